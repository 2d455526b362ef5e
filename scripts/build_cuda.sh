#!/usr/bin/env bash
# Builds the `cuda` feature's binaries on a machine WITHOUT a GPU and stages them in .gpu/ for the
# GPU machine (carry `.gpu`; there, run scripts/gpu_check.sh):
#   .gpu/device_bench  (cargo build --release --features cuda --example device_bench, stripped)
#   .gpu/rerank        (the CLI example, same build: the parity tests run it, through RERANK_BIN)
#   .gpu/it            (cargo test --release --features cuda --test it --no-run, stripped)
#   .gpu/fixtures/     ce_tiny_a, qwen3_tiny_a from ../shared/fixtures (RERANK_SHARED_FIXTURES)
#   .gpu/BUILD_INFO, .gpu/manifest_dir
# or, when those are too big to travel as they are, .gpu/bundle.tar.xz holding them, the fixtures'
# safetensors in byte lanes (scripts/cuda/lanes.py; gpu_check.sh unpacks and restores them).
#
# The CUDA toolkit comes from NVIDIA's pip wheels, pinned to CUDA 13.0 (the GPU machine's driver is
# 580 = CUDA 13.0: PTX from a newer nvcc would not load there), installed once into a virtual
# environment under $RERANK_CUDA_CACHE (default ~/.cache/rerank), and assembled there as a CUDA root
# (bin, include, nvvm, lib64 with the unversioned .so links the linker wants). The wheels have no
# libcuda.so: a stub with the driver API's symbols (soname libcuda.so.1) is generated for the link
# only; at run time the binaries load the real driver and the CUDA 13 libraries of the GPU machine
# (cuBLAS, cuBLASLt, cuRAND, NVRTC, cudart: PyTorch's wheels there; gpu_check.sh sets LD_LIBRARY_PATH).
#
#   bash scripts/build_cuda.sh             # toolkit (first time ~1.2 GB, ~30 s), then both builds
#   bash scripts/build_cuda.sh --toolkit   # only install the toolkit; prints the environment to use
#   eval "$(bash scripts/build_cuda.sh --env)"   # the CUDA build environment in this shell
# candle-kernels is patched in from a copy under $RERANK_CUDA_CACHE whose build script is
# scripts/cuda/candle_kernels_build.rs: the PTX of the operations the crate runs, without candle's
# GGUF and mixture-of-experts kernels (quantized models; most of that crate's build time: 998 s
# against 39 s on the 2-core builder). Cargo.lock is put back as it was afterwards.
# RERANK_CUDA_ALL_KERNELS=1 builds candle-kernels as published instead.
# Environment: RERANK_CUDA_CACHE, RERANK_CUDA_TARGET_DIR (default $RERANK_CUDA_CACHE/gpu-target: the
# cuda build keeps its own target dir), CUDA_COMPUTE_CAP (90: H100/H200), RERANK_SHARED_FIXTURES,
# GPU_BUDGET_MIB (64: what may travel to the GPU machine, working tree included).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${RERANK_CUDA_CACHE:-$HOME/.cache/rerank}
VENV=$CACHE/cuda-venv
CROOT=$CACHE/cuda-13.0
PY=${PYTHON:-python3}
# CUDA 13.0 (nvcc 13.0.88). cudarc's build reads the version (13000) from CUDARC_CUDA_VERSION.
WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96
        nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 nvidia-curand==10.4.0.35 nvidia-cublas==13.0.2.14)
MODE=${1:-build}
log() { echo "[build_cuda $(date +%T)] $*" >&2; }

