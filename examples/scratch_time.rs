use rerank::rerank::CrossEncoder;
use std::time::Instant;
fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
fn main() {
    let dir = "../shared/datasets/scifact";
    let q = "0-dimensional biomaterials show inductive properties.";
    let corpus = std::fs::read_to_string(format!("{dir}/corpus.jsonl")).unwrap();
    let docs: Vec<String> = corpus
        .lines()
        .take(100)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                v["title"].as_str().unwrap(),
                v["text"].as_str().unwrap()
            )
        })
        .collect();
    let pairs: Vec<(&str, &str)> = docs.iter().map(|d| (q, d.as_str())).collect();
    let args: Vec<String> = std::env::args().collect();
    let tokens: usize = args[1].parse().unwrap();
    let size: usize = args[2].parse().unwrap();
    let threads: usize = args[3].parse().unwrap();
    let ce = CrossEncoder::builder("models/ce-minilm-l6-random")
        .batch_tokens(tokens)
        .batch_size(size)
        .threads(threads)
        .build()
        .unwrap();
    let enc: Vec<usize> = pairs
        .iter()
        .map(|(q, d)| ce.encode_pair(q, d).unwrap().len())
        .collect();
    eprintln!(
        "lens: mean {} max {}",
        enc.iter().sum::<usize>() / enc.len(),
        enc.iter().max().unwrap()
    );
    ce.logits(&pairs).unwrap();
    let n: usize = args.get(4).map_or(3, |s| s.parse().unwrap());
    let c0 = cpu();
    let t = Instant::now();
    for _ in 0..n {
        ce.logits(&pairs).unwrap();
    }
    let wall = t.elapsed().as_secs_f64() / n as f64;
    let c = (cpu() - c0) / n as f64;
    println!(
        "tokens {tokens} size {size} threads {threads}: wall {wall:.2}s cpu {c:.2}s per 100 pairs"
    );
}
