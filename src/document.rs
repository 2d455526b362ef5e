//! Documents and the hits that retrieval and reranking produce.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Free-form metadata attached to a [`Document`] (JSON values keyed by name).
pub type Metadata = BTreeMap<String, serde_json::Value>;

/// A document to index and retrieve.
///
/// The JSON form (one per line in a JSONL corpus) is
/// `{"id", "text", "title"?, "source"?, "page"?, "metadata"?}`; unknown keys are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    /// Unique identifier within an index.
    pub id: String,
    /// The body text.
    pub text: String,
    /// Optional title; indexed together with the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where the document comes from (a file name, a URL); used for citations and dedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Page number within the source, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// Free metadata (source type, language, path, ...), usable by filters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: Metadata,
}

impl Document {
    /// A document with an id and a text, and nothing else.
    pub fn new(id: impl Into<String>, text: impl Into<String>) -> Self {
        Document {
            id: id.into(),
            text: text.into(),
            title: None,
            source: None,
            page: None,
            metadata: Metadata::new(),
        }
    }

    /// Sets the title.
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the source.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Sets the page.
    pub fn with_page(mut self, page: u32) -> Self {
        self.page = Some(page);
        self
    }

    /// Adds one metadata entry.
    pub fn with_metadata(
        mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The text a model or an analyzer sees: `title + " " + text` when there is a title.
    pub fn full_text(&self) -> String {
        match &self.title {
            Some(title) if !title.is_empty() => format!("{title} {}", self.text),
            _ => self.text.clone(),
        }
    }
}

/// One retrieved document with every score the stages gave it.
///
/// Retrievers return hits in descending `score` order. The pipeline then fills in the stage-1
/// rank, the rerank score and the final score.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hit {
    /// The document (shared with the index that holds it).
    pub document: Arc<Document>,
    /// The final score: the rerank score when the hit was reranked, else the stage-1 score.
    pub score: f32,
    /// 1-based rank in the stage-1 (recall) list; 0 before the pipeline assigns it.
    pub stage1_rank: usize,
    /// Score given by stage 1 (fused score for a hybrid retriever).
    pub stage1_score: f32,
    /// BM25 score, when a lexical retriever saw this document.
    pub bm25_score: Option<f32>,
    /// Cosine similarity, when a dense retriever saw this document.
    pub vector_score: Option<f32>,
    /// Score from the stage-2 reranker, when it ran.
    pub rerank_score: Option<f32>,
    /// True when the hit was kept on top by protected reranking (factual queries).
    pub protected: bool,
    /// With passage scoring on ([`Passages`](crate::rerankers::Passages)): the byte range of
    /// the document's [`full_text`](Document::full_text) whose window gave its rerank score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passage: Option<std::ops::Range<usize>>,
}

impl Hit {
    /// A stage-1 hit with its retriever score; the other fields are empty.
    pub fn new(document: Arc<Document>, score: f32) -> Self {
        Hit {
            document,
            score,
            stage1_rank: 0,
            stage1_score: score,
            bm25_score: None,
            vector_score: None,
            rerank_score: None,
            protected: false,
            passage: None,
        }
    }

    /// Sets the BM25 score (builder style).
    pub fn with_bm25(mut self, score: f32) -> Self {
        self.bm25_score = Some(score);
        self
    }

    /// Sets the vector score (builder style).
    pub fn with_vector(mut self, score: f32) -> Self {
        self.vector_score = Some(score);
        self
    }

    /// The document id.
    pub fn id(&self) -> &str {
        &self.document.id
    }
}

/// Sorts hits by descending score; ties keep their current order (stable sort), and NaN scores
/// sort last.
pub fn sort_by_score_desc(hits: &mut [Hit]) {
    hits.sort_by(|a, b| cmp_score_desc(a.score, b.score));
}

/// Ordering for descending scores with NaN last.
pub(crate) fn cmp_score_desc(a: f32, b: f32) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        (false, false) => b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal),
    }
}

/// The longest line the crate's line readers accept: 64 MiB. A longer line (a file of one
/// endless line, `/dev/zero`) is an error naming the file and the line, never a buffer that
/// grows until the process aborts.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Calls `f(line number, line)` for each non-blank line of `reader`, one line in memory at a
/// time; `origin` (a file name) names the input in errors. A line longer than
/// [`MAX_LINE_BYTES`] or not UTF-8 is an [`Error::Parse`](crate::Error::Parse) naming
/// `origin` and the line, and nothing after it is read. `\n` and `\r\n` end lines.
pub fn read_bounded_lines<R: std::io::BufRead>(
    reader: R,
    origin: &str,
    f: impl FnMut(usize, &str) -> crate::Result<()>,
) -> crate::Result<()> {
    read_lines_up_to(reader, origin, MAX_LINE_BYTES, f)
}

