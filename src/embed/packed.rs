//! What the encoder embedders ([`BertEmbedder`](super::BertEmbedder),
//! [`ModernBertEmbedder`](super::ModernBertEmbedder), [`GteEmbedder`](super::GteEmbedder))
//! share around their encoder: the text side of the model directory ([`PackedTexts`]: its
//! sentence-transformers layout, the tokenizer, the prompts' token counts), texts in
//! length-sorted batches under a token budget,
//! each batch run *packed* through the family's [`PackedEncoder`], and each text's hidden
//! states pooled (mean pooling by the encoder, so that a device copies back only the means),
//! projected and normalized as the layout says.

use std::path::Path;

use ndarray::Array2;

use super::builder::{
    encode_texts, load_tokenizer, model_id, prompt_length, role_index, token_ids, EmbedderBuilder,
    TextTokenizer,
};
use super::layout::Layout;
use super::{Role, DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};
use crate::models::engine::PackedEncoder;
use crate::models::layers::dense::Output;
use crate::models::{plan_batches, ModelDir, Precision, CONFIG_FILE};
use crate::{Error, Result};

/// The text side of an encoder embedder: layout, tokenizer, prompt lengths and batching.
pub(crate) struct PackedTexts {
    pub tokenizer: TextTokenizer,
    pub layout: Layout,
    /// How many leading tokens of a `[Query, Document]` text are its prompt, left out of
    /// pooling (0 unless `include_prompt` is false).
    prompt_tokens: [usize; 2],
    pub token_budget: usize,
    pub max_batch_size: usize,
}

impl PackedTexts {
    /// Reads the layout of `dir`, whose encoder has `hidden`-wide states, `max_positions`
    /// positions and `vocab` token embeddings; applies the builder's prompts and
    /// `max_length`, which must be between 2 and `max_positions`; loads the tokenizer (no
    /// more tokens than `vocab`) and counts the prompts' tokens.
    pub fn load<M>(
        builder: &EmbedderBuilder<M>,
        dir: &ModelDir,
        hidden: usize,
        max_positions: usize,
        vocab: usize,
    ) -> Result<Self> {
        let mut layout = Layout::read(dir, hidden, max_positions)?;
        builder.apply(&mut layout);
        let max_seq_length = layout.max_seq_length;
        if max_seq_length > max_positions || max_seq_length < 2 {
            return Err(Error::model(format!(
                "max_length {max_seq_length} must be between 2 and max_position_embeddings \
                 {max_positions} ({})",
                dir.path().join(CONFIG_FILE).display()
            )));
        }
        let tokenizer = load_tokenizer(dir, &layout, vocab)?;
        let prompt_tokens = [
            prompt_length(&tokenizer, &layout, Role::Query)?,
            prompt_length(&tokenizer, &layout, Role::Document)?,
        ];
        let options = &builder.options;
        Ok(PackedTexts {
            tokenizer,
            layout,
            prompt_tokens,
            token_budget: options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: options.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
        })
    }

    /// The token ids the model sees for `text` as `role`: its prompt, then the text, with the
    /// tokenizer's special tokens, truncated.
    pub fn token_ids_as(&self, text: &str, role: Role) -> Result<Vec<u32>> {
        token_ids(&self.tokenizer, &self.layout, text, role)
    }

    /// Embeds `texts` as `role` with `encoder`: one finished row per text, in input order.
    pub fn embed(
        &self,
        encoder: &dyn PackedEncoder,
        texts: &[&str],
        role: Role,
    ) -> Result<Array2<f32>> {
        let dim = self.layout.dim();
        let mut out = Array2::zeros((texts.len(), dim));
        if texts.is_empty() {
            return Ok(out);
        }
        let encodings = encode_texts(&self.tokenizer, &self.layout, texts, role)?;
        let ids: Vec<&[u32]> = encodings.iter().map(Vec::as_slice).collect();
        let lengths: Vec<usize> = ids.iter().map(|row| row.len()).collect();
        let skip = self.prompt_tokens[role_index(role)];
        let plan = plan_batches(&lengths, self.token_budget, self.max_batch_size);
        let batches: Vec<Vec<&[u32]>> = plan
            .iter()
            .map(|b| b.indices.iter().map(|&i| ids[i]).collect())
            .collect();
        let width = encoder.hidden();
        let mut store = |n: usize, finished: Vec<Vec<f32>>| {
            for (row, &i) in finished.iter().zip(&plan[n].indices) {
                out.row_mut(i)
                    .iter_mut()
                    .zip(row)
                    .for_each(|(o, v)| *o = *v);
            }
        };
        if self.layout.mean_only() {
            // Pooled by the encoder (on a device, only the means come back).
            encoder.encode_mean_batches(&batches, skip, &mut |n, means| {
                let rows = batches[n].len();
                if means.len() != rows * width {
                    return Err(Error::model(format!(
                        "the encoder returned {} values for {rows} means of width {width}",
                        means.len()
                    )));
                }
                let finished = means
                    .chunks_exact(width.max(1))
                    .map(|mean| self.layout.finish_pooled(mean.to_vec()))
                    .collect();
                store(n, finished);
                Ok(())
            })?;
        } else {
            let output = self.output(skip);
            encoder.encode_batches(&batches, output, &mut |n, hidden| {
                store(n, self.finish(&batches[n], &hidden, width, output, skip)?);
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// What the encoder returns for a batch: cls alone needs only the first token's row
    /// (unless a prompt is left out of pooling: then cls takes the first token after it);
    /// anything else every token's.
    fn output(&self, skip: usize) -> Output {
        match self.layout.first_token_only() && skip == 0 {
            true => Output::FirstToken,
            false => Output::AllTokens,
        }
    }

    /// One finished embedding per row of a batch (pooled, projected, normalized as the
    /// layout says) from the encoder's `hidden` states (`width` wide, as `output` asks),
    /// leaving the first `skip` tokens out of pooling.
    fn finish(
        &self,
        rows: &[&[u32]],
        hidden: &[f32],
        width: usize,
        output: Output,
        skip: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let tokens = match output {
            Output::FirstToken => rows.len(),
            Output::AllTokens => rows.iter().map(|r| r.len()).sum(),
        };
        if hidden.len() != tokens * width {
            return Err(Error::model(format!(
                "the encoder returned {} values for {tokens} rows of width {width}",
                hidden.len()
            )));
        }
        if output == Output::FirstToken {
            return Ok(hidden
                .chunks_exact(width.max(1))
                .map(|first| self.layout.finish(first, 1, 0))
                .collect());
        }
        let mut start = 0;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let len = row.len();
            let states = &hidden[start * width..(start + len) * width];
            out.push(self.layout.finish(states, len, skip));
            start += len;
        }
        Ok(out)
    }

    /// [`Embedder::id`](super::Embedder::id) of a model of `family` in `dir` loaded in
    /// `precision`: `{family}-` and a hash of the model's files, `max_length`, the precision
    /// (unless f32) and the layout (unless mean pooling + normalization with no prompts, whose
    /// ids predate the layout's).
    pub fn id(
        &self,
        family: &str,
        dir: &Path,
        precision: Precision,
        tasks: &str,
    ) -> Option<String> {
        let length = (self.layout.max_seq_length as u64).to_le_bytes();
        let precision = match precision {
            Precision::F32 => "",
            other => other.as_str(),
        };
        let layout = match self.layout.is_mean_normalize() {
            true => String::new(),
            false => self.layout.describe(),
        };
        let extra = [
            &length[..],
            precision.as_bytes(),
            layout.as_bytes(),
            tasks.as_bytes(),
        ];
        model_id(family, dir, &extra)
    }
}
