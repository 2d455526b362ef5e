//! Query intelligence: the [`QueryClassifier`] trait and the [`Classification`] it returns.

mod legal;
pub mod lexicon;
mod rules;

use std::sync::Arc;

pub use legal::{LegalExtractor, LegalRefs};
pub use rules::{read_aliases, RuleClassifier, RuleClassifierBuilder, RuleConfig};
use serde::{Deserialize, Serialize};

/// Whether a query looks up a fact or explores a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum QueryKind {
    /// A lookup of one fact ("Taylor's KTN"): exact lexical matches are protected in reranking.
    #[default]
    Factual,
    /// An open question ("summarize my notes about the project"): fully reranked.
    Semantic,
}

/// What the user wants from the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// Greetings, thanks, farewells: answered without retrieval.
    Chitchat,
    /// Nothing to do with the host's domain.
    OffTopic,
    /// Nothing searchable is left; ask the user to clarify.
    Clarification,
    /// A normal search (the default).
    #[default]
    KnowledgeSearch,
}

/// How much work a query needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// A definition or one section's text.
    Simple,
    /// The default.
    #[default]
    Standard,
    /// Several acts, sections, jurisdictions or courts.
    Complex,
    /// Comparisons, evolutions, "all grounds", relationships.
    Analytical,
}

/// The kind of task behind a query, used to pick reranker instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TaskType {
    /// Building or configuring something.
    Implementation,
    /// Fixing something broken.
    Troubleshooting,
    /// Architecture and design choices.
    Design,
    /// Anything else (the default).
    #[default]
    General,
}

/// The result of classifying a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Classification {
    /// Factual or semantic.
    pub kind: QueryKind,
    /// Chitchat, off-topic, clarification or knowledge search.
    pub intent: Intent,
    /// Simple, standard, complex or analytical.
    pub route: Route,
    /// Implementation, troubleshooting, design or general.
    pub task_type: TaskType,
    /// 1.0 when a pattern matched, 0.7 for a heuristic, 0.5 for a default (that of the intent
    /// when a chitchat or clarification rule decided, else [`Classification::kind_confidence`]).
    pub confidence: f32,
    /// The confidence of `kind` alone: 1.0 pattern, 0.7 heuristic, 0.5 default.
    #[serde(default)]
    pub kind_confidence: f32,
    /// The confidence of `route` alone: 1.0 when a route pattern matched (simple,
    /// analytical), 0.7 when counted references made it complex, 0.5 for the default
    /// (standard).
    #[serde(default)]
    pub route_confidence: f32,
    /// The signals that fired, e.g. `"possessive_identifier"`.
    pub signals: Vec<String>,
    /// The acts, sections and jurisdictions the query names (empty when none).
    #[serde(default, skip_serializing_if = "LegalRefs::is_empty")]
    pub legal: LegalRefs,
    /// The canonical names of the known people the query mentions, aliases resolved ("tay":
    /// "Taylor Smith"). The pipeline adds them to the recall query and to the words that
    /// protect exact matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub people: Vec<String>,
}

/// Classifies a query before retrieval.
pub trait QueryClassifier: Send + Sync {
    /// Classifies `query`. Never fails: an unclear query gets the defaults with low confidence.
    fn classify(&self, query: &str) -> Classification;
}

impl<C: QueryClassifier + ?Sized> QueryClassifier for Arc<C> {
    fn classify(&self, query: &str) -> Classification {
        (**self).classify(query)
    }
}

impl<C: QueryClassifier + ?Sized> QueryClassifier for Box<C> {
    fn classify(&self, query: &str) -> Classification {
        (**self).classify(query)
    }
}
