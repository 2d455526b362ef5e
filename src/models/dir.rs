//! A local model directory: `config.json`, `tokenizer.json`, `model.safetensors`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::config::Architecture;
use crate::{Error, Result};

/// The configuration file name.
pub const CONFIG_FILE: &str = "config.json";
/// The tokenizer file name.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The weights file name.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// Where to get a model directory, for the errors of a missing or incomplete one.
pub(crate) const FETCH_HINT: &str = "`scripts/fetch_models.sh` fetches the embedder \
    all-MiniLM-L6-v2 into $RERANK_MODELS_DIR (default models/), and \
    `scripts/fetch_reranker.sh NAME` a cross-encoder from the Hugging Face hub";

/// A model directory on disk. Opening it checks that it is a directory with a `config.json`;
/// each other file is looked up when needed, and a missing one gives an [`Error::Model`]
/// naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDir {
    root: PathBuf,
}

impl ModelDir {
    /// Opens `path`, which must be an existing directory with a `config.json`. The error says
    /// which of these is wrong (the path does not exist, is not a directory, has no
    /// `config.json`) and where to get a model.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let root = path.as_ref().to_path_buf();
        let problem = if !root.exists() {
            "does not exist"
        } else if !root.is_dir() {
            "is not a directory"
        } else if !root.join(CONFIG_FILE).is_file() {
            "has no config.json"
        } else {
            return Ok(ModelDir { root });
        };
        Err(Error::model(format!(
            "{}: {problem} (a model directory holds {CONFIG_FILE}, {TOKENIZER_FILE} and \
             {WEIGHTS_FILE}; {FETCH_HINT})",
            root.display()
        )))
    }

    /// Opens `path` as a folder of model files that need not have a `config.json` of its own
    /// (a sentence-transformers model whose modules sit in sub-folders, such as a Router's);
    /// a path that is not a directory is refused as [`ModelDir::open`] refuses it.
    pub(crate) fn folder(path: impl AsRef<Path>) -> Result<Self> {
        match path.as_ref().is_dir() {
            true => Ok(ModelDir {
                root: path.as_ref().to_path_buf(),
            }),
            false => Self::open(path),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The path of `name` inside the directory, or an error naming the missing file.
    pub fn file(&self, name: &str) -> Result<PathBuf> {
        let path = self.root.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::model(format!(
                "{}: missing file (the model directory needs {name})",
                path.display()
            )))
        }
    }

    /// Parses `config.json`.
    pub fn config(&self) -> Result<Value> {
        self.json(CONFIG_FILE)
    }

    /// `config.json` read once: its path, its text (for a typed configuration parsed from it,
    /// whose errors name the file) and its parsed value.
    pub fn config_text(&self) -> Result<(PathBuf, String, Value)> {
        let (path, text) = self.text(CONFIG_FILE)?;
        let value = parse_json(&path, &text)?;
        Ok((path, text, value))
    }

    /// Parses a JSON file of the directory.
    pub fn json(&self, name: &str) -> Result<Value> {
        let (path, text) = self.text(name)?;
        parse_json(&path, &text)
    }

    /// The path and the text of the file `name` of the directory.
    fn text(&self, name: &str) -> Result<(PathBuf, String)> {
        let path = self.file(name)?;
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        Ok((path, text))
    }

    /// Parses an optional JSON file: `None` when it does not exist.
    pub fn optional_json(&self, name: &str) -> Result<Option<Value>> {
        if self.root.join(name).is_file() {
            self.json(name).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Whether sentence-transformers' `modules.json` has a Pooling module: the directory is an
    /// embedding model, whatever its `config.json` says (Qwen3-Embedding's says
    /// `Qwen3ForCausalLM`). A `modules.json` that is not JSON is an error.
    pub fn is_embedding_model(&self) -> Result<bool> {
        let Some(modules) = self.optional_json("modules.json")? else {
            return Ok(false);
        };
        Ok(modules.as_array().into_iter().flatten().any(|m| {
            m.get("type")
                .and_then(|t| t.as_str())
                .is_some_and(|t| t.rsplit('.').next() == Some("Pooling"))
        }))
    }

    /// The architecture named in `config.json`.
    pub fn architecture(&self) -> Result<Architecture> {
        let path = self.root.join(CONFIG_FILE);
        Architecture::from_config(&self.config()?, &path)
    }

    /// The folder of the `StaticEmbedding` module this directory's `modules.json` starts with
    /// (`""`: the directory itself), if it does: how a sentence-transformers static-embedding
    /// model (no transformer, no `config.json`) is told apart before anything else is read.
    /// A module path that leaves the directory is an [`Error::Model`] naming `modules.json`.
    pub(crate) fn static_embedding_module(&self) -> Result<Option<String>> {
        let Some(Value::Array(modules)) = self.optional_json(MODULES_FILE)? else {
            return Ok(None);
        };
        let first = modules.first().and_then(Value::as_object);
        let kind = first.and_then(|m| m.get("type")).and_then(Value::as_str);
        if kind.and_then(|k| k.rsplit('.').next()) != Some("StaticEmbedding") {
            return Ok(None);
        }
        let path = first
            .and_then(|m| m.get("path"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if path.split(['/', '\\']).any(|c| c == "..") || Path::new(path).is_absolute() {
            return Err(Error::model(format!(
                "{}: module path {path:?} must be a folder inside the model directory",
                self.root.join(MODULES_FILE).display()
            )));
        }
        Ok(Some(path.to_string()))
    }

    /// Loads `tokenizer.json` as transformers 5 uses it (callers decide truncation and
    /// padding): as is, except where `tokenizer_config.json` names a tokenizer class that
    /// transformers rebuilds from the file's vocabulary (see `rebuild_as_transformers`).
    pub fn tokenizer(&self) -> Result<tokenizers::Tokenizer> {
        let path = self.file(TOKENIZER_FILE)?;
        let mut tokenizer = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
        let config = self.optional_json(TOKENIZER_CONFIG_FILE)?;
        let class = config
            .as_ref()
            .and_then(|c| c.get("tokenizer_class")?.as_str().map(str::to_string));
        if let Some(class) = class {
            rebuild_as_transformers(&mut tokenizer, &class)
                .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
            if super::deberta::tokenizer::is_deberta_v2(&class) {
                let config = config.unwrap_or(Value::Null);
                super::deberta::tokenizer::rebuild(&mut tokenizer, &config)
                    .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
            }
        }
        Ok(tokenizer)
    }

    /// The tokenizer at `path` when given (a builder's `tokenizer(path)`), else the
    /// directory's ([`ModelDir::tokenizer`]), with its own truncation and padding turned off,
    /// and the file it came from (for errors about its tokens).
    pub fn tokenizer_or(&self, path: Option<&Path>) -> Result<(tokenizers::Tokenizer, PathBuf)> {
        let (mut tokenizer, path) = match path {
            Some(path) => {
                let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| {
                    Error::tokenizer(format!("cannot load {}: {e}", path.display()))
                })?;
                (tokenizer, path.to_path_buf())
            }
            None => (self.tokenizer()?, self.root.join(TOKENIZER_FILE)),
        };
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        Ok((tokenizer, path))
    }

    /// Loads `tokenizer.json` as is, refusing a tokenizer with more tokens than the model's
    /// `vocab_size` (it would produce ids outside the embedding matrix).
    pub fn tokenizer_within(&self, vocab_size: usize) -> Result<tokenizers::Tokenizer> {
        let tokenizer = self.tokenizer()?;
        let n = tokenizer.get_vocab_size(true);
        if n > vocab_size {
            return Err(Error::model(format!(
                "{}: {n} tokens, more than vocab_size {vocab_size} in {CONFIG_FILE}",
                self.root.join(TOKENIZER_FILE).display()
            )));
        }
        Ok(tokenizer)
    }
}

/// sentence-transformers' list of modules, relative to the model directory.
pub(crate) const MODULES_FILE: &str = "modules.json";

/// The tokenizer settings, relative to the model directory.
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// Does to `tokenizer` what transformers 5 does when it loads tokenizer class `class`.
///
/// `XLMRobertaTokenizer` (and its `Fast` alias; XLM-R, multilingual-e5, bge-m3,
/// bge-reranker), and `CamembertTokenizer` alike, keeps only the vocabulary of a Unigram
/// `tokenizer.json` and the
/// sentencepiece `Precompiled` normalizer, and builds the rest itself: whitespace split
/// first, then `Metaspace` (`▁`, always prepended). A text's leading and trailing whitespace
/// and its line breaks then give no `▁` token of their own, and the `Replace` and other
/// normalizers a converted file may carry are gone. The reference models are run that way,
/// so this crate reads the file that way too. Other classes load as the file says.
fn rebuild_as_transformers(tokenizer: &mut tokenizers::Tokenizer, class: &str) -> Result<()> {
    use tokenizers::normalizers::NormalizerWrapper;
    use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
    use tokenizers::pre_tokenizers::PreTokenizerWrapper;
    use tokenizers::ModelWrapper;

    if !matches!(
        class,
        "XLMRobertaTokenizer"
            | "XLMRobertaTokenizerFast"
            | "CamembertTokenizer"
            | "CamembertTokenizerFast"
    ) || !matches!(tokenizer.get_model(), ModelWrapper::Unigram(_))
    {
        return Ok(());
    }
    let precompiled = match tokenizer.get_normalizer() {
        Some(NormalizerWrapper::Precompiled(p)) => Some(p.clone()),
        Some(NormalizerWrapper::Sequence(seq)) => seq.as_ref().iter().find_map(|n| match n {
            NormalizerWrapper::Precompiled(p) => Some(p.clone()),
            _ => None,
        }),
        _ => None,
    };
    tokenizer
        .with_normalizer(precompiled.map(NormalizerWrapper::Precompiled))
        .map_err(|e| Error::tokenizer(format!("{class}: {e}")))?;
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![
        PreTokenizerWrapper::WhitespaceSplit(WhitespaceSplit),
        PreTokenizerWrapper::Metaspace(Metaspace::new('▁', PrependScheme::Always, true)),
    ]))));
    Ok(())
}

