//! The one reader of `config.json` values: each helper takes the parsed object, the key and
//! the file, and its error names both (`<file>: key "<key>": <what>`), so that a user's
//! checkpoint with a value the crate cannot honour is told exactly what to change.

use std::path::Path;

use serde_json::{Map, Value};

use super::kernels::Act;
use crate::{Error, Result};

/// The error for `key` of `file`.
pub(crate) fn bad(file: &Path, key: &str, what: impl std::fmt::Display) -> Error {
    Error::model(format!("{}: key {key:?}: {what}", file.display()))
}

/// Reads a config value, absent or null as `None`.
pub(crate) fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// A positive integer `key` (`default` when absent or null; an error naming the key when
/// neither).
pub(crate) fn positive(
    obj: &Map<String, Value>,
    key: &str,
    default: Option<u64>,
    file: &Path,
) -> Result<usize> {
    let n = match get(obj, key) {
        None => default.ok_or_else(|| bad(file, key, "missing (a positive integer)"))?,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| bad(file, key, format!("expected a positive integer, got {v}")))?,
    };
    match usize::try_from(n) {
        Ok(n) if n > 0 && n <= MAX_SIZE => Ok(n),
        _ if n > 0 => Err(bad(
            file,
            key,
            format!("{n} is larger than any model's ({MAX_SIZE} at most)"),
        )),
        _ => Err(bad(
            file,
            key,
            format!("expected a positive integer, got {n}"),
        )),
    }
}

/// The largest size a config may give (2^24): past every real model's vocabulary, width,
/// depth and context, and small enough that what is sized by it before the tensors are
/// checked (a list per layer) cannot exhaust memory.
pub(crate) const MAX_SIZE: usize = 1 << 24;

/// A boolean `key`, false when absent or null.
pub(crate) fn flag(obj: &Map<String, Value>, key: &str, file: &Path) -> Result<bool> {
    flag_or(obj, key, false, file)
}

/// A boolean `key`, `default` when absent or null.
pub(crate) fn flag_or(
    obj: &Map<String, Value>,
    key: &str,
    default: bool,
    file: &Path,
) -> Result<bool> {
    match get(obj, key) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(bad(file, key, format!("expected true or false, got {v}"))),
    }
}

/// The activation `key` names (`gelu` when absent or null).
pub(crate) fn activation(obj: &Map<String, Value>, key: &str, file: &Path) -> Result<Act> {
    let name = match get(obj, key) {
        None => "gelu",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(bad(file, key, format!("expected a string, got {v}"))),
    };
    Act::from_name(name).ok_or_else(|| {
        bad(
            file,
            key,
            format!(
                "unsupported activation {name:?} (supported: gelu, gelu_new, gelu_pytorch_tanh, \
                 gelu_fast, relu, silu)"
            ),
        )
    })
}

/// A positive finite number (a RoPE theta, a scaling factor) at `key`.
pub(crate) fn theta(v: &Value, key: &str, file: &Path) -> Result<f64> {
    match v.as_f64() {
        Some(t) if t.is_finite() && t > 0.0 => Ok(t),
        _ => Err(bad(
            file,
            key,
            format!("expected a positive number, got {v}"),
        )),
    }
}

/// `obj[key]` as a count (absent or null: `None`).
pub(crate) fn count(obj: &Map<String, Value>, key: &str, file: &Path) -> Result<Option<usize>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                bad(
                    file,
                    key,
                    format!("expected a non-negative integer, got {v}"),
                )
            }),
    }
}

/// `obj[key]` as a string (absent or null: `None`).
pub(crate) fn string<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    file: &Path,
) -> Result<Option<&'a str>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(bad(file, key, format!("expected a string, got {v}"))),
    }
}

