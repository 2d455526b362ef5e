//! The query-side stages of a search: PII guard, semantic cache, HyDE, multi-query expansion,
//! and protected ordering of reranked hits.

use std::sync::Arc;
use std::time::Instant;

use super::{ms, Pipeline, SearchRequest, SearchResponse, Timings};
use crate::cache::SemanticCache;
use crate::classify::{Classification, LegalExtractor, Route};
use crate::expand::{
    generate_variants, hyde_embedding, retrieve_expanded, ExpansionConfig, HydeConfig,
};
use crate::guard::PiiGuard;
use crate::guard::PiiKind;
use crate::recall::SearchQuery;
use crate::rerankers::ProtectPolicy;
use crate::{Error, Hit, Result};

/// Settings of the query-side stages (held by the pipeline and its builder).
#[derive(Debug, Clone, Default)]
pub(super) struct QueryStages {
    /// Refuses queries with personal data (default: every kind).
    pub(super) pii: PiiGuard,
    /// Protected reranking for factual queries (default: up to 3 of the top 3).
    pub(super) protection: ProtectPolicy,
    /// The semantic cache, when set (needs an embedder).
    pub(super) cache: Option<Arc<SemanticCache<SearchResponse>>>,
    /// HyDE, when set (needs a generator and an embedder).
    pub(super) hyde: Option<HydeConfig>,
    /// Generated query variants, when set.
    pub(super) expansion: Option<ExpansionConfig>,
    /// Tags cached responses with the acts their hits cite, when set.
    pub(super) act_tags: Option<LegalExtractor>,
}

impl QueryStages {
    /// Checks the settings against the components the pipeline has.
    pub(super) fn validate(&self, has_generator: bool, has_embedder: bool) -> Result<()> {
        self.protection.validate()?;
        if self.cache.is_some() && !has_embedder {
            return Err(Error::Config(
                "the semantic cache needs an embedder: call .embedder(...)".into(),
            ));
        }
        if let Some(hyde) = &self.hyde {
            hyde.validate()?;
            if !has_generator || !has_embedder {
                return Err(Error::Config(
                    "HyDE needs a generator and an embedder: call .generator(...) and .embedder(...)"
                        .into(),
                ));
            }
        }
        if let Some(expansion) = &self.expansion {
            expansion.validate()?;
            if expansion.generate && !has_generator {
                return Err(Error::Config(
                    "generated query variants need a generator: call .generator(...), or use \
                     ExpansionConfig::host_variants_only()"
                        .into(),
                ));
            }
        }
        Ok(())
    }
}

/// A cache lookup: the query embedding and scope to store the response under afterwards.
pub(super) struct CacheProbe {
    embedding: Option<Vec<f32>>,
    scope: String,
    /// The cached response, on a hit.
    pub(super) hit: Option<SearchResponse>,
}

/// Stage-1 hits and what recall did beyond plain retrieval.
pub(super) struct Recall {
    pub(super) hits: Vec<Hit>,
    pub(super) hyde: bool,
    pub(super) variants: Vec<String>,
}

impl Pipeline {
    /// Refuses the request when the query or a host variant holds personal data.
    pub(super) fn guard(&self, request: &SearchRequest) -> Result<()> {
        let mut kinds: Vec<PiiKind> = std::iter::once(&request.query)
            .chain(&request.variants)
            .flat_map(|text| self.query.pii.detect(text))
            .collect();
        if kinds.is_empty() {
            return Ok(());
        }
        kinds.sort();
        kinds.dedup();
        // Only the kinds are logged, never the query.
        tracing::warn!(stage = "guard", kinds = %PiiKind::join(&kinds), "query refused: personal data");
        Err(Error::PiiRefused { kinds })
    }

    /// Looks the query up in the semantic cache (when one is set and the embedder works).
    pub(super) fn cache_probe(
        &self,
        query: &str,
        request: &SearchRequest,
        top_k: usize,
        timings: &mut Timings,
    ) -> CacheProbe {
        let (Some(cache), Some(embedder)) = (&self.query.cache, &self.embedder) else {
            return CacheProbe {
                embedding: None,
                scope: String::new(),
                hit: None,
            };
        };
        let t = Instant::now();
        let scope = cache_scope(request, top_k);
        let embedding = embedder.embed_query(query).ok();
        let hit = embedding
            .as_ref()
            .and_then(|e| cache.get_scoped(&scope, query, e));
        timings.cache_ms = Some(ms(t));
        match (&embedding, &hit) {
            (None, _) => tracing::warn!(stage = "cache", "query embedding failed: cache miss"),
            (_, Some(_)) => tracing::info!(stage = "cache", ms = ms(t), "cache hit"),
            (_, None) => tracing::debug!(stage = "cache", ms = ms(t), "cache miss"),
        }
        CacheProbe {
            embedding,
            scope,
            hit,
        }
    }

