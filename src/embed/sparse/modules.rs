//! The sentence-transformers layout of a sparse encoder directory (`SparseEncoder`): which
//! modules run for a query and for a document.
//!
//! - `modules.json` with an `MLMTransformer` (the directory itself) and a `SpladePooling`
//!   (`1_SpladePooling/config.json`): both roles run them;
//! - `modules.json` with one `Router`: its `router_config.json` names, per route (`query`,
//!   `document`), the modules in folders under the router's: a `SparseStaticEmbedding` alone
//!   (an inference-free query side), or an `MLMTransformer` and a `SpladePooling`; a role
//!   without a route of its own takes `parameters.default_route`;
//! - no `modules.json`: a `*ForMaskedLM` checkpoint, read as sentence-transformers reads one
//!   (max pooling of `log1p(relu(logits))`);
//! - `config_sentence_transformers.json`: `max_active_dims`, `similarity_fn_name` (`dot`).
//!
//! A module type is known by the last segment of its Python path, so the older names
//! published models carry (`sentence_transformers.sparse_encoder.models.MLMTransformer`,
//! `sentence_transformers.models.Router`) read as the current ones. Whatever cannot be
//! reproduced is refused with an [`Error::Model`] naming the file and the key.

use std::path::Path;

use serde_json::{Map, Value};

use crate::embed::layout::{short_name, MODULES_FILE, ST_CONFIG_FILE};
use crate::models::layers::config::{bad, count, get, object, string};
use crate::models::{ModelDir, CONFIG_FILE};
use crate::{Error, Result};

/// The Router's routes, relative to its folder.
const ROUTER_FILE: &str = "router_config.json";
/// A module's settings, relative to its folder.
const MODULE_CONFIG_FILE: &str = "config.json";

/// What SpladePooling reduces the tokens' logits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpladeStrategy {
    /// The largest value over the tokens (`"max"`: SPLADE v2 and later).
    Max,
    /// The sum over the tokens (`"sum"`: the original SPLADE).
    Sum,
}

/// SpladePooling's settings: `pooling_strategy(activation(logits))` over the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Splade {
    pub strategy: SpladeStrategy,
    /// `activation_function` `log1p_relu`: `log1p(log1p(relu(x)))` (the opensearch v3
    /// models) instead of `log1p(relu(x))` (`relu`).
    pub twice: bool,
    /// `embedding_dimension` (older: `word_embedding_dimension`) when given, with its key:
    /// the vocabulary size the model must have.
    pub dim: Option<(usize, &'static str)>,
}

impl Splade {
    /// A plain MLM checkpoint's pooling (sentence-transformers' defaults).
    const DEFAULT: Splade = Splade {
        strategy: SpladeStrategy::Max,
        twice: false,
        dim: None,
    };

    /// The activation of one logit (0 for a logit at or below 0).
    pub fn activate(&self, x: f32) -> f32 {
        if x <= 0.0 {
            return 0.0;
        }
        let y = x.ln_1p();
        match self.twice {
            true => y.ln_1p(),
            false => y,
        }
    }
}

/// The modules one role runs, by folder relative to the model directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// A `SparseStaticEmbedding`: one weight per token id, no model.
    Static { path: String },
    /// An `MLMTransformer` and its `SpladePooling` (`pooling_file` its `config.json`).
    Mlm {
        path: String,
        pooling: Splade,
        pooling_file: String,
    },
}

/// A sparse encoder directory's routes and settings.
#[derive(Debug, Clone)]
pub(crate) struct SparseLayout {
    /// Every distinct route, in the order the files name them.
    pub routes: Vec<Route>,
    /// The route of `[query, document]` (indices into `routes`).
    pub by_role: [usize; 2],
    /// `max_active_dims`: the most non-zero values a vector keeps.
    pub max_active_dims: Option<usize>,
}

/// `path` under `parent` ("" is `parent` itself), with `/` between.
fn join(parent: &str, path: &str) -> String {
    match (parent.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => parent.to_string(),
        (false, false) => format!("{parent}/{path}"),
    }
}

impl SparseLayout {
    /// Reads the layout of `dir`.
    pub fn read(dir: &ModelDir) -> Result<Self> {
        let (routes, by_role) = match dir.optional_json(MODULES_FILE)? {
            Some(modules) => read_modules(dir, modules)?,
            None => {
                check_masked_lm(dir)?;
                let route = Route::Mlm {
                    path: String::new(),
                    pooling: Splade::DEFAULT,
                    pooling_file: String::new(),
                };
                (vec![route], [0, 0])
            }
        };
        let mut layout = SparseLayout {
            routes,
            by_role,
            max_active_dims: None,
        };
        if let Some(v) = dir.optional_json(ST_CONFIG_FILE)? {
            layout.read_st_config(v, &dir.path().join(ST_CONFIG_FILE))?;
        }
        Ok(layout)
    }

