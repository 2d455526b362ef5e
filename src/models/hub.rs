//! Model directories from the Hugging Face hub (the `hf-hub` feature).
//!
//! Files are resolved through the standard hub cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`,
//! else `~/.cache/huggingface/hub`), so a model downloaded once, by this crate or by Python,
//! is found again without network. With `HF_HUB_OFFLINE=1` (or [`HubModel::offline`]) only
//! the cache is read and a miss is an error that says what to do.

use std::path::{Path, PathBuf};

use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};

use super::dir::{ModelDir, CONFIG_FILE, MODULES_FILE, TOKENIZER_FILE, WEIGHTS_FILE};
use crate::{Error, Result};

/// A model repository on the hub, at a revision (branch, tag or commit hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModel {
    id: String,
    revision: String,
    cache_dir: Option<PathBuf>,
    offline: bool,
}

impl HubModel {
    /// The model `id` (e.g. `cross-encoder/ms-marco-MiniLM-L-6-v2`) at revision `main`; offline
    /// when the `HF_HUB_OFFLINE` environment variable is `1`/`true`/`yes`/`on`.
    pub fn new(id: impl Into<String>) -> Self {
        HubModel {
            id: id.into(),
            revision: "main".to_string(),
            cache_dir: None,
            offline: offline_flag(std::env::var("HF_HUB_OFFLINE").ok().as_deref()),
        }
    }

    /// Sets the revision: a branch, a tag or a full commit hash.
    pub fn revision(mut self, revision: impl Into<String>) -> Self {
        self.revision = revision.into();
        self
    }

    /// Uses `dir` as the hub cache instead of the one the environment names.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Reads only the local cache (`true`) or downloads what is missing (`false`).
    pub fn offline(mut self, offline: bool) -> Self {
        self.offline = offline;
        self
    }

    /// The model id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Resolves `config.json`, `tokenizer.json` and `model.safetensors` (downloading them
    /// unless offline) and returns the cache snapshot directory holding them. Optional extra
    /// files (e.g. `tokenizer_config.json`) are fetched when they exist.
    pub fn fetch(&self, optional: &[&str]) -> Result<ModelDir> {
        let dir = self.fetch_files(&[CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE], optional)?;
        ModelDir::open(dir.path())
    }

    /// [`fetch`](Self::fetch) with `required` in place of `config.json`, `tokenizer.json` and
    /// `model.safetensors` (files at the repository's root); the snapshot directory need not
    /// have a `config.json`.
    fn fetch_files(&self, required: &[&str], optional: &[&str]) -> Result<ModelDir> {
        if self.id.trim().is_empty() {
            return Err(Error::Config("hub model id is empty".into()));
        }
        let cache_path = match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => default_cache_dir().ok_or_else(|| {
                Error::model(
                    "cannot locate the hub cache: set HF_HUB_CACHE or HF_HOME (no home \
                     directory)",
                )
            })?,
        };
        let cache = Cache::new(cache_path.clone());
        let repo = Repo::with_revision(self.id.clone(), RepoType::Model, self.revision.clone());
        let mut paths = Vec::new();
        if self.offline {
            for &name in required {
                let path = cached_file(&cache, &repo, &cache_path, name).ok_or_else(|| {
                    Error::model(format!(
                        "{}@{}: {name} is not in the hub cache at {} and offline mode is on \
                         (HF_HUB_OFFLINE); download the model once with network, or point \
                         HF_HUB_CACHE / HF_HOME at a cache that has it",
                        self.id,
                        self.revision,
                        cache_path.display()
                    ))
                })?;
                paths.push(path);
            }
        } else {
            let mut builder = ApiBuilder::from_cache(cache).with_progress(false);
            if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
                builder = builder.with_endpoint(endpoint);
            }
            let api = builder
                .build()
                .map_err(|e| Error::model(format!("hub client: {e}")))?;
            let api_repo = api.repo(repo);
            for &name in required {
                let path = api_repo.get(name).map_err(|e| {
                    Error::model(format!(
                        "{}@{}: cannot fetch {name}: {e}",
                        self.id, self.revision
                    ))
                })?;
                paths.push(path);
            }
            for name in optional {
                // Optional files may legitimately not exist in the repository.
                let _ = api_repo.get(name);
            }
        }
        let dir = common_parent(&paths).ok_or_else(|| {
            Error::model(format!(
                "{}@{}: the cached files are not in one snapshot directory",
                self.id, self.revision
            ))
        })?;
        ModelDir::folder(dir)
    }
}

