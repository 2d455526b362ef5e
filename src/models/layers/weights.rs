//! The one weights loader: memory-mapped safetensors checkpoints, read as `f32`.
//!
//! [`Weights::open`] maps `model.safetensors`, or every shard that
//! `model.safetensors.index.json` names (each shard must be a plain file name inside the model
//! directory, see [`shard_paths`]), once, and parses the headers. Tensors are then read by
//! name: [`Weights::f32`] checks the stored shape against the one the caller expects (what
//! `config.json` implies) and converts `f32`, `f16` or `bf16` to `f32`; [`Weights::rows`] reads
//! only some rows of a matrix (an output head's `yes`/`no` rows, the embeddings of a batch's
//! tokens). Every error names the file and the tensor.
//!
//! Reading a tensor leaves its pages out of the process: once converted, the mapped range is
//! handed back to the kernel (`MADV_DONTNEED`, through the map of `simd::mmap`; the file stays
//! in the page cache), so loading a model holds its weights once (the converted copy), not
//! twice. Parsing the headers checks that each file is as long as its header says, so a
//! truncated download is an error at open time, never a read past the end of the map.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use safetensors::tensor::{Dtype, SafeTensors};

use super::kernels::{Linear, Weight};
use crate::simd::mmap::FileMap;
use crate::{Error, Result};

/// The single-file checkpoint name.
pub(crate) const SINGLE_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";

/// What a weight stored as a torch parametrization with LoRA factors ends in
/// ([`Weights::merge_lora`]); the name before it is the weight's.
const LORA_ORIGINAL: &str = ".parametrizations.weight.original";

/// The name of factor `f` (`"A"` or `"B"`) of the parametrized weight `base`.
fn lora_factor(base: &str, f: &str) -> String {
    format!("{base}.parametrizations.weight.0.lora_{f}")
}

/// One mapped file, or the tensors computed at load ([`Weights::merge_lora`]).
struct Mapped {
    path: PathBuf,
    map: Source,
    /// Offset of the data section (after the 8-byte length and the JSON header).
    data_start: usize,
}

/// A checkpoint file's bytes: the file mapped, or bytes computed at load.
enum Source {
    Mapped(FileMap),
    Owned(Vec<u8>),
}

impl Source {
    /// Hands a mapped range back to the kernel ([`FileMap::release`]); computed bytes stay.
    fn release(&self, offset: usize, len: usize) {
        if let Source::Mapped(map) = self {
            map.release(offset, len);
        }
    }
}

impl std::ops::Deref for Source {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Source::Mapped(map) => map,
            Source::Owned(bytes) => bytes,
        }
    }
}

/// Where one tensor is: its file, dtype, shape and byte range in the file's data section.
struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A memory-mapped safetensors checkpoint (one file or the shards of an index). `Send + Sync`:
/// reads take `&self`.
pub(crate) struct Weights {
    files: Vec<Mapped>,
    tensors: HashMap<String, Entry>,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field(
                "files",
                &self.files.iter().map(|m| &m.path).collect::<Vec<_>>(),
            )
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Weights {
    /// Maps the checkpoint in `dir`: `model.safetensors`, or the shards named by
    /// `model.safetensors.index.json`. Neither is an [`Error::Model`] naming the directory.
    pub fn open(dir: &Path) -> Result<Self> {
        let single = dir.join(SINGLE_FILE);
        let index = dir.join(INDEX_FILE);
        let paths = if single.is_file() {
            vec![single]
        } else if index.is_file() {
            shard_paths(dir, &index)?
        } else {
            return Err(Error::model(format!(
                "{}: no {SINGLE_FILE} (nor {INDEX_FILE})",
                dir.display()
            )));
        };
        Self::open_files(&paths)
    }

    /// Maps the given safetensors files. A tensor name found in two files is an error.
    pub fn open_files(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let (mapped, entries) = map_file(path, i)?;
            for (name, entry) in entries {
                if tensors.contains_key(&name) {
                    return Err(Error::model(format!(
                        "{}: tensor {name} is stored in two files",
                        path.display()
                    )));
                }
                tensors.insert(name, entry);
            }
            files.push(mapped);
        }
        Ok(Weights { files, tensors })
    }

