//! `RedisCacheStore` against a real `redis-server` (started on a free port by
//! `scripts/redis.sh`, stopped on drop): replicas share entries, invalidations and stats; TTLs
//! are Redis's; a Redis that is down, stopped or answers garbage makes calls misses, and the
//! cache works again by itself when it is back. Without `redis-server` the tests skip (and
//! fail in CI, where `.ci/run` installs it).
#![cfg(feature = "redis")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rerank::cache::{
    CacheStore, Clock, InsertOptions, ManualClock, RedisCacheStore, SemanticCache,
};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/redis.sh");
/// Ten times the 50 ms default: a working Redis answers in well under a millisecond, and a
/// reply that arrived in time counts even when the calling thread runs late (`redis_link`), so
/// only Redis itself stalled for half a second on a loaded machine turns a call into a miss.
/// The outage tests wait this long for each call that meets a stopped Redis.
const TIMEOUT: Duration = Duration::from_millis(500);
/// What one test step (up to three calls) may take when Redis is down or stopped: one timeout
/// (later calls fail at once during `retry_after`), a second in case `retry_after` ran out
/// in between, and two seconds for a loaded machine. A call that waited for the operating
/// system's own timeouts (minutes) would still fail it.
const BOUND: Duration = Duration::from_millis(2 * TIMEOUT.as_millis() as u64 + 2000);

/// A `redis-server` of our own on a free port, stopped (by pid, through the script) on drop.
struct Server {
    port: u16,
    dir: PathBuf,
}

