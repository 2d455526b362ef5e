//! ColBERT token vectors and learned sparse vectors in the store (`Store::encode_missing_*`,
//! `Store::late_interaction`, `Store::sparse`): the stored retrievers give the hits and scores,
//! to the bit, of the in-memory indexes over the same documents; vectors are computed once per
//! (content, model), survive a reopen, follow upserts and removals, and are sized; a store
//! missing some says how to fill them in; a pipeline config over a store fills them in.
#![cfg(all(feature = "models", feature = "sqlite"))]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rerank::embed::{ColbertEncoder, SparseEncoder};
use rerank::models::ModelOptions;
use rerank::recall::{LateInteractionIndex, MuveraConfig, Retriever, SearchQuery, SparseIndex};
use rerank::{Document, Hit, Role, Store};

use crate::store::TempDb;

const QUERIES: [&str; 4] = [
    "how are flights booked",
    "hotel receipts",
    "what is the default class for short flights",
    "",
];

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

fn corpus() -> Vec<Document> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/handbook.jsonl");
    Document::read_jsonl(path).unwrap()
}

fn ranked(hits: &[Hit]) -> Vec<(String, u32)> {
    hits.iter()
        .map(|h| (h.document.id.clone(), h.score.to_bits()))
        .collect()
}

/// Every query's top 10 from `a` and `b`: the same ids in the same order with the same bits.
fn assert_same_rankings(a: &dyn Retriever, b: &dyn Retriever) {
    for q in QUERIES {
        let q = SearchQuery::new(q);
        assert_eq!(
            ranked(&a.retrieve(&q, 10).unwrap()),
            ranked(&b.retrieve(&q, 10).unwrap()),
            "{:?}",
            q.text
        );
    }
}

fn colbert() -> Arc<ColbertEncoder> {
    let dir = fixture("colbert_tiny/bert");
    Arc::new(
        ColbertEncoder::builder(&dir)
            .options(ModelOptions::default().threads(2))
            .build()
            .unwrap(),
    )
}

fn splade(case: &str) -> Arc<SparseEncoder> {
    let dir = fixture("splade_tiny").join(case);
    Arc::new(
        SparseEncoder::builder(&dir)
            .options(ModelOptions::default().threads(2))
            .build()
            .unwrap(),
    )
}

