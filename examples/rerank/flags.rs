//! The flags several subcommands share, defined once so that they are spelled, explained and
//! defaulted the same way everywhere (`tests/it/cli_help.rs` checks the `--help` of every
//! subcommand against this vocabulary):
//!
//! - [`LogArgs`]: `--log-level`, on every subcommand;
//! - [`ModelArgs`]: `--threads`, `--precision` and `--device`, on every subcommand that loads a
//!   model on the crate's encoder and reranker paths;
//! - [`PrecisionArg`]: the values of `--precision` this build can run;
//! - [`STDIN`]: `-`, which every JSONL input flag takes for stdin.
//!
//! Model flags are named after the model's role, never `--model` (which meant the embedder in
//! five commands, the reranker in one and the chat model in another): `--embedder`,
//! `--reranker` and `--generator-model`. The old spellings stay as hidden aliases.

use std::path::Path;

use crate::CliResult;

/// The path that names stdin on every JSONL input flag (`--input -`, `--corpus -`).
pub const STDIN: &str = "-";

/// Whether the input `path` is [`STDIN`].
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == STDIN
}

/// Whether the output `path` is `-`, stdout (`ingest --out -`).
#[cfg_attr(not(feature = "pdf"), allow(dead_code))]
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == STDIN
}

/// `--log-level`: where `tracing` events go (stderr) and from which level.
#[derive(clap::Args, Debug, Clone)]
pub struct LogArgs {
    /// Log level for stderr: error, warn, info, debug or trace (or a filter such as
    /// `rerank=debug`).
    // Global: `cache stats --log-level debug` takes it after the action too.
    #[arg(long, default_value = "warn", global = true)]
    pub log_level: String,
}

impl LogArgs {
    /// Starts the logging these flags ask for (once per process).
    pub fn init(&self) -> CliResult {
        crate::query::init_logging(&self.log_level)
    }
}

/// `--device`'s help: the devices this build runs models on (only those).
const DEVICE_HELP: &str = match (
    cfg!(feature = "candle"),
    cfg!(feature = "cuda"),
    cfg!(feature = "metal"),
) {
    (false, _, _) => {
        "Where the models run: cpu (the crate's own kernels; this build has no candle engine)"
    }
    (true, false, false) => {
        "Where the models run: cpu (the crate's own kernels) or candle-cpu (candle's CPU backend; \
         cuda and metal need rerank built with those features)"
    }
    (true, true, false) => {
        "Where the models run: cpu (the crate's own kernels), candle-cpu (candle's CPU backend) or \
         cuda[:N] (an NVIDIA GPU through candle)"
    }
    (true, false, true) => {
        "Where the models run: cpu (the crate's own kernels), candle-cpu (candle's CPU backend) or \
         metal[:N] (an Apple GPU through candle)"
    }
    (true, true, true) => {
        "Where the models run: cpu (the crate's own kernels), candle-cpu (candle's CPU backend), \
         cuda[:N] or metal[:N] (a GPU through candle)"
    }
};

/// `--threads`, `--precision` and `--device`: how a subcommand's models run (its embedder and
/// its reranker alike).
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Threads for the models (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Number format of the models' linear layers.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    #[arg(long, help = DEVICE_HELP, value_name = "DEVICE", default_value = "cpu",
          value_parser = parse_device)]
    pub device: String,
}

/// Checks a `--device` value as the library reads it, and that this build can run it: a
/// device this build has no engine for is refused while the flags are read.
#[cfg(feature = "models")]
fn parse_device(s: &str) -> Result<String, String> {
    let device: rerank::models::Device = s.parse().map_err(|e| format!("{e}"))?;
    device.check_available().map_err(|e| format!("{e}"))?;
    Ok(device.to_string())
}

/// Without the `models` feature no model runs: only `cpu`, the default, is taken.
#[cfg(not(feature = "models"))]
fn parse_device(s: &str) -> Result<String, String> {
    match s.trim().eq_ignore_ascii_case("cpu") {
        true => Ok("cpu".into()),
        false => Err(format!(
            "device {s:?}: this build runs no model (feature `models`)"
        )),
    }
}

impl ModelArgs {
    /// Whether the models run through candle (any device but `cpu`).
    fn uses_candle(&self) -> bool {
        self.device != "cpu"
    }