    /// Reads `config_sentence_transformers.json`: `max_active_dims`, the similarity (`dot`
    /// only) and the prompts (none: a prompt is refused).
    fn read_st_config(&mut self, v: Value, file: &Path) -> Result<()> {
        let obj = object(v, file)?;
        self.max_active_dims = count(&obj, "max_active_dims", file)?;
        if self.max_active_dims == Some(0) {
            return Err(bad(file, "max_active_dims", "must be at least 1 (or null)"));
        }
        if let Some(other) = string(&obj, "similarity_fn_name", file)?.filter(|s| *s != "dot") {
            return Err(bad(
                file,
                "similarity_fn_name",
                format!("{other:?} is not supported (sparse vectors are compared by \"dot\")"),
            ));
        }
        if let Some(name) = string(&obj, "default_prompt_name", file)? {
            return Err(bad(
                file,
                "default_prompt_name",
                format!("{name:?}: prompts are not supported by the sparse encoder"),
            ));
        }
        if let Some(Value::Object(prompts)) = get(&obj, "prompts") {
            for role in ["query", "document"] {
                if let Some(p) = prompts.get(role).filter(|p| p.as_str() != Some("")) {
                    return Err(bad(
                        file,
                        &format!("prompts.{role}"),
                        format!("{p}: prompts are not supported by the sparse encoder"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether the directory `dir` holds a sentence-transformers sparse encoder:
/// `config_sentence_transformers.json` says `model_type` `SparseEncoder`, or `modules.json`
/// names a module only sparse encoders have (`MLMTransformer`, `SpladePooling`,
/// `SparseStaticEmbedding`). Files that cannot be read say no (loading then names them).
pub fn is_sparse_encoder(dir: &Path) -> bool {
    let json = |name: &str| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).ok()?).ok()
    };
    let declared = json(ST_CONFIG_FILE)
        .is_some_and(|v| v.get("model_type").and_then(Value::as_str) == Some("SparseEncoder"));
    let sparse_module = |m: &Value| {
        m.get("type").and_then(Value::as_str).is_some_and(|t| {
            matches!(
                short_name(t),
                "MLMTransformer" | "SpladePooling" | "SparseStaticEmbedding"
            )
        })
    };
    let modules = match json(MODULES_FILE) {
        Some(Value::Array(m)) => m.iter().any(sparse_module),
        _ => false,
    };
    declared || modules
}

/// Refuses a directory without `modules.json` unless `config.json` names a `*ForMaskedLM`
/// architecture.
fn check_masked_lm(dir: &ModelDir) -> Result<()> {
    let config = dir.config()?;
    let file = dir.path().join(CONFIG_FILE);
    let names: Vec<&str> = match config.get("architectures") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if names.iter().any(|n| n.ends_with("ForMaskedLM")) {
        return Ok(());
    }
    Err(bad(
        &file,
        "architectures",
        format!(
            "{names:?}: without {MODULES_FILE}, a sparse encoder must be a *ForMaskedLM \
             checkpoint"
        ),
    ))
}

/// The module's type and path, `[i]` of `file`.
fn type_and_path<'a>(
    module: &'a Map<String, Value>,
    i: usize,
    file: &Path,
) -> Result<(&'a str, &'a str)> {
    let key = |k: &str| format!("[{i}].{k}");
    let kind = string(module, "type", file)
        .map_err(|_| bad(file, &key("type"), "expected a string"))?
        .ok_or_else(|| bad(file, &key("type"), "missing"))?;
    let path = string(module, "path", file)
        .map_err(|_| bad(file, &key("path"), "expected a string"))?
        .unwrap_or("");
    Ok((kind, path))
}

/// Reads `modules.json`: an MLMTransformer and a SpladePooling, or one Router.
fn read_modules(dir: &ModelDir, modules: Value) -> Result<(Vec<Route>, [usize; 2])> {
    let file = dir.path().join(MODULES_FILE);
    let Value::Array(modules) = modules else {
        return Err(Error::model(format!(
            "{}: expected a list of modules",
            file.display()
        )));
    };
    let modules = modules
        .into_iter()
        .map(|m| object(m, &file))
        .collect::<Result<Vec<_>>>()?;
    let mut parts = Vec::new();
    for (i, module) in modules.iter().enumerate() {
        let (kind, path) = type_and_path(module, i, &file)?;
        parts.push((short_name(kind), path.to_string(), format!("[{i}].type")));
    }
    if let [(kind, path, _)] = &parts[..] {
        if *kind == "Router" {
            return read_router(dir, path);
        }
    }
    let route = route_of(dir, "", &parts, &file)?;
    Ok((vec![route], [0, 0]))
}

/// The route of `parts` (short type, path, the key naming its type in `file`), with paths
/// under `parent`: a SparseStaticEmbedding alone, or an MLMTransformer and a SpladePooling.
fn route_of(
    dir: &ModelDir,
    parent: &str,
    parts: &[(&str, String, String)],
    file: &Path,
) -> Result<Route> {
    const SUPPORTED: &str = "supported: MLMTransformer then SpladePooling, \
                             SparseStaticEmbedding alone, or one Router of those";
    match parts {
        [(kind, path, _)] if *kind == "SparseStaticEmbedding" => Ok(Route::Static {
            path: join(parent, path),
        }),
        [(first, path, key), (second, pool_path, pool_key)] => {
            if *first != "MLMTransformer" {
                return Err(bad(
                    file,
                    key,
                    format!("unsupported module {first:?} here ({SUPPORTED})"),
                ));
            }
            if *second != "SpladePooling" {
                return Err(bad(
                    file,
                    pool_key,
                    format!("unsupported module {second:?} here ({SUPPORTED})"),
                ));
            }
            let pooling_file = join(&join(parent, pool_path), MODULE_CONFIG_FILE);
            Ok(Route::Mlm {
                path: join(parent, path),
                pooling: read_splade(dir, &pooling_file)?,
                pooling_file,
            })
        }
        [.., (kind, _, key)] => Err(bad(
            file,
            key,
            format!("unsupported module {kind:?} or sequence of modules ({SUPPORTED})"),
        )),
        [] => Err(Error::model(format!(
            "{}: no modules ({SUPPORTED})",
            file.display()
        ))),
    }
}

/// Reads the Router in folder `path`: its `router_config.json`'s `types`, `structure` and
/// `parameters`.
fn read_router(dir: &ModelDir, path: &str) -> Result<(Vec<Route>, [usize; 2])> {
    let name = join(path, ROUTER_FILE);
    let file = dir.path().join(&name);
    let obj = object(dir.json(&name)?, &file)?;
    let types = match get(&obj, "types") {
        Some(Value::Object(t)) => t,
        _ => return Err(bad(&file, "types", "expected an object of module types")),
    };
    let Some(Value::Object(structure)) = get(&obj, "structure") else {
        return Err(bad(&file, "structure", "expected an object of routes"));
    };
    let parameters = match get(&obj, "parameters") {
        Some(Value::Object(p)) => p.clone(),
        None => Map::new(),
        Some(v) => {
            return Err(bad(
                &file,
                "parameters",
                format!("expected an object, got {v}"),
            ))
        }
    };
    if let Some(Value::Object(m)) = get(&parameters, "route_mappings") {
        if !m.is_empty() {
            return Err(bad(
                &file,
                "parameters.route_mappings",
                "route mappings are not supported (the query and document routes are used)",
            ));
        }
    }
    let default = string(&parameters, "default_route", &file)?;
    let mut routes = Vec::new();
    let mut by_role = [0; 2];
    for (r, role) in ["query", "document"].into_iter().enumerate() {
        let chosen = match (structure.contains_key(role), default) {
            (true, _) => role,
            (false, Some(d)) if structure.contains_key(d) => d,
            _ => {
                return Err(bad(
                    &file,
                    &format!("structure.{role}"),
                    "missing, and no default_route names another route",
                ))
            }
        };
        let key = format!("structure.{chosen}");
        let Some(Value::Array(names)) = structure.get(chosen) else {
            return Err(bad(&file, &key, "expected a list of module names"));
        };
        let mut parts = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let n = n
                .as_str()
                .ok_or_else(|| bad(&file, &format!("{key}[{i}]"), "expected a module name"))?;
            let kind = types
                .get(n)
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&file, &format!("types.{n}"), "missing"))?;
            parts.push((short_name(kind), n.to_string(), format!("types.{n}")));
        }
        let route = route_of(dir, path, &parts, &file)?;
        by_role[r] = match routes.iter().position(|x| *x == route) {
            Some(at) => at,
            None => {
                routes.push(route);
                routes.len() - 1
            }
        };
    }
    Ok((routes, by_role))
}

/// Reads SpladePooling's `config.json` (`name`, relative to the model directory).
fn read_splade(dir: &ModelDir, name: &str) -> Result<Splade> {
    let file = dir.path().join(name);
    let obj = object(dir.json(name)?, &file)?;
    let strategy = match string(&obj, "pooling_strategy", &file)?.unwrap_or("max") {
        "max" => SpladeStrategy::Max,
        "sum" => SpladeStrategy::Sum,
        other => {
            return Err(bad(
                &file,
                "pooling_strategy",
                format!("unsupported strategy {other:?} (supported: max, sum)"),
            ))
        }
    };
    let twice = match string(&obj, "activation_function", &file)?.unwrap_or("relu") {
        "relu" => false,
        "log1p_relu" => true,
        other => {
            return Err(bad(
                &file,
                "activation_function",
                format!("unsupported activation {other:?} (supported: relu, log1p_relu)"),
            ))
        }
    };
    let mut dim = None;
    for key in ["embedding_dimension", "word_embedding_dimension"] {
        if let Some(d) = count(&obj, key, &file)? {
            dim = Some((d, key));
        }
    }
    Ok(Splade {
        strategy,
        twice,
        dim,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_follow_splade_pooling() {
        let relu = Splade::DEFAULT;
        assert_eq!(relu.activate(-1.0), 0.0);
        assert_eq!(relu.activate(0.0), 0.0);
        assert_eq!(relu.activate(1.0), 1f32.ln_1p());
        let twice = Splade {
            twice: true,
            ..relu
        };
        assert_eq!(twice.activate(1.0), 1f32.ln_1p().ln_1p());
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("r", ""), "r");
        assert_eq!(join("r", "a"), "r/a");
    }
}
