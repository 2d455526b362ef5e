//! How [`LocalChat`](super::LocalChat) writes a conversation as the model's prompt: the
//! model's own chat template, rendered as transformers' `apply_chat_template(messages,
//! add_generation_prompt=True)` renders it (`models::chat_template`), or, for a Qwen checkpoint
//! saved without one, the ChatML format Qwen's templates write.
//!
//! Templates that refuse a system message (Mistral-Instruct v0.1 / v0.2's raise "Conversation
//! roles must alternate user/assistant/...") get it folded into the first user message
//! (`system + "\n\n" + user`), the way hosts usually work around them, rather than failing the
//! answer.

use std::collections::BTreeMap;

use minijinja::value::Value;

use super::{Message, Role};
use crate::models::chat_template::Template;
use crate::models::qwen3::DecoderFamily;
use crate::{Error, Result};

/// A conversation's prompt format.
#[derive(Debug)]
pub(crate) enum ChatFormat {
    /// The model's chat template, with the variables it is rendered with besides `messages`.
    Template {
        template: Box<Template>,
        variables: BTreeMap<String, Value>,
    },
    /// ChatML as Qwen's templates write it; for Qwen3, with the empty thinking block that
    /// turns thinking off (`thinking` false).
    ChatMl { qwen3: bool, thinking: bool },
}

impl ChatFormat {
    /// The built-in format of a checkpoint saved without a chat template, when its family has
    /// one (Qwen3 and Qwen2 write ChatML).
    pub fn builtin(family: DecoderFamily, thinking: bool) -> Option<Self> {
        match family {
            DecoderFamily::Qwen3 => Some(ChatFormat::ChatMl {
                qwen3: true,
                thinking,
            }),
            DecoderFamily::Qwen2 => Some(ChatFormat::ChatMl {
                qwen3: false,
                thinking,
            }),
            DecoderFamily::Llama | DecoderFamily::Mistral | DecoderFamily::Phi3 => None,
        }
    }

    /// The prompt of `messages`, ending where the assistant's reply starts.
    pub fn prompt(&self, messages: &[Message]) -> Result<String> {
        match self {
            ChatFormat::ChatMl { qwen3, thinking } => Ok(chat_ml(messages, *qwen3, *thinking)),
            ChatFormat::Template {
                template,
                variables,
            } => match render(template, variables, messages) {
                Ok(prompt) => Ok(prompt),
                Err(e) => match fold_system(messages) {
                    Some(folded) => render(template, variables, &folded).map_err(|_| e),
                    None => Err(e),
                },
            },
        }
    }
}

/// The template rendered over `messages` (`{role, content}` each) and `variables`.
fn render(
    template: &Template,
    variables: &BTreeMap<String, Value>,
    messages: &[Message],
) -> Result<String> {
    let mut context = variables.clone();
    // A message serializes as `{"role": "user", "content": ...}`, what templates read.
    context.insert("messages".into(), Value::from_serialize(messages));
    template
        .render(Value::from(context))
        .map_err(|e| Error::InvalidInput(format!("chat template: {e:#}")))
}

/// `messages` with the system messages' text put before the first user message's (one blank
/// line between), or `None` when there is no system message or no user message after it.
fn fold_system(messages: &[Message]) -> Option<Vec<Message>> {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    if system.is_empty() {
        return None;
    }
    let mut rest: Vec<Message> = messages
        .iter()
        .filter(|m| m.role != Role::System)
        .cloned()
        .collect();
    let first_user = rest.iter_mut().find(|m| m.role == Role::User)?;
    first_user.content = format!("{}\n\n{}", system.join("\n\n"), first_user.content);
    tracing::debug!("chat template refused a system message; folded into the first user message");
    Some(rest)
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// ChatML: each message (content trimmed) as `<|im_start|>{role}\n{content}<|im_end|>\n`, then
/// `<|im_start|>assistant\n`, and for Qwen3 without thinking `<think>\n\n</think>\n\n`.
pub(crate) fn chat_ml(messages: &[Message], qwen3: bool, thinking: bool) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str("<|im_start|>");
        out.push_str(role_name(m.role));
        out.push('\n');
        out.push_str(m.content.trim());
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    if qwen3 && !thinking {
        out.push_str("<think>\n\n</think>\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: Role, content: &str) -> Message {
        Message::new(role, content)
    }

    #[test]
    fn system_messages_fold_into_the_first_user_message() {
        let folded = fold_system(&[
            m(Role::System, "Be brief."),
            m(Role::User, "Hi"),
            m(Role::Assistant, "Hello"),
            m(Role::User, "Bye"),
        ])
        .unwrap();
        assert_eq!(
            folded,
            [
                m(Role::User, "Be brief.\n\nHi"),
                m(Role::Assistant, "Hello"),
                m(Role::User, "Bye")
            ]
        );
        assert_eq!(fold_system(&[m(Role::User, "Hi")]), None);
        assert_eq!(fold_system(&[m(Role::System, "alone")]), None);
    }

    #[test]
    fn a_template_that_refuses_system_messages_gets_them_folded() {
        let template = Template::new(
            "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}\
             {% endif %}[{{ m.role }}: {{ m.content }}]{% endfor %}"
                .into(),
        )
        .unwrap();
        let format = ChatFormat::Template {
            template: Box::new(template),
            variables: BTreeMap::new(),
        };
        let prompt = format
            .prompt(&[m(Role::System, "S"), m(Role::User, "U")])
            .unwrap();
        assert_eq!(prompt, "[user: S\n\nU]");
        // Without a user message to fold into, the template's own error is reported.
        let err = format.prompt(&[m(Role::System, "S")]).unwrap_err();
        assert!(err.to_string().contains("no system"), "{err}");
    }

    #[test]
    fn chat_ml_closes_the_thinking_block_for_qwen3_only() {
        let msgs = [m(Role::User, " Hi ")];
        assert_eq!(
            chat_ml(&msgs, true, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        );
        assert_eq!(
            chat_ml(&msgs, true, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(chat_ml(&msgs, false, false), chat_ml(&msgs, true, true));
    }
}
