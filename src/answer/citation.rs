//! Inline citations: `[Source: file, Page N]`, or `[Source: file]` when the page is unknown.

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// One inline citation.
///
/// ```
/// use rerank::answer::Citation;
/// let c = Citation::new("report.pdf", Some(3));
/// assert_eq!(c.label(), "[Source: report.pdf, Page 3]");
/// assert_eq!(Citation::parse_all("Up 5% [Source: report.pdf, Page 3]."), [c]);
/// assert_eq!(Citation::new("notes.md", None).label(), "[Source: notes.md]");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Citation {
    /// The file (or other source name) cited.
    pub source: String,
    /// The page cited, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
}

fn citation_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)\[\s*source:\s*([^\]\n]*?)(?:,\s*page\s+(\d+))?\s*\]")
            .expect("static regex is valid")
    })
}

impl Citation {
    /// A citation of `source`, page `page`.
    pub fn new(source: impl Into<String>, page: Option<u32>) -> Self {
        Citation {
            source: source.into(),
            page,
        }
    }

    /// The inline label: `[Source: file, Page N]` or `[Source: file]`.
    pub fn label(&self) -> String {
        match self.page {
            Some(p) => format!("[Source: {}, Page {p}]", self.source),
            None => format!("[Source: {}]", self.source),
        }
    }

    /// Every citation in `text`, in order of appearance (repeats kept). Matching is
    /// case-insensitive on `Source` and `Page`; a page that does not fit in `u32` is kept as part
    /// of the source name.
    pub fn parse_all(text: &str) -> Vec<Citation> {
        citation_regex()
            .captures_iter(text)
            .filter_map(|c| {
                let source = c.get(1)?.as_str().trim();
                let page = c.get(2).and_then(|p| p.as_str().parse::<u32>().ok());
                (!source.is_empty()).then(|| Citation::new(source, page))
            })
            .collect()
    }

    /// `text` with every citation removed.
    pub fn strip(text: &str) -> String {
        citation_regex().replace_all(text, "").into_owned()
    }

    /// Whether this citation points at `source`/`page`: same source name (ignoring case and
    /// surrounding space) and, when the citation gives a page, the same page.
    pub fn points_to(&self, source: &str, page: Option<u32>) -> bool {
        self.source.trim().eq_ignore_ascii_case(source.trim())
            && (self.page.is_none() || self.page == page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_and_without_page() {
        let text =
            "A [Source: a.pdf, Page 12] and b [source: dir/b file.md] and [Source: c.txt,page 2]";
        assert_eq!(
            Citation::parse_all(text),
            [
                Citation::new("a.pdf", Some(12)),
                Citation::new("dir/b file.md", None),
                Citation::new("c.txt", Some(2)),
            ]
        );
        assert_eq!(
            Citation::strip(text).split_whitespace().collect::<Vec<_>>(),
            ["A", "and", "b", "and"]
        );
    }

    #[test]
    fn ignores_other_brackets_and_empty_sources() {
        assert!(Citation::parse_all("[1] see [Source: ] and [Page 3]").is_empty());
    }

    #[test]
    fn label_round_trips() {
        for c in [Citation::new("r.v2.pdf", Some(7)), Citation::new("x", None)] {
            assert_eq!(Citation::parse_all(&c.label()), std::slice::from_ref(&c));
        }
    }

    #[test]
    fn points_to_compares_source_and_page() {
        let c = Citation::new("Report.pdf", Some(3));
        assert!(c.points_to("report.pdf", Some(3)));
        assert!(!c.points_to("report.pdf", Some(4)));
        assert!(!c.points_to("report.pdf", None));
        assert!(Citation::new("report.pdf", None).points_to("report.pdf", Some(9)));
        assert!(!c.points_to("other.pdf", Some(3)));
    }
}