/// [`read_bounded_lines`] with lines of at most `max` bytes.
fn read_lines_up_to<R: std::io::BufRead>(
    mut reader: R,
    origin: &str,
    max: usize,
    mut f: impl FnMut(usize, &str) -> crate::Result<()>,
) -> crate::Result<()> {
    use std::io::{BufRead, Read};
    let mut buf = Vec::new();
    let mut number = 0;
    loop {
        buf.clear();
        number += 1;
        // Room for the line, `\r\n`, and nothing more: a longer line stops here.
        let limit = max as u64 + 2;
        let read = (&mut reader)
            .take(limit)
            .read_until(b'\n', &mut buf)
            .map_err(|e| crate::Error::io(origin, e))?;
        if read == 0 {
            return Ok(());
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        if buf.len() > max {
            return Err(crate::Error::parse(
                format!("{origin}:{number}"),
                format!("a line longer than {max} bytes"),
            ));
        }
        let line = std::str::from_utf8(&buf)
            .map_err(|e| crate::Error::parse(format!("{origin}:{number}"), e))?;
        if !line.trim().is_empty() {
            f(number, line)?;
        }
    }
}

impl Document {
    /// Reads a JSONL corpus: one JSON document per line (blank lines skipped), one line in
    /// memory at a time, each at most [`MAX_LINE_BYTES`]. Errors name the file and the line,
    /// and the format expected.
    pub fn read_jsonl(path: impl AsRef<std::path::Path>) -> crate::Result<Vec<Document>> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| crate::Error::io(path, e))?;
        let origin = path.display().to_string();
        let mut docs = Vec::new();
        read_bounded_lines(std::io::BufReader::new(file), &origin, |number, line| {
            let doc = serde_json::from_str::<Document>(line).map_err(|e| {
                crate::Error::parse(format!("{origin}:{number}"), JsonlError::new(line, e))
            })?;
            docs.push(doc);
            Ok(())
        })?;
        Ok(docs)
    }

    /// Parses JSONL text (see [`Document::read_jsonl`]); `origin` names the input in errors,
    /// which read `could not parse ORIGIN:LINE: ...` and say the format expected.
    pub fn parse_jsonl(text: &str, origin: &str) -> crate::Result<Vec<Document>> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                serde_json::from_str::<Document>(line).map_err(|e| {
                    crate::Error::parse(format!("{origin}:{}", i + 1), JsonlError::new(line, e))
                })
            })
            .collect()
    }
}

/// A JSONL line that is not a document: the parser's error, its column within the line (the
/// parser's own "line 1" would be misleading), and the format expected.
#[derive(Debug)]
struct JsonlError {
    message: String,
    source: serde_json::Error,
}

/// What a JSONL corpus line must be.
const JSONL_FORMAT: &str = "a JSONL corpus has one JSON object per line with \"id\" and \"text\" \
     strings, e.g. {\"id\": \"doc-1\", \"text\": \"...\"} (\"title\", \"source\", \"page\" and \
     \"metadata\" are optional)";

impl JsonlError {
    fn new(line: &str, source: serde_json::Error) -> Self {
        let full = source.to_string();
        let position = format!(" at line {} column {}", source.line(), source.column());
        let what = full.strip_suffix(&position).unwrap_or(&full);
        let mut message = format!("{what} at column {}; {JSONL_FORMAT}", source.column());
        let start = line.trim_start();
        if start.starts_with('[') {
            message.push_str(" (this line starts a JSON array: write one object per line)");
        } else if !start.starts_with('{') {
            message.push_str(" (this line is not JSON: is the file JSONL?)");
        }
        JsonlError { message, source }
    }
}

impl std::fmt::Display for JsonlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JsonlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    fn lines(input: &[u8], max: usize) -> crate::Result<Vec<(usize, String)>> {
        let mut out = Vec::new();
        read_lines_up_to(input, "in.jsonl", max, |n, l| {
            out.push((n, l.to_string()));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn lines_are_bounded_and_errors_name_the_line() {
        let got = lines(b"abc\r\n\n  \nabcd\nlast", 4).unwrap();
        let want = [(1, "abc"), (4, "abcd"), (5, "last")];
        let want: Vec<(usize, String)> = want.iter().map(|&(n, l)| (n, l.into())).collect();
        assert_eq!(got, want);
        // Five bytes, with or without a newline after them, are one byte too many.
        for input in [
            &b"ok\nabcde\nnever read"[..],
            b"ok\nabcde",
            b"ok\nabcde\r\n",
        ] {
            let e = lines(input, 4).unwrap_err();
            assert!(matches!(e, crate::Error::Parse { .. }));
            let e = e.to_string();
            assert!(
                e.contains("in.jsonl:2") && e.contains("longer than 4"),
                "{e}"
            );
        }
        let e = lines(b"ok\n\xff\n", 4).unwrap_err().to_string();
        assert!(e.contains("in.jsonl:2"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn an_endless_line_is_an_error_not_an_abort() {
        // /dev/zero is one line without end: the reader stops after MAX_LINE_BYTES.
        let e = Document::read_jsonl("/dev/zero").unwrap_err().to_string();
        assert!(
            e.contains("/dev/zero:1") && e.contains("longer than 67108864"),
            "{e}"
        );
    }

    #[test]
    fn a_line_that_is_not_a_document_says_where_and_what_is_expected() {
        let text = "{\"id\": \"a\", \"text\": \"x\"}\n\nid,text\n";
        let e = Document::parse_jsonl(text, "notes.csv").unwrap_err();
        let shown = e.to_string();
        assert!(
            shown.starts_with("could not parse notes.csv:3: expected value at column 1; "),
            "{shown}"
        );
        assert!(shown.contains(JSONL_FORMAT), "{shown}");
        assert!(
            shown.ends_with("(this line is not JSON: is the file JSONL?)"),
            "{shown}"
        );
        assert!(!shown.contains("line 1"), "{shown}");
        // The parser's error stays reachable.
        let cause = e.source().unwrap().source().unwrap();
        assert!(cause.is::<serde_json::Error>());

        let e = Document::parse_jsonl("[{\"id\": \"a\", \"text\": \"x\"}]\n", "docs.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("could not parse docs.json:1: "), "{e}");
        assert!(e.contains("a JSON array"), "{e}");

        let e = Document::parse_jsonl("{\"id\": \"a\", \"body\": \"x\"}\n", "c.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `text` at column"), "{e}");
        assert!(e.contains("\"id\" and \"text\""), "{e}");
        assert!(!e.contains("is the file JSONL"), "{e}");
    }
}