#[test]
fn stored_token_vectors_rank_as_the_in_memory_index() {
    let db = TempDb::new("colbert");
    let encoder = colbert();
    let model = encoder.id().unwrap();
    let mut docs = corpus();
    // Two documents with one content share one row.
    let mut twin = docs[0].clone();
    twin.id = "twin".into();
    docs.push(twin);
    let store = Arc::new(Store::open(&db.0).unwrap());
    store.upsert(docs.clone()).unwrap();
    let distinct = docs.len() - 1;
    assert_eq!(store.encode_missing_tokens(&encoder).unwrap(), distinct);
    assert_eq!(store.encode_missing_tokens(&encoder).unwrap(), 0);

    let memory = LateInteractionIndex::new(Arc::clone(&encoder));
    memory.add(docs.clone()).unwrap();
    let stored = store.late_interaction(Arc::clone(&encoder)).unwrap();
    assert_same_rankings(&stored, &memory);

    // The size is the vectors' own: 2 bytes per value, one row per distinct content.
    let size = store.encoded_size(&model).unwrap();
    assert_eq!(size.documents, distinct);
    let texts: Vec<String> = docs[..distinct].iter().map(Document::full_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let values: usize = encoder
        .encode(&refs, Role::Document)
        .unwrap()
        .iter()
        .map(|m| m.len())
        .sum();
    assert_eq!(size.bytes, 2 * values as u64);
    assert!((size.bytes_per_document() - (2 * values) as f64 / distinct as f64).abs() < 1e-9);
    assert!(
        (memory.bytes_per_document() * docs.len() as f64
            - size.bytes as f64
            - 2.0 * memory.vectors(&docs[0].id).unwrap().len() as f64)
            .abs()
            < 1e-6
    );

    // Reopened, nothing is computed again and the rankings hold.
    drop(stored);
    drop(store);
    let store = Arc::new(Store::open(&db.0).unwrap());
    assert_eq!(store.encode_missing_tokens(&encoder).unwrap(), 0);
    let stored = store.late_interaction(Arc::clone(&encoder)).unwrap();
    assert_same_rankings(&stored, &memory);
    let reader = Arc::new(Store::open_read_only(&db.0).unwrap());
    assert_eq!(reader.encode_missing_tokens(&encoder).unwrap(), 0);
    assert_same_rankings(
        &reader.late_interaction(Arc::clone(&encoder)).unwrap(),
        &memory,
    );

    // A changed document has no vectors until they are computed: the error says how.
    let changed = Document::new("travel-001", "Flights are booked by the travel desk.");
    store.upsert([changed]).unwrap();
    let e = stored
        .retrieve(&SearchQuery::new("flights"), 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("1 of") && e.contains("token vectors") && e.contains("encode_missing_tokens"),
        "{e}"
    );
    assert_eq!(store.encode_missing_tokens(&encoder).unwrap(), 1);
    // The store ranks by slot order for ties; the changed document moved to the end in both.
    let memory_now = LateInteractionIndex::new(Arc::clone(&encoder));
    memory_now.add(store.documents().unwrap()).unwrap();
    assert_same_rankings(&stored, &memory_now);
    // The twin keeps the old content's row; removing it drops that row.
    assert_eq!(store.encoded_size(&model).unwrap().documents, distinct + 1);
    store.remove(["twin"]).unwrap();
    assert_eq!(store.encoded_size(&model).unwrap().documents, distinct);
    // The loaded index feeds a reranker.
    assert_eq!(stored.index().unwrap().len(), docs.len() - 1);

    // MUVERA candidates over the stored vectors rank as over an in-memory index's.
    let config = MuveraConfig {
        repetitions: 4,
        simhash_bits: 3,
        projection: 8,
        candidates: 6,
        seed: 1,
    };
    let stored = store
        .late_interaction(Arc::clone(&encoder))
        .unwrap()
        .with_muvera(config)
        .unwrap();
    let memory = LateInteractionIndex::new(Arc::clone(&encoder))
        .with_muvera(config)
        .unwrap();
    memory.add(store.documents().unwrap()).unwrap();
    assert_same_rankings(&stored, &memory);
    let e = store
        .late_interaction(Arc::clone(&encoder))
        .unwrap()
        .with_muvera(MuveraConfig {
            repetitions: 0,
            ..config
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("repetitions"), "{e}");
}

#[test]
fn stored_sparse_vectors_rank_as_the_in_memory_index() {
    for case in ["max", "inference_free"] {
        let db = TempDb::new(&format!("sparse-{case}"));
        let encoder = splade(case);
        let model = encoder.id().unwrap();
        let docs = corpus();
        let store = Arc::new(Store::open(&db.0).unwrap());
        store.upsert(docs.clone()).unwrap();
        assert_eq!(store.encode_missing_sparse(&encoder).unwrap(), docs.len());
        let memory = SparseIndex::new(Arc::clone(&encoder));
        memory.add(docs.clone()).unwrap();
        let stored = store.sparse(Arc::clone(&encoder)).unwrap();
        assert_same_rankings(&stored, &memory);
        // 8 bytes per non-zero value (id and weight).
        let texts: Vec<String> = docs.iter().map(Document::full_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let nonzero: usize = encoder
            .encode(&refs, Role::Document)
            .unwrap()
            .iter()
            .map(|v| v.len())
            .sum();
        let size = store.encoded_size(&model).unwrap();
        assert_eq!(
            (size.documents, size.bytes),
            (docs.len(), 8 * nonzero as u64),
            "{case}"
        );
        drop(stored);
        drop(store);
        let store = Arc::new(Store::open(&db.0).unwrap());
        assert_eq!(store.encode_missing_sparse(&encoder).unwrap(), 0);
        assert_same_rankings(&store.sparse(Arc::clone(&encoder)).unwrap(), &memory);
    }
    // Two models' vectors never mix: another pooling is another id.
    assert_ne!(splade("max").id(), splade("sum").id());
}

/// A config with a store and a late-interaction or sparse retriever computes the missing
/// vectors when it is built, and a second build computes none.
#[test]
fn a_config_over_a_store_fills_in_the_vectors() {
    let db = TempDb::new("encoded-config");
    let colbert_dir = fixture("colbert_tiny/bert");
    let splade_dir = fixture("splade_tiny/max");
    let yaml = format!(
        "store: {{ path: {:?} }}\n\
         retriever:\n  type: hybrid\n  fusion: {{ method: rrf, k: 60 }}\n  retrievers:\n\
         \x20   - {{ type: late_interaction, model: {:?}, muvera: {{ candidates: 5 }} }}\n\
         \x20   - {{ type: sparse, model: {:?} }}\n\
         search: {{ top_k: 3 }}\n",
        db.0.display().to_string(),
        colbert_dir.display().to_string(),
        splade_dir.display().to_string(),
    );
    let config = rerank::PipelineConfig::from_yaml_str(&yaml).unwrap();
    let docs = corpus();
    let pipeline = config.build(docs.clone()).unwrap();
    assert_eq!(pipeline.search("hotel receipts").unwrap().hits.len(), 3);
    let store = Store::open(&db.0).unwrap();
    let colbert_id = colbert().id().unwrap();
    let splade_id = splade("max").id().unwrap();
    assert_eq!(
        store.encoded_size(&colbert_id).unwrap().documents,
        docs.len()
    );
    assert_eq!(
        store.encoded_size(&splade_id).unwrap().documents,
        docs.len()
    );
    assert_eq!(store.encode_missing_tokens(&colbert()).unwrap(), 0);
    drop(store);
    drop(pipeline);
    let again = config.build(docs).unwrap();
    assert_eq!(
        again.search("hotel receipts").unwrap().hits.len(),
        3,
        "a second build over the filled store"
    );
}

/// `rerank index --colbert-model DIR --sparse-model DIR` stores both kinds of vectors, says
/// how many it computed and their size a document, and computes none on a second run.
#[test]
fn the_cli_index_stores_token_and_sparse_vectors() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let db = TempDb::new("encoded-cli");
    let corpus_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/handbook.jsonl");
    let run = || -> serde_json::Value {
        let out = std::process::Command::new(&cli)
            .arg("index")
            .arg("--db")
            .arg(&db.0)
            .arg("--corpus")
            .arg(&corpus_file)
            .arg("--colbert-model")
            .arg(fixture("colbert_tiny/bert"))
            .arg("--sparse-model")
            .arg(fixture("splade_tiny/max"))
            .args(["--threads", "2", "--json"])
            .output()
            .unwrap();
        crate::common::json_output(&out)
    };
    let first = run();
    let n = corpus().len() as u64;
    assert_eq!(first["token_vectors"]["computed"], n, "{first}");
    assert_eq!(first["sparse_vectors"]["computed"], n, "{first}");
    let store = Store::open(&db.0).unwrap();
    for (key, id) in [
        ("token_vectors", colbert().id().unwrap()),
        ("sparse_vectors", splade("max").id().unwrap()),
    ] {
        let size = store.encoded_size(&id).unwrap();
        assert_eq!(first[key]["documents"], size.documents as u64);
        let per_doc = first[key]["bytes_per_document"].as_f64().unwrap();
        assert!(
            (per_doc - size.bytes_per_document()).abs() < 1e-6,
            "{first}"
        );
    }
    drop(store);
    let second = run();
    assert_eq!(second["token_vectors"]["computed"], 0, "{second}");
    assert_eq!(second["sparse_vectors"]["computed"], 0, "{second}");
}
