//! Stage 2 (step 7) and post-processing (step 8): the candidates of stage 1 in, the final
//! hits out.
//!
//! [`Pipeline::rerank_stage`] takes one [`Stage2Input`]. When a reranker is set it scores the
//! first `rerank_depth` candidates (all by default; the rest follow in stage-1 order), one call
//! per instruction, and orders them: by score, or with protected reranking for factual
//! queries ([`ProtectPolicy`](crate::rerankers::ProtectPolicy)). It runs whenever a reranker is
//! set, even when stage 1 returned no more candidates than `top_k` (their order still matters);
//! [`SearchOptions::skip_rerank_within_top_k`](super::SearchOptions::skip_rerank_within_top_k)
//! skips it then, to save the model time. Whenever it does not rerank, the response says why
//! ([`SearchResponse::stage2_skipped`](super::SearchResponse::stage2_skipped)). A reranker that
//! fails keeps stage-1 order and says so.
//!
//! Which instruction each candidate is judged with (instruction-aware rerankers such as
//! Qwen3-Reranker): per query, in order, the request's instruction, the two-phase
//! `[INSTRUCT]`, the instruction of the task type the classifier found, the default. Per
//! candidate, an entity-type instruction (from a metadata field of the document, see
//! [`Instructions::entity_field`]) comes after the request's and the `[INSTRUCT]` ones and
//! before the task type's. Without an instruction policy on the pipeline only the request's
//! and the `[INSTRUCT]` instructions are passed on (else the reranker uses its own default).
//!
//! Post-processing ([`Pipeline::postprocess`]): score threshold (protected hits are kept),
//! dedup (best hit per key), top-k.

use std::collections::HashSet;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{ms, Pipeline, Timings};
use crate::classify::{Classification, QueryKind, TaskType};
use crate::rerankers::qwen3::Instructions;
use crate::rerankers::RerankQuery;
use crate::Hit;

/// Everything stage 2 needs for one search.
pub(super) struct Stage2Input<'a> {
    /// The recall text: what lexical protection matches against.
    pub(super) query: &'a str,
    /// What the reranker judges against (the `[TASK]` of a two-phase query).
    pub(super) rerank: RerankQuery,
    /// The request's own instruction.
    pub(super) request_instruction: Option<&'a str>,
    /// The `[INSTRUCT]` part of a two-phase query.
    pub(super) two_phase_instruction: Option<&'a str>,
    /// The candidates, in stage-1 order, filters applied.
    pub(super) hits: Vec<Hit>,
    /// Hits the search returns.
    pub(super) top_k: usize,
    /// Rerank only the first N candidates (`None`: all).
    pub(super) depth: Option<usize>,
    /// The query's classification, when a classifier is set.
    pub(super) classification: Option<&'a Classification>,
}

/// The outcome of stage 2.
pub(super) struct Stage2 {
    pub(super) hits: Vec<Hit>,
    pub(super) reranked: bool,
    pub(super) scorer: String,
    /// The reranker's error (stage-1 order kept), or why a fallback scorer stood in.
    pub(super) error: Option<String>,
    pub(super) scored: usize,
    pub(super) instructions: Vec<UsedInstruction>,
    /// Why stage 2 did not rerank, when it did not (its failure aside, which is `error`).
    pub(super) skipped: Option<String>,
}

impl Stage2 {
    /// Stage-1 order kept.
    fn stage1(hits: Vec<Hit>, error: Option<String>, skipped: Option<String>) -> Stage2 {
        Stage2 {
            hits,
            reranked: false,
            scorer: "stage1".into(),
            error,
            scored: 0,
            instructions: Vec::new(),
            skipped,
        }
    }
}

