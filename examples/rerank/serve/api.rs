//! The wire shapes of the APIs the server speaks: Cohere's rerank (v1 and v2, which Jina's
//! rerank shares), TEI's `/rerank`, `/embed` and `/embed_sparse`, OpenAI's embeddings (which
//! Jina's and Voyage's share), and the pipeline's own `/search` and `/answer`. The
//! fields each API documents (some accepted and ignored); any other field is ignored, as the
//! real services do, and named in the response's `Warning` header (`Unknown`).

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// The fields of a request that its API does not document, by name.
pub type Unknown = BTreeMap<String, IgnoredAny>;

/// A Cohere document: a string, or an object with `text` (v1).
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "each document as a string, or an object with a \"text\" string"
)]
pub enum CohereDocument {
    Text(String),
    Object { text: String },
}

impl CohereDocument {
    pub fn text(&self) -> &str {
        match self {
            CohereDocument::Text(t) | CohereDocument::Object { text: t } => t,
        }
    }
}

/// `POST /v1/rerank`, `POST /v2/rerank` (`model` is accepted and ignored: the server has one;
/// so are v1's `rank_fields` and `max_chunks_per_doc` and v2's `max_tokens_per_doc`: documents
/// are cut to the model's length).
#[derive(Debug, Deserialize)]
pub struct CohereRerankRequest {
    pub query: String,
    pub documents: Vec<CohereDocument>,
    #[serde(default)]
    pub top_n: Option<usize>,
    #[serde(default)]
    pub return_documents: Option<bool>,
    #[serde(default, rename = "model")]
    pub _model: Option<IgnoredAny>,
    #[serde(default, rename = "rank_fields")]
    pub _rank_fields: Option<IgnoredAny>,
    #[serde(default, rename = "max_chunks_per_doc")]
    pub _max_chunks_per_doc: Option<IgnoredAny>,
    #[serde(default, rename = "max_tokens_per_doc")]
    pub _max_tokens_per_doc: Option<IgnoredAny>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Serialize)]
pub struct CohereText {
    pub text: String,
}

#[derive(Debug, Serialize)]
pub struct CohereResult {
    pub index: usize,
    pub relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<CohereText>,
}

/// The tokens a request took: Jina's rerank `usage` (Cohere's count is in `meta.tokens`).
#[derive(Debug, Serialize)]
pub struct RerankUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Serialize)]
pub struct CohereRerankResponse {
    pub id: String,
    pub results: Vec<CohereResult>,
    pub meta: serde_json::Value,
    /// Absent when the reranker cannot count tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<RerankUsage>,
}

/// `POST /rerank` (text-embeddings-inference). `truncate` is accepted and ignored: inputs
/// are always cut to the model's length, as the reference models cut them. `raw_scores` gives
/// the scores before the model's activation (a cross-encoder's logits).
#[derive(Debug, Deserialize)]
pub struct TeiRerankRequest {
    pub query: String,
    pub texts: Vec<String>,
    #[serde(default)]
    pub raw_scores: bool,
    #[serde(default)]
    pub return_text: bool,
    #[serde(default, rename = "truncate")]
    pub _truncate: Option<IgnoredAny>,
    #[serde(default, rename = "truncation_direction")]
    pub _truncation_direction: Option<IgnoredAny>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Serialize)]
pub struct TeiRank {
    pub index: usize,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A string or a list of strings (OpenAI's `input`, TEI's `inputs`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Inputs {
    One(String),
    Many(Vec<String>),
    /// Anything else (token ids): refused, the server takes text.
    Other(serde::de::IgnoredAny),
}

/// `POST /v1/embeddings` (OpenAI).
#[derive(Debug, Deserialize)]
pub struct OpenAiEmbeddingsRequest {
    pub input: Inputs,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub dimensions: Option<usize>,
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// Which side of retrieval the texts are, as Cohere's and Voyage's embedding APIs carry
    /// it: `query` (or `search_query`) embeds with the model's query prompt, `document` (or
    /// `search_document`, the default) with its document prompt. Not in OpenAI's schema:
    /// its SDK sends it through `extra_body`.
    #[serde(default)]
    pub input_type: Option<String>,
    /// OpenAI's end-user id: accepted and ignored.
    #[serde(default, rename = "user")]
    pub _user: Option<IgnoredAny>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Serialize)]
pub struct OpenAiEmbedding {
    pub object: &'static str,
    pub index: usize,
    /// A list of floats, or base64 of their little-endian bytes.
    pub embedding: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct OpenAiUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Serialize)]