    /// The same checkpoint with `prefix` put before every tensor name: how a checkpoint saved
    /// from a bare model (`embed_tokens.weight`, as Qwen3-Embedding's) is read by code that
    /// names the tensors of the model with its head (`model.embed_tokens.weight`).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.tensors = self
            .tensors
            .into_iter()
            .map(|(name, entry)| (format!("{prefix}{name}"), entry))
            .collect();
        self
    }

    /// Gives the stored tensor `from` the name `to`: how a checkpoint saved in another layout
    /// is read under the names the loaders know. A missing `from`, or a `to` that names
    /// another tensor, is an [`Error::Model`].
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        self.check_free(to)?;
        let entry = self.take(from)?;
        self.tensors.insert(to.to_string(), entry);
        Ok(())
    }

    /// Reads the stored tensor `from` as `parts.len()` tensors of equal size along its first
    /// axis, named `parts` in order, without a copy (each part is a byte range of the stored
    /// one): a fused projection `(3 · h, h)`, or its bias `(3 · h)`, read as three. A first
    /// axis that does not divide evenly, a format without a fixed element size, a missing
    /// `from` or a part's name that is taken is an [`Error::Model`].
    pub fn split_rows(&mut self, from: &str, parts: &[&str]) -> Result<()> {
        let e = self.entry(from)?;
        let n = parts.len();
        let rows = e.shape.first().copied().unwrap_or(0);
        let size = dtype_size(e.dtype).ok_or_else(|| self.unsupported(from, e, e.dtype))?;
        if n == 0 || rows == 0 || rows % n != 0 {
            return Err(Error::model(format!(
                "{}: tensor {from} has shape {:?}, which does not split into {n} equal parts \
                 along its first axis",
                self.path(e).display(),
                e.shape
            )));
        }
        let mut shape = e.shape.clone();
        shape[0] = rows / n;
        // The header's byte range is its shape's size (checked when the file was opened), so
        // the parts tile it.
        let bytes = element_count(&shape)? * size;
        for part in parts {
            self.check_free(part)?;
        }
        let whole = self.take(from)?;
        for (i, part) in parts.iter().enumerate() {
            let start = whole.start + i * bytes;
            let entry = Entry {
                file: whole.file,
                dtype: whole.dtype,
                shape: shape.clone(),
                start,
                end: start + bytes,
            };
            self.tensors.insert(part.to_string(), entry);
        }
        Ok(())
    }

    /// Reads the weights stored as torch parametrizations with LoRA factors (jina-embeddings-v3:
    /// `NAME.parametrizations.weight.original`, and every task's factors stacked in
    /// `NAME.parametrizations.weight.0.lora_A` / `lora_B`) as plain `NAME.weight` tensors:
    /// with `adapter` `Some(t)`, task `t`'s adapter merged in f32 (`scale` is `alpha / rank`),
    /// as jina's remote code computes the weight it runs:
    /// - an embedding table (a name with `embeddings.`) `(rows, dim)`:
    ///   `original + scale · lora_A[t] · lora_B[t]`, `lora_A` `(tasks, rows, rank)`, `lora_B`
    ///   `(tasks, rank, dim)`;
    /// - a linear layer `(out, in)`: `original + scale · lora_B[t] · lora_A[t]`, `lora_A`
    ///   `(tasks, rank, in)`, `lora_B` `(tasks, out, rank)`;
    ///
    /// with `None`, the original weights (no adapter). Every factor must be of rank `rank`
    /// (`lora_rank`, which the scale divides by). The merged tensors are held in memory until
    /// read. Returns how many weights were parametrized (0: none, nothing changes); a factor
    /// missing or of another shape, or `t` past the tasks, is an [`Error::Model`] naming the
    /// tensor.
    pub fn merge_lora(&mut self, adapter: Option<usize>, scale: f32, rank: usize) -> Result<usize> {
        let bases = self.lora_weights()?;
        if bases.is_empty() {
            return Ok(0);
        }
        let file = self.files.len();
        let mut bytes = Vec::new();
        let mut merged = Vec::with_capacity(bases.len());
        for &(ref base, (rows, cols)) in &bases {
            let name = format!("{base}{LORA_ORIGINAL}");
            let shape = vec![rows, cols];
            let mut w = self.f32(&name, &shape)?;
            if let Some(t) = adapter {
                let (left, right) = self.lora_task(base, t, (rows, cols), rank)?;
                w.par_chunks_mut(cols).enumerate().for_each(|(i, row)| {
                    for (k, &l) in left[i * rank..][..rank].iter().enumerate() {
                        row.iter_mut()
                            .zip(&right[k * cols..][..cols])
                            .for_each(|(v, &r)| *v += scale * l * r);
                    }
                });
            }
            let start = bytes.len();
            bytes.extend(w.iter().flat_map(|v| v.to_le_bytes()));
            merged.push((
                format!("{base}.weight"),
                Entry {
                    file,
                    dtype: Dtype::F32,
                    shape,
                    start,
                    end: bytes.len(),
                },
            ));
        }
        for (base, _) in &bases {
            self.take(&format!("{base}{LORA_ORIGINAL}"))?;
            for f in ["A", "B"] {
                self.tensors.remove(&lora_factor(base, f));
            }
        }
        for (name, _) in &merged {
            self.check_free(name)?;
        }
        let path = self
            .files
            .first()
            .map(|f| f.path.clone())
            .unwrap_or_default();
        self.files.push(Mapped {
            path,
            map: Source::Owned(bytes),
            data_start: 0,
        });
        self.tensors.extend(merged);
        Ok(bases.len())
    }

    /// Task `t`'s factors of the parametrized weight `base` `(rows, cols)` ([`merge_lora`]'s
    /// layout), as `(left (rows, rank), right (rank, cols))`, its correction `left · right`
    /// (unscaled): `lora_A[t] · lora_B[t]` for an embedding table (a name with `embeddings.`),
    /// `lora_B[t] · lora_A[t]` for a linear layer.
    ///
    /// [`merge_lora`]: Weights::merge_lora
    fn lora_task(
        &self,
        base: &str,
        t: usize,
        (rows, cols): (usize, usize),
        rank: usize,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let table = base.contains("embeddings.");
        let (a, b) = (lora_factor(base, "A"), lora_factor(base, "B"));
        let (a_shape, b_shape) = (self.shape(&a)?.to_vec(), self.shape(&b)?.to_vec());
        let tasks = a_shape.first().copied().unwrap_or(0);
        if t >= tasks || b_shape.first() != Some(&tasks) {
            let want = format!("task {t}'s factors (with lora_B {b_shape:?})");
            return Err(self.bad_factor(&a, &a_shape, &want));
        }
        let fits = match table {
            true => a_shape[1..] == [rows, rank] && b_shape[1..] == [rank, cols],
            false => a_shape[1..] == [rank, cols] && b_shape[1..] == [rows, rank],
        };
        if !fits {
            let want = match table {
                true => format!("(tasks, {rows}, {rank}) and (tasks, {rank}, {cols})"),
                false => format!("(tasks, {rank}, {cols}) and (tasks, {rows}, {rank})"),
            };
            let want = format!("with lora_B {b_shape:?}, factors of shapes {want}");
            return Err(self.bad_factor(&a, &a_shape, &want));
        }
        let (fa, fb) = (self.f32(&a, &a_shape)?, self.f32(&b, &b_shape)?);
        let (left, right) = match table {
            true => (fa, fb),
            false => (fb, fa),
        };
        Ok((
            left[t * rows * rank..][..rows * rank].to_vec(),
            right[t * rank * cols..][..rank * cols].to_vec(),
        ))
    }

    /// The difference between tasks `plus`' and `minus`' adapters of every parametrized weight
    /// ([`merge_lora`]'s layout), at `scale`, by the weight's name without
    /// `.parametrizations.weight.original`: `scale · (ΔW_plus - ΔW_minus)` as one [`LowRank`]
    /// of rank `2 · rank`, what a forward pass on the weights with `minus` merged adds to run
    /// as `plus`. Read before [`merge_lora`] drops the factors.
    ///
    /// [`merge_lora`]: Weights::merge_lora
    /// [`LowRank`]: super::lora::LowRank
    pub fn lora_difference(
        &self,
        (plus, minus): (usize, usize),
        scale: f32,
        rank: usize,
    ) -> Result<std::collections::HashMap<String, super::lora::LowRank>> {
        let bases = self.lora_weights()?;
        let mut out = std::collections::HashMap::with_capacity(bases.len());
        for (base, (rows, cols)) in bases {
            let (lp, rp) = self.lora_task(&base, plus, (rows, cols), rank)?;
            let (lm, rm) = self.lora_task(&base, minus, (rows, cols), rank)?;
            // [s · L_plus | -s · L_minus] · [R_plus ; R_minus].
            let left = lp
                .chunks_exact(rank)
                .zip(lm.chunks_exact(rank))
                .flat_map(|(p, m)| {
                    let p = p.iter().map(|v| scale * v);
                    p.chain(m.iter().map(|v| -scale * v)).collect::<Vec<_>>()
                })
                .collect();
            let low = super::lora::LowRank::new(rows, cols, 2 * rank, left, [rp, rm].concat());
            out.insert(base, low);
        }
        Ok(out)
    }

    /// Whether any weight is stored as a parametrization with LoRA factors
    /// ([`merge_lora`](Weights::merge_lora)).
    pub fn has_lora(&self) -> bool {
        self.names().any(|n| n.ends_with(LORA_ORIGINAL))
    }

    /// The parametrized weights, sorted by name: each weight's name (without
    /// `.parametrizations.weight.original`) and its `(rows, cols)`; one that is not a matrix is
    /// an [`Error::Model`].
    fn lora_weights(&self) -> Result<Vec<(String, (usize, usize))>> {
        let mut bases: Vec<&str> = self
            .names()
            .filter_map(|n| n.strip_suffix(LORA_ORIGINAL))
            .collect();
        bases.sort();
        bases
            .into_iter()
            .map(|base| {
                let name = format!("{base}{LORA_ORIGINAL}");
                match *self.shape(&name)? {
                    [rows, cols] => Ok((base.to_string(), (rows, cols))),
                    ref shape => Err(self.bad_factor(&name, shape, "a matrix")),
                }
            })
            .collect()
    }

    /// An [`Error::Model`] for a parametrized weight or LoRA factor `name` of `shape` that is
    /// not `want`.
    fn bad_factor(&self, name: &str, shape: &[usize], want: &str) -> Error {
        Error::model(format!(
            "{}: tensor {name} has shape {shape:?}, expected {want}",
            self.label()
        ))
    }

    /// An [`Error::Model`] when `name` is already a tensor's.
    fn check_free(&self, name: &str) -> Result<()> {
        match self.tensors.get(name) {
            Some(e) => Err(Error::model(format!(
                "{}: tensor {name} is stored under that name already",
                self.path(e).display()
            ))),
            None => Ok(()),
        }
    }

    /// Removes `name`'s entry.
    fn take(&mut self, name: &str) -> Result<Entry> {
        match self.tensors.remove(name) {
            Some(e) => Ok(e),
            None => Err(Error::model(format!(
                "{}: missing tensor {name}",
                self.label()
            ))),
        }
    }

    /// Whether `name` is stored in a float format [`Weights::f32`] reads (an integer buffer
    /// such as `position_ids` is not; an unknown name is not either).
    #[cfg(feature = "candle")]
    pub fn is_float(&self, name: &str) -> bool {
        self.tensors
            .get(name)
            .is_some_and(|e| dtype_size(e.dtype).is_some())
    }

    /// The names of every tensor, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Whether the checkpoint has a tensor called `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The stored shape of `name`.
    pub fn shape(&self, name: &str) -> Result<&[usize]> {
        self.entry(name).map(|e| e.shape.as_slice())
    }

    /// The `config.json` beside the checkpoint's files (they are all in the model directory),
    /// for errors about a size it gives.
    pub fn config_path(&self) -> PathBuf {
        match self.files.first() {
            Some(f) => f.path.with_file_name("config.json"),
            None => PathBuf::from("config.json"),
        }
    }

    /// Checks a size that `config.json` gives (`key` is `value`) against axis `axis` of the
    /// stored tensor `name`, before anything is allocated with it: a size from a config file
    /// must never size an allocation that the weights do not back (a `hidden_size` of 10^9
    /// would abort the process). A mismatch, or a tensor without that axis, is an
    /// [`Error::Model`] naming `config.json`, the key, the tensor and its file.
    pub fn check_config_size(
        &self,
        key: &str,
        value: usize,
        name: &str,
        axis: usize,
    ) -> Result<()> {
        let e = self.entry(name)?;
        if e.shape.get(axis) == Some(&value) {
            return Ok(());
        }
        Err(Error::model(format!(
            "{}: {key} is {value}, but tensor {name} in {} has shape {:?} (axis {axis} should \
             be {key})",
            self.config_path().display(),
            self.path(e).display(),
            e.shape
        )))
    }

    /// Checks that the checkpoint has the tensor `name` that `config.json`'s `key` (`value`)
    /// implies, e.g. the last layer `num_hidden_layers` announces: an [`Error::Model`] naming
    /// `config.json` and the key otherwise.
    pub fn check_config_tensor(&self, key: &str, value: usize, name: &str) -> Result<()> {
        if self.has(name) {
            return Ok(());
        }
        Err(Error::model(format!(
            "{}: {key} is {value}, but there is no tensor {name} in {}",
            self.config_path().display(),
            self.label()
        )))
    }

    /// One linear layer of `inputs` inputs stacked from the `{prefix}{part}.weight` of each
    /// `(part, rows)` of `parts`, in order (fused projections: `[q | k | v]`, `[gate | up]`),
    /// with their `{prefix}{part}.bias` when `bias` (zeros otherwise).
    pub fn stacked_linear(
        &self,
        prefix: &str,
        parts: &[(&str, usize)],
        inputs: usize,
        bias: bool,
    ) -> Result<Linear> {
        let outputs = parts.iter().map(|p| p.1).sum();
        let mut weight = Vec::with_capacity(outputs * inputs);
        let mut biases = Vec::with_capacity(outputs);
        for (part, rows) in parts {
            weight.extend(self.f32(&format!("{prefix}{part}.weight"), &[*rows, inputs])?);
            match bias {
                true => biases.extend(self.f32(&format!("{prefix}{part}.bias"), &[*rows])?),
                false => biases.extend(std::iter::repeat_n(0.0, *rows)),
            }
        }
        Ok(Linear {
            weight: Weight::F32(weight),
            bias: biases,
            inputs,
            outputs,
        })
    }

    /// Reads `name` as `f32` after checking that its shape is `expected`. The shape is checked
    /// before the result is allocated, so a wrong size from `config.json` is an error, never an
    /// allocation the file does not back.
    pub fn f32(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
        self.expect_shape(name, expected)?;
        let mut out = vec![0.0; element_count(expected)?];
        self.read_into(name, expected, &mut out)?;
        Ok(out)
    }

    /// Checks that `name` is stored with the shape `expected` (what `config.json` implies):
    /// an [`Error::Model`] naming the file, the tensor and both shapes otherwise.
    pub fn expect_shape(&self, name: &str, expected: &[usize]) -> Result<()> {
        let e = self.entry(name)?;
        if e.shape != expected {
            return Err(Error::model(format!(
                "{}: tensor {name} has shape {:?}, but config.json implies {expected:?}",
                self.path(e).display(),
                e.shape
            )));
        }
        Ok(())
    }

    /// Reads `name` as `f32` into `out` (whose length must be the product of `expected`)
    /// after checking that its shape is `expected`; for weights stacked into one buffer (fused
    /// projections) without an intermediate copy.
    pub fn read_into(&self, name: &str, expected: &[usize], out: &mut [f32]) -> Result<()> {
        self.expect_shape(name, expected)?;
        let e = self.entry(name)?;
        if out.len() != element_count(expected)? {
            return Err(Error::model(format!(
                "reading {name}: a buffer of {} values for shape {expected:?}",
                out.len()
            )));
        }
        let bytes = self.bytes(name, e)?;
        let size = dtype_size(e.dtype).ok_or_else(|| self.unsupported(name, e, e.dtype))?;
        // Large tensors (an output head, a fused projection) convert in parallel chunks.
        const CHUNK: usize = 1 << 18;
        out.par_chunks_mut(CHUNK)
            .zip(bytes.par_chunks(CHUNK * size))
            .try_for_each(|(out, bytes)| convert(bytes, e.dtype, out))
            .map_err(|dtype| self.unsupported(name, e, dtype))?;
        self.release(e);
        Ok(())
    }

    /// Reads the 1-D integer tensor `name` (I64, I32 or U32, little-endian) of `len` values as
    /// indices (a model2vec `mapping`). A negative value, another shape or dtype is an
    /// [`Error::Model`] naming the file and the tensor.
    pub fn indices(&self, name: &str, len: usize) -> Result<Vec<usize>> {
        self.expect_shape(name, &[len])?;
        let e = self.entry(name)?;
        let bytes = self.bytes(name, e)?;
        let negative = || {
            Error::model(format!(
                "{}: tensor {name} holds a negative index",
                self.path(e).display()
            ))
        };
        let out: Result<Vec<usize>> = match e.dtype {
            Dtype::I64 => bytes
                .chunks_exact(8)
                .map(|b| {
                    let v = i64::from_le_bytes(b.try_into().expect("8 bytes"));
                    usize::try_from(v).map_err(|_| negative())
                })
                .collect(),
            Dtype::I32 => bytes
                .chunks_exact(4)
                .map(|b| {
                    let v = i32::from_le_bytes(b.try_into().expect("4 bytes"));
                    usize::try_from(v).map_err(|_| negative())
                })
                .collect(),
            Dtype::U32 => Ok(bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
                .collect()),
            other => Err(Error::model(format!(
                "{}: tensor {name} is stored as {other:?}; indices are read from I64, I32 or \
                 U32",
                self.path(e).display()
            ))),
        };
        out
    }

    /// Reads rows `ids` of the 2-D tensor `name` (`(n, width)`), only those rows, as a
    /// `(ids.len(), width)` row-major `f32` matrix. A row id outside the matrix is an
    /// [`Error::Model`] saying that the tokenizer does not belong to these weights.
    pub fn rows(&self, name: &str, width: usize, ids: &[u32]) -> Result<Vec<f32>> {
        let e = self.entry(name)?;
        if e.shape.len() != 2 || e.shape[1] != width {
            return Err(self.not_rows_of(name, e, width));
        }
        let mut out = vec![0.0; element_count(&[ids.len(), width])?];
        self.rows_into(name, width, ids, &mut out)?;
        Ok(out)
    }

    /// [`Weights::rows`] into `out` (`ids.len() * width` values). The pages read stay mapped
    /// (rows are read again and again, e.g. embeddings).
    pub fn rows_into(&self, name: &str, width: usize, ids: &[u32], out: &mut [f32]) -> Result<()> {
        let e = self.entry(name)?;
        if e.shape.len() != 2 || e.shape[1] != width {
            return Err(self.not_rows_of(name, e, width));
        }
        if Some(out.len()) != ids.len().checked_mul(width) {
            return Err(Error::model(format!(
                "reading rows of {name}: a buffer of {} values for {} rows of {width}",
                out.len(),
                ids.len()
            )));
        }
        let bytes = self.bytes(name, e)?;
        let row_bytes =
            width * dtype_size(e.dtype).ok_or_else(|| self.unsupported(name, e, e.dtype))?;
        for (&id, row) in ids.iter().zip(out.chunks_exact_mut(width.max(1))) {
            let id = id as usize;
            if id >= e.shape[0] {
                return Err(Error::model(format!(
                    "{}: token id {id} is outside {name}, which has {} rows: the tokenizer \
                     does not belong to these weights",
                    self.path(e).display(),
                    e.shape[0]
                )));
            }
            let src = &bytes[id * row_bytes..(id + 1) * row_bytes];
            convert(src, e.dtype, row).map_err(|dtype| self.unsupported(name, e, dtype))?;
        }
        Ok(())
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::model(format!("{}: missing tensor {name}", self.label())))
    }

    fn not_rows_of(&self, name: &str, e: &Entry, width: usize) -> Error {
        Error::model(format!(
            "{}: tensor {name} has shape {:?}, expected (rows, {width})",
            self.path(e).display(),
            e.shape
        ))
    }

    fn path(&self, e: &Entry) -> &Path {
        &self.files[e.file].path
    }

    /// The files, for errors about a tensor that is in none of them.
    fn label(&self) -> String {
        self.files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The stored bytes of a tensor (the header check at open time keeps them in the file).
    fn bytes(&self, name: &str, e: &Entry) -> Result<&[u8]> {
        let f = &self.files[e.file];
        f.map
            .get(f.data_start + e.start..f.data_start + e.end)
            .ok_or_else(|| Error::model(format!("{}: {name} is truncated", f.path.display())))
    }

    fn unsupported(&self, name: &str, e: &Entry, dtype: Dtype) -> Error {
        Error::model(format!(
            "{}: tensor {name} is stored as {dtype:?}; only F32, F16 and BF16 can be read",
            self.path(e).display()
        ))
    }

    /// Hands the pages of a tensor that was just converted back to the kernel.
    fn release(&self, e: &Entry) {
        let f = &self.files[e.file];
        f.map.release(f.data_start + e.start, e.end - e.start);
    }
}

