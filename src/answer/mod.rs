//! Step 9: answers. The [`Generator`] trait with the request and result it works with;
//! generators; prompts with numbered, labelled context; citations; the grounding check.
//!
//! - generators: [`Extractive`] (`extractive`, model-free), `LocalChat` (`local_chat`, feature
//!   `models`), `OpenAiCompatible` (`openai`, feature `http`);
//! - [`PromptBuilder`] (`prompt`): the context block with `[Source: file, Page N]` labels under a
//!   token budget;
//! - [`Citation`] (`citation`) and reading a generator's output (`output`);
//! - [`GroundingChecker`] (`grounding`): the share of an answer's sentences a source supports.
//!
//! [`Pipeline::answer`](crate::Pipeline::answer) puts these together.

#[cfg(feature = "models")]
mod chat_format;
mod citation;
mod confidence;
mod extractive;
mod grounding;
#[cfg(feature = "models")]
mod local_chat;
#[cfg(feature = "http")]
mod openai;
mod output;
mod prompt;

use std::ops::ControlFlow;
use std::sync::Arc;

pub use citation::Citation;
pub use confidence::{
    excerpt, relevance, round4, ConfidenceBand, ConfidenceBands, RelevanceMeasure, SourceBrief,
    SourceScores, EXCERPT_CHARS,
};
pub use extractive::Extractive;
pub use grounding::{
    EmbeddingSupport, GroundingChecker, GroundingReport, LexicalSupport, RerankerSupport,
    SentenceCheck, SentenceStatus, SupportScorer, DEFAULT_META_PREFIXES,
};
#[cfg(feature = "models")]
pub use local_chat::{DecodeParams, DecodeTimings, Decoded, LocalChat, LocalChatBuilder};

/// The former name of [`LocalChat`], which now loads Qwen2, Llama and Mistral chat models too.
#[cfg(feature = "models")]
#[deprecated(since = "0.1.0", note = "renamed LocalChat")]
pub type Qwen3Chat = LocalChat;

/// The former name of [`LocalChatBuilder`].
#[cfg(feature = "models")]
#[deprecated(since = "0.1.0", note = "renamed LocalChatBuilder")]
pub type Qwen3ChatBuilder = LocalChatBuilder;
#[cfg(feature = "http")]
pub use openai::{OpenAiCompatible, OpenAiCompatibleBuilder};
pub use output::{distinct_citations, is_not_enough_information, strip_thinking, ThinkingFilter};
pub use prompt::{
    parse_prompt, ApproxTokenCounter, ContextBudget, ContextSource, ParsedBlock, ParsedPrompt,
    Prompt, PromptBuilder, TokenCounter, NOT_ENOUGH_INFORMATION, SYSTEM_PROMPT,
};

use serde::{Deserialize, Serialize};

use crate::Result;

/// Who said a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// What a generator is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRequest {
    /// The conversation so far (system prompt first, when any).
    pub messages: Vec<Message>,
    /// Upper bound on new tokens.
    pub max_new_tokens: usize,
    /// Sampling temperature; `0.0` means greedy decoding.
    pub temperature: f32,
    /// Nucleus sampling mass (used when `temperature > 0`).
    pub top_p: f32,
    /// Seed for sampling.
    pub seed: u64,
    /// Strings that end generation when produced (not included in the output).
    pub stop: Vec<String>,
}

impl Default for GenerationRequest {
    fn default() -> Self {
        GenerationRequest {
            messages: Vec::new(),
            max_new_tokens: 256,
            temperature: 0.0,
            top_p: 1.0,
            seed: 42,
            stop: Vec::new(),
        }
    }
}

impl GenerationRequest {
    /// A request with a system prompt and one user message, greedy by default.
    pub fn new(system: impl Into<String>, user: impl Into<String>) -> Self {
        GenerationRequest {
            messages: vec![
                Message::new(Role::System, system),
                Message::new(Role::User, user),
            ],
            ..Default::default()
        }
    }

    /// The content of the last user message, or `""`.
    pub fn last_user(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("")
    }

    /// The content of the system message, or `""`.
    pub fn system(&self) -> &str {
        self.messages
            .iter()
            .find(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .unwrap_or("")
    }
}

/// What a generator produced.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Generation {
    /// The generated text.
    pub text: String,
    /// Why generation stopped (e.g. `"stop"`, `"length"`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The tokens the generation read and wrote, when the generator counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
}

/// Tokens a generation used, in the model's own tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    /// The prompt: the rendered conversation, special tokens included.
    pub prompt_tokens: usize,
    /// The reply: the new tokens (a stop token that ended it not counted).
    pub completion_tokens: usize,
}

/// Writes text from a chat request: answers, hypothetical documents (HyDE), query variants.
pub trait Generator: Send + Sync {
    /// Generates a reply to `request`.
    fn generate(&self, request: &GenerationRequest) -> Result<Generation>;

    /// Generates a reply to `request`, handing its text to `on_text` as it is written: the
    /// pieces, in order, make the returned text. `on_text` returning `ControlFlow::Break` asks
    /// the generator to stop early (a client that went away); what was written until then is
    /// returned. By default the whole text is one piece, after [`generate`](Self::generate);
    /// a model that decodes token by token ([`LocalChat`]) passes each piece as soon as no
    /// stop string can still claim it, from the thread it decodes on (hence `Send`).
    fn generate_stream(
        &self,
        request: &GenerationRequest,
        on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
    ) -> Result<Generation> {
        let generation = self.generate(request)?;
        if !generation.text.is_empty() {
            let _ = on_text(&generation.text);
        }
        Ok(generation)
    }

    /// A short name for responses (e.g. `"extractive"`).
    fn name(&self) -> &str {
        "generator"
    }

    /// Whether it writes text beyond its sources: a hypothetical document for HyDE, query
    /// variants. `true` by default (a language model); [`Extractive`] only quotes its sources,
    /// so it says `false`, and the pipeline neither asks it for HyDE nor plans HyDE with it.
    fn writes_freely(&self) -> bool {
        true
    }
}

/// An `Arc` or a `Box` of a generator is the generator.
macro_rules! forward_generator {
    ($($pointer:ident),*) => {$(
        impl<G: Generator + ?Sized> Generator for $pointer<G> {
            fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
                (**self).generate(request)
            }
            fn generate_stream(
                &self,
                request: &GenerationRequest,
                on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
            ) -> Result<Generation> {
                (**self).generate_stream(request, on_text)
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn writes_freely(&self) -> bool {
                (**self).writes_freely()
            }
        }
    )*};
}

forward_generator!(Arc, Box);
