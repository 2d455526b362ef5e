//! With the `cuda` feature: compiles the crate's own CUDA kernels (`src/simd/fused.cu`) to PTX
//! with the CUDA toolkit's `nvcc` (`$NVCC`, else `nvcc` on the `PATH`), for the virtual
//! architecture `compute_$CUDA_COMPUTE_CAP` (candle's variable; 75 when unset: the oldest that
//! CUDA 13 compiles for, and PTX runs on every later GPU). Without it, nothing.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_CUDA");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let source = "src/simd/fused.cu";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".to_string());
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "75".to_string());
    let cap = cap.trim().replace('.', "");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("fused.ptx");
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17"])
        .arg(format!("-arch=compute_{cap}"))
        .arg(source)
        .arg("-o")
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{nvcc} could not compile {source} ({s})"),
        Err(e) => panic!(
            "the `cuda` feature compiles {source} with nvcc, and `{nvcc}` could not be run ({e}): \
             install the CUDA toolkit, or set NVCC to its nvcc"
        ),
    }
}
