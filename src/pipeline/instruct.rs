//! Which reranker instruction each candidate is judged with, and saying so in the response.
//!
//! Per query, in order: the request's instruction, the two-phase `[INSTRUCT]`, the
//! instruction of the task type the classifier found, the default. Per candidate, an
//! entity-type instruction (from a metadata field of the document, see
//! [`Instructions::entity_field`]) comes after the request's and the `[INSTRUCT]` ones and
//! before the task type's. Without an instruction policy on the pipeline only the request's
//! and the `[INSTRUCT]` instructions are passed on (else the reranker uses its own default).

use serde::{Deserialize, Serialize};

use crate::classify::{Classification, TaskType};
use crate::rerankers::qwen3::Instructions;
use crate::Hit;

/// Where an instruction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionSource {
    /// [`SearchRequest::instruction`](super::SearchRequest::instruction).
    Request,
    /// The `[INSTRUCT]` part of a two-phase query.
    TwoPhase,
    /// The entity type of the candidate document.
    Entity,
    /// The task type the classifier found.
    TaskType,
    /// The policy's default.
    Default,
}

/// One instruction the reranker was given, and for how many candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsedInstruction {
    /// Where it came from.
    pub source: InstructionSource,
    /// The instruction text.
    pub text: String,
    /// The entity type, for [`InstructionSource::Entity`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// The task type, for [`InstructionSource::TaskType`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<TaskType>,
    /// How many candidates were judged with it.
    pub candidates: usize,
}

/// The instruction of one candidate: `None` text leaves the reranker's own default.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Assigned {
    pub(super) source: InstructionSource,
    pub(super) text: Option<String>,
    pub(super) entity: Option<String>,
    pub(super) task_type: Option<TaskType>,
}

impl Assigned {
    fn same_group(&self, other: &Assigned) -> bool {
        self.source == other.source && self.text == other.text && self.entity == other.entity
    }
}

/// The instruction for each of `hits` (in order).
pub(super) fn assign(
    policy: Option<&Instructions>,
    request: Option<&str>,
    two_phase: Option<&str>,
    classification: Option<&Classification>,
    hits: &[Hit],
) -> Vec<Assigned> {
    let explicit = request
        .map(|t| (InstructionSource::Request, t))
        .or_else(|| two_phase.map(|t| (InstructionSource::TwoPhase, t)));
    if let Some((source, text)) = explicit {
        let one = Assigned {
            source,
            text: Some(text.to_string()),
            entity: None,
            task_type: None,
        };
        return vec![one; hits.len()];
    }
    let Some(policy) = policy else {
        let none = Assigned {
            source: InstructionSource::Default,
            text: None,
            entity: None,
            task_type: None,
        };
        return vec![none; hits.len()];
    };
    let task = classification
        .map(|c| c.task_type)
        .filter(|_| policy.by_task);
    let query_level = match task.and_then(|t| policy.for_task(t).map(|s| (t, s))) {
        Some((t, text)) => Assigned {
            source: InstructionSource::TaskType,
            text: Some(text.to_string()),
            entity: None,
            task_type: Some(t),
        },
        None => Assigned {
            source: InstructionSource::Default,
            text: Some(policy.default_instruction().to_string()),
            entity: None,
            task_type: None,
        },
    };
    hits.iter()
        .map(|h| {
            let entity = policy
                .entity_field
                .as_deref()
                .and_then(|f| h.document.metadata.get(f))
                .and_then(|v| v.as_str());
            match entity.and_then(|e| policy.for_entity(e).map(|t| (e, t))) {
                Some((e, text)) => Assigned {
                    source: InstructionSource::Entity,
                    text: Some(text.to_string()),
                    entity: Some(e.to_string()),
                    task_type: None,
                },
                None => query_level.clone(),
            }
        })
        .collect()
}

/// Groups candidate indices by instruction, in order of first appearance.
pub(super) fn groups(assigned: &[Assigned]) -> Vec<(Assigned, Vec<usize>)> {
    let mut out: Vec<(Assigned, Vec<usize>)> = Vec::new();
    for (i, a) in assigned.iter().enumerate() {
        match out.iter_mut().find(|(g, _)| g.same_group(a)) {
            Some((_, idx)) => idx.push(i),
            None => out.push((a.clone(), vec![i])),
        }
    }
    out
}

/// What the response reports: the groups that had an instruction text.
pub(super) fn report(groups: &[(Assigned, Vec<usize>)]) -> Vec<UsedInstruction> {
    groups
        .iter()
        .filter_map(|(a, idx)| {
            Some(UsedInstruction {
                source: a.source,
                text: a.text.clone()?,
                entity: a.entity.clone(),
                task_type: a.task_type,
                candidates: idx.len(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Document;

    fn hit(id: &str, entity: Option<&str>) -> Hit {
        let mut d = Document::new(id, "text");
        if let Some(e) = entity {
            d = d.with_metadata("entity_type", e);
        }
        Hit::new(Arc::new(d), 1.0)
    }

    #[test]
    fn order_is_request_two_phase_entity_task_default() {
        let policy = Instructions::default().with_entity_field("entity_type");
        let hits = [
            hit("a", Some("manual")),
            hit("b", None),
            hit("c", Some("nope")),
        ];
        let troubleshooting = Classification {
            task_type: TaskType::Troubleshooting,
            ..Default::default()
        };
        let c = Some(&troubleshooting);
        let all = |a: &[Assigned]| a.iter().map(|x| x.source).collect::<Vec<_>>();

        let a = assign(Some(&policy), Some("mine"), Some("instruct"), c, &hits);
        assert_eq!(all(&a), [InstructionSource::Request; 3]);
        assert_eq!(a[0].text.as_deref(), Some("mine"));
        let a = assign(Some(&policy), None, Some("instruct"), c, &hits);
        assert_eq!(all(&a), [InstructionSource::TwoPhase; 3]);
        let a = assign(Some(&policy), None, None, c, &hits);
        use InstructionSource as S;
        assert_eq!(all(&a), [S::Entity, S::TaskType, S::TaskType]);
        assert_eq!(a[0].text.as_deref(), policy.for_entity("manual"));
        assert_eq!(
            a[1].text.as_deref(),
            policy.for_task(TaskType::Troubleshooting)
        );
        let a = assign(
            Some(&policy.clone().with_task_types(false)),
            None,
            None,
            c,
            &hits,
        );
        assert_eq!(all(&a), [S::Entity, S::Default, S::Default]);
        // Without a policy: no instruction (the reranker's own default), nothing reported.
        let a = assign(None, None, None, c, &hits);
        assert!(a.iter().all(|x| x.text.is_none()));
        assert!(report(&groups(&a)).is_empty());

        let a = assign(Some(&policy), None, None, c, &hits);
        let r = report(&groups(&a));
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].source, r[0].candidates), (S::Entity, 1));
        assert_eq!((r[1].source, r[1].candidates), (S::TaskType, 2));
    }
}