/// Maps `path` and lists its tensors (`file` is its index among the checkpoint's files).
fn map_file(path: &Path, file: usize) -> Result<(Mapped, Vec<(String, Entry)>)> {
    let handle = File::open(path).map_err(|e| Error::io(path, e))?;
    // Read-only; as with every memory-mapped model file, it must not be truncated or rewritten
    // while mapped. The header check below makes sure that the file is as long as its header
    // says when it is opened.
    let map = FileMap::open(&handle).map_err(|e| Error::io(path, e))?;
    let (header, metadata) = SafeTensors::read_metadata(&map).map_err(|e| {
        Error::model_caused(
            format!(
                "{}: not a complete safetensors file (truncated, or another format)",
                path.display()
            ),
            e,
        )
    })?;
    let entries = metadata
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let entry = Entry {
                file,
                dtype: info.dtype,
                shape: info.shape.clone(),
                start: info.data_offsets.0,
                end: info.data_offsets.1,
            };
            (name, entry)
        })
        .collect();
    let mapped = Mapped {
        path: path.to_path_buf(),
        map: Source::Mapped(map),
        data_start: 8 + header,
    };
    Ok((mapped, entries))
}

/// The number of values of a tensor of shape `shape`; a product that overflows `usize` (sizes
/// from a hostile `config.json`) is an [`Error::Model`], never a wrapped size or a panic.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::model(format!("a tensor of shape {shape:?} has too many values")))
}

