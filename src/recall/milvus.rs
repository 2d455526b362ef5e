//! [`MilvusRetriever`]: dense recall from a Milvus collection over Milvus's REST API (v1).
//!
//! The crate stays a client: Milvus scales out the vectors, this module embeds, writes and
//! searches. One collection holds one embedding model's vectors: an auto-id `Int64` primary key,
//! a float vector, and dynamic fields for what the pipeline needs back (`doc_id`, `text`,
//! `title`, `source`, `page`, `metadata` as a JSON object).
//!
//! Writes become visible to searches within the collection's consistency window (Milvus's
//! default, bounded staleness: about a second); [`MilvusRetriever::wait_until_count`] waits for
//! them where a caller needs to read its own writes.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ndarray::Array2;
use serde_json::{json, Map, Value};

use super::{Retriever, SearchQuery};
use crate::http::{self, Attempt, ClientSettings, Reply, RetryPolicy, Sleeper};
use crate::Filter;
use crate::{Document, Embedder, Error, Hit, Result};

/// The most hits Milvus returns for one search (its `topk` limit).
pub const MAX_TOP_K: usize = 16_384;

/// Fields read back with every hit.
const OUTPUT_FIELDS: [&str; 6] = ["doc_id", "text", "title", "source", "page", "metadata"];

/// Dense recall from a Milvus collection, with upserts and deletes by document id.
///
/// ```no_run
/// # #[cfg(feature = "models")] {
/// use std::sync::Arc;
/// use rerank::recall::MilvusRetriever;
/// use rerank::{BertEmbedder, Document, Pipeline};
///
/// let embedder = Arc::new(BertEmbedder::from_dir("models/all-MiniLM-L6-v2")?);
/// let milvus = MilvusRetriever::builder("http://127.0.0.1:19530", "notes", embedder).build()?;
/// milvus.upsert(&[Document::new("n1", "Milvus scales vectors out")])?;
/// let pipeline = Pipeline::builder().retriever(milvus).build()?;
/// # }
/// # Ok::<(), rerank::Error>(())
/// ```
///
/// Every call has a timeout; connection failures, timeouts and 5xx answers are retried with
/// capped exponential backoff, a 4xx answer or an error reported by Milvus never is. Errors are
/// [`Error::Http`] naming Milvus, the collection, the endpoint and the status.
pub struct MilvusRetriever {
    agent: ureq::Agent,
    base: String,
    collection: String,
    embedder: Arc<dyn Embedder>,
    retry: RetryPolicy,
    insert_batch: usize,
    embed_batch: usize,
    max_text_bytes: usize,
    store_text: bool,
}

impl std::fmt::Debug for MilvusRetriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MilvusRetriever")
            .field("url", &self.base)
            .field("collection", &self.collection)
            .field("dim", &self.embedder.dim())
            .field("retry", &self.retry)
            .field("insert_batch", &self.insert_batch)
            .finish_non_exhaustive()
    }
}

/// Configures a [`MilvusRetriever`]; [`MilvusBuilder::build`] checks it without calling the
/// server.
pub struct MilvusBuilder {
    url: String,
    collection: String,
    embedder: Arc<dyn Embedder>,
    http: ClientSettings,
    insert_batch: usize,
    embed_batch: usize,
    max_text_bytes: usize,
    store_text: bool,
}

impl MilvusBuilder {
    /// Timeout of one HTTP call (default 10 s) and of connecting (default 2 s).
    pub fn timeouts(mut self, call: Duration, connect: Duration) -> Self {
        self.http.timeout = call;
        self.http.connect_timeout = connect;
        self
    }