/// The files of a sentence-transformers directory besides the weights and the tokenizer.
const SENTENCE_TRANSFORMERS_FILES: [&str; 5] = [
    MODULES_FILE,
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
];

impl HubModel {
    /// [`fetch`](Self::fetch) for a sentence-transformers model: also `modules.json`,
    /// `sentence_bert_config.json`, `config_sentence_transformers.json`, the tokenizer's
    /// settings, and each module folder's `config.json` and `model.safetensors` that
    /// `modules.json` names (`1_Pooling`, `2_Dense`, ...), where they exist. A static-embedding
    /// model (its first module a `StaticEmbedding`: no `config.json`) is fetched as
    /// `modules.json`, that module's `tokenizer.json` and `model.safetensors`, and the rest.
    pub fn fetch_sentence_transformers(&self) -> Result<ModelDir> {
        // modules.json first, where there is one: it says whether the model is static.
        if let Ok(probe) = self.fetch_files(&[MODULES_FILE], &[]) {
            if let Some(module) = probe.static_embedding_module()? {
                let mut files: Vec<String> = SENTENCE_TRANSFORMERS_FILES
                    .iter()
                    .map(|f| f.to_string())
                    .collect();
                let inner = |f: &str| match module.as_str() {
                    "" => f.to_string(),
                    m => format!("{m}/{f}"),
                };
                files.extend([inner(TOKENIZER_FILE), inner(WEIGHTS_FILE)]);
                // The other modules' folders (Dense, Normalize), as for any model.
                files.extend(module_files(&probe, &module)?);
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                return self.fetch_files(&[MODULES_FILE], &files);
            }
        }
        let dir = self.fetch(&SENTENCE_TRANSFORMERS_FILES)?;
        let files = module_files(&dir, "")?;
        if files.is_empty() {
            return Ok(dir);
        }
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        self.fetch(&files)
    }
}

/// `config.json` and `model.safetensors` of each module folder `dir`'s `modules.json` names
/// (`1_Pooling`, `2_Dense`, ...; not the directory itself, nor a path that leaves it, nor
/// `skip`); none without a `modules.json`.
fn module_files(dir: &ModelDir, skip: &str) -> Result<Vec<String>> {
    let Some(modules) = dir.optional_json(MODULES_FILE)? else {
        return Ok(Vec::new());
    };
    Ok(modules
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("path").and_then(serde_json::Value::as_str))
        .filter(|p| !p.is_empty() && !p.contains("..") && *p != skip)
        .flat_map(|f| [format!("{f}/{CONFIG_FILE}"), format!("{f}/{WEIGHTS_FILE}")])
        .collect())
}

/// Whether an `HF_HUB_OFFLINE` value turns offline mode on.
fn offline_flag(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

fn default_cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = env("HF_HUB_CACHE") {
        return Some(PathBuf::from(dir));
    }
    if let Some(home) = env("HF_HOME") {
        return Some(PathBuf::from(home).join("hub"));
    }
    env("HOME").map(|h| {
        PathBuf::from(h)
            .join(".cache")
            .join("huggingface")
            .join("hub")
    })
}

/// A file of the cache: through `refs/<revision>` for a branch or tag, or directly under
/// `snapshots/<revision>` for a commit hash.
fn cached_file(cache: &Cache, repo: &Repo, cache_path: &Path, name: &str) -> Option<PathBuf> {
    if let Some(path) = cache.repo(repo.clone()).get(name) {
        return Some(path);
    }
    let rev = repo.revision();
    if rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit()) {
        let path = cache_path
            .join(repo.folder_name())
            .join("snapshots")
            .join(rev)
            .join(name);
        if path.is_file() {
            return Some(path);
        }
    }
    None
}

fn common_parent(paths: &[PathBuf]) -> Option<PathBuf> {
    let first = paths.first()?.parent()?.to_path_buf();
    paths
        .iter()
        .all(|p| p.parent() == Some(first.as_path()))
        .then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_flag_values() {
        for v in ["1", "true", "TRUE", " yes ", "on"] {
            assert!(offline_flag(Some(v)), "{v}");
        }
        for v in ["0", "false", "", "nope"] {
            assert!(!offline_flag(Some(v)), "{v}");
        }
        assert!(!offline_flag(None));
    }
}
