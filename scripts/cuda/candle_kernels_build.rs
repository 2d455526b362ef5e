//! The build script scripts/build_cuda.sh puts in place of candle-kernels' own, in a copy of
//! that crate it patches in for the `cuda` build: the kernels of the operations rerank runs,
//! nothing else.
//!
//! candle-kernels' own script compiles two things:
//! - PTX for every module of candle's CUDA backend (loaded when an operation first needs it);
//! - `libmoe.a`, machine code for GGUF and mixture-of-experts products (15 files, most of the
//!   build's time: quantized models, which rerank never runs on a device).
//!
//! This one compiles the same PTX except `quantized.cu` (GGUF matrix products), which becomes
//! an empty module: candle loads a module only when an operation first asks for one of its
//! kernels, and loading the empty one fails with an error. `libmoe.a` is built from C stubs,
//! one per function `src/ffi.rs` declares, each printing its name and aborting: rerank never
//! calls them, and the linker needs their names.
use std::env;
use std::path::PathBuf;
use std::process::Command;

use cudaforge::{KernelBuilder, Result};

fn main() -> Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    let bindings = KernelBuilder::new()
        .source_dir("src")
        .exclude(&["moe_*.cu", "mmvq_gguf.cu", "mmq_*.cu", "quantized.cu"])
        .arg("--expt-relaxed-constexpr")
        .arg("-std=c++17")
        .arg("-O3")
        .build_ptx()?;
    let ptx_rs = out_dir.join("ptx.rs");
    bindings.write(&ptx_rs)?;
    let mut consts = std::fs::read_to_string(&ptx_rs).expect("ptx.rs written");
    consts.push_str("\n/// Not built by rerank's build (no GGUF products on a device): an empty module.\n");
    consts.push_str("pub const QUANTIZED: &str = \"\";\n");
    std::fs::write(&ptx_rs, consts).expect("ptx.rs");

    // One aborting C function per foreign function candle-kernels declares.
    let ffi = std::fs::read_to_string("src/ffi.rs").expect("src/ffi.rs");
    let mut stubs = String::from(
        "#include <stdio.h>\n#include <stdlib.h>\n\
         static void missing(const char *name) {\n\
         fprintf(stderr, \"candle-kernels: %s is not built in rerank's CUDA build \
         (no GGUF or mixture-of-experts kernels)\\n\", name);\n  abort();\n}\n",
    );
    for line in ffi.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("pub fn ") {
            if let Some(name) = rest.split('(').next() {
                stubs.push_str(&format!("void {name}(void) {{ missing(\"{name}\"); }}\n"));
            }
        }
    }
    let c = out_dir.join("moe_stubs.c");
    let o = out_dir.join("moe_stubs.o");
    std::fs::write(&c, stubs).expect("moe_stubs.c");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = |cmd: &mut Command| cmd.status().map(|s| s.success()).unwrap_or(false);
    assert!(
        ok(Command::new(&cc).args(["-c", "-fPIC", "-O1", "-o"]).arg(&o).arg(&c)),
        "compiling the stubs with {cc}"
    );
    let lib = out_dir.join("libmoe.a");
    let _ = std::fs::remove_file(&lib);
    assert!(
        ok(Command::new("ar").arg("crs").arg(&lib).arg(&o)),
        "archiving the stubs with ar"
    );
    println!("cargo:rustc-link-search={}", out_dir.display());
    println!("cargo:rustc-link-lib=static=moe");
    Ok(())
}
