//! Recall modes: the retrievers a pipeline holds by name, and which one a request uses.
//!
//! A pipeline always has its default retriever. It may also hold named ones (`"bm25"`,
//! `"vector"`, `"keyword"`, or any name a host gives, such as `"graph"`); a
//! [`SearchRequest`](super::SearchRequest) picks one with `mode`. The mode `"hybrid"` is the
//! registered `"hybrid"` retriever, or, when the request sets a fusion weight (or none is
//! registered), a fusion made for the request of the `"vector"` retriever with the lexical one
//! (`"bm25"`, else `"keyword"`), by the pipeline's mode fusion, the vector side weighted `w`
//! and the lexical side `1 - w` (for [`Fusion::Linear`], `alpha = w`).

use std::sync::Arc;

use super::SearchRequest;
use crate::recall::{Fusion, Hybrid};
use crate::{Error, Result, Retriever};

/// The vector and the lexical retriever of a per-request hybrid.
type Pair<'a> = (&'a Arc<dyn Retriever>, &'a Arc<dyn Retriever>);

/// The name of the mode that fuses the vector and lexical retrievers.
pub const HYBRID_MODE: &str = "hybrid";

/// The retriever one request uses: one the pipeline holds, or a fusion made for it.
pub(super) enum Picked<'a> {
    Borrowed(&'a dyn Retriever),
    Owned(Box<dyn Retriever>),
}

impl Picked<'_> {
    pub(super) fn get(&self) -> &dyn Retriever {
        match self {
            Picked::Borrowed(r) => *r,
            Picked::Owned(r) => r.as_ref(),
        }
    }
}

/// The named retrievers of a pipeline and how requests pick among them.
#[derive(Clone)]
pub(super) struct RecallModes {
    pub(super) named: Vec<(String, Arc<dyn Retriever>)>,
    /// The fusion of a per-request hybrid (default RRF, k 60).
    pub(super) fusion: Fusion,
    /// Hits fetched from each side of a per-request hybrid (default: as many as asked).
    pub(super) depth: Option<usize>,
    /// The vector side's weight when a request asks for the hybrid mode without one
    /// (default 0.5).
    pub(super) vector_weight: f32,
    /// The mode of requests that name none (default: the default retriever).
    pub(super) default_mode: Option<String>,
}

impl Default for RecallModes {
    fn default() -> Self {
        RecallModes {
            named: Vec::new(),
            fusion: Fusion::default(),
            depth: None,
            vector_weight: 0.5,
            default_mode: None,
        }
    }
}

impl std::fmt::Debug for RecallModes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecallModes")
            .field("named", &self.names())
            .field("fusion", &self.fusion)
            .field("vector_weight", &self.vector_weight)
            .field("default_mode", &self.default_mode)
            .finish()
    }
}

impl RecallModes {
    /// The registered names, in order, with `"hybrid"` when a hybrid can be made.
    pub(super) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.named.iter().map(|(n, _)| n.clone()).collect();
        if self.pair().is_some() && !names.iter().any(|n| n == HYBRID_MODE) {
            names.push(HYBRID_MODE.into());
        }
        names
    }

    fn get(&self, name: &str) -> Option<&Arc<dyn Retriever>> {
        self.named.iter().find(|(n, _)| n == name).map(|(_, r)| r)
    }

    /// The vector and lexical retrievers a per-request hybrid fuses.
    fn pair(&self) -> Option<Pair<'_>> {
        let vector = self.get("vector")?;
        let lexical = self.get("bm25").or_else(|| self.get("keyword"))?;
        Some((vector, lexical))
    }

    /// Checks the settings at `build()`.
    pub(super) fn validate(&self) -> Result<()> {
        check_weight(self.vector_weight, "vector_weight").map_err(Error::Config)?;
        if let Some(mode) = &self.default_mode {
            if !self.names().contains(mode) {
                return Err(Error::Config(format!(
                    "default recall mode {mode:?} is not one of this pipeline's modes {:?}",
                    self.names()
                )));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (name, _) in &self.named {
            if name.is_empty() || !seen.insert(name) {
                return Err(Error::Config(format!(
                    "recall mode names must be distinct and non-empty, got {name:?} twice or empty"
                )));
            }
        }
        Ok(())
    }

    /// The retriever `request` asks for (`default` when it asks for nothing in particular), and
    /// the mode's name (`None` for the default retriever).
    pub(super) fn pick<'a>(
        &'a self,
        default: &'a dyn Retriever,
        request: &SearchRequest,
    ) -> Result<(Picked<'a>, Option<String>)> {
        if let Some(w) = request.fusion_weight {
            check_weight(w, "fusion_weight").map_err(Error::InvalidInput)?;
        }
        let mode = request.mode.as_deref().or(self.default_mode.as_deref());
        let Some(mode) = mode else {
            return match request.fusion_weight {
                None => Ok((Picked::Borrowed(default), None)),
                Some(w) => Ok((self.fused(w)?, Some(HYBRID_MODE.into()))),
            };
        };
        if mode == HYBRID_MODE {
            if let (None, Some(r)) = (request.fusion_weight, self.get(HYBRID_MODE)) {
                return Ok((Picked::Borrowed(r.as_ref()), Some(mode.into())));
            }
            let w = request.fusion_weight.unwrap_or(self.vector_weight);
            return Ok((self.fused(w)?, Some(mode.into())));
        }
        if request.fusion_weight.is_some() {
            return Err(Error::InvalidInput(format!(
                "fusion_weight applies to the {HYBRID_MODE:?} recall mode, not to {mode:?}"
            )));
        }
        match self.get(mode) {
            Some(r) => Ok((Picked::Borrowed(r.as_ref()), Some(mode.into()))),
            None => Err(Error::InvalidInput(format!(
                "unknown recall mode {mode:?}; this pipeline has {:?}",
                self.names()
            ))),
        }
    }

    /// The vector and lexical retrievers fused for one request.
    fn fused(&self, vector_weight: f32) -> Result<Picked<'_>> {
        let Some((vector, lexical)) = self.pair() else {
            return Err(Error::InvalidInput(format!(
                "the {HYBRID_MODE:?} recall mode needs a \"vector\" and a \"bm25\" (or \
                 \"keyword\") retriever; this pipeline has {:?}",
                self.names()
            )));
        };
        let mut hybrid = Hybrid::new(self.fusion)
            .with(Arc::clone(vector), vector_weight)
            .with(Arc::clone(lexical), 1.0 - vector_weight);
        if let Fusion::Linear { .. } = self.fusion {
            hybrid = Hybrid::new(Fusion::Linear {
                alpha: vector_weight,
            })
            .with(Arc::clone(vector), 1.0)
            .with(Arc::clone(lexical), 1.0);
        }
        if let Some(d) = self.depth {
            hybrid = hybrid.depth(d);
        }
        hybrid.validate()?;
        Ok(Picked::Owned(Box::new(hybrid)))
    }
}

fn check_weight(w: f32, what: &str) -> std::result::Result<(), String> {
    if (0.0..=1.0).contains(&w) {
        Ok(())
    } else {
        Err(format!("{what} must be in [0, 1], got {w}"))
    }
}
