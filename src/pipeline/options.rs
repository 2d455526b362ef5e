//! Post-processing options: candidate depth, threshold, dedup and metadata filters.

use serde::{Deserialize, Serialize};

use crate::{Document, Error, Result};

/// How many candidates stage 1 fetches and what stage 2 and post-processing keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchOptions {
    /// Hits returned (default 10).
    pub top_k: usize,
    /// Stage 1 fetches `top_k * candidate_multiplier` candidates (default 10)...
    pub candidate_multiplier: usize,
    /// ...capped at `max_candidates` (default 100), but never fewer than `top_k`.
    pub max_candidates: usize,
    /// Hits whose final score is below this are dropped (default: none).
    pub score_threshold: Option<f32>,
    /// Keeps only the best hit per key (default: source + page).
    pub dedup: DedupKey,
    /// Every filter must match for a hit to be kept (default: none).
    pub filters: Vec<Filter>,
    /// Rerank only the first N candidates; the rest keep their stage-1 order after them
    /// (default: none, every candidate is reranked). A request can override it. In a
    /// [`PipelineConfig`](super::PipelineConfig) it is `reranker.depth`.
    #[serde(skip)]
    pub rerank_depth: Option<usize>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            top_k: 10,
            candidate_multiplier: 10,
            max_candidates: 100,
            score_threshold: None,
            dedup: DedupKey::default(),
            filters: Vec::new(),
            rerank_depth: None,
        }
    }
}

impl SearchOptions {
    /// The number of stage-1 candidates for `top_k`:
    /// `max(top_k, min(top_k * candidate_multiplier, max_candidates))`.
    pub fn candidates_for(&self, top_k: usize) -> usize {
        top_k
            .saturating_mul(self.candidate_multiplier)
            .min(self.max_candidates)
            .max(top_k)
    }

    /// Checks the values (called by the pipeline builder).
    pub fn validate(&self) -> Result<()> {
        if self.top_k == 0 {
            return Err(Error::Config("top_k must be at least 1".into()));
        }
        if self.candidate_multiplier == 0 {
            return Err(Error::Config(
                "candidate_multiplier must be at least 1".into(),
            ));
        }
        if self.max_candidates == 0 {
            return Err(Error::Config("max_candidates must be at least 1".into()));
        }
        if let Some(t) = self.score_threshold {
            if t.is_nan() {
                return Err(Error::Config("score_threshold must not be NaN".into()));
            }
        }
        for f in &self.filters {
            f.validate()?;
        }
        if self.rerank_depth == Some(0) {
            return Err(Error::Config(
                "rerank_depth must be at least 1 (leave it out to rerank every candidate)".into(),
            ));
        }
        Ok(())
    }
}

/// Which hits count as duplicates of each other.
///
/// In configs it is a string: `"none"`, `"id"`, `"source"`, `"source_page"` or
/// `"metadata:FIELD"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(try_from = "String", into = "String")]
pub enum DedupKey {
    /// No dedup.
    None,
    /// Same document id.
    Id,
    /// Same source (documents without a source are never duplicates).
    Source,
    /// Same source and page (the default; documents without a source are never duplicates).
    #[default]
    SourcePage,
    /// Same value of this metadata field (documents without it are never duplicates).
    Metadata(String),
}

impl TryFrom<String> for DedupKey {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        match s.as_str() {
            "none" => Ok(DedupKey::None),
            "id" => Ok(DedupKey::Id),
            "source" => Ok(DedupKey::Source),
            "source_page" => Ok(DedupKey::SourcePage),
            other => match other.strip_prefix("metadata:") {
                Some(field) if !field.is_empty() => Ok(DedupKey::Metadata(field.to_string())),
                _ => Err(format!(
                    "unknown dedup key {other:?}: use none, id, source, source_page or metadata:FIELD"
                )),
            },
        }
    }
}

impl From<DedupKey> for String {
    fn from(k: DedupKey) -> String {
        match k {
            DedupKey::None => "none".into(),
            DedupKey::Id => "id".into(),
            DedupKey::Source => "source".into(),
            DedupKey::SourcePage => "source_page".into(),
            DedupKey::Metadata(f) => format!("metadata:{f}"),
        }
    }
}

