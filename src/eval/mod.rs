//! Evaluation: IR metrics with trec_eval conventions and a BEIR loader.
