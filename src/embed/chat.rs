//! Texts through the tokenizer's chat template, as sentence-transformers 6 formats them for a
//! model saved with a `message` modality (`modality_config.message` in
//! `sentence_bert_config.json`; for example a fine-tuned Qwen3-Embedding whose tokenizer has a
//! chat template).
//!
//! What sentence-transformers does, and this module with it (`tests/fixtures/st_qwen3_chat`
//! records it):
//! - the template is `chat_template.jinja` of the model directory, else `chat_template` of
//!   `tokenizer_config.json`; it is rendered with [`minijinja`] set up as transformers sets up
//!   Jinja (`trim_blocks`, `lstrip_blocks`, no trailing newline kept, lenient undefined
//!   values, Python's string methods, `raise_exception`, `strftime_now`, a `tojson` that
//!   writes what Python's `json.dumps` writes);
//! - each text becomes one `user` message, after a `system` message holding the role's prompt
//!   when there is one. The content is the text itself (`flat` format) or
//!   `[{"type": "text", "text": text}]` (`structured`); `auto` or an absent format picks
//!   `structured` when the template reads content parts;
//! - the template sees `messages`, `add_generation_prompt` (false unless the saved
//!   `processing_kwargs.chat_template` says otherwise), `tools` and `documents` (none), the
//!   special tokens of `tokenizer_config.json` by name, the other saved
//!   `processing_kwargs.chat_template` entries, and `task` (`query` or `document`) when it
//!   declares that variable;
//! - the rendered string is tokenized without the tokenizer's own special tokens, then cut to
//!   `max_seq_length` tokens; a cut row ends with the conversation's suffix again
//!   (`restore_suffix`, on by default): the tokens every rendering of the conversation ends
//!   with whatever the text is, found by rendering it with two different texts.

use std::collections::BTreeMap;

use minijinja::value::Value;
use serde_json::{Map, Value as Json};
use tokenizers::Tokenizer;

use super::Role;
use crate::models::chat_template::{self, Template, TEMPLATE_FILE};
use crate::models::ModelDir;
use crate::{Error, Result};

/// What `sentence_bert_config.json` says of the `message` modality, read with the layout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChatSettings {
    /// `modality_config.message.format`: `flat`, `structured` or `auto` (`None`: auto).
    pub format: Option<String>,
    /// `processing_kwargs.chat_template`: what is passed to the template besides the messages.
    pub kwargs: Map<String, Json>,
    /// The template's source.
    pub template: String,
}

impl ChatSettings {
    /// The settings of `dir` given the `message` entry of `modality_config` and the
    /// `processing_kwargs` of `sentence_bert_config.json` (`file` names it in errors).
    pub fn read(
        dir: &ModelDir,
        message: &Json,
        processing: Option<&Json>,
        file: &std::path::Path,
    ) -> Result<Self> {
        let format = match message.get("format") {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) if matches!(s.as_str(), "flat" | "structured" | "auto") => {
                Some(s.clone())
            }
            Some(other) => {
                return Err(Error::model(format!(
                    "{}: key \"modality_config.message.format\": {other} (supported: flat, \
                     structured, auto)",
                    file.display()
                )))
            }
        };
        let kwargs = match processing.and_then(|p| p.get("chat_template")) {
            None | Some(Json::Null) => Map::new(),
            Some(Json::Object(m)) => m.clone(),
            Some(other) => {
                return Err(Error::model(format!(
                    "{}: key \"processing_kwargs.chat_template\": expected an object, got \
                     {other}",
                    file.display()
                )))
            }
        };
        Ok(ChatSettings {
            format,
            kwargs,
            template: template_source(dir, file)?,
        })
    }
}

/// The chat template of `dir` (`chat_template.jinja`, else `tokenizer_config.json`'s), which a
/// `message` modality needs (`file` names the config that asks for it).
fn template_source(dir: &ModelDir, file: &std::path::Path) -> Result<String> {
    chat_template::template_source(dir)?.ok_or_else(|| {
        Error::model(format!(
            "{}: key \"modality_config.message\": sentence-transformers formats every text with \
             the tokenizer's chat template, but there is no {TEMPLATE_FILE} and \
             tokenizer_config.json has no chat_template",
            file.display()
        ))
    })
}

/// A text's messages: the text alone, or as one text part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Flat,
    Structured,
}

