//! [`OpenAiEmbedder`]: embeddings from an OpenAI-compatible `/embeddings` endpoint (OpenAI,
//! `rerank serve`, text-embeddings-inference, infinity, vLLM, Ollama), with batching,
//! retries and the roles' prompts.

use std::time::Duration;

use ndarray::Array2;
use serde_json::{json, Value};

use super::{Embedder, Role};
use crate::http::{self, ApiClient, ApiSettings};
use crate::{Error, Result};

/// Default texts per request.
pub const DEFAULT_BATCH_SIZE: usize = 64;

/// An [`Embedder`] that calls an OpenAI-compatible `POST {base_url}/embeddings` endpoint.
///
/// Texts go in requests of at most `batch_size`, each `{"model", "input": [...],
/// "encoding_format": "float"}` plus `"dimensions"` when set (models with Matryoshka
/// dimensions, such as text-embedding-3-*, cut their vectors server-side). The reply's `data`
/// is put back in input order by its `index`; a reply with the wrong count, a row of another
/// width or a non-finite value is an error, never a silently wrong vector. Failures are
/// retried as the OpenAI-compatible generator retries them: 408, 429 (honouring
/// `Retry-After`), 5xx and network failures with capped exponential backoff; 401 / 403 fail
/// at once, naming where the key came from.
///
/// Roles: a remote model cannot read a local prompt file, so the prompts are the builder's
/// ([`query_prompt`](OpenAiEmbedderBuilder::query_prompt),
/// [`document_prompt`](OpenAiEmbedderBuilder::document_prompt); e5's `"query: "` /
/// `"passage: "`, or a registry entry's); without them both sides are embedded alike.
///
/// [`Embedder::id`] is `openai-` and a hash of the model name, the dimensions and the prompts
/// (not the URL: the same model served elsewhere gives the same vectors), so a store keeps its
/// vectors apart from every other model's.
///
/// ```no_run
/// use rerank::embed::OpenAiEmbedder;
/// use rerank::Embedder;
/// let embedder = OpenAiEmbedder::builder()
///     .base_url("http://127.0.0.1:8080/v1")
///     .model("sentence-transformers/all-MiniLM-L6-v2")
///     .dim(384)
///     .build()?;
/// let v = embedder.embed_query("what is bm25")?;
/// assert_eq!(v.len(), 384);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct OpenAiEmbedder {
    client: ApiClient,
    model: String,
    dimensions: Option<usize>,
    dim: usize,
    batch_size: usize,
    query_prompt: Option<String>,
    document_prompt: Option<String>,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("client", &self.client)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

/// Configures an [`OpenAiEmbedder`]; [`OpenAiEmbedderBuilder::build`] checks it.
#[derive(Clone, Debug)]
pub struct OpenAiEmbedderBuilder {
    api: ApiSettings,
    model: Option<String>,
    dimensions: Option<usize>,
    dim: Option<usize>,
    batch_size: usize,
    query_prompt: Option<String>,
    document_prompt: Option<String>,
}

impl Default for OpenAiEmbedderBuilder {
    fn default() -> Self {
        OpenAiEmbedderBuilder {
            api: ApiSettings::new("https://api.openai.com/v1", Duration::from_secs(60)),
            model: None,
            dimensions: None,
            dim: None,
            batch_size: DEFAULT_BATCH_SIZE,
            query_prompt: None,
            document_prompt: None,
        }
    }
}

impl OpenAiEmbedderBuilder {
    http::api_builder_methods!("embeddings", "60 s");

    /// The model name sent with each request (required).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Asks the server for vectors of `n` dimensions (the API's `dimensions`; Matryoshka
    /// models). Also the expected width.
    pub fn dimensions(mut self, n: usize) -> Self {
        self.dimensions = Some(n);
        self
    }

    /// The width the model's vectors have. Without it (and without
    /// [`dimensions`](Self::dimensions)) `build` embeds one probe text to find out.
    pub fn dim(mut self, n: usize) -> Self {
        self.dim = Some(n);
        self
    }

    /// Texts per request (default 64).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// Put before every query ([`Role::Query`]), e.g. `"query: "`.
    pub fn query_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.query_prompt = Some(prompt.into()).filter(|p| !p.is_empty());
        self
    }

    /// Put before every document ([`Role::Document`]), e.g. `"passage: "`.
    pub fn document_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.document_prompt = Some(prompt.into()).filter(|p| !p.is_empty());
        self
    }

    /// Checks the settings and builds the embedder; without a known width, one probe request
    /// finds it (so a wrong URL, key or model fails here, not at the first search).
    pub fn build(self) -> Result<OpenAiEmbedder> {
        let model = self.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| {
            Error::Config(
                "the OpenAI-compatible embedder needs a model name: call .model(...)".into(),
            )
        })?;
        if self.batch_size == 0 {
            return Err(Error::Config(
                "embedder batch_size must be at least 1".into(),
            ));
        }
        if let (Some(d), Some(n)) = (self.dim, self.dimensions) {
            if d != n {
                return Err(Error::Config(format!(
                    "embedder dim {d} differs from the dimensions {n} asked of the server"
                )));
            }
        }
        if self.dim == Some(0) || self.dimensions == Some(0) {
            return Err(Error::Config(
                "embedder dimensions must be at least 1".into(),
            ));
        }
        let mut embedder = OpenAiEmbedder {
            client: self.api.connect("embeddings")?,
            model,
            dimensions: self.dimensions,
            dim: self.dim.or(self.dimensions).unwrap_or(0),
            batch_size: self.batch_size,
            query_prompt: self.query_prompt,
            document_prompt: self.document_prompt,
        };
        if embedder.dim == 0 {
            let probe = embedder.request(&["dimension probe".to_string()], None)?;
            embedder.dim = probe.first().map_or(0, Vec::len);
            if embedder.dim == 0 {
                return Err(Error::Http {
                    url: embedder.client.url.clone(),
                    status: None,
                    message: "the server returned an empty embedding".into(),
                    source: None,
                });
            }
        }
        Ok(embedder)
    }
}