impl Server {
    /// Starts one, or says why it cannot (through `common::skip`) and returns `None`.
    fn start() -> Option<Server> {
        let found = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            crate::common::skip(
                "redis-server is not installed (scripts/redis.sh install): redis cache tests skipped",
            );
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("rerank-redis-{}-{port}", std::process::id()));
        let server = Server { port, dir };
        server.up();
        Some(server)
    }

    fn script(&self, action: &str) {
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg(action)
            .arg(self.port.to_string())
            .arg(&self.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/redis.sh {action} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn up(&self) {
        self.script("start");
    }

    fn down(&self) {
        self.script("stop");
    }

    fn pid(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("redis-{}.pid", self.port)))
            .unwrap()
            .trim()
            .to_string()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn store(&self, namespace: &str) -> RedisCacheStore<String> {
        store_at(&self.url(), namespace)
    }

    fn cache(&self, namespace: &str) -> SemanticCache<String> {
        SemanticCache::builder()
            .store(self.store(namespace))
            .build()
            .unwrap()
    }

    fn raw(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.dir.join(format!("redis-{}.pid", self.port)).exists() {
            // A stopped (SIGSTOP) server must run again to take SIGTERM.
            let _ = Command::new("kill").args(["-CONT", &self.pid()]).status();
        }
        let _ = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(self.port.to_string())
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn store_at(url: &str, namespace: &str) -> RedisCacheStore<String> {
    RedisCacheStore::builder(url)
        .namespace(namespace)
        .timeout(TIMEOUT)
        .retry_after(Duration::from_millis(100))
        .build()
        .unwrap()
}

fn tagged(tag: &str) -> InsertOptions {
    InsertOptions::tagged([tag])
}

#[test]
fn two_replicas_share_entries_invalidations_and_stats() {
    let Some(server) = Server::start() else {
        return;
    };
    let (a, b) = (server.cache("share"), server.cache("share"));

    assert!(a.insert_with(
        "refund policy for flights",
        vec![1.0, 0.0, 0.0],
        "30 days".into(),
        &tagged("policies.md"),
    ));
    assert_eq!(
        b.get("the refund policy for flights", &[0.99, 0.05, 0.0])
            .as_deref(),
        Some("30 days")
    );
    // The guard still applies to entries from another replica.
    assert_eq!(b.get("flights refund policy?", &[0.99, 0.05, 0.0]), None);

    // Invalidation by tag in one replica is seen by the other at once.
    assert_eq!(b.invalidate_tag("policies.md"), 1);
    assert_eq!(a.get("refund policy for flights", &[1.0, 0.0, 0.0]), None);
    assert_eq!(b.get("refund policy for flights", &[1.0, 0.0, 0.0]), None);

    // And by key, across scopes.
    a.insert_with(
        "baggage allowance",
        vec![0.0, 1.0, 0.0],
        "23 kg".into(),
        &InsertOptions::default().scope("k=5"),
    );
    a.insert("baggage allowance", vec![0.0, 1.0, 0.0], "23 kg".into());
    assert_eq!(
        b.get_scoped("k=5", "baggage allowance", &[0.0, 1.0, 0.0])
            .as_deref(),
        Some("23 kg")
    );
    assert_eq!(
        a.get_scoped("k=9", "baggage allowance", &[0.0, 1.0, 0.0]),
        None
    );
    assert_eq!(b.invalidate_key("Baggage allowance?"), 2);
    assert_eq!(
        a.get_scoped("k=5", "baggage allowance", &[0.0, 1.0, 0.0]),
        None
    );
    assert_eq!(a.get("baggage allowance", &[0.0, 1.0, 0.0]), None);

    // Stats are Redis's: both replicas report every lookup.
    a.insert("pets in cabin", vec![0.0, 0.0, 1.0], "small pets".into());
    assert!(b.get("pets in cabin", &[0.0, 0.0, 1.0]).is_some());
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa, sb);
    assert_eq!((sa.hits, sa.misses, sa.entries), (3, 6, 1));

    // Clear empties Redis for both, counters stay.
    a.clear();
    assert_eq!(b.get("pets in cabin", &[0.0, 0.0, 1.0]), None);
    assert_eq!(b.stats().entries, 0);
    assert_eq!(b.stats().hits, 3);

    // Another namespace on the same server shares nothing.
    let other = server.cache("other");
    a.insert("pets in cabin", vec![0.0, 0.0, 1.0], "small pets".into());
    assert_eq!(other.get("pets in cabin", &[0.0, 0.0, 1.0]), None);
}

#[test]
fn entries_expire_by_redis_ttl_and_by_the_callers_clock() {
    let Some(server) = Server::start() else {
        return;
    };
    let (a, b) = (server.cache("ttl"), server.cache("ttl"));
    a.insert_with(
        "opening hours",
        vec![1.0, 0.0],
        "9 to 5".into(),
        &InsertOptions::default().ttl(Duration::from_secs(3)),
    );
    // One hour.
    a.insert("closing days", vec![0.0, 1.0], "sundays".into());
    // Three seconds for two calls to a working Redis: only a stalled machine misses it.
    assert!(b.get("opening hours", &[1.0, 0.0]).is_some());
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(b.get("opening hours", &[1.0, 0.0]), None);
    assert_eq!(a.get("opening hours", &[1.0, 0.0]), None);
    assert!(b.get("closing days", &[0.0, 1.0]).is_some());
    // Redis dropped the key itself; the store counts only live entries.
    assert_eq!(a.stats().entries, 1);
    let mut conn = server.raw();
    let ttl: i64 = redis::cmd("PTTL")
        .arg(scan(&mut conn, "ttl:c:e:*")[0].as_str())
        .query(&mut conn)
        .unwrap();
    assert!(ttl > 3_000_000 && ttl <= 3_600_000, "{ttl}");

    // A caller whose clock says the entry expired does not use it, whatever Redis holds.
    let clock = Arc::new(ManualClock::new());
    let manual: SemanticCache<String> = SemanticCache::builder()
        .store(server.store("manual"))
        .clock(clock.clone())
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    manual.insert("closing days", vec![0.0, 1.0], "sundays".into());
    assert!(manual.get("closing days", &[0.0, 1.0]).is_some());
    clock.advance(Duration::from_secs(61));
    assert_eq!(manual.get("closing days", &[0.0, 1.0]), None);
    let store = server.store("manual");
    assert_eq!(store.len().unwrap(), 1);
    assert_eq!(store.remove_expired(clock.now()).unwrap(), 1);
    assert_eq!(store.len().unwrap(), 0);
}

fn scan(conn: &mut redis::Connection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS").arg(pattern).query(conn).unwrap()
}

#[test]
fn garbage_in_redis_is_a_miss() {
    let Some(server) = Server::start() else {
        return;
    };
    let cache = server.cache("garbage");
    cache.insert("refund policy", vec![1.0, 0.0], "30 days".into());
    cache.insert("baggage allowance", vec![0.0, 1.0], "23 kg".into());
    assert!(cache.get("refund policy", &[1.0, 0.0]).is_some());
    let mut conn = server.raw();
    let entries = scan(&mut conn, "garbage:c:e:*");
    let vectors = scan(&mut conn, "garbage:c:v:*");
    assert_eq!((entries.len(), vectors.len()), (2, 2));
    // One entry's JSON is garbled, the other's vector.
    let ids: Vec<&str> = entries.iter().map(|k| &k["garbage:c:e:".len()..]).collect();
    let _: () = redis::cmd("SET")
        .arg(format!("garbage:c:e:{}", ids[0]))
        .arg("{not json")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("garbage:c:v:{}", ids[1]))
        .arg("xyz")
        .query(&mut conn)
        .unwrap();
    assert_eq!(cache.get("refund policy", &[1.0, 0.0]), None);
    assert_eq!(cache.get("baggage allowance", &[0.0, 1.0]), None);
    // A set turned into a string: an error reply, so a miss too; counters that are not numbers
    // fall back to this process's own.
    let _: () = redis::cmd("SET")
        .arg("garbage:c:scope:")
        .arg("oops")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("garbage:stats:hits")
        .arg("many")
        .query(&mut conn)
        .unwrap();
    assert_eq!(cache.get("refund policy", &[1.0, 0.0]), None);
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses), (1, 3));
    // Writing over the garbage works again.
    let _: () = redis::cmd("DEL")
        .arg("garbage:c:scope:")
        .query(&mut conn)
        .unwrap();
    assert!(cache.insert("refund policy", vec![1.0, 0.0], "30 days".into()));
    assert!(cache.get("refund policy", &[1.0, 0.0]).is_some());
}

