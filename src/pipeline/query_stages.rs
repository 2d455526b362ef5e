//! The query-side stages of a search: PII guard, semantic cache, HyDE, multi-query expansion,
//! and protected ordering of reranked hits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ms, Answer, Pipeline, SearchRequest, SearchResponse, Timings};
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
    /// The answer cache, when set (needs an embedder): `Pipeline::answer` is answered from it.
    pub(super) answer_cache: Option<Arc<SemanticCache<Answer>>>,
    /// Lifetimes by tag: an entry carrying some of these tags lives the shortest of their TTLs.
    pub(super) ttl_by_tag: Vec<(String, Duration)>,
}

impl QueryStages {
    /// Checks the settings against the components the pipeline has.
    pub(super) fn validate(&self, has_generator: bool, has_embedder: bool) -> Result<()> {
        self.protection.validate()?;
        if (self.cache.is_some() || self.answer_cache.is_some()) && !has_embedder {
            return Err(Error::Config(
                "the semantic cache needs an embedder: call .embedder(...)".into(),
            ));
        }
        if let Some((tag, _)) = self.ttl_by_tag.iter().find(|(_, ttl)| ttl.is_zero()) {
            return Err(Error::Config(format!(
                "the cache TTL of tag {tag:?} must be longer than zero"
            )));
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

/// A cache lookup: the query embedding and scope to store the value under afterwards.
pub(super) struct CacheProbe<V = SearchResponse> {
    embedding: Option<Vec<f32>>,
    scope: String,
    /// The cached value, on a hit.
    pub(super) hit: Option<V>,
}

/// The scope prefix of answers in a store shared with responses: lookups of one never see the
/// other.
const ANSWER_SCOPE: &str = "answer\u{1f}";

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
        Err(self.query.pii.refusal(kinds))
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

    /// Stores a fresh response in the cache, tagged as [`Pipeline::cache_tags`] says; a
    /// degraded response (reranker fallback) gets the short TTL.
    pub(super) fn cache_store(&self, probe: CacheProbe, query: &str, response: &SearchResponse) {
        let (Some(cache), Some(embedding)) = (&self.query.cache, probe.embedding) else {
            return;
        };
        let tags = self.cache_tags(response);
        let options = self.insert_options(probe.scope, tags, response.rerank_fallback);
        cache.insert_with(query, embedding, response.clone(), &options);
    }

    /// The tags of a cache entry made from `response`: its hits' sources, their `area`
    /// metadata as `area:NAME`, the acts they cite (`act:NAME`, with
    /// `PipelineBuilder::cache_act_tags`), and the query's route (`route:simple`, ...) when it
    /// was classified.
    pub(super) fn cache_tags(&self, response: &SearchResponse) -> Vec<String> {
        let mut tags: Vec<String> = response
            .hits
            .iter()
            .filter_map(|h| h.document.source.clone())
            .collect();
        for hit in &response.hits {
            match hit.document.metadata.get("area") {
                Some(serde_json::Value::String(a)) => tags.push(format!("area:{a}")),
                Some(serde_json::Value::Array(list)) => tags.extend(
                    list.iter()
                        .filter_map(|v| v.as_str().map(|a| format!("area:{a}"))),
                ),
                _ => {}
            }
        }
        if let Some(extractor) = &self.query.act_tags {
            tags.extend(act_tags(extractor, response));
        }
        if let Some(c) = &response.classification {
            if let Ok(serde_json::Value::String(route)) = serde_json::to_value(c.route) {
                tags.push(format!("route:{route}"));
            }
        }
        tags.sort();
        tags.dedup();
        tags
    }

    /// How to insert an entry with `tags`: the short TTL when it is `degraded` (reranker
    /// fallback), else the shortest TTL the tags have in `ttl_by_tag` (none: the cache's own).
    fn insert_options(
        &self,
        scope: String,
        tags: Vec<String>,
        degraded: bool,
    ) -> crate::cache::InsertOptions {
        let ttl = self
            .query
            .ttl_by_tag
            .iter()
            .filter(|(tag, _)| tags.contains(tag))
            .map(|(_, ttl)| *ttl)
            .min();
        crate::cache::InsertOptions {
            scope,
            tags,
            short_ttl: degraded,
            ttl: ttl.filter(|_| !degraded),
        }
    }

    /// Why HyDE, configured for `route`, would not run (no generator, no embedder, or a
    /// generator that only quotes its sources); `None` when it runs or is not configured for
    /// the route.
    pub(super) fn hyde_off(&self, route: Route) -> Option<String> {
        if !self
            .query
            .hyde
            .as_ref()
            .is_some_and(|h| h.applies_to(route))
        {
            return None;
        }
        match (&self.generator, &self.embedder) {
            (None, _) => Some("no generator to write a hypothetical document".into()),
            (_, None) => Some("no embedder for the hypothetical document".into()),
            (Some(g), _) if !g.writes_freely() => Some(format!(
                "the {} generator only quotes its sources: it writes no hypothetical \
                 document (configure a language model, e.g. local_chat)",
                g.name()
            )),
            _ => None,
        }
    }

    /// Looks the question up in the answer cache (when one is set and the embedder works).
    pub(super) fn answer_cache_probe(
        &self,
        query: &str,
        request: &SearchRequest,
        options_key: &str,
    ) -> CacheProbe<Answer> {
        let (Some(cache), Some(embedder)) = (&self.query.answer_cache, &self.embedder) else {
            return CacheProbe {
                embedding: None,
                scope: String::new(),
                hit: None,
            };
        };
        let top_k = request.top_k.unwrap_or(self.options.top_k);
        let scope = format!(
            "{ANSWER_SCOPE}{}\u{1f}options={options_key}",
            cache_scope(request, top_k)
        );
        let embedding = embedder.embed_query(query).ok();
        let hit = embedding
            .as_ref()
            .and_then(|e| cache.get_scoped(&scope, query, e));
        match (&embedding, &hit) {
            (None, _) => {
                tracing::warn!(stage = "cache", "query embedding failed: answer cache miss")
            }
            (_, Some(_)) => tracing::info!(
                stage = "cache",
                "answer cache hit: no retrieval, no generation"
            ),
            (_, None) => tracing::debug!(stage = "cache", "answer cache miss"),
        }
        CacheProbe {
            embedding,
            scope,
            hit,
        }
    }

    /// Stores a fresh answer in the answer cache with `tags` (those of the response it was
    /// made from); a not-enough-information answer is not stored, a degraded one (reranker
    /// fallback) gets the short TTL.
    pub(super) fn answer_cache_store(
        &self,
        probe: CacheProbe<Answer>,
        query: &str,
        answer: &Answer,
        tags: Vec<String>,
    ) {
        let (Some(cache), Some(embedding)) = (&self.query.answer_cache, probe.embedding) else {
            return;
        };
        if answer.flags.not_enough_information {
            return;
        }
        let options = self.insert_options(probe.scope, tags, answer.flags.rerank_fallback);
        cache.insert_with(query, embedding, answer.clone(), &options);
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
            if config.applies_to(route) && self.hyde_off(route).is_none() {
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
