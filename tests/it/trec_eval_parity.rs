//! `rerank::eval` against pytrec_eval (through ir_measures) on a synthetic run with many tied
//! scores, graded and negative judgments, queries without relevant documents and one judged
//! query without results. The expected values come from `scripts/trec_eval_golden.py`.

use std::collections::HashMap;

use rerank::eval::{Evaluator, Qrels, Run};
use serde_json::Value;

#[test]
fn per_query_values_match_pytrec_eval() {
    let text = include_str!("../data/trec_eval_golden.json");
    let golden: Value = serde_json::from_str(text).unwrap();

    let mut qrels = Qrels::new();
    for (qid, docs) in golden["qrels"].as_object().unwrap() {
        let judgments: HashMap<String, i32> = docs
            .as_object()
            .unwrap()
            .iter()
            .map(|(d, s)| (d.clone(), s.as_i64().unwrap() as i32))
            .collect();
        qrels.insert(qid.clone(), judgments);
    }
    // The JSON object gives each query's results sorted by doc id, not by score: the evaluator
    // has to put them in trec_eval order itself.
    let mut run = Run::new();
    for (qid, docs) in golden["run"].as_object().unwrap() {
        let results = docs
            .as_object()
            .unwrap()
            .iter()
            .map(|(d, s)| (d.clone(), s.as_f64().unwrap()))
            .collect();
        run.insert(qid.clone(), results);
    }
    assert!(
        run.len() < qrels.len(),
        "the fixture has a judged query without results"
    );

    let values = golden["values"].as_object().unwrap();
    let names: Vec<&String> = values
        .values()
        .next()
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .collect();
    let evaluator = Evaluator::from_names(&names).unwrap();
    let eval = evaluator.evaluate(&run, &qrels);
    assert_eq!(eval.queries(), values.len());

    let mut checked = 0;
    for (qid, expected) in values {
        for (name, want) in expected.as_object().unwrap() {
            let metric = name.parse().unwrap();
            let got = eval.query_value(qid, &metric).unwrap();
            let want = want.as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-9,
                "{qid} {name}: ours {got}, pytrec_eval {want}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, values.len() * names.len());
    // the means are the plain averages over the judged queries
    for name in &names {
        let want: f64 = values
            .values()
            .map(|v| v[name.as_str()].as_f64().unwrap())
            .sum::<f64>()
            / values.len() as f64;
        assert!((eval.mean_of(name).unwrap() - want).abs() < 1e-12);
    }
}