install_toolkit() {
  local stamp
  stamp="$VENV/.installed-$(echo "${WHEELS[*]}" | sha256sum | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    log "installing the CUDA 13.0 wheels into $VENV"
    [ -x "$VENV/bin/pip" ] || "$PY" -m venv "$VENV"
    nice -n 19 "$VENV/bin/pip" install -q --disable-pip-version-check "${WHEELS[@]}"
    touch "$stamp"
  fi
  local nv
  nv=$(ls -d "$VENV"/lib/python3*/site-packages/nvidia/cu13 | head -1)
  [ -x "$nv/bin/nvcc" ] || { log "no nvcc under $nv"; exit 1; }
  # The CUDA root: links into the wheels' tree, plus lib64/libX.so -> libX.so.N for -lX.
  mkdir -p "$CROOT/lib64/stubs"
  for d in bin include nvvm; do ln -sfn "$nv/$d" "$CROOT/$d"; done
  for f in "$nv"/lib/*.so.*; do
    local b base
    b=$(basename "$f"); base=${b%%.so.*}
    ln -sfn "$f" "$CROOT/lib64/$b"
    ln -sfn "$f" "$CROOT/lib64/$base.so"
  done
  # libcuda.so stub: every driver-API function cudarc binds (any CUDA version) or cuda.h declares.
  if [ ! -f "$CROOT/lib64/stubs/libcuda.so" ] || [ "$CROOT/lib64/stubs/libcuda.so" -ot "$stamp" ]; then
    local syms src
    syms=$(mktemp)
    grep -hoE '^\s*CUresult CUDAAPI cu[A-Za-z0-9_]+' "$CROOT/include/cuda.h" | awk '{print $3}' >"$syms"
    grep -hoE '#define\s+cu[A-Za-z0-9_]+\s+cu[A-Za-z0-9_]+' "$CROOT/include/cuda.h" | awk '{print $3}' >>"$syms"
    for src in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-*/src/driver/sys/mod.rs; do
      [ -f "$src" ] && grep -hoE '^ +fn cu[A-Za-z0-9_]+\(' "$src" | sed -E 's/^ +fn //; s/\($//' >>"$syms"
    done
    sort -u "$syms" | awk '{print "int " $1 "(void) { return 999; }"}' >"$syms.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CROOT/lib64/stubs/libcuda.so" "$syms.c"
    log "libcuda.so stub: $(sort -u "$syms" | wc -l) symbols"
    rm -f "$syms" "$syms.c"
  fi
}

print_env() {
  cat <<EOF
export CUDA_ROOT=$CROOT CUDA_HOME=$CROOT CUDA_PATH=$CROOT NVCC=$CROOT/bin/nvcc
export PATH=$CROOT/bin:\$PATH CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90} CUDARC_CUDA_VERSION=13000
EOF
}

case "$MODE" in
  --env) install_toolkit; print_env; exit 0 ;;
  --toolkit) install_toolkit; print_env; "$CROOT/bin/nvcc" --version | tail -2; exit 0 ;;
  build) ;;
  *) echo "usage: $0 [--toolkit|--env]" >&2; exit 2 ;;
esac

# candle-kernels' sources, copied under the cache with the crate's lean build script in place of
# theirs; prints the cargo flag that patches the copy in.
lean_kernels() {
  local version src dst
  version=$(grep -A1 -E '^name = "candle-kernels"' Cargo.lock | sed -nE 's/^version = "(.*)"/\1/p')
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"candle-kernels-$version" 2>/dev/null | head -1)
  [ -d "$src" ] || { log "candle-kernels $version is not in cargo's registry sources"; exit 1; }
  dst=$CACHE/candle-kernels-lean/candle-kernels-$version
  if ! cmp -s scripts/cuda/candle_kernels_build.rs "$dst/build.rs"; then
    rm -rf "$dst"
    mkdir -p "$(dirname "$dst")"
    cp -r "$src" "$dst"
    chmod -R u+w "$dst"
    cp scripts/cuda/candle_kernels_build.rs "$dst/build.rs"
  fi
  printf 'patch.crates-io.candle-kernels.path="%s"' "$dst"
}

T0=$(date +%s)
# cudarc's sources (for the stub's symbol list) come with the fetch.
nice -n 19 cargo fetch --quiet
install_toolkit
eval "$(print_env)"
export CARGO_TARGET_DIR=${RERANK_CUDA_TARGET_DIR:-$CACHE/gpu-target}
log "toolkit ready ($(( $(date +%s) - T0 ))s): $(nvcc --version | grep -m1 release); target dir $CARGO_TARGET_DIR"
PATCH=()
if [ "${RERANK_CUDA_ALL_KERNELS:-0}" != 1 ]; then
  PATCH=(--config "$(lean_kernels)")
  # The patch rewrites Cargo.lock's entry for candle-kernels: put the file back on the way out.
  cp Cargo.lock "$CACHE/Cargo.lock.before-cuda"
  trap 'cp "$CACHE/Cargo.lock.before-cuda" Cargo.lock' EXIT
  log "candle-kernels: the lean build (scripts/cuda/candle_kernels_build.rs)"
fi

