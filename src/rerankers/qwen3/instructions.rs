//! Reranker instructions: a default, one per task type, one per entity type, all overridable.
//!
//! Qwen3-Reranker judges a document against `<Instruct>: {instruction}`; a precise instruction
//! (what counts as relevant for this kind of task, or for this kind of document) improves the
//! ranking. [`Instructions`] holds the texts a host uses; [`Instructions::resolve`] picks one.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::classify::TaskType;

/// The instruction of the official Qwen3-Reranker model card, used when nothing else applies.
pub const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";

/// Built-in instruction for [`TaskType::Implementation`].
pub const IMPLEMENTATION_INSTRUCTION: &str = "Given a request to build or configure something, \
judge whether the passage gives concrete steps, code, commands or settings that accomplish it";

/// Built-in instruction for [`TaskType::Troubleshooting`].
pub const TROUBLESHOOTING_INSTRUCTION: &str = "Given a description of a problem or an error, \
judge whether the passage explains its cause or gives a fix or workaround for it";

/// Built-in instruction for [`TaskType::Design`].
pub const DESIGN_INSTRUCTION: &str = "Given a design or architecture question, judge whether \
the passage discusses the relevant trade-offs, patterns or decisions";

/// Built-in instruction for [`TaskType::General`]: the model card's default.
pub const GENERAL_INSTRUCTION: &str = DEFAULT_INSTRUCTION;

/// Built-in instruction for documents of entity type `"experience"` (first-hand reports,
/// lessons learned, notes from past work).
pub const EXPERIENCE_INSTRUCTION: &str = "Given a query, judge whether the passage reports \
first-hand experience (what was tried, what happened, lessons learned) that helps with it";

/// Built-in instruction for documents of entity type `"manual"` (reference documentation).
pub const MANUAL_INSTRUCTION: &str = "Given a query, judge whether the passage is reference \
documentation (a manual, specification or API description) that answers it";

/// The instruction texts a Qwen3 reranker uses: a default, one per [`TaskType`], and one per
/// entity type (a free-form key such as `"experience"` or `"manual"` describing the documents).
///
/// [`Instructions::default`] holds the built-ins; every entry can be replaced or added.
///
/// ```
/// use rerank::rerankers::qwen3::Instructions;
/// use rerank::classify::TaskType;
///
/// let instructions = Instructions::default()
///     .with_task(TaskType::Design, "Judge whether the passage compares architectures")
///     .with_entity("ticket", "Judge whether the support ticket describes the same problem");
/// assert_eq!(
///     instructions.resolve(None, Some("ticket"), Some(TaskType::Design)),
///     "Judge whether the support ticket describes the same problem"
/// );
/// assert_eq!(
///     instructions.resolve(None, None, Some(TaskType::Design)),
///     "Judge whether the passage compares architectures"
/// );
/// assert_eq!(instructions.resolve(Some("mine"), Some("ticket"), None), "mine");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Instructions {
    /// Used when no explicit, entity or task instruction applies.
    pub default: String,
    /// One instruction per task type (a map given in a config replaces the built-in map).
    pub tasks: HashMap<TaskType, String>,
    /// One instruction per entity type, keys compared exactly (a map given in a config
    /// replaces the built-in map).
    pub entities: BTreeMap<String, String>,
    /// In a [`Pipeline`](crate::Pipeline): use the instruction of the task type the classifier
    /// found when the query brings none (default true).
    pub by_task: bool,
    /// In a [`Pipeline`](crate::Pipeline): the document metadata field naming each candidate's
    /// entity type (e.g. `"entity_type"`, whose value `"manual"` picks the `manual`
    /// instruction); default none (no per-document instruction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity_field: Option<String>,
}

impl Default for Instructions {
    fn default() -> Self {
        let tasks = [
            (TaskType::Implementation, IMPLEMENTATION_INSTRUCTION),
            (TaskType::Troubleshooting, TROUBLESHOOTING_INSTRUCTION),
            (TaskType::Design, DESIGN_INSTRUCTION),
            (TaskType::General, GENERAL_INSTRUCTION),
        ]
        .into_iter()
        .map(|(t, s)| (t, s.to_string()))
        .collect();
        let entities = [
            ("experience", EXPERIENCE_INSTRUCTION),
            ("manual", MANUAL_INSTRUCTION),
        ]
        .into_iter()
        .map(|(k, s)| (k.to_string(), s.to_string()))
        .collect();
        Instructions {
            default: DEFAULT_INSTRUCTION.to_string(),
            tasks,
            entities,
            by_task: true,
            entity_field: None,
        }
    }
}