    /// Refuses a `--precision` that `--device` cannot run, before anything is loaded:
    /// int8 is the crate's own CPU kernels', f16 candle's.
    pub fn check(&self) -> CliResult {
        match (self.precision, self.uses_candle()) {
            (PrecisionArg::Int8, true) => Err(format!(
                "--precision int8 runs on --device cpu only (the crate's own kernels); on \
                 --device {} use f32, f16 or bf16",
                self.device
            )
            .into()),
            (PrecisionArg::F16, false) => Err("--precision f16 runs through candle only: add \
                 --device candle-cpu (or a GPU: cuda, metal), or use f32, int8 or bf16 on cpu"
                .into()),
            _ => Ok(()),
        }
    }

    /// The library's model options for these flags (checked by [`ModelArgs::check`]).
    #[cfg(feature = "models")]
    pub fn options(&self) -> CliResult<rerank::models::ModelOptions> {
        self.check()?;
        Ok(rerank::models::ModelOptions {
            threads: self.threads,
            precision: self.precision.into(),
            device: self.device.parse()?,
            ..rerank::models::ModelOptions::default()
        })
    }
}

/// `--precision`: the number format of a model's linear layers (the CLI's spelling of
/// `rerank::models::Precision`). Only the values this build can run are listed: f16 needs the
/// candle engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// 32-bit floats: exact to the reference models (every model, every device).
    #[default]
    F32,
    /// 8-bit integer linear layers: faster, close to f32 (--device cpu only).
    Int8,
    /// bfloat16 linear layers: Qwen3 models (reranker, embedder) on --device cpu, or a candle
    /// device.
    Bf16,
    /// float16: a candle device only (--device candle-cpu, cuda, metal).
    #[cfg_attr(not(feature = "candle"), value(skip), allow(dead_code))]
    F16,
}

#[cfg(feature = "models")]
impl From<PrecisionArg> for rerank::models::Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::F32 => rerank::models::Precision::F32,
            PrecisionArg::Int8 => rerank::models::Precision::Int8,
            PrecisionArg::Bf16 => rerank::models::Precision::Bf16,
            PrecisionArg::F16 => rerank::models::Precision::F16,
        }
    }
}

/// Reads all of stdin as lines, for a JSONL input given as `-`: each line at most
/// `rerank::MAX_LINE_BYTES`, blank lines kept so that line numbers in errors are stdin's.
pub fn read_stdin_text() -> CliResult<String> {
    let mut text = String::new();
    let mut lines = 0;
    rerank::read_bounded_lines(std::io::stdin().lock(), "stdin", |number, line| {
        // Blank lines are not passed on: they come back as empty lines here.
        while lines + 1 < number {
            text.push('\n');
            lines += 1;
        }
        text.push_str(line);
        text.push('\n');
        lines += 1;
        Ok(())
    })?;
    Ok(text)
}

/// A JSONL corpus (`--corpus FILE`, or `-` for stdin).
pub fn read_corpus(path: &Path) -> CliResult<Vec<rerank::Document>> {
    if is_stdin(path) {
        return Ok(rerank::Document::parse_jsonl(&read_stdin_text()?, "stdin")?);
    }
    Ok(rerank::Document::read_jsonl(path)?)
}

/// An error when `values` (the output for input `n`, 1-based) hold a NaN or an infinity: a
/// model that overflows in a half precision must not print `null`s as if they were scores.
#[cfg_attr(not(feature = "models"), allow(dead_code))]
pub fn check_finite<'a>(
    values: impl IntoIterator<Item = &'a f32>,
    n: usize,
    models: &ModelArgs,
) -> CliResult {
    if values.into_iter().all(|v| v.is_finite()) {
        return Ok(());
    }
    Err(format!(
        "input {n}: the model's output is not a finite number (NaN or infinity) at --precision \
         {} on --device {}; try --precision f32",
        models.precision.as_str(),
        models.device
    )
    .into())
}

#[cfg_attr(not(feature = "models"), allow(dead_code))]
impl PrecisionArg {
    /// The value as the flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PrecisionArg::F32 => "f32",
            PrecisionArg::Int8 => "int8",
            PrecisionArg::Bf16 => "bf16",
            PrecisionArg::F16 => "f16",
        }
    }
}
