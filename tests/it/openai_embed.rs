//! `OpenAiEmbedder` against a real HTTP server on loopback: `tests/servers/openai_embeddings.py`
//! (the OpenAI embeddings API from its published schema, Python's standard library only), whose
//! vectors come from the `rerank embed` command on the real all-MiniLM-L6-v2. Through it:
//! Cranfield documents and queries embed to exactly the in-process vectors and retrieve with the
//! same nDCG@10; the query prompt is the role's; 429s are retried with the server's
//! `Retry-After`; a wrong key fails at once, naming where the key came from; replies in another
//! order are put back by `index`; the config's `embedder: {type: openai}` builds it.
#![cfg(all(feature = "http", feature = "models"))]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rerank::embed::{BertEmbedder, OpenAiEmbedder};
use rerank::eval::{BeirDataset, Evaluator, Run};
use rerank::recall::SearchQuery;
use rerank::{DenseIndex, Embedder, Error, Retriever};

fn minilm() -> Option<PathBuf> {
    let base = std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")));
    let dir = base.join("all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        crate::common::skip(&format!(
            "skipping: {} missing (scripts/fetch_models.sh)",
            dir.display()
        ));
        None
    }
}

/// The Python server, stopped (by its process id) on drop.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(cli: &Path, model: &Path, flags: &[&str]) -> Server {
        let embed = format!(
            "{} embed --model {} --threads 2 --input -",
            cli.display(),
            model.display()
        );
        let mut child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/servers/openai_embeddings.py"
            ))
            .args(["--embed-cmd", &embed])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the loopback server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("server said {line:?}"));
        Server {
            child,
            base: format!("http://127.0.0.1:{port}/v1"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn setup() -> Option<(PathBuf, PathBuf)> {
    let cli = crate::common::rerank_cli()?;
    Some((cli, minilm()?))
}

#[test]
fn remote_vectors_and_retrieval_equal_the_in_process_model() {
    let Some((cli, model)) = setup() else {
        return;
    };
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/cranfield"
    ));
    let data = BeirDataset::load(dir).unwrap();
    let server = Server::start(&cli, &model, &["--shuffle"]);
    // Each request runs `rerank embed` (a process start, the model's load, then the texts),
    // built in the test profile and sharing the CPU with the other tests. Requests of 25 texts
    // keep the work per request small, and the timeout is far above it (a 2-core AVX2 machine
    // embeds 25 Cranfield documents in about a second in release, the test profile a few
    // times slower): a slow machine makes the test slower, never failing. A timed-out request
    // is not retried either, since the server would still be running the first one's work.
    let remote = OpenAiEmbedder::builder()
        .base_url(&server.base)
        .model("sentence-transformers/all-MiniLM-L6-v2")
        .batch_size(25)
        .timeout(Duration::from_secs(600))
        .max_retries(0)
        .build()
        .unwrap();
    assert_eq!(remote.dim(), 384, "found with one probe request");
    let local = BertEmbedder::from_dir(&model).unwrap();

    // 150 documents and 60 judged queries: the same vectors, bit for bit after JSON.
    let docs: Vec<rerank::Document> = data.corpus[..150].to_vec();
    let texts: Vec<String> = docs.iter().map(|d| d.full_text()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (a, b) = (remote.embed(&refs).unwrap(), local.embed(&refs).unwrap());
    assert_eq!(a, b);
    let queries: Vec<(&str, &str)> = data
        .queries
        .iter()
        .filter(|q| data.qrels.contains_key(&q.id))
        .take(60)
        .map(|q| (q.id.as_str(), q.text.as_str()))
        .collect();
    let texts: Vec<&str> = queries.iter().map(|q| q.1).collect();
    assert_eq!(
        remote.embed_queries(&texts).unwrap(),
        local.embed_queries(&texts).unwrap()
    );

    // Dense retrieval over those documents: the same nDCG@10 through either embedder.
    let ndcg = |embedder: Arc<dyn Embedder>, vectors| {
        let index = DenseIndex::from_embeddings(embedder.clone(), docs.clone(), vectors).unwrap();
        let q = embedder.embed_queries(&texts).unwrap();
        let run: Run = queries
            .iter()
            .zip(q.rows())
            .map(|((id, text), e)| {
                let query = SearchQuery::new(*text).with_embedding(e.to_vec());
                let hits = index.retrieve(&query, 100).unwrap();
                let scored = hits
                    .iter()
                    .map(|h| (h.id().to_string(), f64::from(h.score)));
                (id.to_string(), scored.collect())
            })
            .collect();
        Evaluator::from_names(&["ndcg@10"])
            .unwrap()
            .evaluate(&run, &data.qrels)
            .mean_of("ndcg@10")
            .unwrap()
    };
    let remote_ndcg = ndcg(Arc::new(remote), a);
    let local_ndcg = ndcg(Arc::new(local), b);
    println!(
        "Cranfield, 150 documents: nDCG@10 remote {remote_ndcg:.4}, in-process {local_ndcg:.4}"
    );
    assert_eq!(remote_ndcg, local_ndcg);
    assert!(remote_ndcg > 0.0);
}

#[test]
fn prompts_retries_keys_and_the_config() {
    let Some((cli, model)) = setup() else {
        return;
    };
    // Two 429s, then answers: retried after the server's Retry-After (0 s).
    let server = Server::start(&cli, &model, &["--fail-first", "2", "--api-key", "sekret"]);
    let waits = Arc::new(Mutex::new(Vec::new()));
    let w = waits.clone();
    let e5 = OpenAiEmbedder::builder()
        .base_url(&server.base)
        .model("minilm")
        .api_key("sekret")
        .dim(384)
        .query_prompt("query: ")
        .sleeper(Arc::new(move |d| w.lock().unwrap().push(d)))
        .build()
        .unwrap();
    let q = e5.embed_query("what is bm25").unwrap();
    assert_eq!(*waits.lock().unwrap(), [Duration::ZERO, Duration::ZERO]);
    let local = BertEmbedder::builder(&model)
        .prompt(rerank::Role::Query, "query: ")
        .build()
        .unwrap();
    assert_eq!(q, local.embed_query("what is bm25").unwrap());
    assert_eq!(
        e5.embed_one("what is bm25").unwrap(),
        local.embed_one("what is bm25").unwrap(),
        "documents get no prompt"
    );

    // A wrong key: 401 at once, no retry, and the error says where the key came from.
    let bad = OpenAiEmbedder::builder()
        .base_url(&server.base)
        .model("minilm")
        .api_key_env("RERANK_TEST_NO_SUCH_KEY")
        .dim(384)
        .sleeper(Arc::new(|_| panic!("a 401 is not retried")))
        .build()
        .unwrap();
    let e = bad.embed_query("x").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Http {
                status: Some(401),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("RERANK_TEST_NO_SUCH_KEY"), "{e}");

    // The config builds it (a probe finds the width); no server: a clear error naming the URL.
    std::env::set_var("RERANK_TEST_OPENAI_EMBED_KEY", "sekret");
    let yaml = format!(
        "retriever: {{type: bm25}}\nembedder: {{type: openai, url: \"{}\", model: minilm, \
         api_key_env: RERANK_TEST_OPENAI_EMBED_KEY}}\n",
        server.base
    );
    let config: rerank::pipeline::PipelineConfig = serde_yaml_ng::from_str(&yaml).unwrap();
    config
        .build(vec![rerank::Document::new("a", "b")])
        .unwrap_or_else(|e| panic!("{e}"));
    drop(server);
    let gone = OpenAiEmbedder::builder()
        .base_url("http://127.0.0.1:9/v1")
        .model("m")
        .max_retries(0)
        .build()
        .unwrap_err();
    assert!(gone.to_string().contains("127.0.0.1:9"), "{gone}");
}