impl DedupKey {
    /// The key of `doc`, or `None` when it has no key (and so is never a duplicate).
    pub fn key_of(&self, doc: &Document) -> Option<String> {
        match self {
            DedupKey::None => None,
            DedupKey::Id => Some(doc.id.clone()),
            DedupKey::Source => doc.source.clone(),
            DedupKey::SourcePage => doc.source.as_ref().map(|s| match doc.page {
                Some(p) => format!("{s}\u{1f}{p}"),
                None => s.clone(),
            }),
            DedupKey::Metadata(field) => doc.metadata.get(field).map(|v| v.to_string()),
        }
    }
}

/// The metadata field the typed [`Filter::SourceType`] reads.
pub const SOURCE_TYPE_FIELD: &str = "source_type";
/// The metadata field the typed [`Filter::Language`] reads.
pub const LANGUAGE_FIELD: &str = "language";
/// The metadata field the typed [`Filter::PathPrefix`] reads (the document's `source` when the
/// metadata has no such field).
pub const PATH_FIELD: &str = "path";

/// A condition on a document field. `field` is `"id"`, `"source"`, `"page"`, `"title"`, or a
/// metadata key; a document without the field does not match. The typed filters
/// ([`Filter::SourceType`], [`Filter::Language`], [`Filter::PathPrefix`]) read the
/// conventional metadata fields [`SOURCE_TYPE_FIELD`], [`LANGUAGE_FIELD`] and [`PATH_FIELD`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Filter {
    /// The field equals `value` (strings compare exactly, numbers numerically).
    Eq {
        /// Field name.
        field: String,
        /// Wanted value.
        value: serde_json::Value,
    },
    /// The field equals one of `values`.
    In {
        /// Field name.
        field: String,
        /// Accepted values.
        values: Vec<serde_json::Value>,
    },
    /// The field is a string starting with `prefix` (e.g. a path prefix).
    Prefix {
        /// Field name.
        field: String,
        /// Wanted prefix.
        prefix: String,
    },
    /// The document's `source_type` metadata (e.g. `"code"`, `"doc"`, `"chat"`) is one of
    /// `values`.
    SourceType {
        /// Accepted source types.
        values: Vec<String>,
    },
    /// The document's `language` metadata (e.g. `"rust"`, `"python"`, `"en"`) is one of
    /// `values`.
    Language {
        /// Accepted languages.
        values: Vec<String>,
    },
    /// The document's `path` metadata (or, without one, its `source`) starts with `prefix`.
    PathPrefix {
        /// Wanted prefix, e.g. `"src/cache/"`.
        prefix: String,
    },
}

impl Filter {
    /// `field == value`.
    pub fn eq(field: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        Filter::Eq {
            field: field.into(),
            value: value.into(),
        }
    }

