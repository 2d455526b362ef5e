//! Evaluation: IR metrics with trec_eval conventions and a BEIR loader.
//!
//! - [`metrics`]: nDCG@k, MAP@k, Recall@k, MRR@k, P@k and an [`Evaluator`] that scores a
//!   [`Run`] against [`Qrels`] the way `pytrec_eval` does (same tie order, same cut-offs);
//! - [`beir`]: a loader for collections in the BEIR layout ([`BeirDataset`]).
//!
//! ```no_run
//! use std::collections::HashMap;
//! use rerank::eval::{BeirDataset, Evaluator, Run};
//! use rerank::{Bm25Index, Retriever};
//! use rerank::recall::SearchQuery;
//!
//! let data = BeirDataset::load("datasets/scifact")?;
//! let index = Bm25Index::new();
//! index.add(data.corpus.clone())?;
//! let mut run = Run::new();
//! for q in data.judged_queries() {
//!     let hits = index.retrieve(&SearchQuery::new(&q.text), 1000)?;
//!     let results = hits.iter().map(|h| (h.id().to_string(), f64::from(h.score))).collect();
//!     run.insert(q.id.clone(), results);
//! }
//! let eval = Evaluator::from_names(&["ndcg@10", "recall@100"])?.evaluate(&run, &data.qrels);
//! println!("nDCG@10 = {:.4}", eval.mean_of("ndcg@10").unwrap_or(0.0));
//! # Ok::<(), rerank::Error>(())
//! ```

pub mod beir;
pub mod metrics;

pub use beir::{read_corpus, read_qrels, read_queries, BeirDataset, BeirQuery};
pub use metrics::{
    evaluate, trec_order, trec_ranking, Evaluation, Evaluator, Metric, MetricKind, Qrels, Run,
};