impl OpenAiEmbedder {
    /// A builder with the defaults (see its methods).
    pub fn builder() -> OpenAiEmbedderBuilder {
        OpenAiEmbedderBuilder::default()
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.client.url
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// One request for `texts`; rows in input order, each `expect` wide when given.
    fn request(&self, texts: &[String], expect: Option<usize>) -> Result<Vec<Vec<f32>>> {
        let mut body = json!({
            "model": self.model,
            "input": texts,
            "encoding_format": "float",
        });
        if let Some(n) = self.dimensions {
            body["dimensions"] = json!(n);
        }
        self.client
            .call(&body, |text| parse_embeddings(text, texts.len(), expect))
    }
}

/// The rows of an embeddings reply, by `index`: `count` of them, each `width` wide when
/// given, every value finite.
fn parse_embeddings(
    text: &str,
    count: usize,
    width: Option<usize>,
) -> std::result::Result<Vec<Vec<f32>>, String> {
    let bad = |m: String| format!("invalid embeddings response: {m}");
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no data list".into()))?;
    if data.len() != count {
        return Err(bad(format!("{} embeddings for {count} inputs", data.len())));
    }
    let mut rows: Vec<Option<Vec<f32>>> = vec![None; count];
    for (i, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            None => i,
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n < count)
                .ok_or_else(|| bad(format!("data[{i}].index {v} is not an input index")))?,
        };
        let values = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("data[{i}].embedding is not a list of numbers")))?;
        let row: Vec<f32> = values
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32).filter(|x| x.is_finite()))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                bad(format!(
                    "data[{i}].embedding has a non-finite or non-number value"
                ))
            })?;
        if let Some(w) = width.filter(|&w| w != row.len()) {
            return Err(bad(format!(
                "data[{i}].embedding has {} values, expected {w}",
                row.len()
            )));
        }
        if rows[index].replace(row).is_some() {
            return Err(bad(format!("index {index} twice")));
        }
    }
    Ok(rows.into_iter().map(|r| r.unwrap_or_default()).collect())
}

impl Embedder for OpenAiEmbedder {
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        let prompt = match role {
            Role::Query => self.query_prompt.as_deref(),
            Role::Document => self.document_prompt.as_deref(),
        }
        .unwrap_or("");
        let mut out = Array2::zeros((texts.len(), self.dim));
        for (chunk_index, chunk) in texts.chunks(self.batch_size).enumerate() {
            let inputs: Vec<String> = chunk.iter().map(|t| format!("{prompt}{t}")).collect();
            let rows = self.request(&inputs, Some(self.dim))?;
            for (i, row) in rows.into_iter().enumerate() {
                let r = chunk_index * self.batch_size + i;
                out.row_mut(r).iter_mut().zip(row).for_each(|(o, v)| *o = v);
            }
        }
        Ok(out)
    }

    fn dim(&self) -> usize {
        self.dim
    }

    /// `openai-` and the first 16 bytes (hex) of a SHA-256 of the model name, the dimensions
    /// asked for and both prompts.
    fn id(&self) -> Option<String> {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(self.model.as_bytes());
        hash.update([0]);
        hash.update(self.dimensions.unwrap_or(0).to_le_bytes());
        for p in [&self.query_prompt, &self.document_prompt] {
            hash.update([0]);
            hash.update(p.as_deref().unwrap_or("").as_bytes());
        }
        let digest = hash.finalize();
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Some(format!("openai-{hex}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_put_in_input_order_and_checked() {
        let reply =
            r#"{"data": [{"index": 1, "embedding": [3, 4]}, {"index": 0, "embedding": [1, 2]}]}"#;
        assert_eq!(
            parse_embeddings(reply, 2, Some(2)).unwrap(),
            vec![vec![1.0, 2.0], vec![3.0, 4.0]]
        );
        for (reply, count, width, why) in [
            (r#"{"data": []}"#, 1, None, "0 embeddings for 1 inputs"),
            (
                r#"{"data": [{"index": 5, "embedding": [1]}]}"#,
                1,
                None,
                "not an input index",
            ),
            (
                r#"{"data": [{"embedding": [1, 2]}]}"#,
                1,
                Some(3),
                "expected 3",
            ),
            (
                r#"{"data": [{"embedding": [1, "x"]}]}"#,
                1,
                None,
                "non-number",
            ),
            (
                r#"{"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}"#,
                2,
                None,
                "twice",
            ),
            ("<html>", 1, None, "not JSON"),
        ] {
            let e = parse_embeddings(reply, count, width).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn the_builder_checks_its_settings() {
        let b = || {
            OpenAiEmbedder::builder()
                .base_url("http://127.0.0.1:9/v1")
                .dim(4)
        };
        assert!(b().build().is_err(), "no model");
        assert!(b().model("m").batch_size(0).build().is_err());
        assert!(
            b().model("m").dimensions(8).build().is_err(),
            "dim 4 vs dimensions 8"
        );
        assert!(b().model("m").base_url("ftp://x").build().is_err());
        let e = b().model("m").build().unwrap();
        assert_eq!(e.url(), "http://127.0.0.1:9/v1/embeddings");
        assert_eq!(e.dim(), 4);
        let other = b().model("m").query_prompt("query: ").build().unwrap();
        assert_ne!(e.id(), other.id());
    }
}