    /// `field` is one of `values`.
    pub fn one_of<V: Into<serde_json::Value>>(
        field: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        Filter::In {
            field: field.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// `field` starts with `prefix`.
    pub fn prefix(field: impl Into<String>, prefix: impl Into<String>) -> Self {
        Filter::Prefix {
            field: field.into(),
            prefix: prefix.into(),
        }
    }

    /// Documents whose `source_type` metadata is one of `values`.
    pub fn source_type<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        Filter::SourceType {
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// Documents whose `language` metadata is one of `values`.
    pub fn language<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        Filter::Language {
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// Documents whose `path` metadata (or `source`) starts with `prefix`.
    pub fn path_prefix(prefix: impl Into<String>) -> Self {
        Filter::PathPrefix {
            prefix: prefix.into(),
        }
    }

    fn field(&self) -> &str {
        match self {
            Filter::Eq { field, .. } | Filter::In { field, .. } | Filter::Prefix { field, .. } => {
                field
            }
            Filter::SourceType { .. } => SOURCE_TYPE_FIELD,
            Filter::Language { .. } => LANGUAGE_FIELD,
            Filter::PathPrefix { .. } => PATH_FIELD,
        }
    }

    fn validate(&self) -> Result<()> {
        if let Filter::SourceType { values } | Filter::Language { values } = self {
            if values.is_empty() {
                return Err(Error::Config(format!(
                    "a {} filter needs at least one value",
                    self.field()
                )));
            }
        }
        if self.field().is_empty() {
            return Err(Error::Config(
                "a filter needs a non-empty field name".into(),
            ));
        }
        Ok(())
    }

    /// Whether `doc` passes this filter.
    pub fn matches(&self, doc: &Document) -> bool {
        let actual = match self {
            Filter::PathPrefix { .. } => {
                field_value(doc, PATH_FIELD).or_else(|| field_value(doc, "source"))
            }
            _ => field_value(doc, self.field()),
        };
        let Some(actual) = actual else {
            return false;
        };
        match self {
            Filter::Eq { value, .. } => values_equal(&actual, value),
            Filter::In { values, .. } => values.iter().any(|v| values_equal(&actual, v)),
            Filter::Prefix { prefix, .. } | Filter::PathPrefix { prefix } => actual
                .as_str()
                .is_some_and(|s| s.starts_with(prefix.as_str())),
            Filter::SourceType { values } | Filter::Language { values } => actual
                .as_str()
                .is_some_and(|s| values.iter().any(|v| v.eq_ignore_ascii_case(s))),
        }
    }
}

fn field_value(doc: &Document, field: &str) -> Option<serde_json::Value> {
    match field {
        "id" => Some(doc.id.clone().into()),
        "source" => doc.source.clone().map(Into::into),
        "page" => doc.page.map(Into::into),
        "title" => doc.title.clone().map(Into::into),
        _ => doc.metadata.get(field).cloned(),
    }
}

fn values_equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_depth_is_multiplied_capped_and_at_least_top_k() {
        let o = SearchOptions::default();
        assert_eq!(o.candidates_for(3), 30);
        assert_eq!(o.candidates_for(10), 100);
        assert_eq!(o.candidates_for(20), 100);
        assert_eq!(o.candidates_for(150), 150);
        let o = SearchOptions {
            candidate_multiplier: 4,
            max_candidates: 50,
            ..SearchOptions::default()
        };
        assert_eq!(o.candidates_for(5), 20);
        assert_eq!(o.candidates_for(usize::MAX), usize::MAX);
    }

    #[test]
    fn filters_on_builtin_and_metadata_fields() {
        let d = Document::new("1", "t")
            .with_source("docs/guide/intro.md")
            .with_page(3)
            .with_metadata("lang", "en")
            .with_metadata("year", 2021);
        assert!(Filter::prefix("source", "docs/").matches(&d));
        assert!(!Filter::prefix("source", "src/").matches(&d));
        assert!(Filter::eq("lang", "en").matches(&d));
        assert!(!Filter::eq("lang", "de").matches(&d));
        assert!(Filter::eq("page", 3).matches(&d));
        assert!(Filter::eq("year", 2021.0).matches(&d));
        assert!(Filter::one_of("lang", ["de", "en"]).matches(&d));
        assert!(!Filter::eq("missing", "x").matches(&d));
        assert!(!Filter::prefix("year", "20").matches(&d));
    }

    #[test]
    fn typed_filters_read_the_conventional_fields() {
        let code = Document::new("1", "t")
            .with_source("repo/src/cache/mod.rs")
            .with_metadata("source_type", "code")
            .with_metadata("language", "Rust");
        let note = Document::new("2", "t")
            .with_source("notes/cache.md")
            .with_metadata("path", "notes/2024/cache.md")
            .with_metadata("source_type", "note");
        assert!(Filter::source_type(["code", "doc"]).matches(&code));
        assert!(!Filter::source_type(["code"]).matches(&note));
        assert!(Filter::language(["rust"]).matches(&code));
        assert!(!Filter::language(["rust"]).matches(&note));
        // `path` metadata wins over the source; without it the source is the path.
        assert!(Filter::path_prefix("repo/src/").matches(&code));
        assert!(Filter::path_prefix("notes/2024/").matches(&note));
        assert!(!Filter::path_prefix("notes/cache").matches(&note));
        let yaml = "{op: path_prefix, prefix: src/}";
        let f: Filter = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(f, Filter::path_prefix("src/"));
        assert!(Filter::source_type(Vec::<String>::new())
            .validate()
            .is_err());
    }

    #[test]
    fn dedup_keys() {
        let a = Document::new("1", "").with_source("a.pdf").with_page(1);
        let b = Document::new("2", "").with_source("a.pdf").with_page(2);
        let c = Document::new("3", "");
        let k = DedupKey::SourcePage;
        assert_ne!(k.key_of(&a), k.key_of(&b));
        assert_eq!(k.key_of(&c), None);
        assert_eq!(DedupKey::Source.key_of(&a), DedupKey::Source.key_of(&b));
        assert_eq!(DedupKey::None.key_of(&a), None);
    }

    #[test]
    fn validation() {
        assert!(SearchOptions::default().validate().is_ok());
        let bad = SearchOptions {
            top_k: 0,
            ..SearchOptions::default()
        };
        assert!(bad.validate().is_err());
        let bad = SearchOptions {
            filters: vec![Filter::eq("", 1)],
            ..SearchOptions::default()
        };
        assert!(bad.validate().is_err());
    }
}
