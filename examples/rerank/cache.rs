//! `rerank cache`: the shared semantic cache of `search --cache` and `answer --cache`, seen from
//! any process: its stats, invalidation by tag (a source the cached responses cite) or by
//! query, and clearing. Prints one JSON object.
//!
//! ```text
//! cargo run --release --example rerank --features redis -- cache stats --cache redis://127.0.0.1:6379
//! cargo run --release --example rerank --features redis -- cache invalidate --tag notes/a.md --cache URL
//! cargo run --release --example rerank --features redis -- cache invalidate --key "the query" --cache URL
//! cargo run --release --example rerank --features redis -- cache clear --cache URL
//! ```

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// The cache: redis://HOST:PORT[/DB].
    #[arg(long, value_name = "URL", global = true)]
    cache: Option<String>,
    /// JSON output: one object. It is the only output of `cache`, so the flag changes
    /// nothing; every subcommand takes it.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    log: crate::flags::LogArgs,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Entries, hits, misses and hit rate (shared by every process using the cache).
    Stats,
    /// Removes the entries with a tag (`--tag`: responses citing that source) or of a query
    /// (`--key`).
    Invalidate {
        /// A tag: the source of a document the cached responses cite.
        #[arg(long, conflicts_with = "key", required_unless_present = "key")]
        tag: Option<String>,
        /// A query, as it was asked.
        #[arg(long)]
        key: Option<String>,
    },
    /// Removes every entry.
    Clear,
}

pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    let url = args
        .cache
        .as_deref()
        .ok_or("give the cache with --cache redis://HOST:PORT[/DB]")?;
    let (cache, url) = reachable_cache(url)?;
    let out = match args.action {
        Action::Stats => {
            // A Redis that answers the PING and then fails is an error, not zeros.
            let stats = cache.try_stats()?;
            serde_json::json!({
                "cache": url,
                "entries": stats.entries,
                "hits": stats.hits,
                "misses": stats.misses,
                "hit_rate": stats.hit_rate,
            })
        }
        Action::Invalidate { tag, key } => {
            let (by, value, removed) = match (tag, key) {
                (Some(tag), _) => {
                    let n = cache.try_invalidate_tag(&tag)?;
                    ("tag", tag, n)
                }
                (None, Some(key)) => {
                    let n = cache.try_invalidate_key(&key)?;
                    ("key", key, n)
                }
                (None, None) => return Err("give --tag T or --key QUERY".into()),
            };
            serde_json::json!({ "cache": url, "invalidated": { by: value }, "removed": removed })
        }
        Action::Clear => {
            // A Redis that answers the PING and then stops is an error, not "cleared".
            cache.try_clear()?;
            serde_json::json!({ "cache": url, "cleared": true, "entries": cache.try_stats()?.entries })
        }
    };
    println!("{out}");
    Ok(())
}

/// The cache at `url`, once Redis answers a PING: the cache itself treats a Redis that is down
/// as empty, which would make this command print zeros and invalidate nothing, silently. The
/// error names the URL (password hidden) and what to check.
/// Also returns the URL as printed (password hidden).
#[cfg(feature = "redis")]
fn reachable_cache(url: &str) -> CliResult<(Cache, String)> {
    let store = crate::recall::redis_store(url)?;
    store.ping()?;
    let shown = store.url().to_string();
    Ok((
        rerank::SemanticCache::builder().store(store).build()?,
        shown,
    ))
}

type Cache = rerank::SemanticCache<rerank::SearchResponse>;

#[cfg(not(feature = "redis"))]
fn reachable_cache(url: &str) -> CliResult<(Cache, String)> {
    Err(format!("--cache {url}: needs the `redis` feature").into())
}