/// A listener that answers every connection with `reply` (or nothing) and keeps it open.
fn fake_server(reply: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if !reply.is_empty() && stream.write_all(reply).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn assert_every_call_is_a_quick_miss(cache: &SemanticCache<String>, what: &str) {
    for i in 0..20 {
        let started = Instant::now();
        assert!(!cache.insert(&format!("query {i}"), vec![1.0, i as f32], "v".into()));
        assert_eq!(cache.get(&format!("query {i}"), &[1.0, i as f32]), None);
        assert_eq!(cache.invalidate_tag("t"), 0);
        let took = started.elapsed();
        assert!(took < BOUND, "{what}: three calls took {took:?}");
    }
    assert_eq!(cache.stats().misses, 20);
}

#[test]
fn a_server_that_answers_garbage_or_nothing_is_a_miss() {
    // No redis-server needed: fake ones.
    for (what, reply) in [
        ("garbage", &b"%%garbage\r\n"[..]),
        ("wrong type", &b":42\r\n"[..]),
        ("silent", &b""[..]),
    ] {
        let port = fake_server(reply);
        let url = format!("redis://127.0.0.1:{port}/0");
        let cache: SemanticCache<String> = SemanticCache::builder()
            .store(store_at(&url, "fake"))
            .build()
            .unwrap();
        assert_every_call_is_a_quick_miss(&cache, what);
    }
    // Nothing listening at all.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cache: SemanticCache<String> = SemanticCache::builder()
        .store(store_at(&format!("redis://127.0.0.1:{port}/0"), "none"))
        .build()
        .unwrap();
    assert_every_call_is_a_quick_miss(&cache, "refused");
}

#[test]
fn redis_stopped_or_killed_mid_run_costs_misses_only_and_the_cache_recovers() {
    let Some(server) = Server::start() else {
        return;
    };
    let (a, b) = (server.cache("outage"), server.cache("outage"));
    let emb = |i: usize| vec![1.0, (i % 50) as f32 / 10.0, 0.5];
    let mut slowest = Duration::ZERO;
    let mut hits_while_down = 0;
    for i in 0..200 {
        if i == 60 {
            server.signal("-STOP"); // a Redis that does not answer
        }
        if i == 80 {
            server.signal("-CONT");
            server.down(); // a Redis that is gone
        }
        let started = Instant::now();
        let inserted = a.insert_with(&format!("query {i}"), emb(i), format!("v{i}"), &tagged("t"));
        let found = b.get(&format!("query {i}"), &emb(i));
        slowest = slowest.max(started.elapsed());
        if (60..200).contains(&i) {
            assert!(!inserted, "insert {i} succeeded while redis was down");
            hits_while_down += usize::from(found.is_some());
        } else {
            assert!(inserted, "insert {i}");
            assert_eq!(found.as_deref(), Some(format!("v{i}").as_str()), "get {i}");
        }
    }
    assert_eq!(hits_while_down, 0);
    assert!(slowest < BOUND, "the slowest call took {slowest:?}");

    // Back on the same port (empty: no persistence); the same caches work again by themselves.
    server.up();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !a.insert_with("query back", emb(7), "back".into(), &tagged("t")) {
        assert!(Instant::now() < deadline, "the store did not reconnect");
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.get("query back", &emb(7)).is_none() {
        assert!(
            Instant::now() < deadline,
            "the other replica did not reconnect"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(b.get("query back", &emb(7)).as_deref(), Some("back"));
}

#[test]
fn an_invalidation_that_failed_reaches_the_other_replicas_when_redis_answers_again() {
    let Some(server) = Server::start() else {
        return;
    };
    let (a, b) = (server.cache("replay"), server.cache("replay"));
    let store = Arc::new(server.store("replay"));
    let c: SemanticCache<String> = SemanticCache::builder()
        .store(store.clone())
        .build()
        .unwrap();
    a.insert_with(
        "refund policy",
        vec![1.0, 0.0],
        "30 days".into(),
        &tagged("policies.md"),
    );
    assert!(b.get("refund policy", &[1.0, 0.0]).is_some());
    assert!(c.get("refund policy", &[1.0, 0.0]).is_some());

    server.signal("-STOP");
    let started = Instant::now();
    assert_eq!(c.invalidate_tag("policies.md"), 0); // timed out
    assert!(started.elapsed() < BOUND);
    assert_eq!(store.pending_invalidations(), 1);
    // This replica already refuses the entry.
    assert_eq!(c.get("refund policy", &[1.0, 0.0]), None);
    server.signal("-CONT");

    // Its next call that reaches Redis replays the invalidation first.
    std::thread::sleep(Duration::from_millis(150)); // retry_after
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.pending_invalidations() > 0 {
        assert!(
            Instant::now() < deadline,
            "the invalidation was not replayed"
        );
        let _ = c.stats();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(b.get("refund policy", &[1.0, 0.0]), None);
    assert_eq!(a.get("refund policy", &[1.0, 0.0]), None);
}

/// An embedding per query of the two-process test: one-hot on the query's length.
fn one_hot(query: &str) -> Vec<f32> {
    let mut v = vec![0.0; 8];
    v[query.len() % 8] = 1.0;
    v
}

/// Not a test on its own: the other process of `two_processes_share_one_redis`.
#[test]
#[ignore = "child process of the two-process redis test"]
fn child_process_replica_for_the_redis_test() {
    let Some(url) = std::env::var_os("RERANK_REDIS_CHILD") else {
        return;
    };
    let cache: SemanticCache<String> = SemanticCache::builder()
        .store(store_at(url.to_str().unwrap(), "procs"))
        .build()
        .unwrap();
    // Commands from the parent, one a line; answers on stdout.
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let answer = match line.split_once(' ') {
            Some(("insert", q)) => cache
                .insert_with(q, one_hot(q), format!("from child: {q}"), &tagged("child"))
                .to_string(),
            Some(("get", q)) => format!("{:?}", cache.get(q, &one_hot(q))),
            _ => break,
        };
        println!("answer={answer}");
    }
}

#[test]
fn two_processes_share_one_redis() {
    let Some(server) = Server::start() else {
        return;
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "redis_cache::child_process_replica_for_the_redis_test",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RERANK_REDIS_CHILD", server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ask = |cmd: &str| -> String {
        writeln!(to_child, "{cmd}").unwrap();
        to_child.flush().unwrap();
        // Skip the test harness's own output (it may share a line with the answer).
        loop {
            let line = from_child.next().expect("the child exited").unwrap();
            if let Some((_, answer)) = line.split_once("answer=") {
                return answer.trim().to_string();
            }
        }
    };
    let parent: SemanticCache<String> = SemanticCache::builder()
        .store(server.store("procs"))
        .build()
        .unwrap();

    assert_eq!(ask("insert opening hours"), "true");
    assert_eq!(
        parent
            .get("opening hours", &one_hot("opening hours"))
            .as_deref(),
        Some("from child: opening hours")
    );
    parent.insert("closing days", one_hot("closing days"), "sundays".into());
    assert_eq!(ask("get closing days"), "Some(\"sundays\")");
    assert_eq!(parent.invalidate_tag("child"), 1);
    assert_eq!(ask("get opening hours"), "None");
    drop(to_child);
    assert!(child.wait().unwrap().success());
    // Both processes' lookups are counted in Redis.
    assert_eq!((parent.stats().hits, parent.stats().misses), (2, 1));
    let _ = TcpStream::connect(("127.0.0.1", server.port)); // still up
}

#[test]
fn one_store_serves_many_threads() {
    let Some(server) = Server::start() else {
        return;
    };
    let cache = Arc::new(server.cache("threads"));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let mut emb = vec![0.0; 16];
                    emb[t] = 1.0;
                    emb[8 + i % 8] = 1.0;
                    let query = format!("thread {t} question {i}");
                    let opts = InsertOptions::default().scope(format!("t{t}-{i}"));
                    assert!(cache.insert_with(&query, emb.clone(), format!("{t}/{i}"), &opts));
                    assert_eq!(
                        cache.get_scoped(&format!("t{t}-{i}"), &query, &emb),
                        Some(format!("{t}/{i}"))
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (200, 0, 200));
}

/// Words hashed into 32 buckets, L2-normalized (the pipelines' cache embedder).
struct Words;
impl rerank::Embedder for Words {
    fn embed_as(
        &self,
        texts: &[&str],
        _role: rerank::Role,
    ) -> rerank::Result<ndarray::Array2<f32>> {
        let mut m = ndarray::Array2::<f32>::zeros((texts.len(), 32));
        for (i, t) in texts.iter().enumerate() {
            for w in t.split_whitespace() {
                let h = w
                    .bytes()
                    .fold(7u32, |h, b| h.wrapping_mul(31) ^ u32::from(b));
                m[[i, (h % 32) as usize]] += 1.0;
            }
            let norm = m.row(i).dot(&m.row(i)).sqrt().max(1e-6);
            m.row_mut(i).mapv_inplace(|x| x / norm);
        }
        Ok(m)
    }
    fn dim(&self) -> usize {
        32
    }
}

/// A replica: a pipeline whose response cache lives in the shared Redis.
fn replica(server: &Server) -> rerank::Pipeline {
    let index = rerank::Bm25Index::new();
    index
        .add(vec![
            rerank::Document::new("1", "refunds are paid within 14 days").with_source("refunds.md"),
            rerank::Document::new("2", "baggage allowance is 23 kg").with_source("baggage.md"),
        ])
        .unwrap();
    let store = RedisCacheStore::<rerank::SearchResponse>::builder(server.url())
        .namespace("pipelines")
        .timeout(TIMEOUT)
        .build()
        .unwrap();
    let cache = SemanticCache::builder().store(store).build().unwrap();
    rerank::Pipeline::builder()
        .retriever(index)
        .embedder(Words)
        .cache(cache)
        .top_k(2)
        .build()
        .unwrap()
}

#[test]
fn two_pipelines_share_cached_responses_and_invalidations_through_redis() {
    let Some(server) = Server::start() else {
        return;
    };
    let (a, b) = (replica(&server), replica(&server));
    let first = a.search("when are refunds paid").unwrap();
    assert!(!first.cache_hit);
    assert_eq!(first.hits[0].id(), "1");
    // The other replica gets the same response from Redis, hits and scores included.
    let second = b.search("when are refunds paid").unwrap();
    assert!(
        second.cache_hit,
        "a response cached by one replica is a hit in the other"
    );
    assert_eq!(second.hits.len(), first.hits.len());
    for (x, y) in first.hits.iter().zip(&second.hits) {
        assert_eq!((x.id(), x.score), (y.id(), y.score));
        assert_eq!(x.document, y.document);
    }
    // Responses are tagged with their hits' sources: invalidating one in B is seen by A.
    let stats = b.cache().unwrap().stats();
    assert_eq!((stats.hits, stats.misses), (1, 1));
    assert_eq!(b.cache().unwrap().invalidate_tag("refunds.md"), 1);
    assert!(!a.search("when are refunds paid").unwrap().cache_hit);
}

#[test]
fn two_replicas_of_the_legal_router_share_answers_through_redis() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Some(server) = Server::start() else {
        return;
    };
    // The shipped legal config, its cache moved to this Redis (answers cached, acts tagged).
    let replica = |calls: &Arc<AtomicUsize>| {
        let mut config = rerank::pipeline::PipelineConfig::from_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/configs/legal_router.yaml"
        ))
        .unwrap();
        let cache = config.cache.as_mut().unwrap();
        cache.store = rerank::pipeline::CacheStoreKind::Redis;
        cache.path = None;
        cache.url = Some(server.url());
        cache.namespace = Some("legal-answers".into());
        assert!(cache.answers && cache.tag_acts);
        config
            .builder(Vec::new())
            .unwrap()
            .generator(crate::common::CountingGenerator(calls.clone()))
            .build()
            .unwrap()
    };
    let (calls_a, calls_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, b) = (replica(&calls_a), replica(&calls_b));
    let asked = "duties of directors under the Companies Act 2013";
    let rephrased = "What are the duties of directors under the Companies Act 2013?";
    let first = a.answer(asked).unwrap();
    assert!(!first.flags.cache_hit);
    assert_eq!(calls_a.load(Ordering::SeqCst), 1);
    // The other replica answers the rephrasing from Redis: no retrieval, no generator call.
    let second = b.answer(rephrased).unwrap();
    assert!(second.flags.cache_hit);
    assert_eq!(second.text, first.text);
    assert_eq!(calls_b.load(Ordering::SeqCst), 0);
    // The act is amended in one replica: the other generates afresh.
    let tag = rerank::classify::LegalExtractor::act_tag("Companies Act 2013");
    assert!(b.cache().unwrap().invalidate_tag(&tag) >= 1);
    assert!(!a.answer(rephrased).unwrap().flags.cache_hit);
    assert_eq!(calls_a.load(Ordering::SeqCst), 2);
}
