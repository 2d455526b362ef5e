//! A model's chat template (`chat_template.jinja`, or `chat_template` in
//! `tokenizer_config.json`), rendered as transformers renders it: [`minijinja`] set up as
//! transformers sets up Jinja (`trim_blocks`, `lstrip_blocks`, no trailing newline kept,
//! lenient undefined values, Python's string methods through `minijinja_contrib`'s pycompat,
//! `raise_exception`, `strftime_now`, a `tojson` that writes what Python's `json.dumps`
//! writes), and the special tokens of `tokenizer_config.json` as variables (`bos_token`,
//! `eos_token`, ...), as `apply_chat_template` passes them.
//!
//! Two readers use it: sentence-transformers' `message` modality (`embed::chat`) and the chat
//! generator (`answer::LocalChat`).

use std::collections::BTreeMap;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde_json::Value as Json;

use super::ModelDir;
use crate::Result;

/// The file transformers 5 (and sentence-transformers) save a chat template in.
pub(crate) const TEMPLATE_FILE: &str = "chat_template.jinja";
/// The name the template is registered under.
const NAME: &str = "chat_template";

/// The chat template of `dir`: `chat_template.jinja`, else `chat_template` of
/// `tokenizer_config.json` (a string, or a list of named templates of which `default` is
/// used); `None` when the directory has neither.
pub(crate) fn template_source(dir: &ModelDir) -> Result<Option<String>> {
    let path = dir.path().join(TEMPLATE_FILE);
    if path.is_file() {
        return std::fs::read_to_string(&path)
            .map(Some)
            .map_err(|e| crate::Error::io(&path, e));
    }
    let config = dir.optional_json("tokenizer_config.json")?;
    Ok(match config.as_ref().and_then(|c| c.get("chat_template")) {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Json::as_str)
            .map(str::to_string),
        _ => None,
    })
}

/// The special tokens of a `tokenizer_config.json` (`bos_token`, `eos_token`, `pad_token`, ...:
/// every `*_token` key holding a string or an added token's `content`), by name, as
/// `apply_chat_template` passes them to the template.
pub(crate) fn special_tokens(tokenizer_config: Option<&Json>) -> BTreeMap<String, Value> {
    let mut tokens = BTreeMap::new();
    if let Some(Json::Object(config)) = tokenizer_config {
        for (key, value) in config {
            let token = match value {
                Json::String(s) => Some(s.as_str()),
                Json::Object(o) => o.get("content").and_then(Json::as_str),
                _ => None,
            };
            if let (true, Some(token)) = (key.ends_with("_token"), token) {
                tokens.insert(key.clone(), Value::from(token));
            }
        }
    }
    tokens
}

/// A compiled chat template. `Send + Sync`.
pub(crate) struct Template {
    env: Environment<'static>,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template").finish_non_exhaustive()
    }
}

impl Template {
    /// Compiles `source` (a syntax error is reported here, not at the first render).
    pub fn new(source: String) -> std::result::Result<Self, minijinja::Error> {
        let mut env = environment();
        env.add_template_owned(NAME, source)?;
        env.get_template(NAME)?;
        Ok(Template { env })
    }

    /// Whether the template reads the variable `name` without setting it.
    pub fn declares(&self, name: &str) -> bool {
        self.env
            .get_template(NAME)
            .is_ok_and(|t| t.undeclared_variables(false).contains(name))
    }

    /// The template rendered with `context`'s variables.
    pub fn render(&self, context: Value) -> std::result::Result<String, minijinja::Error> {
        self.env.get_template(NAME)?.render(context)
    }
}

/// An environment set up as transformers sets up Jinja for chat templates.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env
}

/// transformers' `strftime_now(format)`: the current UTC time in `format` (`%Y %m %d %B %b
/// %H %M %S %%`; other directives are kept as written).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('B') => out.push_str(name),
            Some('b') => out.push_str(&name[..3]),
            Some('H') => out.push_str(&format!("{:02}", rest / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rest / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rest % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// transformers' `tojson`: `json.dumps(value, ensure_ascii=False, indent=indent)` (Python's
/// separators: `", "` and `": "` on one line, `","` and `": "` when indented).
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    python_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// `value` as Python's `json.dumps` writes it with `ensure_ascii=False`.
fn python_json(value: &Json, indent: Option<usize>, depth: usize, out: &mut String) {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let comma = if indent.is_some() { "," } else { ", " };
    match value {
        Json::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                newline(out, depth + 1);
                python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        Json::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(comma);
                }
                newline(out, depth + 1);
                python_string(key, out);
                out.push_str(": ");
                python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        Json::String(s) => python_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON string as Python writes it with `ensure_ascii=False`.
fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tojson_writes_what_python_writes() {
        let v: Json = serde_json::json!({"a": [1, "é\n"], "b": {}, "c": null});
        let mut out = String::new();
        python_json(&v, None, 0, &mut out);
        assert_eq!(out, r#"{"a": [1, "é\n"], "b": {}, "c": null}"#);
        let mut out = String::new();
        python_json(&v, Some(2), 0, &mut out);
        assert_eq!(
            out,
            "{\n  \"a\": [\n    1,\n    \"é\\n\"\n  ],\n  \"b\": {},\n  \"c\": null\n}"
        );
    }

    #[test]
    fn strftime_now_fills_the_directives() {
        let s = strftime_now("%Y-%m-%d %b %% %q".into());
        let parts: Vec<&str> = s.split(' ').collect();
        assert_eq!(parts.len(), 4, "{s}");
        assert_eq!(parts[0].len(), 10, "{s}");
        assert_eq!(parts[1].len(), 3, "{s}");
        assert_eq!(&parts[2..], ["%", "%q"]);
    }

    /// The Jinja that published chat templates lean on beyond the Qwen3 one the parity tests
    /// render (Mistral v0.3's `selectattr(.., "equalto", ..)`, Gemma's and Phi's string tests,
    /// Llama 3.1's `trim` and `tojson`), with what Python's Jinja renders for each.
    #[test]
    fn templates_in_the_wild_render_as_jinja_does() {
        let cases = [
            (
                "{%- set users = messages | selectattr('role', 'equalto', 'user') | list %}\
                 {{ users | length }}:{{ users[-1]['content'] }}",
                "2:b",
            ),
            (
                "{%- for m in messages %}{%- if m.content is string %}s{% endif %}\
                 {%- if m is mapping %}m{% endif %}{%- endfor %}",
                "smsmsm",
            ),
            (
                "{{ messages[0]['content'] | trim }}|{{ '  x  '.strip() }}|\
                 {{ 'a-b'.split('-') | join(',') }}|{{ messages | map(attribute='role') | join(' ') }}",
                "a|x|a,b|user assistant user",
            ),
            (
                "{%- for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}\
                 {{ m.role[0] }}{% if loop.last %}.{% endif %}{% endfor %}",
                "uu.",
            ),
            (
                "{{ {'name': 'f', 'x': [1, 2]} | tojson }}",
                "{\"name\": \"f\", \"x\": [1, 2]}",
            ),
        ];
        let messages = serde_json::json!([
            {"role": "user", "content": " a "},
            {"role": "assistant", "content": "z"},
            {"role": "user", "content": "b"},
        ]);
        for (source, want) in cases {
            let template = Template::new(source.to_string()).unwrap();
            let context = Value::from_serialize(serde_json::json!({ "messages": messages }));
            assert_eq!(template.render(context).unwrap(), want, "{source}");
        }
    }
}