    /// Stores a fresh response in the cache, tagged with its hits' sources; a degraded response
    /// (reranker fallback) gets the short TTL.
    pub(super) fn cache_store(&self, probe: CacheProbe, query: &str, response: &SearchResponse) {
        let (Some(cache), Some(embedding)) = (&self.query.cache, probe.embedding) else {
            return;
        };
        let mut tags: Vec<String> = response
            .hits
            .iter()
            .filter_map(|h| h.document.source.clone())
            .collect();
        if let Some(extractor) = &self.query.act_tags {
            tags.extend(act_tags(extractor, response));
        }
        tags.sort();
        tags.dedup();
        let options = crate::cache::InsertOptions {
            scope: probe.scope,
            tags,
            short_ttl: response.rerank_fallback,
            ttl: None,
        };
        cache.insert_with(query, embedding, response.clone(), &options);
    }

    /// Stage 1: HyDE (dense recall with a hypothetical answer's embedding) and multi-query
    /// expansion (variants retrieved separately, fused by RRF) when configured.
    pub(super) fn recall(
        &self,
        retriever: &dyn crate::Retriever,
        query: &str,
        request: &SearchRequest,
        classification: Option<&Classification>,
        k: usize,
        timings: &mut Timings,
    ) -> Result<Recall> {
        let t = Instant::now();
        let route = classification.map(|c| c.route).unwrap_or(Route::Standard);
        let filters = self.options.filters.iter().chain(&request.filters);
        let mut search_query = SearchQuery::new(query).with_filters(filters.cloned().collect());
        let mut hyde = false;
        if let (Some(config), Some(generator), Some(embedder)) =
            (&self.query.hyde, &self.generator, &self.embedder)
        {
            if config.applies_to(route) {
                // A failure falls back to the original query.
                match hyde_embedding(generator.as_ref(), embedder.as_ref(), query, config) {
                    Ok(e) => {
                        search_query = search_query.with_embedding(e);
                        hyde = true;
                    }
                    Err(e) => tracing::warn!(
                        stage = "hyde",
                        error = %e,
                        "HyDE failed: falling back to the query"
                    ),
                }
            }
        }
        let default_expansion = ExpansionConfig::host_variants_only();
        let expansion = self.query.expansion.as_ref().unwrap_or(&default_expansion);
        let variants = if !request.variants.is_empty() {
            crate::expand::clean_variants(&request.variants, query, expansion.max_variants)
        } else {
            match (&self.generator, self.query.expansion.as_ref()) {
                (Some(generator), Some(config)) if config.generate => {
                    generate_variants(generator.as_ref(), query, config)
                        .unwrap_or_default()
                        .into_iter()
                        // A generated variant never carries personal data to a retriever.
                        .filter(|v| self.query.pii.detect(v).is_empty())
                        .collect()
                }
                _ => Vec::new(),
            }
        };
        if hyde || !variants.is_empty() {
            timings.expand_ms = Some(ms(t));
        }
        let t = Instant::now();
        let hits = retrieve_expanded(retriever, &search_query, &variants, k, expansion)?;
        timings.retrieve_ms = ms(t);
        tracing::debug!(
            stage = "recall",
            retriever = retriever.name(),
            hits = hits.len(),
            hyde,
            variants = variants.len(),
            ms = timings.retrieve_ms,
            "stage 1 done"
        );
        Ok(Recall {
            hits,
            hyde,
            variants,
        })
    }
}

/// The `act:NAME` tags of the acts a response's hits cite: in their text and title, and in
/// an `act` metadata field (a string or a list of strings).
pub(super) fn act_tags(extractor: &LegalExtractor, response: &SearchResponse) -> Vec<String> {
    let mut tags = Vec::new();
    for h in &response.hits {
        let mut refs = extractor.extract(&h.document.full_text());
        match h.document.metadata.get("act") {
            Some(serde_json::Value::String(a)) => refs.acts.push(a.clone()),
            Some(serde_json::Value::Array(list)) => refs
                .acts
                .extend(list.iter().filter_map(|v| v.as_str().map(str::to_string))),
            _ => {}
        }
        refs.acts = refs
            .acts
            .iter()
            .map(|a| {
                LegalExtractor::act_tag(a)
                    .trim_start_matches("act:")
                    .to_string()
            })
            .collect();
        tags.extend(LegalExtractor::act_tags(&refs));
    }
    tags
}

/// What else a cached response depends on besides the query.
fn cache_scope(request: &SearchRequest, top_k: usize) -> String {
    let filters = serde_json::to_string(&request.filters).unwrap_or_default();
    let opt = |v: Option<String>| v.unwrap_or_default();
    format!(
        "top_k={top_k}\u{1f}filters={filters}\u{1f}instruction={}\u{1f}variants={}\u{1f}mode={}\u{1f}w={}\u{1f}threshold={}\u{1f}depth={}",
        request.instruction.as_deref().unwrap_or(""),
        request.variants.join("\u{1e}"),
        opt(request.mode.clone()),
        opt(request.fusion_weight.map(|w| w.to_string())),
        opt(request.score_threshold.map(|t| t.to_string())),
        opt(request.rerank_depth.map(|d| d.to_string())),
    )
}

/// A cached response re-labelled for this request.
pub(super) fn from_cache(
    mut cached: SearchResponse,
    request: &SearchRequest,
    classification: Option<Classification>,
    timings: Timings,
) -> SearchResponse {
    cached.query = request.query.clone();
    cached.cache_hit = true;
    cached.classification = classification;
    cached.timings = timings;
    cached
}