log "cargo build --release --features cuda --example device_bench --example rerank"
nice -n 19 cargo build "${PATCH[@]}" --release --features cuda --example device_bench --example rerank
log "cargo test --release --features cuda --test it --no-run"
IT_BIN=$(nice -n 19 cargo test "${PATCH[@]}" --release --features cuda --test it --no-run --message-format=json \
  | "$PY" -c 'import json,sys
for l in sys.stdin:
    try: d = json.loads(l)
    except ValueError: continue
    if d.get("reason") == "compiler-artifact" and d["target"]["name"] == "it" and d.get("executable"):
        print(d["executable"])' | tail -1)
[ -x "$IT_BIN" ] || { log "no test binary found"; exit 1; }
T1=$(date +%s)
log "built in $(( T1 - T0 ))s"

# --- stage .gpu/ (ignored by git through .git/info/exclude).
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.gpu/' "$EXCLUDE" 2>/dev/null || echo '/.gpu/' >>"$EXCLUDE"
STAGE=$REPO/.gpu
rm -rf "$STAGE"
mkdir -p "$STAGE/fixtures"
strip --strip-all -o "$STAGE/device_bench" "$CARGO_TARGET_DIR/release/examples/device_bench"
strip --strip-all -o "$STAGE/rerank" "$CARGO_TARGET_DIR/release/examples/rerank"
strip --strip-all -o "$STAGE/it" "$IT_BIN"
FX=${RERANK_SHARED_FIXTURES:-$REPO/../shared/fixtures}
# (minilm_embed stays home: its one reader, the real-MiniLM test, is skipped there; its model
# does not travel.)
for f in ce_tiny_a qwen3_tiny_a; do
  if [ -d "$FX/$f" ]; then
    kb=$(du -sk "$FX/$f" | cut -f1)
    if [ "$kb" -le $((40 * 1024)) ]; then cp -r "$FX/$f" "$STAGE/fixtures/"; chmod -R u+w "$STAGE/fixtures/$f"
    else log "fixture $f is ${kb} KiB: not staged"; fi
  else
    log "fixture $FX/$f absent"
  fi
done
echo "$REPO" >"$STAGE/manifest_dir"
{
  # Cargo.lock is the patched one until the script exits: it does not count as a change.
  echo "built: $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!Cargo.lock' || echo ' (+ uncommitted changes)')"
  echo "nvcc: $(nvcc --version | grep -m1 release)"
  echo "CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP CUDARC_CUDA_VERSION=$CUDARC_CUDA_VERSION"
  echo "candle-kernels: $([ ${#PATCH[@]} -gt 0 ] && echo 'lean (scripts/cuda/candle_kernels_build.rs: no GGUF / MoE kernels)' || echo 'as published')"
  echo "crates: $(grep -A1 -E '^name = "(candle-core|candle-kernels|cudarc)"' Cargo.lock | grep -oE '"[^"]+"' | paste -sd' ')"
  echo "needs at run time: $(ldd "$STAGE/it" 2>/dev/null | awk '/=>/{print $1}' | grep -E 'cu|nvrtc' | sort -u | paste -sd' ')"
  (cd "$STAGE" && sha256sum device_bench rerank it)
} >"$STAGE/BUILD_INFO"

# --- what travels: the working tree (tracked + untracked, not ignored) plus .gpu.
mib() { awk -v b="$1" 'BEGIN{printf "%.1f", b/1048576}'; }
TREE=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END{print s+0}')
GPU=$(du -sb "$STAGE" | cut -f1)
BUDGET=$(( ${GPU_BUDGET_MIB:-64} * 1048576 ))
log "sizes: device_bench $(mib "$(stat -c %s "$STAGE/device_bench")") MiB, rerank $(mib "$(stat -c %s "$STAGE/rerank")") MiB, it $(mib "$(stat -c %s "$STAGE/it")") MiB, fixtures $(mib "$(du -sb "$STAGE/fixtures" | cut -f1)") MiB"
if [ $(( TREE + GPU )) -gt $(( BUDGET - 2 * 1048576 )) ]; then
  log "working tree $(mib "$TREE") MiB + .gpu $(mib "$GPU") MiB is over the budget: packing into bundle.tar.xz"
  # One xz stream with a dictionary larger than a binary: the three binaries share most of their
  # bytes (candle's kernels, the crate), so each copy after the first costs little.
  # The fixtures' float32 weights in byte lanes first (scripts/cuda/lanes.py: the exponent
  # bytes together compress; gpu_check.sh restores them).
  python3 scripts/cuda/lanes.py pack "$STAGE/fixtures"
  (cd "$STAGE" && tar -cf - device_bench rerank it fixtures | xz -T1 --lzma2=preset=6,dict=256MiB >bundle.tar.xz &&
    rm -rf device_bench rerank it fixtures)
  GPU=$(du -sb "$STAGE" | cut -f1)
fi
log ".gpu total $(mib "$GPU") MiB; with the working tree $(mib $(( TREE + GPU ))) MiB of $(( BUDGET / 1048576 )) MiB"
if [ $(( TREE + GPU )) -gt "$BUDGET" ]; then
  log "STILL TOO BIG to travel: see the sizes above; bash scripts/gpu_slim.sh moves the fixture"
  log "folders the device checks never read aside (--restore puts them back), then the staged .gpu travels"
  exit 3
fi
ls -la "$STAGE"
log "done in $(( $(date +%s) - T0 ))s; on the GPU machine: run with carry [\".gpu\"]: bash scripts/gpu_check.sh"
