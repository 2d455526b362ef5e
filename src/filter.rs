//! Metadata filters: [`Filter`], a condition on a document's fields, applied to stage-1
//! candidates before any model time is spent on them (and pushed down to the retrievers that
//! can filter themselves, such as Milvus).

use serde::{Deserialize, Serialize};

use crate::{Document, Error, Result};

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

    /// Checks the filter (a typed filter needs a value, every filter a field name).
    pub(crate) fn validate(&self) -> Result<()> {
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
}
