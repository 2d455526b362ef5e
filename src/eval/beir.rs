//! Loading collections in the BEIR layout.
//!
//! A BEIR folder holds:
//! - `corpus.jsonl`: one `{"_id", "title"?, "text"}` object per line;
//! - `queries.jsonl`: one `{"_id", "text"}` object per line;
//! - `qrels/<split>.tsv`: a header line `query-id\tcorpus-id\tscore`, then one judgment per line.
//!
//! Unknown JSON keys (BEIR's `metadata`, for instance) are ignored; ids may be JSON strings or
//! numbers. Errors name the file and the line.

use std::collections::HashSet;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Deserialize;

use super::metrics::Qrels;
use crate::{Document, Error, Result};

/// A query of a BEIR collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeirQuery {
    /// The query id (`_id`).
    pub id: String,
    /// The query text.
    pub text: String,
}

/// A BEIR collection loaded in memory: corpus, queries and the judgments of one split.
#[derive(Debug, Clone)]
pub struct BeirDataset {
    /// The documents, in file order: id = `_id`, title when non-empty, text.
    pub corpus: Vec<Document>,
    /// Every query of `queries.jsonl`, in file order (judged or not).
    pub queries: Vec<BeirQuery>,
    /// The judgments of the split.
    pub qrels: Qrels,
}

impl BeirDataset {
    /// Loads `dir` with the `test` split.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        BeirDataset::load_split(dir, "test")
    }

    /// Loads `dir` with the judgments of `qrels/<split>.tsv`.
    ///
    /// Fails when a file is missing or malformed, when the corpus or the queries repeat an id,
    /// or when the qrels name a query that `queries.jsonl` lacks.
    pub fn load_split(dir: impl AsRef<Path>, split: &str) -> Result<Self> {
        let dir = dir.as_ref();
        if split.is_empty() || split.contains(['/', '\\']) || split.contains("..") {
            return Err(Error::InvalidInput(format!(
                "invalid split name {split:?} (expected a file name such as \"test\")"
            )));
        }
        let corpus = read_corpus(dir.join("corpus.jsonl"))?;
        let queries = read_queries(dir.join("queries.jsonl"))?;
        let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));
        let qrels = read_qrels(&qrels_path)?;
        let known: HashSet<&str> = queries.iter().map(|q| q.id.as_str()).collect();
        if let Some(missing) = qrels.keys().find(|q| !known.contains(q.as_str())) {
            return Err(Error::parse(
                qrels_path.display().to_string(),
                format!(
                    "query {missing:?} is judged but absent from {}",
                    dir.join("queries.jsonl").display()
                ),
            ));
        }
        Ok(BeirDataset {
            corpus,
            queries,
            qrels,
        })
    }

    /// The queries that have judgments in the loaded split, in `queries.jsonl` order: the ones
    /// to evaluate.
    pub fn judged_queries(&self) -> Vec<&BeirQuery> {
        self.queries
            .iter()
            .filter(|q| self.qrels.contains_key(&q.id))
            .collect()
    }
}

/// A JSON id: BEIR writes strings, some conversions write numbers.
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonId {
    Text(String),
    Int(i64),
}

impl From<JsonId> for String {
    fn from(id: JsonId) -> String {
        match id {
            JsonId::Text(s) => s,
            JsonId::Int(n) => n.to_string(),
        }
    }
}

#[derive(Deserialize)]
struct CorpusLine {
    #[serde(rename = "_id")]
    id: JsonId,
    #[serde(default)]
    title: Option<String>,
    text: String,
}

#[derive(Deserialize)]
struct QueryLine {
    #[serde(rename = "_id")]
    id: JsonId,
    text: String,
}

/// Calls `f(line number, line)` for each non-blank line of `path` (each at most
/// [`MAX_LINE_BYTES`](crate::MAX_LINE_BYTES)).
fn for_each_line(path: &Path, f: impl FnMut(usize, &str) -> Result<()>) -> Result<()> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    crate::read_bounded_lines(BufReader::new(file), &path.display().to_string(), f)
}

fn at(path: &Path, line: usize) -> String {
    format!("{}:{line}", path.display())
}

/// Corpus lines parsed together (in parallel) by [`read_corpus`].
const PARSE_BATCH: usize = 16 * 1024;

