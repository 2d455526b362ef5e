//! Step 8: post-processing of the ranked hits: score threshold, dedup, top-k.

use std::collections::HashSet;

use super::Pipeline;
use crate::Hit;

impl Pipeline {
    /// Threshold, dedup (best hit per key wins), top-k.
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