impl Pipeline {
    /// Reranks the candidates (see the module docs).
    pub(super) fn rerank_stage(&self, input: Stage2Input<'_>, timings: &mut Timings) -> Stage2 {
        let Stage2Input {
            query,
            rerank,
            request_instruction,
            two_phase_instruction,
            hits,
            top_k,
            depth,
            classification,
        } = input;
        let Some(reranker) = &self.reranker else {
            return Stage2::stage1(hits, None, Some("no reranker is configured".into()));
        };
        if hits.is_empty() {
            return Stage2::stage1(hits, None, Some("stage 1 returned no candidates".into()));
        }
        if self.options.skip_rerank_within_top_k && hits.len() <= top_k {
            let why = format!(
                "{} candidate{} from stage 1, not more than top_k {top_k} (skip_rerank_within_top_k is set)",
                hits.len(),
                if hits.len() == 1 { "" } else { "s" },
            );
            tracing::debug!(stage = "rerank", reason = %why, "stage 2 skipped");
            return Stage2::stage1(hits, None, Some(why));
        }
        let t = Instant::now();
        // Only the first `depth` candidates are reranked; the rest follow in stage-1 order.
        let mut head = hits;
        let tail = head.split_off(depth.unwrap_or(usize::MAX).min(head.len()));
        let assigned = assign(
            self.instructions.as_ref(),
            request_instruction,
            two_phase_instruction,
            classification,
            &head,
        );
        let groups = groups(&assigned);
        let texts: Vec<String> = head.iter().map(|h| h.document.full_text()).collect();
        let mut scores = vec![f32::NAN; head.len()];
        let mut passages = vec![None; head.len()];
        let mut scorer = String::new();
        let mut fallback_reason = None;
        let mut failure = None;
        for (a, idx) in &groups {
            let q = RerankQuery {
                text: rerank.text.clone(),
                instruction: a.text.clone(),
            };
            let refs: Vec<&str> = idx.iter().map(|&i| texts[i].as_str()).collect();
            let result = reranker
                .score_detailed(&q, &refs)
                .and_then(|out| out.one_per_document(refs.len()));
            match result {
                Ok(out) => {
                    for (&i, s) in idx.iter().zip(out.scores) {
                        scores[i] = s;
                    }
                    for (&i, p) in idx.iter().zip(out.passages) {
                        passages[i] = Some(p);
                    }
                    scorer = out.scorer;
                    fallback_reason = fallback_reason.or(out.fallback_reason);
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        timings.rerank_ms = Some(ms(t));
        if let Some(e) = failure {
            tracing::warn!(stage = "rerank", error = %e, "reranker failed: stage-1 order kept");
            let mut hits = head;
            hits.extend(tail);
            return Stage2::stage1(hits, Some(e), None);
        }
        if let Some(reason) = &fallback_reason {
            tracing::warn!(stage = "rerank", scorer = %scorer, reason = %reason, "fallback scorer used");
        }
        tracing::debug!(
            stage = "rerank",
            scorer = %scorer,
            scored = head.len(),
            ms = timings.rerank_ms,
            "stage 2 done"
        );
        let scored = head.len();
        for ((h, s), p) in head.iter_mut().zip(scores).zip(passages) {
            h.rerank_score = Some(s);
            h.passage = p;
            // A NaN or infinite score (a host reranker's bug) ranks below every real
            // score instead of above it; `rerank_score` keeps what the reranker said.
            h.score = if s.is_finite() { s } else { f32::NEG_INFINITY };
        }
        if let Some(blend) = &self.options.final_blend {
            // The hybrid final ranking: reranker, stage 1 and recency, each normalized (the
            // hits stay in stage-1 order here: the ordering below sorts by score).
            blend.apply(&mut head);
        }
        let mut hits = self.order_reranked(query, classification, head);
        hits.extend(tail);
        Stage2 {
            hits,
            reranked: true,
            scorer,
            error: fallback_reason,
            scored,
            instructions: report(&groups),
            skipped: None,
        }
    }

    /// Orders reranked hits (stage-1 order in, rerank score in `score`): protected reranking
    /// for factual queries, plain score order otherwise.
    fn order_reranked(
        &self,
        query: &str,
        classification: Option<&Classification>,
        hits: Vec<Hit>,
    ) -> Vec<Hit> {
        let (kind, people) = match classification {
            Some(c) => (c.kind, c.people.as_slice()),
            // Without a classifier nothing is known to be factual.
            None => (QueryKind::Semantic, &[][..]),
        };
        self.query
            .protection
            .order_with_names(query, people, kind, hits)
    }

    /// Step 8: threshold (protected hits are kept), dedup (best hit per key wins), top-k.
    pub(super) fn postprocess(
        &self,
        hits: Vec<Hit>,
        top_k: usize,
        threshold: Option<f32>,
    ) -> Vec<Hit> {
        let mut seen: HashSet<String> = HashSet::new();
        hits.into_iter()
            .filter(|h| h.protected || threshold.is_none_or(|t| h.score >= t))
            .filter(|h| match self.options.dedup.key_of(&h.document) {
                Some(key) => seen.insert(key),
                None => true,
            })
            .take(top_k)
            .collect()
    }
}

/// Where an instruction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionSource {
    /// [`SearchRequest::instruction`](super::SearchRequest::instruction).
    Request,
    /// The `[INSTRUCT]` part of a two-phase query.
    TwoPhase,
    /// The entity type of the candidate document.
    Entity,
    /// The task type the classifier found.
    TaskType,
    /// The policy's default.
    Default,
}

/// One instruction the reranker was given, and for how many candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsedInstruction {
    /// Where it came from.
    pub source: InstructionSource,
    /// The instruction text.
    pub text: String,
    /// The entity type, for [`InstructionSource::Entity`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// The task type, for [`InstructionSource::TaskType`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<TaskType>,
    /// How many candidates were judged with it.
    pub candidates: usize,
}

/// The instruction of one candidate: `None` text leaves the reranker's own default.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Assigned {
    pub(super) source: InstructionSource,
    pub(super) text: Option<String>,
    pub(super) entity: Option<String>,
    pub(super) task_type: Option<TaskType>,
}

impl Assigned {
    fn same_group(&self, other: &Assigned) -> bool {
        self.source == other.source && self.text == other.text && self.entity == other.entity
    }
}

