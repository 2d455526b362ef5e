//! tantivy over a BEIR-layout collection, in RAM, for the side-by-side of
//! `scripts/bench_recall_scale.py`.
//!
//! ```text
//! tantivy_peer DATA_DIR THREADS OUT_JSON [english|whitespace]
//! ```
//!
//! `english` (the default) is the analysis of rerank's `EnglishAnalyzer`: tantivy's simple
//! tokenizer (runs of alphanumeric characters), lower-cased, Lucene's English stopwords
//! (tantivy's `Language::English` list is the same 33 words) and the Snowball English stemmer
//! (the same `rust-stemmers` crate); `whitespace` is tantivy's `whitespace` tokenizer (no
//! lower-casing, no stemming; the synthetic corpus needs none). BM25 with tantivy's fixed
//! k1 1.2 / b 0.75, an OR of the query's terms (analyzed like the documents), top 10. The build
//! time includes reading and parsing the JSON lines. Writes build seconds, per-query latencies
//! on one thread (best of RERANK_SCALE_REPEAT passes, default 3), queries/s on THREADS threads
//! that each take the next query not yet taken (the median of RERANK_SCALE_REPEAT passes), the
//! top-10 (id, score) of every query, and the peak resident memory (VmHWM).

use std::io::BufRead;
use std::time::Instant;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED, STRING,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, TantivyDocument, Term};

fn vm_hwm_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("VmHWM:") {
            let kb: f64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0.0);
            return kb / 1024.0;
        }
    }
    0.0
}

fn read_jsonl(path: &std::path::Path) -> Vec<serde_json::Value> {
    let f = std::io::BufReader::new(std::fs::File::open(path).expect("open"));
    f.lines()
        .map(|l| serde_json::from_str(&l.expect("line")).expect("json"))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let threads: usize = args[2].parse().expect("threads");
    let out = &args[3];
    let analysis = args.get(4).map_or("english", String::as_str);
    let tokenizer = match analysis {
        "english" => "english",
        "whitespace" => "whitespace",
        other => panic!("analysis must be english or whitespace, got {other}"),
    };

    let mut builder = Schema::builder();
    let id = builder.add_text_field("id", STRING | STORED);
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(tokenizer)
        .set_index_option(IndexRecordOption::WithFreqs);
    let text = builder.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(indexing),
    );
    let schema = builder.build();
    let index = Index::create_in_ram(schema);
    let english = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::new(Language::English).expect("English stopwords"))
        .filter(Stemmer::new(Language::English))
        .build();
    index.tokenizers().register("english", english);

    // stream the corpus: one line at a time into the writer
    let t = Instant::now();
    let mut writer = index
        .writer_with_num_threads(threads, threads * 400_000_000)
        .expect("writer");
    let f = std::io::BufReader::new(std::fs::File::open(dir.join("corpus.jsonl")).expect("corpus"));
    let mut docs = 0usize;
    for line in f.lines() {
        let v: serde_json::Value = serde_json::from_str(&line.expect("line")).expect("json");
        let mut doc = TantivyDocument::default();
        doc.add_text(id, v["_id"].as_str().unwrap_or_default());
        let title = v["title"].as_str().unwrap_or_default();
        let body = v["text"].as_str().unwrap_or_default();
        doc.add_text(text, format!("{title} {body}"));
        writer.add_document(doc).expect("add");
        docs += 1;
    }
    writer.commit().expect("commit");
    writer.wait_merging_threads().expect("merge");
    let build_seconds = t.elapsed().as_secs_f64();

    let reader: IndexReader = index.reader().expect("reader");
    let queries = read_jsonl(&dir.join("queries.jsonl"));
    // queries analyzed once, up front (their analysis is left out of tantivy's timings)
    let mut query_analyzer = index.tokenizers().get(tokenizer).expect("tokenizer");
    let texts: Vec<Vec<String>> = queries
        .iter()
        .map(|q| {
            let mut words = Vec::new();
            let mut stream = query_analyzer.token_stream(q["text"].as_str().unwrap_or_default());
            while stream.advance() {
                words.push(stream.token().text.clone());
            }
            words
        })
        .collect();
    let make = |words: &[String]| -> Box<dyn Query> {
        let clauses: Vec<(Occur, Box<dyn Query>)> = words
            .iter()
            .map(|w| {
                let tq: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(text, w),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, tq)
            })
            .collect();
        Box::new(BooleanQuery::new(clauses))
    };
    let searcher = reader.searcher();
    let collector = TopDocs::with_limit(10);
    // warm-up, then one thread, one query at a time
    for q in texts.iter().take(50) {
        searcher.search(&*make(q), &collector).expect("search");
    }
    // each query's latency is the best of RERANK_SCALE_REPEAT passes (default 3)
    let repeat: usize = std::env::var("RERANK_SCALE_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1);
    let mut lat = vec![f64::INFINITY; texts.len()];
    for _ in 0..repeat {
        for (i, q) in texts.iter().enumerate() {
            let t = Instant::now();
            let hits = searcher.search(&*make(q), &collector).expect("search");
            lat[i] = lat[i].min(t.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(hits);
        }
    }
    let mut tops = Vec::with_capacity(texts.len());
    for q in &texts {
        let hits = searcher.search(&*make(q), &collector).expect("search");
        let top: Vec<(String, f32)> = hits
            .iter()
            .map(|(score, addr)| {
                let d: TantivyDocument = searcher.doc(*addr).expect("doc");
                let i = d
                    .get_first(id)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string();
                (i, *score)
            })
            .collect();
        tops.push(top);
    }
    // throughput: `threads` threads, each taking the next query not yet taken, one figure per
    // pass (RERANK_SCALE_REPEAT); the median is reported, as the bench does for ours
    let mut qps_passes: Vec<f64> = (0..repeat)
        .map(|_| {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads.max(1) {
                    let searcher = reader.searcher();
                    let (make, next, texts) = (&make, &next, &texts);
                    s.spawn(move || loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= texts.len() {
                            break;
                        }
                        searcher
                            .search(&*make(&texts[i]), &TopDocs::with_limit(10))
                            .expect("search");
                    });
                }
            });
            texts.len() as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    let passes = qps_passes.clone();
    qps_passes.sort_by(f64::total_cmp);
    let qps = qps_passes[qps_passes.len() / 2];
    let report = serde_json::json!({
        "engine": "tantivy",
        "analysis": analysis,
        "docs": docs,
        "threads": threads,
        "build_seconds": build_seconds,
        "latency_ms": lat,
        "qps": qps,
        "qps_passes": passes,
        "peak_rss_mb": vm_hwm_mb(),
        "top10": tops,
    });
    std::fs::write(out, report.to_string()).expect("write");
}