/// Reads a BEIR `corpus.jsonl` into documents (id = `_id`, title when non-empty, text).
///
/// Lines are parsed in parallel, a batch at a time; errors are those of reading line by line
/// (the first bad or repeated line).
pub fn read_corpus(path: impl AsRef<Path>) -> Result<Vec<Document>> {
    let path = path.as_ref();
    let mut docs = Vec::new();
    let mut seen: HashSet<String, foldhash::fast::RandomState> = HashSet::default();
    // a batch of lines: their text one after the other, and (line number, end) of each
    let mut text = String::new();
    let mut lines: Vec<(usize, usize)> = Vec::new();
    let mut flush = |text: &mut String, lines: &mut Vec<(usize, usize)>| -> Result<()> {
        let parsed: Vec<std::result::Result<CorpusLine, serde_json::Error>> = lines
            .par_iter()
            .enumerate()
            .map(|(i, &(_, end))| {
                let start = if i == 0 { 0 } else { lines[i - 1].1 };
                serde_json::from_str(&text[start..end])
            })
            .collect();
        for (row, &(n, _)) in parsed.into_iter().zip(lines.iter()) {
            let row = row.map_err(|e| Error::parse(at(path, n), e))?;
            let id = String::from(row.id);
            if !seen.insert(id.clone()) {
                return Err(Error::parse(at(path, n), format!("duplicate _id {id:?}")));
            }
            let mut doc = Document::new(id, row.text);
            if let Some(title) = row.title.filter(|t| !t.is_empty()) {
                doc = doc.with_title(title);
            }
            docs.push(doc);
        }
        text.clear();
        lines.clear();
        Ok(())
    };
    for_each_line(path, |n, line| {
        text.push_str(line);
        lines.push((n, text.len()));
        if lines.len() == PARSE_BATCH {
            flush(&mut text, &mut lines)?;
        }
        Ok(())
    })?;
    flush(&mut text, &mut lines)?;
    Ok(docs)
}

/// Reads a BEIR `queries.jsonl`.
pub fn read_queries(path: impl AsRef<Path>) -> Result<Vec<BeirQuery>> {
    let path = path.as_ref();
    let mut queries = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    for_each_line(path, |n, line| {
        let row: QueryLine =
            serde_json::from_str(line).map_err(|e| Error::parse(at(path, n), e))?;
        let id = String::from(row.id);
        if !seen.insert(id.clone()) {
            return Err(Error::parse(at(path, n), format!("duplicate _id {id:?}")));
        }
        queries.push(BeirQuery { id, text: row.text });
        Ok(())
    })?;
    Ok(queries)
}