    /// Retries after a failed call (default 3).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.http.max_retries = n;
        self
    }

    /// The first backoff delay (default 200 ms) and the cap (default 2 s).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.http.initial_backoff = initial;
        self.http.max_backoff = max;
        self
    }

    /// Rows per insert request (default 256).
    pub fn insert_batch(mut self, n: usize) -> Self {
        self.insert_batch = n;
        self
    }

    /// Texts per embedder call while upserting (default 64).
    pub fn embed_batch(mut self, n: usize) -> Self {
        self.embed_batch = n;
        self
    }

    /// Whether documents' text is stored in Milvus (default true; hits then carry it for the
    /// reranker). Longer texts are cut at `max_bytes` (default 60,000, on a character boundary:
    /// Milvus caps one row's dynamic fields).
    pub fn store_text(mut self, store: bool, max_bytes: usize) -> Self {
        self.store_text = store;
        self.max_text_bytes = max_bytes;
        self
    }

    /// Replaces the sleep between retries (tests).
    pub fn sleeper(mut self, sleeper: Sleeper) -> Self {
        self.http.sleeper = Some(sleeper);
        self
    }

    /// Checks the settings: an `http://` or `https://` URL, a collection name Milvus accepts
    /// (a letter or `_`, then letters, digits and `_`, at most 255), non-zero sizes and
    /// timeouts, an embedder with a dimension.
    pub fn build(self) -> Result<MilvusRetriever> {
        let base = self.url.trim().trim_end_matches('/').to_string();
        let rest = base
            .strip_prefix("http://")
            .or_else(|| base.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.contains(char::is_whitespace)) {
            return Err(Error::Config(format!(
                "milvus url {:?}: expected http://HOST:PORT",
                self.url
            )));
        }
        validate_collection_name(&self.collection)?;
        if self.insert_batch == 0 || self.embed_batch == 0 {
            return Err(Error::Config(
                "milvus: insert and embed batch sizes must be at least 1".into(),
            ));
        }
        if self.embedder.dim() == 0 {
            return Err(Error::Config(
                "milvus: the embedder reports dimension 0".into(),
            ));
        }
        let (agent, retry) = self.http.client("milvus: ")?;
        Ok(MilvusRetriever {
            agent,
            base,
            collection: self.collection,
            embedder: self.embedder,
            retry,
            insert_batch: self.insert_batch,
            embed_batch: self.embed_batch,
            max_text_bytes: self.max_text_bytes,
            store_text: self.store_text,
        })
    }
}

/// Milvus's rule for collection names.
fn validate_collection_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || name.len() > 255 || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::Config(format!(
            "milvus collection name {name:?}: use a letter or '_' then letters, digits and '_' (at most 255)"
        )));
    }
    Ok(())
}