/// `text`, the contents of the JSON file at `path`, parsed; errors name the file.
fn parse_json(path: &Path, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::parse(path.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_things_are_named() {
        let e = ModelDir::open("/nonexistent/model")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/model: does not exist ("), "{e}");
        assert!(!e.contains("not a directory"), "{e}");
        for fetch in ["scripts/fetch_models.sh", "scripts/fetch_reranker.sh NAME"] {
            assert!(e.contains(fetch), "{e}");
        }
        let dir = std::env::temp_dir().join(format!("rerank-modeldir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = ModelDir::open(&dir).unwrap_err();
        assert!(matches!(e, Error::Model { .. }));
        let e = e.to_string();
        assert!(
            e.contains(&format!("{}: has no config.json (", dir.display())),
            "{e}"
        );
        assert!(e.contains("scripts/fetch_models.sh"), "{e}");
        let file = dir.join("a-file");
        std::fs::write(&file, "").unwrap();
        let e = ModelDir::open(&file).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}: is not a directory (", file.display())),
            "{e}"
        );
        std::fs::write(dir.join(CONFIG_FILE), "{not json").unwrap();
        let m = ModelDir::open(&dir).unwrap();
        assert!(m
            .file(TOKENIZER_FILE)
            .unwrap_err()
            .to_string()
            .contains(TOKENIZER_FILE));
        let e = m.config().unwrap_err();
        assert!(matches!(e, Error::Parse { .. }), "{e}");
        std::fs::write(dir.join(WEIGHTS_FILE), b"garbage").unwrap();
        let Err(e) = crate::models::layers::weights::Weights::open(m.path()) else {
            panic!("garbage weights loaded")
        };
        let e = e.to_string();
        assert!(e.contains(WEIGHTS_FILE), "{e}");
        assert!(m.optional_json("nope.json").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
