//! The tokenizer transformers 5 builds for `DebertaV2Tokenizer` (mxbai-rerank, DeBERTa-v3).
//!
//! transformers 5 keeps only the Unigram vocabulary of a DeBERTa `tokenizer.json` and builds
//! the rest itself (`tokenization_deberta_v2.py`): the normalizer `Lowercase` (with
//! `do_lower_case`), `Replace(\s{2,}|[\n\r\t], " ")`, `NFC`, `Strip` on the right; the
//! pre-tokenizer `Punctuation` (with `split_by_punct`) then `Metaspace` (`▁`, prepended always,
//! or to the first word only without `add_prefix_space`); the post-processor
//! `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]` with token types 0 then 1; the Unigram model
//! without byte fallback. The published files were written by transformers 4.x's converter,
//! with another normalizer (`Strip` on both sides, the SentencePiece `Precompiled` map,
//! `Replace(" {2,}", " ")`): tabs, line breaks and leading spaces come out differently. The
//! reference models run on transformers' rebuild, so this crate reads the file the same way.

use serde_json::Value;
use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::{Lowercase, Replace, Sequence, Strip, NFC};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::punctuation::Punctuation;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    ModelWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    SplitDelimiterBehavior, Tokenizer,
};

/// The tokenizer classes rebuilt here (`tokenizer_class` in `tokenizer_config.json`).
pub(crate) fn is_deberta_v2(class: &str) -> bool {
    matches!(class, "DebertaV2Tokenizer" | "DebertaV2TokenizerFast")
}

/// A boolean of `tokenizer_config.json`, `default` when absent.
fn flag(config: &Value, key: &str, default: bool) -> bool {
    config.get(key).and_then(Value::as_bool).unwrap_or(default)
}

/// A special token of `tokenizer_config.json` (a string, or an added-token object with a
/// `content`), `default` when absent.
fn special<'a>(config: &'a Value, key: &str, default: &'a str) -> &'a str {
    match config.get(key) {
        Some(Value::String(s)) => s,
        Some(v) => v.get("content").and_then(Value::as_str).unwrap_or(default),
        None => default,
    }
}

/// Rebuilds `tokenizer` (a Unigram `tokenizer.json`) as transformers 5's `DebertaV2Tokenizer`
/// with the options of `config` (`tokenizer_config.json`). A tokenizer of another model is left
/// as it is. The error is a message for the caller to put beside the file's name.
pub(crate) fn rebuild(tokenizer: &mut Tokenizer, config: &Value) -> Result<(), String> {
    let ModelWrapper::Unigram(model) = tokenizer.get_model() else {
        return Ok(());
    };
    let cls = special(config, "cls_token", "[CLS]");
    let sep = special(config, "sep_token", "[SEP]");
    let unk = special(config, "unk_token", "[UNK]");
    let id = |token: &str| {
        tokenizer
            .token_to_id(token)
            .ok_or_else(|| format!("DebertaV2Tokenizer: no token {token:?} in the vocabulary"))
    };
    let (cls_id, sep_id) = (id(cls)?, id(sep)?);
    if model.byte_fallback() {
        // transformers' Unigram has no byte fallback; its unknown token is `unk_token`.
        let vocab: Vec<(String, f64)> = model.iter().map(|(t, s)| (t.clone(), *s)).collect();
        let unk_id = vocab.iter().position(|(t, _)| t == unk);
        let unigram = Unigram::from(vocab, unk_id, false).map_err(|e| e.to_string())?;
        tokenizer.with_model(unigram);
    }
    let mut normalizers = Vec::new();
    if flag(config, "do_lower_case", false) {
        normalizers.push(NormalizerWrapper::Lowercase(Lowercase));
    }
    let spaces = Replace::new(
        tokenizers::normalizers::replace::ReplacePattern::Regex(r"\s{2,}|[\n\r\t]".into()),
        " ",
    )
    .map_err(|e| e.to_string())?;
    normalizers.extend([
        NormalizerWrapper::Replace(spaces),
        NormalizerWrapper::NFC(NFC),
        NormalizerWrapper::StripNormalizer(Strip::new(false, true)),
    ]);
    tokenizer
        .with_normalizer(Some(NormalizerWrapper::Sequence(Sequence::new(
            normalizers,
        ))))
        .map_err(|e| e.to_string())?;
    let mut pre = Vec::new();
    if flag(config, "split_by_punct", false) {
        pre.push(PreTokenizerWrapper::Punctuation(Punctuation::new(
            SplitDelimiterBehavior::Isolated,
        )));
    }
    let prepend = match flag(config, "add_prefix_space", true) {
        true => PrependScheme::Always,
        false => PrependScheme::First,
    };
    pre.push(PreTokenizerWrapper::Metaspace(Metaspace::new(
        '▁', prepend, true,
    )));
    tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(PreSequence::new(pre))));
    let template = TemplateProcessing::builder()
        .try_single(format!("{cls}:0 $A:0 {sep}:0"))
        .and_then(|b| b.try_pair(format!("{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1")))
        .map_err(|e| e.to_string())?
        .special_tokens(vec![(cls, cls_id), (sep, sep_id)])
        .build()
        .map_err(|e| e.to_string())?;
    tokenizer.with_post_processor(Some(PostProcessorWrapper::Template(template)));
    Ok(())
}