/// Reads a qrels file: BEIR's `query-id corpus-id score` (tab-separated, with or without the
/// header line) or TREC's `query-id iteration corpus-id score`. Scores are integers; a pair
/// judged twice keeps its last score.
pub fn read_qrels(path: impl AsRef<Path>) -> Result<Qrels> {
    let path: PathBuf = path.as_ref().to_path_buf();
    let mut qrels = Qrels::new();
    let mut first = true;
    for_each_line(&path, |n, line| {
        let fields: Vec<&str> = if line.contains('\t') {
            line.split('\t').map(str::trim).collect()
        } else {
            line.split_whitespace().collect()
        };
        let is_header = std::mem::replace(&mut first, false)
            && fields.last().is_some_and(|s| s.parse::<i32>().is_err());
        if is_header {
            return Ok(());
        }
        let (query, doc, score) = match fields.as_slice() {
            [q, d, s] | [q, _, d, s] => (*q, *d, *s),
            _ => {
                return Err(Error::parse(
                    at(&path, n),
                    format!(
                        "expected 3 fields (query-id, corpus-id, score) or 4 (TREC), got {}",
                        fields.len()
                    ),
                ))
            }
        };
        if query.is_empty() || doc.is_empty() {
            return Err(Error::parse(at(&path, n), "empty query or corpus id"));
        }
        let score: i32 = score.parse().map_err(|_| {
            Error::parse(at(&path, n), format!("score {score:?} is not an integer"))
        })?;
        qrels
            .entry(query.to_string())
            .or_default()
            .insert(doc.to_string(), score);
        Ok(())
    })?;
    Ok(qrels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, content: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rerank-beir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sample(dir: &Path) {
        write(
            dir,
            "corpus.jsonl",
            concat!(
                r#"{"_id": "d1", "title": "Title one", "text": "first text", "metadata": {"x": 1}}"#,
                "\n",
                r#"{"_id": "d2", "title": "", "text": "second text"}"#,
                "\n\n",
                r#"{"_id": 3, "text": "third, no title", "extra": [1, 2]}"#,
                "\n",
            ),
        );
        write(
            dir,
            "queries.jsonl",
            concat!(
                r#"{"_id": "q1", "text": "first query", "metadata": {}}"#,
                "\n",
                r#"{"_id": "q2", "text": "unjudged query"}"#,
                "\n",
                r#"{"_id": "q3", "text": "third query"}"#,
                "\n",
            ),
        );
        write(
            dir,
            "qrels/test.tsv",
            "query-id\tcorpus-id\tscore\nq3\td2\t2\nq1\td1\t1\nq1\t3\t0\n",
        );
        write(dir, "qrels/dev.tsv", "q2 0 d1 1\n");
    }

    #[test]
    fn loads_a_beir_folder() {
        let dir = temp_dir("ok");
        sample(&dir);
        let data = BeirDataset::load(&dir).unwrap();
        assert_eq!(data.corpus.len(), 3);
        assert_eq!(data.corpus[0].id, "d1");
        assert_eq!(data.corpus[0].title.as_deref(), Some("Title one"));
        assert_eq!(data.corpus[0].text, "first text");
        assert!(data.corpus[0].metadata.is_empty());
        assert_eq!(data.corpus[1].title, None);
        assert_eq!(data.corpus[2].id, "3");
        assert_eq!(data.queries.len(), 3);
        assert_eq!(data.qrels.len(), 2);
        assert_eq!(data.qrels["q1"]["d1"], 1);
        assert_eq!(data.qrels["q1"]["3"], 0);
        assert_eq!(data.qrels["q3"]["d2"], 2);
        let judged: Vec<&str> = data
            .judged_queries()
            .iter()
            .map(|q| q.id.as_str())
            .collect();
        assert_eq!(judged, ["q1", "q3"]);

        // another split, TREC format without a header
        let dev = BeirDataset::load_split(&dir, "dev").unwrap();
        assert_eq!(dev.qrels["q2"]["d1"], 1);
        assert_eq!(dev.judged_queries()[0].text, "unjudged query");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let dir = temp_dir("bad");
        sample(&dir);
        // missing split
        let err = BeirDataset::load_split(&dir, "train").unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        assert!(err.to_string().contains("train.tsv"), "{err}");
        assert!(BeirDataset::load_split(&dir, "../x").is_err());

        write(&dir, "qrels/bad.tsv", "q1\td1\t1\nq1\td2\thigh\n");
        let err = BeirDataset::load_split(&dir, "bad")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad.tsv:2") && err.contains("high"), "{err}");

        write(&dir, "qrels/short.tsv", "q1\td1\t1\nq1\td2\n");
        let err = BeirDataset::load_split(&dir, "short")
            .unwrap_err()
            .to_string();
        assert!(err.contains("short.tsv:2"), "{err}");

        write(&dir, "qrels/ghost.tsv", "q1\td1\t1\nq7\td2\t1\n");
        let err = BeirDataset::load_split(&dir, "ghost")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"q7\""), "{err}");

        write(
            &dir,
            "corpus.jsonl",
            "{\"_id\": \"d1\", \"text\": \"a\"}\n{\"_id\": \"d2\"}\n",
        );
        let err = BeirDataset::load(&dir).unwrap_err();
        assert!(matches!(err, Error::Parse { .. }));
        assert!(err.to_string().contains("corpus.jsonl:2"), "{err}");

        write(
            &dir,
            "corpus.jsonl",
            "{\"_id\": \"d1\", \"text\": \"a\"}\n{\"_id\": \"d1\", \"text\": \"b\"}\n",
        );
        let err = BeirDataset::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("corpus.jsonl:2") && err.contains("duplicate"),
            "{err}"
        );

        write(&dir, "corpus.jsonl", "{\"_id\": \"d1\", \"text\": \"a\"}\n");
        write(
            &dir,
            "queries.jsonl",
            "{\"_id\": \"q1\", \"text\": \"a\"}\nnot json\n",
        );
        let err = BeirDataset::load(&dir).unwrap_err().to_string();
        assert!(err.contains("queries.jsonl:2"), "{err}");

        std::fs::remove_file(dir.join("queries.jsonl")).unwrap();
        let err = BeirDataset::load(&dir).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