/// `config.json`'s object `v`, whose `model_type`, when it has one, must be `model_type` (else
/// an error naming `file`, the key, and the architecture's `name`).
pub(crate) fn object_of_type(
    v: &Value,
    model_type: &str,
    name: &str,
    file: &Path,
) -> Result<Map<String, Value>> {
    let obj = object(v.clone(), file)?;
    match string(&obj, "model_type", file)? {
        Some(kind) if kind != model_type => Err(bad(
            file,
            "model_type",
            format!("{kind:?} is not {name} ({model_type:?})"),
        )),
        _ => Ok(obj),
    }
}

/// A JSON object, or an error naming `file`.
pub(crate) fn object(v: Value, file: &Path) -> Result<Map<String, Value>> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(Error::model(format!(
            "{}: expected a JSON object, got {other}",
            file.display()
        ))),
    }
}

/// A parsed `config.json` as the JSON object it must be, or an error naming `file`.
pub(crate) fn object_ref<'a>(v: &'a Value, file: &Path) -> Result<&'a Map<String, Value>> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(Error::model(format!(
            "{}: expected a JSON object",
            file.display()
        ))),
    }
}

/// `hidden_size` and `num_attention_heads` (both required), the first a multiple of the second.
pub(crate) fn hidden_and_heads(obj: &Map<String, Value>, file: &Path) -> Result<(usize, usize)> {
    let hidden = positive(obj, "hidden_size", None, file)?;
    let heads = positive(obj, "num_attention_heads", None, file)?;
    if hidden % heads != 0 {
        return Err(bad(
            file,
            "num_attention_heads",
            format!("hidden_size {hidden} is not a multiple of num_attention_heads {heads}"),
        ));
    }
    Ok((hidden, heads))
}

/// A finite non-negative number `key` (a layer norm's epsilon), `default` when absent or null.
pub(crate) fn non_negative(
    obj: &Map<String, Value>,
    key: &str,
    default: f64,
    file: &Path,
) -> Result<f64> {
    match get(obj, key) {
        None => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|e| e.is_finite() && *e >= 0.0)
            .ok_or_else(|| {
                bad(
                    file,
                    key,
                    format!("expected a non-negative number, got {v}"),
                )
            }),
    }
}

/// `layer_types`, when the config gives it: per layer, `true` for `"full_attention"`, `false`
/// for `"sliding_attention"` (the rotary encoders with sliding layers: ModernBERT, Gemma3).
/// A list of another length than `layers`, or another type, is an error naming the key.
pub(crate) fn layer_types(
    obj: &Map<String, Value>,
    layers: usize,
    file: &Path,
) -> Result<Option<Vec<bool>>> {
    let types = match get(obj, "layer_types") {
        None => return Ok(None),
        Some(Value::Array(types)) => types,
        Some(v) => {
            return Err(bad(
                file,
                "layer_types",
                format!("expected a list, got {v}"),
            ))
        }
    };
    if types.len() != layers {
        return Err(bad(
            file,
            "layer_types",
            format!("{} entries for num_hidden_layers {layers}", types.len()),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(true),
            Some("sliding_attention") => Ok(false),
            _ => Err(bad(
                file,
                "layer_types",
                format!(
                    "unsupported layer type {t} (supported: \"full_attention\", \
                     \"sliding_attention\")"
                ),
            )),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Test support: each of `cases` (a key and the patch that breaks it) applied to `base()`
/// makes `parse` fail with an error naming `dir/config.json` and the key.
#[cfg(test)]
pub(crate) fn assert_patches_refused<T: std::fmt::Debug>(
    base: impl Fn() -> Value,
    parse: impl Fn(Value) -> Result<T>,
    cases: Vec<(&str, Value)>,
) {
    for (key, patch) in cases {
        let mut v = base();
        for (k, x) in patch.as_object().unwrap() {
            v[k] = x.clone();
        }
        let e = parse(v).unwrap_err().to_string();
        assert!(
            e.contains("dir/config.json") && e.contains(key),
            "{key}: {e}"
        );
    }
}
