//! The pipeline boundary: a panic in a component the host plugged in becomes an error (or, for
//! a classifier, a default classification that says so), and the pipeline stays usable.
//!
//! Every component a [`PipelineBuilder`](super::PipelineBuilder) receives is wrapped here at
//! `build()`. The crate's own components do not panic on input; the wrappers are for the host's.

use std::any::Any;
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ndarray::Array2;

use crate::answer::{Generation, GenerationRequest, Generator};
use crate::classify::{Classification, QueryClassifier};
use crate::recall::{Retriever, SearchQuery};
use crate::rerankers::{RerankQuery, RerankScores, Reranker};
use crate::{Embedder, Error, Hit, Result};

/// The text of a panic's payload.
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs `f`; a panic becomes an [`Error::Backend`] naming the component (`component` is only
/// called then, so the hot path formats nothing).
pub(crate) fn catch<T>(
    component: impl FnOnce() -> String,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(Error::backend(
            component(),
            format!("panicked: {}", message(payload.as_ref())),
        ))
    })
}

/// A retriever whose panics are errors.
pub(crate) struct Guarded<C: ?Sized>(pub(crate) Box<C>);

impl Retriever for Guarded<dyn Retriever> {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        catch(
            || format!("retriever {}", self.0.name()),
            || self.0.retrieve(query, k),
        )
    }
    fn name(&self) -> &str {
        self.0.name()
    }
}

impl Reranker for Guarded<dyn Reranker> {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        catch(
            || format!("reranker {}", self.0.name()),
            || self.0.score(query, docs),
        )
    }
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        catch(
            || format!("reranker {}", self.0.name()),
            || self.0.score_detailed(query, docs),
        )
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Vec<f32>> {
        catch(
            || format!("reranker {}", self.0.name()),
            || self.0.score_pairs(pairs),
        )
    }
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        catch(
            || format!("reranker {}", self.0.name()),
            || self.0.raw_score_pairs(pairs),
        )
    }
    fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
        catch(
            || format!("reranker {}", self.0.name()),
            || Ok(self.0.token_count(query, document)),
        )
        .ok()
        .flatten()
    }
}

impl Generator for Guarded<dyn Generator> {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        catch(
            || format!("generator {}", self.0.name()),
            || self.0.generate(request),
        )
    }
    fn generate_stream(
        &self,
        request: &GenerationRequest,
        on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
    ) -> Result<Generation> {
        catch(
            || format!("generator {}", self.0.name()),
            || self.0.generate_stream(request, on_text),
        )
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn writes_freely(&self) -> bool {
        self.0.writes_freely()
    }
}

impl Embedder for Guarded<dyn Embedder> {
    fn embed_as(&self, texts: &[&str], role: crate::Role) -> Result<Array2<f32>> {
        catch(|| "embedder".into(), || self.0.embed_as(texts, role))
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn id(&self) -> Option<String> {
        self.0.id()
    }
    fn token_count(&self, text: &str, role: crate::Role) -> Option<usize> {
        catch(|| "embedder".into(), || Ok(self.0.token_count(text, role)))
            .ok()
            .flatten()
    }
}

impl QueryClassifier for Guarded<dyn QueryClassifier> {
    /// A panicking classifier gives the default classification with confidence 0 and the
    /// signal `classifier_panicked`.
    fn classify(&self, query: &str) -> Classification {
        catch_unwind(AssertUnwindSafe(|| self.0.classify(query))).unwrap_or_else(|_| {
            Classification {
                confidence: 0.0,
                signals: vec!["classifier_panicked".into()],
                ..Classification::default()
            }
        })
    }
}