pub struct OpenAiEmbeddingsResponse {
    pub object: &'static str,
    pub data: Vec<OpenAiEmbedding>,
    pub model: String,
    pub usage: OpenAiUsage,
}

/// `POST /embed` (text-embeddings-inference; `truncate` is accepted and ignored, as for
/// `/rerank`).
#[derive(Debug, Deserialize)]
pub struct TeiEmbedRequest {
    pub inputs: Inputs,
    /// Unit-length vectors (default true, as TEI); false gives the model's own vectors.
    #[serde(default)]
    pub normalize: Option<bool>,
    /// `query` embeds with the model's query prompt; anything else as documents.
    #[serde(default)]
    pub prompt_name: Option<String>,
    #[serde(default, rename = "truncate")]
    pub _truncate: Option<IgnoredAny>,
    #[serde(default, rename = "truncation_direction")]
    pub _truncation_direction: Option<IgnoredAny>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// `POST /embed_sparse` (text-embeddings-inference; `truncate` is accepted and ignored, as for
/// `/embed`).
#[derive(Debug, Deserialize)]
pub struct TeiEmbedSparseRequest {
    pub inputs: Inputs,
    /// `query` or `document` (`passage`): the sparse encoder's route for the texts.
    #[serde(default)]
    pub prompt_name: Option<String>,
    #[serde(default, rename = "truncate")]
    pub _truncate: Option<IgnoredAny>,
    #[serde(default, rename = "truncation_direction")]
    pub _truncation_direction: Option<IgnoredAny>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// One non-zero entry of a sparse vector: a vocabulary id and its weight.
#[derive(Debug, Serialize)]
pub struct SparseValue {
    pub index: u32,
    pub value: f32,
}

/// `POST /search` and `POST /answer`: the pipeline's request. `include_sources` and `stream`
/// are read by `/answer` only (`/search` refuses them).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    pub query: String,
    #[serde(default)]
    pub top_k: Option<usize>,
    #[serde(default)]
    pub instruction: Option<String>,
    #[serde(default)]
    pub variants: Vec<String>,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub fusion_weight: Option<f32>,
    #[serde(default)]
    pub score_threshold: Option<f32>,
    #[serde(default)]
    pub rerank_depth: Option<usize>,
    /// `/answer`: whether the answer lists its sources (default true; false leaves them out,
    /// as `AnswerOptions::include_sources`).
    #[serde(default)]
    pub include_sources: Option<bool>,
    /// `/answer`: the answer's text as server-sent events while it is written (`delta`
    /// events), then the whole answer (an `answer` event).
    #[serde(default)]
    pub stream: Option<bool>,
}

impl SearchBody {
    pub fn request(self) -> rerank::pipeline::SearchRequest {
        let mut r = rerank::pipeline::SearchRequest::new(self.query);
        r.top_k = self.top_k;
        r.instruction = self.instruction;
        r.variants = self.variants;
        r.mode = self.mode;
        r.fusion_weight = self.fusion_weight;
        r.score_threshold = self.score_threshold;
        r.rerank_depth = self.rerank_depth;
        r
    }
}

/// A response with a `Warning` header (code 299) naming the request fields the server ignored,
/// at most ten of them, when there are any.
pub struct Warned<T>(pub T, pub Unknown);

impl<T: axum::response::IntoResponse> axum::response::IntoResponse for Warned<T> {
    fn into_response(self) -> axum::response::Response {
        let mut response = self.0.into_response();
        if self.1.is_empty() {
            return response;
        }
        let mut names: Vec<String> = self
            .1
            .keys()
            .take(10)
            .map(|k| k.chars().take(64).collect())
            .collect();
        if self.1.len() > 10 {
            names.push(format!("and {} more", self.1.len() - 10));
        }
        let text = format!(
            "299 rerank \"unknown fields ignored: {}\"",
            names.join(", ").replace(['"', '\\'], "")
        );
        // A name the header cannot carry (control characters) leaves the warning out.
        if let Ok(value) = axum::http::HeaderValue::from_str(&text) {
            response
                .headers_mut()
                .insert(axum::http::header::WARNING, value);
        }
        response
    }
}