/// The instruction for each of `hits` (in order).
pub(super) fn assign(
    policy: Option<&Instructions>,
    request: Option<&str>,
    two_phase: Option<&str>,
    classification: Option<&Classification>,
    hits: &[Hit],
) -> Vec<Assigned> {
    let explicit = request
        .map(|t| (InstructionSource::Request, t))
        .or_else(|| two_phase.map(|t| (InstructionSource::TwoPhase, t)));
    if let Some((source, text)) = explicit {
        let one = Assigned {
            source,
            text: Some(text.to_string()),
            entity: None,
            task_type: None,
        };
        return vec![one; hits.len()];
    }
    let Some(policy) = policy else {
        let none = Assigned {
            source: InstructionSource::Default,
            text: None,
            entity: None,
            task_type: None,
        };
        return vec![none; hits.len()];
    };
    let task = classification
        .map(|c| c.task_type)
        .filter(|_| policy.by_task);
    let query_level = match task.and_then(|t| policy.for_task(t).map(|s| (t, s))) {
        Some((t, text)) => Assigned {
            source: InstructionSource::TaskType,
            text: Some(text.to_string()),
            entity: None,
            task_type: Some(t),
        },
        None => Assigned {
            source: InstructionSource::Default,
            text: Some(policy.default_instruction().to_string()),
            entity: None,
            task_type: None,
        },
    };
    hits.iter()
        .map(|h| {
            let entity = policy
                .entity_field
                .as_deref()
                .and_then(|f| h.document.metadata.get(f))
                .and_then(|v| v.as_str());
            match entity.and_then(|e| policy.for_entity(e).map(|t| (e, t))) {
                Some((e, text)) => Assigned {
                    source: InstructionSource::Entity,
                    text: Some(text.to_string()),
                    entity: Some(e.to_string()),
                    task_type: None,
                },
                None => query_level.clone(),
            }
        })
        .collect()
}

/// Groups candidate indices by instruction, in order of first appearance.
pub(super) fn groups(assigned: &[Assigned]) -> Vec<(Assigned, Vec<usize>)> {
    let mut out: Vec<(Assigned, Vec<usize>)> = Vec::new();
    for (i, a) in assigned.iter().enumerate() {
        match out.iter_mut().find(|(g, _)| g.same_group(a)) {
            Some((_, idx)) => idx.push(i),
            None => out.push((a.clone(), vec![i])),
        }
    }
    out
}

/// What the response reports: the groups that had an instruction text.
pub(super) fn report(groups: &[(Assigned, Vec<usize>)]) -> Vec<UsedInstruction> {
    groups
        .iter()
        .filter_map(|(a, idx)| {
            Some(UsedInstruction {
                source: a.source,
                text: a.text.clone()?,
                entity: a.entity.clone(),
                task_type: a.task_type,
                candidates: idx.len(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Document;

    fn hit(id: &str, entity: Option<&str>) -> Hit {
        let mut d = Document::new(id, "text");
        if let Some(e) = entity {
            d = d.with_metadata("entity_type", e);
        }
        Hit::new(Arc::new(d), 1.0)
    }

    #[test]
    fn order_is_request_two_phase_entity_task_default() {
        let policy = Instructions::default().with_entity_field("entity_type");
        let hits = [
            hit("a", Some("manual")),
            hit("b", None),
            hit("c", Some("nope")),
        ];
        let troubleshooting = Classification {
            task_type: TaskType::Troubleshooting,
            ..Default::default()
        };
        let c = Some(&troubleshooting);
        let all = |a: &[Assigned]| a.iter().map(|x| x.source).collect::<Vec<_>>();

        let a = assign(Some(&policy), Some("mine"), Some("instruct"), c, &hits);
        assert_eq!(all(&a), [InstructionSource::Request; 3]);
        assert_eq!(a[0].text.as_deref(), Some("mine"));
        let a = assign(Some(&policy), None, Some("instruct"), c, &hits);
        assert_eq!(all(&a), [InstructionSource::TwoPhase; 3]);
        let a = assign(Some(&policy), None, None, c, &hits);
        use InstructionSource as S;
        assert_eq!(all(&a), [S::Entity, S::TaskType, S::TaskType]);
        assert_eq!(a[0].text.as_deref(), policy.for_entity("manual"));
        assert_eq!(
            a[1].text.as_deref(),
            policy.for_task(TaskType::Troubleshooting)
        );
        let a = assign(
            Some(&policy.clone().with_task_types(false)),
            None,
            None,
            c,
            &hits,
        );
        assert_eq!(all(&a), [S::Entity, S::Default, S::Default]);
        // Without a policy: no instruction (the reranker's own default), nothing reported.
        let a = assign(None, None, None, c, &hits);
        assert!(a.iter().all(|x| x.text.is_none()));
        assert!(report(&groups(&a)).is_empty());

        let a = assign(Some(&policy), None, None, c, &hits);
        let r = report(&groups(&a));
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].source, r[0].candidates), (S::Entity, 1));
        assert_eq!((r[1].source, r[1].candidates), (S::TaskType, 2));
    }
}