/// Bytes per element of the dtypes [`convert`] reads.
fn dtype_size(dtype: Dtype) -> Option<usize> {
    match dtype {
        Dtype::F32 => Some(4),
        Dtype::F16 | Dtype::BF16 => Some(2),
        _ => None,
    }
}

/// Little-endian `bytes` of `dtype` to `out` (as many values as `out` holds; the callers size
/// `bytes` to match). Errors with the dtype when it is not a float format read here.
fn convert(bytes: &[u8], dtype: Dtype, out: &mut [f32]) -> std::result::Result<(), Dtype> {
    match dtype {
        Dtype::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        Dtype::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        Dtype::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                // bf16 is the top half of an f32.
                *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        other => return Err(other),
    }
    Ok(())
}

/// The shard files a sharded checkpoint's `model.safetensors.index.json` names, each once, in
/// name order. A name that is not a plain file name inside `dir` (a path separator, `..`, an
/// absolute path) is an [`Error::Model`]: an index cannot make the loader read outside the model
/// directory.
pub(crate) fn shard_paths(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index).map_err(|e| Error::io(index, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::parse(index.display().to_string(), e))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::parse(index.display().to_string(), "no \"weight_map\" object"))?;
    let mut names: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let plain = Path::new(name).file_name().is_some_and(|f| f == name)
                && !name.contains(['/', '\\'])
                && name != ".."
                && name != ".";
            if plain {
                Ok(dir.join(name))
            } else {
                Err(Error::model(format!(
                    "{}: shard {name:?} is not a file name inside the model directory",
                    index.display()
                )))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rerank-weights-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes `(name, dtype, shape, little-endian bytes)` tensors to `path`.
    fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::tensor::serialize_to_file(views, None, path).unwrap();
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_f32_f16_and_bf16_as_f32_and_selected_rows() {
        let dir = temp_dir("dtypes");
        let values: Vec<f32> = vec![1.0, -2.5, 0.125, 3.0, 65280.0, -0.0];
        let f16: Vec<u8> = values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let bf16: Vec<u8> = values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        write(
            &dir.join(SINGLE_FILE),
            &[
                ("a", Dtype::F32, vec![3, 2], f32_bytes(&values)),
                ("b", Dtype::F16, vec![3, 2], f16),
                ("c", Dtype::BF16, vec![3, 2], bf16),
                ("i", Dtype::I64, vec![1], vec![0; 8]),
            ],
        );
        let w = Weights::open(&dir).unwrap();
        for name in ["a", "b", "c"] {
            assert!(w.has(name));
            assert_eq!(w.shape(name).unwrap(), &[3, 2]);
            // All six values are exact in every format.
            assert_eq!(w.f32(name, &[3, 2]).unwrap(), values, "{name}");
            assert_eq!(
                w.rows(name, 2, &[2, 0, 2]).unwrap(),
                [65280.0, -0.0, 1.0, -2.5, 65280.0, -0.0],
                "{name}"
            );
            // Reading again after the pages were released gives the same values.
            assert_eq!(w.f32(name, &[3, 2]).unwrap(), values, "{name}");
        }
        let mut fused = vec![0.0; 12];
        w.read_into("a", &[3, 2], &mut fused[..6]).unwrap();
        w.read_into("c", &[3, 2], &mut fused[6..]).unwrap();
        assert_eq!(fused, [values.clone(), values.clone()].concat());
        let e = w.f32("i", &[1]).unwrap_err().to_string();
        assert!(e.contains("I64") && e.contains(SINGLE_FILE), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_the_tensor() {
        let dir = temp_dir("errors");
        let path = dir.join(SINGLE_FILE);
        write(
            &path,
            &[("m", Dtype::F32, vec![2, 2], f32_bytes(&[1.0; 4]))],
        );
        let w = Weights::open(&dir).unwrap();
        let e = w.f32("nope", &[2]).unwrap_err();
        assert!(matches!(e, Error::Model { .. }));
        let e = e.to_string();
        assert!(
            e.contains("missing tensor nope") && e.contains(SINGLE_FILE),
            "{e}"
        );
        let e = w.f32("m", &[4, 1]).unwrap_err().to_string();
        assert!(
            e.contains("tensor m has shape [2, 2]") && e.contains("[4, 1]"),
            "{e}"
        );
        let e = w.rows("m", 3, &[0]).unwrap_err().to_string();
        assert!(e.contains("expected (rows, 3)"), "{e}");
        let e = w.rows("m", 2, &[2]).unwrap_err().to_string();
        assert!(e.contains("token id 2 is outside m"), "{e}");
        drop(w);

        // A truncated file is refused when it is opened.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let e = Weights::open(&dir).unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "the cause is kept");
        let e = e.to_string();
        assert!(
            e.contains("not a complete safetensors file") && e.contains(SINGLE_FILE),
            "{e}"
        );
        std::fs::write(&path, b"garbage").unwrap();
        assert!(Weights::open(&dir).is_err());

        std::fs::remove_file(&path).unwrap();
        let e = Weights::open(&dir).unwrap_err().to_string();
        assert!(e.contains("no model.safetensors"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes_are_checked_before_anything_is_allocated() {
        let dir = temp_dir("sizes");
        write(
            &dir.join(SINGLE_FILE),
            &[("m", Dtype::F32, vec![2, 2], f32_bytes(&[1.0; 4]))],
        );
        let w = Weights::open(&dir).unwrap();
        // Shapes whose allocation would abort (2^60 values) or overflow (2^124): errors.
        for expected in [vec![1usize << 30, 1 << 30], vec![1 << 62, 1 << 62]] {
            let e = w.f32("m", &expected).unwrap_err().to_string();
            assert!(e.contains("tensor m has shape [2, 2]"), "{e}");
        }
        assert!(w.rows("m", 1 << 62, &[0, 1]).is_err());
        assert!(element_count(&[1 << 62, 8]).is_err());
        assert_eq!(element_count(&[3, 4, 5]).unwrap(), 60);
        assert_eq!(element_count(&[]).unwrap(), 1);
        // A config size is compared with the header, and the error names config.json, the
        // key, the tensor and its file.
        w.check_config_size("hidden_size", 2, "m", 1).unwrap();
        let e = w
            .check_config_size("hidden_size", 1_000_000_000, "m", 1)
            .unwrap_err();
        assert!(matches!(e, Error::Model { .. }));
        let e = e.to_string();
        assert!(
            e.contains("config.json: hidden_size is 1000000000")
                && e.contains("tensor m in")
                && e.contains(SINGLE_FILE),
            "{e}"
        );
        assert!(w.check_config_size("k", 2, "m", 2).is_err(), "no such axis");
        let e = w
            .check_config_tensor("num_hidden_layers", 9, "layer.8")
            .unwrap_err();
        assert!(e.to_string().contains("num_hidden_layers is 9"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn renamed_and_split_tensors_read_as_the_stored_rows() {
        let dir = temp_dir("views");
        // A fused (3 · 2, 2) projection, its bias, and a bf16 one.
        let fused: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
        let bias = [0.5f32, -1.0, 2.0, 4.0, -8.0, 16.0];
        let bf16: Vec<u8> = fused
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        write(
            &dir.join(SINGLE_FILE),
            &[
                ("qkv.weight", Dtype::F32, vec![6, 2], f32_bytes(&fused)),
                ("qkv.bias", Dtype::F32, vec![6], f32_bytes(&bias)),
                ("half.weight", Dtype::BF16, vec![6, 2], bf16),
                ("norm", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0])),
                ("odd", Dtype::F32, vec![5], f32_bytes(&[0.0; 5])),
                ("i", Dtype::I64, vec![3], vec![0; 24]),
            ],
        );
        let mut w = Weights::open(&dir).unwrap();
        w.split_rows("qkv.weight", &["q.weight", "k.weight", "v.weight"])
            .unwrap();
        w.split_rows("qkv.bias", &["q.bias", "k.bias", "v.bias"])
            .unwrap();
        w.split_rows("half.weight", &["h0", "h1"]).unwrap();
        w.rename("norm", "ln.weight").unwrap();
        assert!(!w.has("qkv.weight") && !w.has("qkv.bias") && !w.has("norm"));
        for (i, part) in ["q", "k", "v"].iter().enumerate() {
            let weight = w.f32(&format!("{part}.weight"), &[2, 2]).unwrap();
            assert_eq!(weight, fused[i * 4..(i + 1) * 4], "{part}");
            let b = w.f32(&format!("{part}.bias"), &[2]).unwrap();
            assert_eq!(b, bias[i * 2..(i + 1) * 2], "{part}");
        }
        // Rows of a part are the stored rows; a bf16 part converts as the whole would.
        assert_eq!(w.rows("k.weight", 2, &[1]).unwrap(), fused[6..8]);
        assert_eq!(w.f32("h1", &[3, 2]).unwrap(), fused[6..]);
        assert_eq!(w.f32("ln.weight", &[2]).unwrap(), [1.0, 2.0]);
        // What cannot be split, or renamed, is refused with the tensor's name.
        let e = w.split_rows("odd", &["a", "b"]).unwrap_err().to_string();
        assert!(e.contains("odd") && e.contains("2 equal parts"), "{e}");
        let e = w.split_rows("i", &["a", "b", "c"]).unwrap_err().to_string();
        assert!(e.contains("I64"), "{e}");
        let e = w.rename("q.weight", "k.weight").unwrap_err().to_string();
        assert!(e.contains("k.weight") && e.contains("already"), "{e}");
        let e = w.rename("gone", "x").unwrap_err().to_string();
        assert!(e.contains("missing tensor gone"), "{e}");
        let e = w
            .split_rows("ln.weight", &["q.bias", "z"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("q.bias") && e.contains("already"), "{e}");
        // A refused change leaves the tensors as they were.
        assert!(w.has("odd") && w.has("ln.weight") && !w.has("z"));
        assert!(w.has("q.weight") && w.has("k.weight") && w.has("q.bias"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sharded_checkpoints_are_read_through_their_index() {
        let dir = temp_dir("sharded");
        write(
            &dir.join("a.safetensors"),
            &[("x", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0]))],
        );
        write(
            &dir.join("b.safetensors"),
            &[("y", Dtype::F32, vec![1], f32_bytes(&[3.0]))],
        );
        let index = serde_json::json!({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}});
        std::fs::write(dir.join(INDEX_FILE), index.to_string()).unwrap();
        let w = Weights::open(&dir).unwrap();
        assert_eq!(w.f32("x", &[2]).unwrap(), [1.0, 2.0]);
        assert_eq!(w.f32("y", &[1]).unwrap(), [3.0]);
        // The same tensor in two shards is refused.
        write(
            &dir.join("b.safetensors"),
            &[("x", Dtype::F32, vec![1], f32_bytes(&[3.0]))],
        );
        let e = Weights::open(&dir).unwrap_err().to_string();
        assert!(e.contains("stored in two files"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shard_names_must_stay_inside_the_model_directory() {
        let dir = temp_dir("shards");
        let index = dir.join(INDEX_FILE);
        let write = |names: &[&str]| {
            let map: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("t{i}"), serde_json::Value::from(*n)))
                .collect();
            std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).unwrap();
        };
        write(&["b.safetensors", "a.safetensors", "a.safetensors"]);
        let paths = shard_paths(&dir, &index).unwrap();
        assert_eq!(
            paths,
            [dir.join("a.safetensors"), dir.join("b.safetensors")]
        );
        for bad in [
            "../x.safetensors",
            "/etc/passwd",
            "sub/x.safetensors",
            "..",
            "a\\..\\b",
        ] {
            write(&["a.safetensors", bad]);
            let e = shard_paths(&dir, &index).unwrap_err().to_string();
            assert!(
                e.contains("is not a file name inside the model directory"),
                "{bad}: {e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A checkpoint of one linear layer `(2, 3)` and one embedding table `(3, 2)` stored as
    /// parametrizations with two tasks' rank-1 factors (jina-embeddings-v3's layout).
    fn parametrized(dir: &Path, rank: usize) {
        let p = |n: &str, f: &str| format!("{n}.parametrizations.weight.{f}");
        let linear: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let table: Vec<f32> = vec![0.5, -0.5, 1.5, -1.5, 2.5, -2.5];
        // Linear: A (tasks, rank, in), B (tasks, out, rank); task 1's A = [1, 0, -1], B = [2, 3].
        let lin_a: Vec<f32> = [vec![9.0; 3 * rank], vec![1.0, 0.0, -1.0]].concat();
        let lin_b: Vec<f32> = [vec![9.0; 2 * rank], vec![2.0, 3.0]].concat();
        // Table: A (tasks, rows, rank), B (tasks, rank, dim); task 1's A = [1, 2, 3], B = [1, -1].
        let tab_a: Vec<f32> = [vec![9.0; 3], vec![1.0, 2.0, 3.0]].concat();
        let tab_b: Vec<f32> = [vec![9.0; 2], vec![1.0, -1.0]].concat();
        let (lin, tab) = ("encoder.layers.0.mlp.fc1", "embeddings.word_embeddings");
        write(
            &dir.join(SINGLE_FILE),
            &[
                (
                    &p(lin, "original"),
                    Dtype::F32,
                    vec![2, 3],
                    f32_bytes(&linear),
                ),
                (
                    &p(lin, "0.lora_A"),
                    Dtype::F32,
                    vec![2, rank, 3],
                    f32_bytes(&lin_a),
                ),
                (
                    &p(lin, "0.lora_B"),
                    Dtype::F32,
                    vec![2, 2, rank],
                    f32_bytes(&lin_b),
                ),
                (
                    &p(tab, "original"),
                    Dtype::F32,
                    vec![3, 2],
                    f32_bytes(&table),
                ),
                (
                    &p(tab, "0.lora_A"),
                    Dtype::F32,
                    vec![2, 3, 1],
                    f32_bytes(&tab_a),
                ),
                (
                    &p(tab, "0.lora_B"),
                    Dtype::F32,
                    vec![2, 1, 2],
                    f32_bytes(&tab_b),
                ),
                (
                    "encoder.layers.0.mlp.fc1.bias",
                    Dtype::F32,
                    vec![2],
                    f32_bytes(&[0.0; 2]),
                ),
            ],
        );
    }

    #[test]
    fn lora_adapters_merge_into_their_weights_as_jinas_code_computes_them() {
        let dir = temp_dir("lora");
        parametrized(&dir, 1);
        let (lin, tab) = (
            "encoder.layers.0.mlp.fc1.weight",
            "embeddings.word_embeddings.weight",
        );
        // Task 1 at scale 0.5: linear + 0.5 · B·A, table + 0.5 · A·B.
        let mut w = Weights::open(&dir).unwrap();
        assert_eq!(w.merge_lora(Some(1), 0.5, 1).unwrap(), 2);
        let ba = [2.0, 0.0, -2.0, 3.0, 0.0, -3.0];
        let want: Vec<f32> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .zip(ba)
            .map(|(w, d)| w + 0.5 * d)
            .collect();
        assert_eq!(w.f32(lin, &[2, 3]).unwrap(), want);
        let ab = [1.0, -1.0, 2.0, -2.0, 3.0, -3.0];
        let want: Vec<f32> = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5]
            .iter()
            .zip(ab)
            .map(|(w, d)| w + 0.5 * d)
            .collect();
        assert_eq!(w.f32(tab, &[3, 2]).unwrap(), want);
        // The factors are gone; the bias is as it was.
        assert!(!w.names().any(|n| n.contains("parametrizations")));
        assert!(w.has("encoder.layers.0.mlp.fc1.bias"));
        // No adapter: the original weights.
        let mut w = Weights::open(&dir).unwrap();
        w.merge_lora(None, 0.5, 1).unwrap();
        assert_eq!(w.f32(lin, &[2, 3]).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // Task 0 merged plus the difference of task 1's adapter and task 0's is task 1 merged.
        let raw = Weights::open(&dir).unwrap();
        let diff = raw.lora_difference((1, 0), 0.5, 1).unwrap();
        let mut base = Weights::open(&dir).unwrap();
        base.merge_lora(Some(0), 0.5, 1).unwrap();
        let mut want = Weights::open(&dir).unwrap();
        want.merge_lora(Some(1), 0.5, 1).unwrap();
        let c = &diff["encoder.layers.0.mlp.fc1"];
        assert_eq!((c.outputs, c.inputs, c.rank), (2, 3, 2));
        let eye = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let mut got = vec![0.0; 6];
        // Row r of x · ΔWᵀ for x = I is column r of ΔW: the corrected weight, transposed.
        c.add_product(
            &eye,
            3,
            &mut got,
            crate::models::layers::kernels::Then::Nothing,
        );
        let merged0 = base.f32(lin, &[2, 3]).unwrap();
        let merged1 = want.f32(lin, &[2, 3]).unwrap();
        for o in 0..2 {
            for i in 0..3 {
                let v = merged0[o * 3 + i] + got[i * 2 + o];
                assert!((v - merged1[o * 3 + i]).abs() < 1e-6, "({o}, {i})");
            }
        }
        let t = &diff["embeddings.word_embeddings"];
        let (mut row, table0) = (vec![0.0; 2], base.f32(tab, &[3, 2]).unwrap());
        row.copy_from_slice(&table0[4..6]);
        t.add_row(2, &mut row);
        assert_eq!(row, want.f32(tab, &[3, 2]).unwrap()[4..6]);
        // A task past the stacked ones, or factors of another rank, are refused by name.
        let e = Weights::open(&dir).unwrap().merge_lora(Some(2), 0.5, 1);
        assert!(e.unwrap_err().to_string().contains("lora_A"));
        let e = Weights::open(&dir).unwrap().merge_lora(Some(0), 0.5, 4);
        let e = e.unwrap_err().to_string();
        assert!(e.contains("lora_A") && e.contains('4'), "{e}");
        // A checkpoint without parametrizations is left as it is.
        std::fs::remove_dir_all(&dir).unwrap();
        let dir = temp_dir("lora-none");
        write(
            &dir.join(SINGLE_FILE),
            &[("a", Dtype::F32, vec![1], f32_bytes(&[1.0]))],
        );
        let mut w = Weights::open(&dir).unwrap();
        assert_eq!(w.merge_lora(Some(0), 1.0, 4).unwrap(), 0);
        assert!(w.has("a"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