/// The chat template of a model, ready to render and tokenize texts.
pub(crate) struct ChatTemplate {
    template: Template,
    format: Format,
    /// Whether the template reads `task`.
    declares_task: bool,
    /// The template's variables besides `messages` (and `task`).
    globals: BTreeMap<String, Value>,
    /// `restore_suffix` (default true).
    restore_suffix: bool,
    /// The tokenizer without truncation, special tokens left to the template.
    tokenizer: Tokenizer,
    /// `truncation_side` of `tokenizer_config.json` is `left`.
    truncate_left: bool,
    /// The suffix per role (query, document), when restored.
    suffix: [Vec<u32>; 2],
    /// The prompt per role (query, document).
    prompts: [Option<String>; 2],
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("format", &self.format)
            .field("declares_task", &self.declares_task)
            .field("restore_suffix", &self.restore_suffix)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The template of `settings` over `tokenizer` (whose truncation is dropped here), with the
    /// special tokens and truncation side of `dir`'s `tokenizer_config.json` and the prompts of
    /// each role.
    pub fn new(
        settings: &ChatSettings,
        dir: &ModelDir,
        tokenizer: &Tokenizer,
        prompts: [Option<String>; 2],
    ) -> Result<Self> {
        let template =
            Template::new(settings.template.clone()).map_err(|e| template_error(dir, &e))?;
        let declares_task = template.declares("task");
        let format = match settings.format.as_deref() {
            Some("flat") => Format::Flat,
            Some("structured") => Format::Structured,
            _ => auto_format(&settings.template),
        };
        let tokenizer_config = dir.optional_json("tokenizer_config.json")?;
        let mut globals = chat_template::special_tokens(tokenizer_config.as_ref());
        let truncate_left = tokenizer_config
            .as_ref()
            .and_then(|c| c.get("truncation_side"))
            .and_then(Json::as_str)
            == Some("left");
        globals.insert("add_generation_prompt".into(), Value::from(false));
        globals.insert("tools".into(), Value::from(()));
        globals.insert("documents".into(), Value::from(()));
        globals.insert(
            "common_kwargs".into(),
            Value::from_serialize(Map::<String, Json>::new()),
        );
        let mut restore_suffix = true;
        for (key, value) in &settings.kwargs {
            if key == "restore_suffix" {
                restore_suffix = value.as_bool().unwrap_or(true);
            } else {
                globals.insert(key.clone(), Value::from_serialize(value));
            }
        }
        let mut tokenizer = tokenizer.clone();
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::tokenizer(format!("{}: {e}", dir.path().display())))?;
        let mut chat = ChatTemplate {
            template,
            format,
            declares_task,
            globals,
            restore_suffix,
            tokenizer,
            truncate_left,
            suffix: [Vec::new(), Vec::new()],
            prompts,
        };
        if chat.restore_suffix {
            for role in [Role::Query, Role::Document] {
                chat.suffix[index(role)] = chat.find_suffix(role)?;
            }
        }
        Ok(chat)
    }

    /// The string the template renders for `text` as `role`.
    pub fn render(&self, text: &str, role: Role) -> Result<String> {
        let mut messages = Vec::with_capacity(2);
        if let Some(prompt) = self.prompts[index(role)]
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            messages.push(self.message("system", prompt));
        }
        messages.push(self.message("user", text));
        let mut context = self.globals.clone();
        context.insert("messages".into(), Value::from(messages));
        if self.declares_task {
            context.insert("task".into(), Value::from(role.as_str()));
        }
        self.template
            .render(Value::from(context))
            .map_err(|e| Error::tokenizer(format!("chat template: {e:#}")))
    }

    /// The token ids the model sees for `text` as `role`, cut to `max_length` (the suffix
    /// written back over the end of a cut row).
    pub fn ids(&self, text: &str, role: Role, max_length: usize) -> Result<Vec<u32>> {
        let mut ids = self.tokens(&self.render(text, role)?)?;
        if ids.len() >= max_length {
            if self.truncate_left {
                ids.drain(..ids.len() - max_length);
            } else {
                ids.truncate(max_length);
            }
            let suffix = &self.suffix[index(role)];
            let k = suffix.len().min(ids.len());
            let n = ids.len();
            ids[n - k..].copy_from_slice(&suffix[suffix.len() - k..]);
        }
        Ok(ids)
    }

    /// One message of `role` holding `text` in the template's format.
    fn message(&self, role: &str, text: &str) -> Value {
        let content = match self.format {
            Format::Flat => Value::from(text),
            Format::Structured => {
                let part: BTreeMap<&str, Value> =
                    [("type", Value::from("text")), ("text", Value::from(text))].into();
                Value::from(vec![Value::from_serialize(&part)])
            }
        };
        let message: BTreeMap<&str, Value> =
            [("role", Value::from(role)), ("content", content)].into();
        Value::from_serialize(&message)
    }

    /// `rendered` tokenized as sentence-transformers does (`add_special_tokens=False`).
    fn tokens(&self, rendered: &str) -> Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode_fast(rendered, false)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The tokens every rendering of a conversation of `role` ends with: the longest common
    /// tail of its renderings with the texts `0` and `1 2 3 4`, or none when that tail is a
    /// whole rendering.
    fn find_suffix(&self, role: Role) -> Result<Vec<u32>> {
        let a = self.tokens(&self.render("0", role)?)?;
        let b = self.tokens(&self.render("1 2 3 4", role)?)?;
        let common = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        if common == a.len() || common == b.len() {
            return Ok(Vec::new());
        }
        Ok(a[a.len() - common..].to_vec())
    }
}

/// 0 for queries, 1 for documents.
fn index(role: Role) -> usize {
    match role {
        Role::Query => 0,
        Role::Document => 1,
    }
}

/// sentence-transformers' `auto` format: `structured` when the template reads content parts.
fn auto_format(template: &str) -> Format {
    let markers = [
        "content[0]",
        ".type",
        "'type'",
        "\"type\"",
        "item.type",
        "message.content[",
    ];
    match markers.iter().any(|m| template.contains(m)) {
        true => Format::Structured,
        false => Format::Flat,
    }
}

fn template_error(dir: &ModelDir, e: &minijinja::Error) -> Error {
    Error::model(format!("{}: chat template: {e:#}", dir.path().display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_structured_when_the_template_reads_parts() {
        assert_eq!(auto_format("{{ m.content }}"), Format::Flat);
        assert_eq!(
            auto_format("{% if item.type == 'text' %}"),
            Format::Structured
        );
    }
}