impl Instructions {
    /// Replaces the default instruction.
    pub fn with_default(mut self, instruction: impl Into<String>) -> Self {
        self.default = instruction.into();
        self
    }

    /// Sets the instruction for a task type.
    pub fn with_task(mut self, task: TaskType, instruction: impl Into<String>) -> Self {
        self.tasks.insert(task, instruction.into());
        self
    }

    /// Sets the instruction for an entity type.
    pub fn with_entity(
        mut self,
        entity: impl Into<String>,
        instruction: impl Into<String>,
    ) -> Self {
        self.entities.insert(entity.into(), instruction.into());
        self
    }

    /// Reads each candidate's entity type from this metadata field (in a pipeline).
    pub fn with_entity_field(mut self, field: impl Into<String>) -> Self {
        self.entity_field = Some(field.into());
        self
    }

    /// Whether a pipeline uses the classifier's task type (default true).
    pub fn with_task_types(mut self, on: bool) -> Self {
        self.by_task = on;
        self
    }

    /// The default instruction.
    pub fn default_instruction(&self) -> &str {
        &self.default
    }

    /// The instruction for a task type, when one is set.
    pub fn for_task(&self, task: TaskType) -> Option<&str> {
        self.tasks.get(&task).map(String::as_str)
    }

    /// The instruction for an entity type, when one is set.
    pub fn for_entity(&self, entity: &str) -> Option<&str> {
        self.entities.get(entity).map(String::as_str)
    }

    /// Picks the instruction, most specific first: an explicit one (used verbatim, even when
    /// empty), then the entity type's, then the task type's, then the default.
    pub fn resolve<'a>(
        &'a self,
        explicit: Option<&'a str>,
        entity: Option<&str>,
        task: Option<TaskType>,
    ) -> &'a str {
        explicit
            .or_else(|| entity.and_then(|e| self.for_entity(e)))
            .or_else(|| task.and_then(|t| self.for_task(t)))
            .unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_cover_every_task_type_and_the_two_entity_types() {
        let i = Instructions::default();
        for t in [
            TaskType::Implementation,
            TaskType::Troubleshooting,
            TaskType::Design,
            TaskType::General,
        ] {
            assert!(i.for_task(t).is_some_and(|s| !s.is_empty()), "{t:?}");
        }
        assert_ne!(i.for_entity("experience"), i.for_entity("manual"));
        assert_eq!(i.for_entity("nope"), None);
        assert_eq!(
            i.default_instruction(),
            "Given a web search query, retrieve relevant passages that answer the query"
        );
    }

    #[test]
    fn resolution_order_is_explicit_entity_task_default() {
        let i = Instructions::default();
        let troubleshoot = i.for_task(TaskType::Troubleshooting).unwrap();
        let manual = i.for_entity("manual").unwrap();
        assert_eq!(i.resolve(Some(""), Some("manual"), None), "");
        assert_eq!(
            i.resolve(None, Some("manual"), Some(TaskType::Troubleshooting)),
            manual
        );
        assert_eq!(
            i.resolve(None, Some("unknown"), Some(TaskType::Troubleshooting)),
            troubleshoot
        );
        assert_eq!(i.resolve(None, None, None), DEFAULT_INSTRUCTION);
        let custom = i.with_default("X");
        assert_eq!(custom.resolve(None, Some("unknown"), None), "X");
    }

    #[test]
    fn overrides_round_trip_through_json() {
        let i = Instructions::default()
            .with_task(TaskType::General, "general")
            .with_entity("faq", "faq");
        let json = serde_json::to_string(&i).unwrap();
        let back: Instructions = serde_json::from_str(&json).unwrap();
        assert_eq!(back, i);
        let partial: Instructions = serde_json::from_str(r#"{"tasks": {"design": "d"}}"#).unwrap();
        assert_eq!(partial.for_task(TaskType::Design), Some("d"));
        assert_eq!(partial.default_instruction(), DEFAULT_INSTRUCTION);
    }
}