impl MilvusRetriever {
    /// A builder for the collection `collection` of the server at `url` (e.g.
    /// `http://127.0.0.1:19530`), holding `embedder`'s vectors.
    pub fn builder(
        url: impl Into<String>,
        collection: impl Into<String>,
        embedder: Arc<dyn Embedder>,
    ) -> MilvusBuilder {
        MilvusBuilder {
            url: url.into(),
            collection: collection.into(),
            embedder,
            http: ClientSettings {
                timeout: Duration::from_secs(10),
                connect_timeout: Duration::from_secs(2),
                max_retries: 3,
                initial_backoff: Duration::from_millis(200),
                max_backoff: Duration::from_secs(2),
                sleeper: None,
            },
            insert_batch: 256,
            embed_batch: 64,
            max_text_bytes: 60_000,
            store_text: true,
        }
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The collection's name.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The embedder whose vectors the collection holds.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// Whether the server answers its health check (`GET :9091/healthz` is the metrics port;
    /// this asks the REST port for the collection list, which needs a working proxy).
    pub fn is_healthy(&self) -> bool {
        let url = format!("{}/v1/vector/collections", self.base);
        http::get(&self.agent, &url).is_ok_and(|r| {
            r.status == 200
                && serde_json::from_str::<Value>(&r.text)
                    .is_ok_and(|v| v.get("code").and_then(Value::as_i64) == Some(200))
        })
    }

    /// Whether the collection exists.
    pub fn exists(&self) -> Result<bool> {
        let data = self.call("collections", None)?;
        let names = data.as_array().ok_or_else(|| {
            self.error(
                "collections",
                None,
                "the collection list is not an array".into(),
            )
        })?;
        Ok(names
            .iter()
            .any(|n| n.as_str() == Some(self.collection.as_str())))
    }

    /// Creates the collection (dimension from the embedder, cosine metric) unless it exists;
    /// returns whether it created it. An existing collection whose vectors have another
    /// dimension is an [`Error::Config`].
    pub fn ensure_collection(&self) -> Result<bool> {
        if self.exists()? {
            let dim = self.existing_dim()?;
            if dim != Some(self.embedder.dim()) {
                return Err(Error::Config(format!(
                    "milvus collection {:?} holds vectors of dimension {}, the embedder makes {}",
                    self.collection,
                    dim.map_or("unknown".to_string(), |d| d.to_string()),
                    self.embedder.dim()
                )));
            }
            return Ok(false);
        }
        let body = json!({
            "collectionName": self.collection,
            "dimension": self.embedder.dim(),
            "metricType": "COSINE",
            "primaryField": "pk",
            "vectorField": "vector",
        });
        self.call("collections/create", Some(&body))?;
        Ok(true)
    }

    /// The vector dimension of the existing collection, from `collections/describe`.
    fn existing_dim(&self) -> Result<Option<usize>> {
        let endpoint = format!("collections/describe?collectionName={}", self.collection);
        let data = self.call(&endpoint, None)?;
        let dim = data
            .get("fields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("type").and_then(Value::as_str))
            .find_map(|t| {
                t.strip_prefix("FloatVector(")
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|d| d.parse().ok())
            });
        Ok(dim)
    }

    /// Drops the collection and everything in it; `Ok(false)` when there was none.
    pub fn drop_collection(&self) -> Result<bool> {
        if !self.exists()? {
            return Ok(false);
        }
        let body = json!({ "collectionName": self.collection });
        self.call("collections/drop", Some(&body))?;
        Ok(true)
    }

    /// The number of rows in the collection (as far as its consistency window shows them).
    pub fn count(&self) -> Result<usize> {
        let body = json!({
            "collectionName": self.collection,
            "filter": "pk > 0",
            "outputFields": ["count(*)"],
            "limit": 0,
        });
        let data = self.call("query", Some(&body))?;
        let count = data
            .get(0)
            .and_then(|row| row.get("count(*)"))
            .and_then(|c| match c {
                Value::String(s) => s.parse().ok(),
                other => other.as_u64().map(|n| n as usize),
            })
            .ok_or_else(|| self.error("query", None, format!("no count(*) in {data}")))?;
        Ok(count)
    }

    /// Waits (polling every 200 ms) until the collection shows at least `expected` rows, up to
    /// `timeout`; returns the last count.
    pub fn wait_until_count(&self, expected: usize, timeout: Duration) -> Result<usize> {
        let start = Instant::now();
        loop {
            let n = self.count()?;
            if n >= expected || start.elapsed() >= timeout {
                return Ok(n);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Which of `ids` the collection holds (asked 500 at a time).
    pub fn existing_ids(&self, ids: &[&str]) -> Result<HashSet<String>> {
        let mut found = HashSet::new();
        for chunk in ids.chunks(500) {
            for row in self.rows_with_ids(chunk, &["doc_id"])? {
                if let Some(id) = row.get("doc_id").and_then(Value::as_str) {
                    found.insert(id.to_string());
                }
            }
        }
        Ok(found)
    }

    /// Rows whose `doc_id` is one of `ids`, with `fields` (and the primary key).
    fn rows_with_ids(&self, ids: &[&str], fields: &[&str]) -> Result<Vec<Value>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = ids.iter().map(|id| quote(id)).collect();
        let body = json!({
            "collectionName": self.collection,
            "filter": format!("doc_id in [{}]", list.join(", ")),
            "outputFields": fields,
            "limit": MAX_TOP_K,
        });
        let data = self.call("query", Some(&body))?;
        Ok(data.as_array().cloned().unwrap_or_default())
    }

    /// Embeds and writes `docs`, replacing the rows of documents with the same ids; creates
    /// the collection when missing. Duplicate ids within `docs`: the last one wins. Returns
    /// the number of rows written.
    pub fn upsert(&self, docs: &[Document]) -> Result<usize> {
        if docs.is_empty() {
            return Ok(0);
        }
        self.ensure_collection()?;
        self.embed_and_write(&last_of_each_id(docs))
    }

    /// Embeds and writes only the documents whose ids the collection lacks (a first load, or
    /// one cut short), creating the collection when missing, and waits up to `visible` for the
    /// rows to show in searches. Returns how many it wrote. Documents already present are not
    /// compared: use [`MilvusRetriever::upsert`] for changed content.
    pub fn add_missing(&self, docs: &[Document], visible: Duration) -> Result<usize> {
        self.ensure_collection()?;
        let docs = last_of_each_id(docs);
        let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
        let present = self.existing_ids(&ids)?;
        let missing: Vec<Document> = docs
            .into_iter()
            .filter(|d| !present.contains(&d.id))
            .collect();
        if missing.is_empty() {
            return Ok(0);
        }
        let before = self.count()?;
        let written = self.embed_and_write(&missing)?;
        self.wait_until_count(before + written, visible)?;
        Ok(written)
    }

    /// Writes `docs` with their precomputed `vectors` (row `i` for `docs[i]`), replacing the
    /// rows of documents with the same ids; creates the collection when missing.
    pub fn upsert_embedded(&self, docs: &[Document], vectors: &Array2<f32>) -> Result<usize> {
        if vectors.nrows() != docs.len() {
            return Err(Error::Config(format!(
                "milvus upsert: {} documents but {} vectors",
                docs.len(),
                vectors.nrows()
            )));
        }
        if vectors.ncols() != self.embedder.dim() {
            return Err(Error::Config(format!(
                "milvus upsert: vectors of dimension {}, the collection's embedder makes {}",
                vectors.ncols(),
                self.embedder.dim()
            )));
        }
        if docs.is_empty() {
            return Ok(0);
        }
        self.ensure_collection()?;
        self.write(docs, vectors)
    }

    /// Embeds `docs` (`embed_batch` texts a call) and writes them, `insert_batch` at a time,
    /// into the existing collection.
    fn embed_and_write(&self, docs: &[Document]) -> Result<usize> {
        let mut written = 0;
        for chunk in docs.chunks(self.embed_batch.max(self.insert_batch)) {
            let texts: Vec<String> = chunk.iter().map(|d| d.full_text()).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let mut vectors = Array2::zeros((chunk.len(), self.embedder.dim()));
            for (i, part) in refs.chunks(self.embed_batch).enumerate() {
                let start = i * self.embed_batch;
                vectors
                    .slice_mut(ndarray::s![start..start + part.len(), ..])
                    .assign(&self.embedder.embed(part)?);
            }
            written += self.write(chunk, &vectors)?;
        }
        Ok(written)
    }

    /// Deletes the rows of `docs`' ids, then inserts `docs` with `vectors` (row `i` for
    /// `docs[i]`) in batches of `insert_batch`, into the existing collection.
    fn write(&self, docs: &[Document], vectors: &Array2<f32>) -> Result<usize> {
        let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
        self.delete(&ids)?;
        let mut written = 0;
        for (n, chunk) in docs.chunks(self.insert_batch).enumerate() {
            let start = n * self.insert_batch;
            let rows: Vec<Value> = chunk
                .iter()
                .enumerate()
                .map(|(i, d)| self.row(d, vectors.row(start + i).to_vec()))
                .collect::<Result<_>>()?;
            let body = json!({ "collectionName": self.collection, "data": rows });
            let data = self.call("insert", Some(&body))?;
            written += data.get("insertCount").and_then(Value::as_u64).unwrap_or(0) as usize;
        }
        Ok(written)
    }

    /// One row: the vector and the document's fields.
    fn row(&self, doc: &Document, vector: Vec<f32>) -> Result<Value> {
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(Error::Config(format!(
                "milvus upsert: the vector of document {:?} is not finite",
                doc.id
            )));
        }
        let mut row = Map::new();
        row.insert("vector".into(), json!(vector));
        row.insert("doc_id".into(), json!(doc.id));
        if self.store_text {
            row.insert("text".into(), json!(cut(&doc.text, self.max_text_bytes)));
        }
        if let Some(t) = &doc.title {
            row.insert("title".into(), json!(t));
        }
        if let Some(s) = &doc.source {
            row.insert("source".into(), json!(s));
        }
        if let Some(p) = doc.page {
            row.insert("page".into(), json!(p));
        }
        if !doc.metadata.is_empty() {
            row.insert("metadata".into(), json!(doc.metadata));
        }
        Ok(Value::Object(row))
    }

    /// Deletes the rows of documents `ids`; returns how many rows it deleted.
    pub fn delete(&self, ids: &[&str]) -> Result<usize> {
        let mut deleted = 0;
        for chunk in ids.chunks(500) {
            let pks: Vec<i64> = self
                .rows_with_ids(chunk, &["pk"])?
                .iter()
                .filter_map(|row| match row.get("pk")? {
                    Value::String(s) => s.parse().ok(),
                    other => other.as_i64(),
                })
                .collect();
            if pks.is_empty() {
                continue;
            }
            let body = json!({ "collectionName": self.collection, "id": pks });
            self.call("delete", Some(&body))?;
            deleted += pks.len();
        }
        Ok(deleted)
    }

    /// The `k` nearest rows to `vector` that pass `filters` (those Milvus can evaluate; the
    /// pipeline applies every filter again to the hits).
    pub fn search_vector(&self, vector: &[f32], k: usize, filters: &[Filter]) -> Result<Vec<Hit>> {
        if k == 0 {
            return Ok(Vec::new());
        }
        if vector.len() != self.embedder.dim() {
            return Err(Error::Config(format!(
                "milvus search: a query vector of dimension {}, the collection holds {}",
                vector.len(),
                self.embedder.dim()
            )));
        }
        let mut body = json!({
            "collectionName": self.collection,
            "vector": vector,
            "limit": k.min(MAX_TOP_K),
            "outputFields": OUTPUT_FIELDS,
        });
        if let Some(expr) = filter_expression(filters) {
            body["filter"] = json!(expr);
        }
        let data = self.call("search", Some(&body))?;
        let rows = data.as_array().ok_or_else(|| {
            self.error(
                "search",
                None,
                format!("search data is not an array: {data}"),
            )
        })?;
        let mut hits = Vec::with_capacity(rows.len());
        for row in rows {
            let score = row.get("distance").and_then(Value::as_f64).ok_or_else(|| {
                self.error("search", None, format!("a hit without distance: {row}"))
            })? as f32;
            let doc = document_of(row).ok_or_else(|| {
                self.error("search", None, format!("a hit without doc_id: {row}"))
            })?;
            hits.push(Hit::new(Arc::new(doc), score).with_vector(score));
        }
        Ok(hits)
    }

    /// Calls `POST /v1/vector/{endpoint}` (or `GET` without a body) and returns the reply's
    /// `data`, with the retry policy.
    fn call(&self, endpoint: &str, body: Option<&Value>) -> Result<Value> {
        let url = format!("{}/v1/vector/{endpoint}", self.base);
        let what = endpoint.split('?').next().unwrap_or(endpoint);
        self.retry.run(
            || {
                let reply = match body {
                    Some(b) => http::post_json(&self.agent, &url, &[], b),
                    None => http::get(&self.agent, &url),
                };
                match reply {
                    Ok(r) => self.judge(what, r),
                    Err(t) if t.retryable => Attempt::Retry {
                        reason: t.message,
                        status: None,
                        retry_after: None,
                    },
                    Err(t) => Attempt::Fail(self.error_from(what, None, t.message, Some(t.source))),
                }
            },
            |status, message| self.error(what, status, message),
        )
    }

    /// What one reply means: `data` on `{"code": 200}`, a retry on 408/429/5xx, else an error.
    fn judge(&self, what: &str, reply: Reply) -> Attempt<Value> {
        if reply.is_retryable() {
            return Attempt::Retry {
                reason: format!(
                    "{} ({})",
                    http::status_line(reply.status),
                    http::server_message(&reply.text)
                ),
                status: Some(reply.status),
                retry_after: reply.retry_after,
            };
        }
        if !(200..300).contains(&reply.status) {
            return Attempt::Fail(self.error(
                what,
                Some(reply.status),
                format!(
                    "{} ({}) (not retried)",
                    http::status_line(reply.status),
                    http::server_message(&reply.text)
                ),
            ));
        }
        let parsed: Value = match serde_json::from_str(&reply.text) {
            Ok(v) => v,
            Err(e) => {
                return Attempt::Fail(self.error(
                    what,
                    Some(reply.status),
                    format!("the reply is not JSON ({e})"),
                ))
            }
        };
        match parsed.get("code").and_then(Value::as_i64) {
            Some(200) => Attempt::Done(parsed.get("data").cloned().unwrap_or(Value::Null)),
            code => Attempt::Fail(self.error(
                what,
                Some(reply.status),
                format!(
                    "Milvus code {}: {} (not retried)",
                    code.map_or("none".to_string(), |c| c.to_string()),
                    http::server_message(&reply.text)
                ),
            )),
        }
    }

    fn error(&self, what: &str, status: Option<u16>, message: String) -> Error {
        self.error_from(what, status, message, None)
    }

    /// An [`Error::Http`] naming the endpoint, Milvus and the collection.
    fn error_from(
        &self,
        what: &str,
        status: Option<u16>,
        message: String,
        source: Option<crate::BoxError>,
    ) -> Error {
        Error::Http {
            url: format!("{}/v1/vector/{what}", self.base),
            status,
            message: format!("milvus collection {:?}: {message}", self.collection),
            source,
        }
    }
}

impl Retriever for MilvusRetriever {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        if k == 0 {
            return Ok(Vec::new());
        }
        match &query.embedding {
            Some(e) => self.search_vector(e, k, &query.filters),
            None => {
                let e = self.embedder.embed_query(&query.text)?;
                self.search_vector(&e, k, &query.filters)
            }
        }
    }

    fn name(&self) -> &str {
        "milvus"
    }
}

/// The last occurrence of each id, in the order of those last occurrences.
fn last_of_each_id(docs: &[Document]) -> Vec<Document> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<Document> = docs
        .iter()
        .rev()
        .filter(|d| seen.insert(d.id.as_str()))
        .cloned()
        .collect();
    out.reverse();
    out
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A hit's document from the row's fields.
fn document_of(row: &Value) -> Option<Document> {
    let id = row.get("doc_id")?.as_str()?;
    let text = row.get("text").and_then(Value::as_str).unwrap_or_default();
    let mut doc = Document::new(id, text);
    doc.title = row.get("title").and_then(Value::as_str).map(str::to_string);
    doc.source = row
        .get("source")
        .and_then(Value::as_str)
        .map(str::to_string);
    doc.page = row
        .get("page")
        .and_then(Value::as_u64)
        .and_then(|p| u32::try_from(p).ok());
    if let Some(Value::Object(m)) = row.get("metadata") {
        doc.metadata = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    }
    Some(doc)
}

/// A Milvus string literal: double quotes, with `\` and `"` escaped, so a value can never end
/// the literal and inject an expression.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The field a filter names, as a Milvus expression operand.
fn operand(field: &str) -> String {
    match field {
        "id" => "doc_id".into(),
        "source" | "page" | "title" => field.into(),
        key => format!("metadata[{}]", quote(key)),
    }
}

/// A JSON value as a Milvus literal; `None` for what Milvus cannot compare (null, arrays,
/// objects).
fn literal(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(quote(s)),
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite()).map(|_| n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The part of `filters` Milvus can evaluate, joined with `&&`; `None` when nothing is left.
///
/// Values are quoted literals ([`quote`]). A prefix holding `%`, `_` or `\` is left to the
/// pipeline (Milvus's `like` has no escape for its wildcards), as are null, array and object
/// values and the typed filters (source type, language, path prefix).
pub(crate) fn filter_expression(filters: &[Filter]) -> Option<String> {
    let parts: Vec<String> = filters
        .iter()
        .filter_map(|f| match f {
            Filter::Eq { field, value } => {
                Some(format!("{} == {}", operand(field), literal(value)?))
            }
            Filter::In { field, values } => {
                let list: Option<Vec<String>> = values.iter().map(literal).collect();
                let list = list?;
                if list.is_empty() {
                    // Nothing can match; Milvus rejects `in []`, so say it another way.
                    return Some(format!(
                        "{} == \"\" && {} != \"\"",
                        operand(field),
                        operand(field)
                    ));
                }
                Some(format!("{} in [{}]", operand(field), list.join(", ")))
            }
            Filter::Prefix { field, prefix } => {
                if prefix.contains(['%', '_', '\\']) {
                    return None;
                }
                Some(format!(
                    "{} like {}",
                    operand(field),
                    quote(&format!("{prefix}%"))
                ))
            }
            // Case-insensitive matches and the path-or-source fallback have no exact Milvus
            // form: the pipeline applies them (a narrower expression would drop documents that
            // pass).
            Filter::SourceType { .. } | Filter::Language { .. } | Filter::PathPrefix { .. } => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(" && "))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(usize);
    impl Embedder for Fixed {
        fn embed_as(&self, texts: &[&str], _role: crate::Role) -> Result<Array2<f32>> {
            Ok(Array2::ones((texts.len(), self.0)))
        }
        fn dim(&self) -> usize {
            self.0
        }
    }

    fn builder(url: &str, collection: &str) -> MilvusBuilder {
        MilvusRetriever::builder(url, collection, Arc::new(Fixed(4)))
    }

    #[test]
    fn build_checks_url_name_and_sizes() {
        assert!(builder("http://127.0.0.1:19530", "docs_1").build().is_ok());
        assert!(builder("https://milvus.internal:443/", "_x")
            .build()
            .is_ok());
        for url in ["", "127.0.0.1:19530", "ftp://x", "http://", "http://a b"] {
            let e = builder(url, "docs").build().unwrap_err();
            assert!(e.to_string().contains("milvus url"), "{url}: {e}");
        }
        for name in ["", "1abc", "a-b", "a b", "ä", &"a".repeat(256)] {
            let e = builder("http://h:1", name).build().unwrap_err();
            assert!(e.to_string().contains("collection name"), "{name}: {e}");
        }
        assert!(builder("http://h:1", "c").insert_batch(0).build().is_err());
        let zero = Duration::ZERO;
        assert!(builder("http://h:1", "c")
            .timeouts(zero, zero)
            .build()
            .is_err());
        let e = MilvusRetriever::builder("http://h:1", "c", Arc::new(Fixed(0)))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("dimension 0"), "{e}");
    }

    #[test]
    fn quoting_escapes_everything_that_could_end_a_literal() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote(r#"a" || doc_id != ""#), r#""a\" || doc_id != \"""#);
        assert_eq!(quote(r"back\slash"), r#""back\\slash""#);
        assert_eq!(quote("line\nbreak\u{1}"), "\"line\\nbreak\\u0001\"");
    }

    #[test]
    fn filters_become_milvus_expressions() {
        let filters = [
            Filter::eq("source", "notes/a.md"),
            Filter::eq("page", 3),
            Filter::one_of("lang", ["rust", "py"]),
            Filter::prefix("path", "src/"),
            Filter::eq("id", "x\"y"),
        ];
        assert_eq!(
            filter_expression(&filters).unwrap(),
            r#"source == "notes/a.md" && page == 3 && metadata["lang"] in ["rust", "py"] && metadata["path"] like "src/%" && doc_id == "x\"y""#
        );
    }

    #[test]
    fn what_milvus_cannot_evaluate_is_left_to_the_pipeline() {
        assert_eq!(filter_expression(&[]), None);
        assert_eq!(filter_expression(&[Filter::prefix("path", "a_b")]), None);
        assert_eq!(filter_expression(&[Filter::prefix("path", "100%")]), None);
        assert_eq!(filter_expression(&[Filter::eq("k", Value::Null)]), None);
        let typed = [
            Filter::Language {
                values: vec!["EN".into()],
            },
            Filter::SourceType {
                values: vec!["code".into()],
            },
            Filter::PathPrefix {
                prefix: "src/".into(),
            },
        ];
        assert_eq!(filter_expression(&typed), None);
        assert_eq!(filter_expression(&[Filter::eq("k", json!([1]))]), None);
        assert_eq!(
            filter_expression(&[Filter::eq("k", json!([1])), Filter::eq("a", true)]).unwrap(),
            r#"metadata["a"] == true"#
        );
        let none: [&str; 0] = [];
        assert_eq!(
            filter_expression(&[Filter::one_of("lang", none)]).unwrap(),
            r#"metadata["lang"] == "" && metadata["lang"] != """#
        );
    }

    #[test]
    fn rows_round_trip_to_documents() {
        let m = builder("http://h:1", "c")
            .store_text(true, 5)
            .build()
            .unwrap();
        let doc = Document::new("d1", "héllo world")
            .with_title("T")
            .with_source("s.md")
            .with_page(2)
            .with_metadata("lang", "en");
        let row = m.row(&doc, vec![0.5; 4]).unwrap();
        // Cut at 5 bytes on a char boundary: "héll" is 5 bytes.
        assert_eq!(row["text"], "héll");
        let back = document_of(&row).unwrap();
        assert_eq!(back.id, "d1");
        assert_eq!(back.title.as_deref(), Some("T"));
        assert_eq!(back.source.as_deref(), Some("s.md"));
        assert_eq!(back.page, Some(2));
        assert_eq!(back.metadata.get("lang"), Some(&json!("en")));
        assert!(m.row(&doc, vec![f32::NAN; 4]).is_err());
    }

    #[test]
    fn duplicate_ids_keep_the_last_document() {
        let docs = [
            Document::new("a", "1"),
            Document::new("b", "2"),
            Document::new("a", "3"),
        ];
        let kept = last_of_each_id(&docs);
        let pairs: Vec<(&str, &str)> = kept
            .iter()
            .map(|d| (d.id.as_str(), d.text.as_str()))
            .collect();
        assert_eq!(pairs, [("b", "2"), ("a", "3")]);
    }

    #[test]
    fn a_closed_port_is_a_typed_error_naming_milvus_after_the_retries() {
        let slept = Arc::new(std::sync::Mutex::new(0));
        let counter = slept.clone();
        // Port 9 (discard) on loopback: nothing listens there in the test environment.
        let m = builder("http://127.0.0.1:9", "docs")
            .max_retries(2)
            .sleeper(Arc::new(move |_| *counter.lock().unwrap() += 1))
            .build()
            .unwrap();
        let e = m.retrieve(&SearchQuery::new("q"), 3).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::Http { .. }), "{e:?}");
        assert!(text.contains("milvus collection \"docs\""), "{text}");
        assert!(text.contains("gave up after 3 attempts"), "{text}");
        assert_eq!(*slept.lock().unwrap(), 2);
        assert!(!m.is_healthy());
    }
}
