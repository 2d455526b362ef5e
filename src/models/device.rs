//! [`Device`]: where a model runs, and so which engine runs it.
//!
//! [`Device::Cpu`] (the default) runs the crate's own CPU kernels. Every other device runs the
//! same model through candle (feature `candle`): [`Device::CandleCpu`] on candle's CPU backend
//! (how the candle engine is tested without a GPU), [`Device::Cuda`] on an NVIDIA GPU (feature
//! `cuda`) and [`Device::Metal`] on Apple silicon (feature `metal`).

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Where a model runs ([`ModelOptions::device`](super::ModelOptions::device)). Spelled in
/// configs and on the command line as `cpu`, `candle-cpu`, `cuda`, `cuda:N`, `metal` or
/// `metal:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Device {
    /// The crate's own CPU kernels (the default).
    #[default]
    Cpu,
    /// candle's CPU backend (feature `candle`): the device engine, run where every CI
    /// machine can run it.
    CandleCpu,
    /// The NVIDIA GPU of this ordinal, through candle (feature `cuda`).
    Cuda(usize),
    /// The Apple GPU of this ordinal, through candle (feature `metal`).
    Metal(usize),
}

impl Device {
    /// Whether the model runs through candle (every device but [`Device::Cpu`]).
    pub fn uses_candle(self) -> bool {
        self != Device::Cpu
    }

    /// Whether this is the default, [`Device::Cpu`].
    pub fn is_cpu(&self) -> bool {
        *self == Device::Cpu
    }

    /// An [`Error::Config`] when this build of the crate cannot run models on this device
    /// (the feature it needs is off); `Ok` otherwise. The device itself (is there a GPU?) is
    /// checked when a model loads.
    pub fn check_available(self) -> Result<()> {
        let feature = match self {
            Device::Cpu => return Ok(()),
            Device::CandleCpu => (cfg!(feature = "candle"), "candle"),
            Device::Cuda(_) => (cfg!(feature = "cuda"), "cuda"),
            Device::Metal(_) => (cfg!(feature = "metal"), "metal"),
        };
        match feature {
            (true, _) => Ok(()),
            (false, name) => Err(Error::Config(format!(
                "device {self} needs rerank built with the `{name}` feature"
            ))),
        }
    }
}

impl Device {
    /// The error for a device this build cannot run ([`Device::check_available`]'s, or a
    /// generic one should it say the device is available).
    #[cfg(not(feature = "candle"))]
    pub(crate) fn unavailable(self) -> Error {
        self.check_available().err().unwrap_or_else(|| {
            Error::Config(format!("device {self} is not available in this build"))
        })
    }
}

/// Lets the f32 matrix products on CUDA devices run on TF32 tensor cores (their inputs rounded
/// to 10 bits of mantissa, their sums kept in f32), or stops them: for the whole process, every
/// model on every CUDA device, the crate's linear layers and candle's own products alike, as
/// PyTorch's `torch.backends.cuda.matmul.allow_tf32`. Off by default, and f32 is then exact to
/// the reference models; on, an f32 model's products run on the GPU's tensor cores and its
/// scores are close to f32's rather than equal. f16 and bf16 products, and every other device,
/// are unaffected.
///
/// An [`Error::Config`] for `true` in a build without the `cuda` feature, which has no product
/// for it to change.
///
/// ```
/// // Exact f32 (the default) is always available.
/// rerank::models::allow_tf32(false)?;
/// # Ok::<(), rerank::Error>(())
/// ```
pub fn allow_tf32(allowed: bool) -> Result<()> {
    #[cfg(feature = "cuda")]
    candle_core::cuda::set_gemm_reduced_precision_f32(allowed);
    match allowed && !cfg!(feature = "cuda") {
        true => Err(Error::Config(
            "TF32 is for CUDA devices: rerank was built without the `cuda` feature".into(),
        )),
        false => Ok(()),
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::CandleCpu => f.write_str("candle-cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::Metal(n) => write!(f, "metal:{n}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, ordinal) = match lower.split_once(':') {
            Some((name, n)) => match n.parse::<usize>() {
                Ok(n) if n < 1024 => (name, Some(n)),
                _ => {
                    return Err(Error::Config(format!(
                        "device {s:?}: the ordinal after ':' must be a number below 1024"
                    )))
                }
            },
            None => (lower.as_str(), None),
        };
        match (name, ordinal) {
            ("cpu", None) => Ok(Device::Cpu),
            ("candle-cpu", None) => Ok(Device::CandleCpu),
            ("cuda", n) => Ok(Device::Cuda(n.unwrap_or(0))),
            ("metal", n) => Ok(Device::Metal(n.unwrap_or(0))),
            _ => Err(Error::Config(format!(
                "unknown device {s:?} (expected cpu, candle-cpu, cuda, cuda:N, metal or metal:N)"
            ))),
        }
    }
}

impl TryFrom<String> for Device {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for d in [
            Device::Cpu,
            Device::CandleCpu,
            Device::Cuda(0),
            Device::Cuda(3),
            Device::Metal(1),
        ] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_json::from_str::<Device>(&json).unwrap(), d);
        }
        assert_eq!("CUDA".parse::<Device>().unwrap(), Device::Cuda(0));
        for bad in ["gpu", "cuda:x", "cuda:-1", "cpu:1", "metal:99999", ""] {
            let e = bad.parse::<Device>().unwrap_err().to_string();
            assert!(e.contains("device"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_device_without_its_feature_is_refused_by_name() {
        assert!(Device::Cpu.check_available().is_ok());
        let cuda = Device::Cuda(0).check_available();
        assert_eq!(cuda.is_ok(), cfg!(feature = "cuda"));
        if let Err(e) = cuda {
            assert!(e.to_string().contains("`cuda` feature"), "{e}");
        }
        assert_eq!(
            Device::CandleCpu.check_available().is_ok(),
            cfg!(feature = "candle")
        );
    }

    #[test]
    fn tf32_is_refused_by_name_in_a_build_without_cuda_and_exact_f32_always_taken() {
        let allowed = allow_tf32(true);
        assert_eq!(allowed.is_ok(), cfg!(feature = "cuda"));
        if let Err(e) = allowed {
            assert!(e.to_string().contains("`cuda` feature"), "{e}");
        }
        allow_tf32(false).unwrap();
    }
}
