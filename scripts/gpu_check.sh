#!/usr/bin/env bash
# What runs ON the GPU machine, from the repository root, after scripts/build_cuda.sh staged .gpu/
# here (carry `.gpu`): the candle parity tests on cuda:0, then device_bench (ours) and
# scripts/gpu_peer.py (PyTorch) on the same random models, shapes and workloads, f32, f16 and bf16.
#
#   bash scripts/gpu_check.sh            # on the GPU machine (at most 8 minutes; every step has a timeout):
#                                        # the device tool's run with command "bash scripts/gpu_check.sh",
#                                        # carry [".gpu"], timeout_s 600 (the script stops starting steps at 450 s)
#   bash scripts/gpu_slim.sh             # before it, here, when the working tree and .gpu pass the 64 MiB
#                                        # a run carries (--restore afterwards)
#   GPU_CHECK_DRY=1 bash scripts/gpu_check.sh   # here, no GPU: the peer on CPU at --tiny sizes; the Rust
#                                               # binaries on candle-cpu if they run here, else skipped
#
# Writes, under $OUT (default /tmp/gpu-out): gpu_table.md (ours vs PyTorch, items/s and ratio, and
# the device's busy share while ours ran), gpu_raw.jsonl (every JSON line, "impl": "rerank" or
# "pytorch", with its "workload"), profile.md (each f16 kind's kernel time by kernel, Nsight
# Compute, where the machine lets it count; profile_raw.csv, ncu's lines), gpu_check.log (all output).
# Steps, in the order of what the issue needs most, each started only before DEADLINE_S: parity; the
# threads test repeated, then under initcheck; the table's rows in DTYPES; the A/B rows; the memory check; the kernel profile; the
# other cross-encoder architectures; the rows in LATE_DTYPES;
# the larger shape; then the table.
# Environment: WORKLOADS (ITEMS:BATCH:DOC_WORDS each, run in order: "512:32:120 4096:128:190", the
# two of issue 54), QUERY_WORDS (8), DTYPES ("f32 f16"), LATE_DTYPES (bf16: the same rows once the
# A/B rows and the profile are in; empty to leave them out; LATE_KINDS and LATE_WORKLOADS, the kinds and
# workloads they run, KINDS and WORKLOADS unless set), KINDS ("cross-encoder embedder
# qwen3-reranker"), WARMUP_BATCHES (4: both sides warm up on that many batches' worth of the items),
# THREADS_REPEAT (10: the threads test's runs in each configuration of THREADS_CONFIGS, after the
# parity tests), SANITIZE_THREADS (initcheck memcheck: compute-sanitizer's tools on the threads test,
# after them, in SANITIZE_CONFIG: NAME=VALUE[,NAME=VALUE...], by default the turns lifted and no lock
# on cuBLASLt's calls), TABLE (1; 0 stops after the threads test), RUNS (3: PyTorch's timed passes, the median reported) and RUNS_AT_SCALE (1: past 1024 items),
# FUSED_AB_DTYPES (f32 f16) and FUSED_AB_KINDS (cross-encoder qwen3-reranker: each kind once more at
# the first workload with RERANK_CUDA_FUSED_LINEAR=0, the rows "KIND-unfused"; either empty to leave
# them out), TF32_AB (1: the f32 cross-encoder once more on TF32, the row "cross-encoder-tf32"; 0 to
# leave it out), HEADS_AB_DTYPES (f32 f16: the cross-encoder once more at every workload with
# RERANK_CUDA_HEADS_IN_PLACE=0, the rows "cross-encoder-heads-copied"; empty to leave them out),
# POOL_AB_DTYPES (f16) and POOL_AB_KINDS (qwen3-reranker cross-encoder: each kind once more at the
# first workload with RERANK_CUDA_POOL_KEEP=0, the rows "KIND-pool-trimmed"; empty to leave them out),
# PARAM_AB_DTYPES (empty: the Qwen3 reranker once more at the first workload with
# RERANK_CUDA_PARAM_CACHE=1 in each of these, the rows "qwen3-reranker-params-cached"; left out by
# default since the decoder's own kernels replaced the strided copies whose uploads it caches),
# DECODER_AB_DTYPES (f16: the Qwen3 reranker once more at every workload with
# RERANK_CUDA_FUSED_KERNELS=0, the rows "qwen3-reranker-candle-ops"; empty to leave them out),
# PROFILE (1: the kernel profile; PROFILE_SPECS, KIND:ITEMS:BATCH:DOC_WORDS each, what it profiles),
# ARCH_DTYPES (f16) and ARCH_KINDS (cross-encoder-modernbert cross-encoder-deberta: the other
# cross-encoder architectures at the first workload, ours, ours on candle's operations alone, PyTorch;
# ARCH_DTYPES empty to leave them out), LARGE_DTYPES (f16: bge-reranker-v2-m3's shape at the
# first workload; empty to leave it out), SANITIZE (1: compute-sanitizer's memcheck on three parity
# tests), GPU_DIR (.gpu), MODELS (/tmp/peer_models), PY (python3), DEADLINE_S (450: steps that would
# start later are skipped), IT_SKIP (libtest --skip arguments for the parity tests; default skips the
# real-MiniLM test, whose model does not travel), GPU_CHECK_DRY.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$(date +%s)
DRY=${GPU_CHECK_DRY:-0}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
GPU_DIR=$(cd "${GPU_DIR:-.gpu}" 2>/dev/null && pwd || echo "$ROOT/.gpu")
MODELS=${MODELS:-/tmp/peer_models}
PY=${PY:-python3}
DEADLINE_S=${DEADLINE_S:-450}
if [ "$DRY" = 1 ]; then
  WORKLOADS=${WORKLOADS:-16:4:20 24:8:30} QUERY_WORDS=${QUERY_WORDS:-8}
  DEVICE=${DEVICE:-candle-cpu} TEST_DEVICE=${TEST_DEVICE:-candle-cpu} PEER_DEVICE=cpu TINY=--tiny RUNS=1
else
  WORKLOADS=${WORKLOADS:-512:32:120 4096:128:190} QUERY_WORDS=${QUERY_WORDS:-8}
  DEVICE=${DEVICE:-cuda:0} TEST_DEVICE=${TEST_DEVICE:-cuda:0} PEER_DEVICE=cuda:0 TINY='' RUNS=${RUNS:-3}
fi
DTYPES=${DTYPES:-f32 f16}
LATE_DTYPES=${LATE_DTYPES-bf16}
# Python's output reaches the log (and the table's files) even when a step's timeout stops it.
export PYTHONUNBUFFERED=1
# The real all-MiniLM-L6-v2 (90 MB) cannot travel: its test would fail under RERANK_REQUIRE_FIXTURES=1.
IT_SKIP=${IT_SKIP---skip the_real_minilm_matches_sentence_transformers}
KINDS=${KINDS:-cross-encoder embedder qwen3-reranker}
LOG=$OUT/gpu_check.log
OURS=$OUT/.ours.jsonl PEER=$OUT/.peer.jsonl
: >"$LOG"; : >"$OURS"; : >"$PEER"
exec > >(tee -a "$LOG") 2>&1

say() { echo "== [$(( $(date +%s) - START ))s] $*"; }
# step SECONDS CMD...: runs CMD under a timeout unless the deadline is near; never fails the script.
step() {
  local t=$1; shift
  local left=$(( DEADLINE_S - ($(date +%s) - START) ))
  if [ "$left" -lt 15 ]; then say "SKIPPED (deadline): $*"; return 99; fi
  [ "$t" -gt "$left" ] && t=$left
  timeout --kill-after=10 "$t" "$@"
  local rc=$?
  [ $rc -eq 124 ] && say "TIMED OUT after ${t}s: $*"
  [ $rc -ne 0 ] && say "exit $rc: $*"
  return $rc
}

say "gpu_check (dry=$DRY) in $ROOT; out $OUT"
if [ "$DRY" != 1 ]; then
  step 30 nvidia-smi
  step 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
fi
[ -f "$GPU_DIR/BUILD_INFO" ] && cat "$GPU_DIR/BUILD_INFO"

# --- the CUDA 13 libraries the binaries link (cuBLAS, cuBLASLt, cuRAND, NVRTC, cudart): those of
# PyTorch's wheels (site-packages/nvidia/cu13/lib, or nvidia/*/lib in older layouts), torch/lib,
# then the toolkit's; libcuda.so.1 is the driver's.
LIBS=$(timeout 60 "$PY" - <<'EOF' 2>/dev/null
import glob, os, sys
dirs = []
for p in sys.path:
    for pat in ("nvidia/cu13/lib", "nvidia/*/lib", "torch/lib"):
        dirs += [d for d in glob.glob(os.path.join(p, pat)) if os.path.isdir(d)]
dirs += [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/nvidia/lib64",
                     "/usr/local/nvidia/lib") if os.path.isdir(d)]
print(":".join(dict.fromkeys(dirs)))
EOF
)
export LD_LIBRARY_PATH="${LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Dry run: the CUDA binaries start here on build_cuda.sh's libcuda stub and toolkit libraries (they
# run on candle-cpu; any CUDA call fails cleanly). STUB_ROOT: the CUDA root build_cuda.sh assembled.
STUB_ROOT=${STUB_ROOT:-${RERANK_CUDA_CACHE:-$HOME/.cache/rerank}/cuda-13.0}
if [ "$DRY" = 1 ] && [ -f "$STUB_ROOT/lib64/stubs/libcuda.so" ]; then
  mkdir -p /tmp/gpu-check-stub && ln -sfn "$STUB_ROOT/lib64/stubs/libcuda.so" /tmp/gpu-check-stub/libcuda.so.1
  export LD_LIBRARY_PATH="/tmp/gpu-check-stub:$STUB_ROOT/lib64:$LD_LIBRARY_PATH"
fi
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# The staged binaries and fixtures (build_cuda.sh may have packed them into bundle.tar.xz).
if [ -f "$GPU_DIR/bundle.tar.xz" ] && [ ! -x "$GPU_DIR/it" ]; then
  say "unpacking $GPU_DIR/bundle.tar.xz"
  tar -C "$GPU_DIR" -xJf "$GPU_DIR/bundle.tar.xz" 2>/dev/null ||
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$GPU_DIR/bundle.tar.xz" "$GPU_DIR"
fi
# Safetensors packed in byte lanes (scripts/cuda/lanes.py) back to their own bytes.
if [ -n "$(find "$GPU_DIR/fixtures" -name '*.safetensors.lanes' 2>/dev/null | head -1)" ]; then
  "$PY" scripts/cuda/lanes.py unpack "$GPU_DIR/fixtures" || say "lanes.py unpack failed"
fi
IT=$GPU_DIR/it BENCH=$GPU_DIR/device_bench
# The CLI example the parity tests run (tests/it/common.rs: rerank_cli).
[ -x "$GPU_DIR/rerank" ] && export RERANK_BIN=$GPU_DIR/rerank
runs_here() {
  [ -x "$1" ] || { say "$1: absent"; return 1; }
  local msg; msg=$("$1" --help 2>&1) || { say "$1 does not start here:"; echo "$msg" | head -5; return 1; }
}
for b in "$IT" "$BENCH" "$GPU_DIR/rerank"; do
  if [ -x "$b" ]; then
    miss=$(ldd "$b" 2>/dev/null | grep 'not found' || true)
    [ -n "$miss" ] && say "$b: missing libraries:" && echo "$miss"
  fi
done
# Tests that name paths through the build machine's CARGO_MANIFEST_DIR: make that path lead here.
if [ -f "$GPU_DIR/manifest_dir" ]; then
  md=$(cat "$GPU_DIR/manifest_dir")
  if [ "$md" != "$ROOT" ] && [ ! -e "$md" ]; then
    mkdir -p "$(dirname "$md")" && ln -s "$ROOT" "$md" && say "linked $md -> $ROOT"
  fi
  sh_fx="$(dirname "$md")/shared/fixtures"
  if [ -d "$GPU_DIR/fixtures" ] && [ ! -e "$sh_fx" ]; then
    mkdir -p "$(dirname "$sh_fx")" && ln -s "$GPU_DIR/fixtures" "$sh_fx" && say "linked $sh_fx -> $GPU_DIR/fixtures"
  fi
fi

# --- 1. the candle parity tests on the device (they need no peer model).
if runs_here "$IT"; then
  say "parity tests: RERANK_TEST_DEVICE=$TEST_DEVICE"
  RERANK_TEST_DEVICE=$TEST_DEVICE RERANK_SHARED_FIXTURES=$GPU_DIR/fixtures RERANK_REQUIRE_FIXTURES=1 \
    step 180 "$IT" candle:: --test-threads=1 --nocapture $IT_SKIP
  rc=$?
  echo "parity tests exit: $rc"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 99 ]; then
    # Tells a failure of the cuBLASLt linear layers (layers/candle/cublaslt.rs) from the rest.
    say "parity tests again with RERANK_CUDA_FUSED_LINEAR=0 (candle's products and additions)"
    RERANK_CUDA_FUSED_LINEAR=0 RERANK_TEST_DEVICE=$TEST_DEVICE RERANK_SHARED_FIXTURES=$GPU_DIR/fixtures \
      RERANK_REQUIRE_FIXTURES=1 step 180 "$IT" candle:: --test-threads=1 --nocapture $IT_SKIP
    echo "parity tests without the fused linear layers exit: $?"
  fi
  # --- 1a. the threads test (four threads scoring at once on one model) THREADS_REPEAT (10) times in
  # each configuration of THREADS_CONFIGS (each "-" for as built, or NAME=VALUE[,NAME=VALUE...]). As
  # built, calls on one device take turns (layers::candle::Turns); RERANK_CUDA_CONCURRENT_CALLS=1
  # lifts the turns, which is how DeBERTa's scores went wrong on an H200 (8 runs in 8 failed with the
  # cuBLASLt products on, none in 8 with them off): the default configurations tell its cause apart:
  # host threads calling cuBLASLt on one handle one at a time (as built) or at once
  # (RERANK_CUDA_LT_LOCK=0, as on 1 December), the attention's batched scores on candle with the
  # linear layers fused (RERANK_CUDA_FUSED_SCORES=0), cuBLASLt without a workspace
  # (RERANK_CUDA_LT_WORKSPACE=0), every launch waited for (CUDA_LAUNCH_BLOCKING=1), the cuBLASLt
  # products off.
  THREADS_TEST=candle::models_on_the_candle_engine_are_send_and_sync_and_agree_across_threads
  C=RERANK_CUDA_CONCURRENT_CALLS=1
  for cfg in ${THREADS_CONFIGS:-- $C $C,RERANK_CUDA_LT_LOCK=0 $C,RERANK_CUDA_FUSED_SCORES=0 $C,RERANK_CUDA_LT_WORKSPACE=0 $C,CUDA_LAUNCH_BLOCKING=1 $C,RERANK_CUDA_FUSED_LINEAR=0}; do
    [ "${THREADS_REPEAT:-10}" -gt 0 ] || break
    [ "$cfg" = - ] && cfg=
    failed=0
    for _ in $(seq "${THREADS_REPEAT:-10}"); do
      (
        IFS=, read -ra vars <<<"$cfg"
        for v in "${vars[@]}"; do export "${v?}"; done
        export RERANK_TEST_DEVICE=$TEST_DEVICE RERANK_SHARED_FIXTURES=$GPU_DIR/fixtures RERANK_REQUIRE_FIXTURES=1
        step 60 "$IT" "$THREADS_TEST" --exact
      ) >"$OUT/.threads" 2>&1
      rc=$?
      [ "$rc" -eq 99 ] && break
      [ "$rc" -ne 0 ] && failed=$((failed + 1)) && grep -m8 -E 'panicked|calls differ|thread [0-9], call' "$OUT/.threads"
    done
    say "threads test ${cfg:-as built}: $failed of ${THREADS_REPEAT:-10} runs failed"
  done
  # --- 1b. compute-sanitizer on the threads test as it failed (SANITIZE_CONFIG), SANITIZE_THREADS ("initcheck
  # memcheck"): initcheck for reads of device memory nothing wrote (a kernel reading an output's
  # unwritten part, or a buffer before its copy landed, reads what the allocator left there: the same
  # bytes when one call runs alone and other threads' when four do), memcheck for reads of memory
  # freed or out of bounds.
  if [ "$DRY" != 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    # The configuration that failed on 1 December: the turns lifted and no lock on cuBLASLt's calls.
    sanitized=${SANITIZE_CONFIG:-$C,RERANK_CUDA_LT_LOCK=0}
    for tool in ${SANITIZE_THREADS-initcheck memcheck}; do
      say "compute-sanitizer $tool: the threads test on $TEST_DEVICE, $sanitized"
      (
        IFS=, read -ra vars <<<"$sanitized"
        for v in "${vars[@]}"; do export "${v?}"; done
        RERANK_TEST_DEVICE=$TEST_DEVICE RERANK_SHARED_FIXTURES=$GPU_DIR/fixtures RERANK_REQUIRE_FIXTURES=1 \
          step 150 compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 "$IT" "$THREADS_TEST" --exact
      )
      echo "$tool exit: $? (0: nothing found; 3: errors above; 101: the test failed, nothing found)"
    done
  fi
  if [ "${TABLE:-1}" != 1 ]; then
    say "TABLE=${TABLE}: the table's steps left out; done"
    exit 0
  fi
else
  say "SKIPPED parity tests: $IT absent or does not run here"
fi

# tag FILE WORKLOAD [BUSY [KIND]]: the JSON lines of FILE with "workload" (and "busy_percent", and
# "kind" replaced) added.
tag() {
  "$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    try:
        d = json.loads(line)
    except ValueError:
        continue
    d["workload"] = sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3]:
        d["busy_percent"] = float(sys.argv[3])
    if len(sys.argv) > 4:
        d["kind"] = sys.argv[4]
    print(json.dumps(d))
' "$@"
}

# busy_start / busy_stop: the device's utilization (the share of time a kernel ran), sampled
# every 100 ms by nvidia-smi while one of ours runs; busy_stop prints the mean (nothing without
# nvidia-smi).
busy_start() {
  BUSY_PID=
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 >"$OUT/.busy" 2>/dev/null &
  BUSY_PID=$!
}
busy_stop() {
  [ -n "${BUSY_PID:-}" ] || return 0
  kill "$BUSY_PID" 2>/dev/null; wait "$BUSY_PID" 2>/dev/null
  awk '$1 ~ /^[0-9]+$/ { s += $1; n++ } END { if (n) printf "%.1f", s / n }' "$OUT/.busy"
}

# show_stages: what device_bench --stages wrote on stderr: anything other than its stage lines
# (an error), then where the timed call's time went (the host's stages against the wait for the
# device).
show_stages() {
  grep -v 'rerank::device' "$OUT/.stages" || true
  # A product cuBLASLt had no algorithm for (candle's operations ran it): once per kind of product.
  grep -o 'cuBLASLt has no algorithm.*' "$OUT/.stages" | sort | uniq -c | head -5 || true
  # Decoder passes whose repeated mask passed its bound (candle's broadcast addition added it).
  local over
  over=$(grep -c "mask repeated for every head would pass" "$OUT/.stages" || true)
  [ "${over:-0}" -gt 0 ] && echo "  decoder passes over the repeated mask's bound: $over"
  grep -o 'batches=.*' "$OUT/.stages" | tail -1 | sed 's/^/  stages of the timed call: /' || true
}

# ours LABEL KIND MODEL DTYPE WORKLOAD [NAME=VALUE | --FLAG ...]: device_bench on MODEL as KIND at
# WORKLOAD (ITEMS:BATCH:DOC_WORDS), with the NAME=VALUE variables in its environment and the --FLAGs
# on its command line; prints its stages and the device's busy share while it ran, and adds its
# JSON line to $OURS as kind LABEL.
ours() {
  local label=$1 kind=$2 model=$3 dt=$4 wl=$5 items batch words busy
  shift 5
  IFS=: read -r items batch words <<<"$wl"
  say "device_bench $label $dt on $DEVICE, workload $wl${1:+ ($*)}"
  busy_start
  (
    extra=()
    for a in "$@"; do
      case $a in --*) extra+=("$a") ;; *) export "$a" ;; esac
    done
    step 120 "$BENCH" --kind "$kind" --model "$model" --device "$DEVICE" --dtype "$dt" --items "$items" \
      --batch "$batch" --doc-words "$words" --query-words "$QUERY_WORDS" --warmup-items "$(warmup "$wl")" \
      --stages "${extra[@]}" >"$OUT/.bench.out" 2>"$OUT/.stages"
  )
  busy=$(busy_stop)
  show_stages
  cat "$OUT/.bench.out"
  [ -n "$busy" ] && say "device busy ${busy} % of the run"
  grep '^{' "$OUT/.bench.out" | tail -1 >"$OUT/.last"
  tag "$OUT/.last" "$wl" "$busy" "$label" >>"$OURS"
}

# warmup WORKLOAD: the items both sides warm up on (device_bench and gpu_peer.py --warmup-items):
# the first WARMUP_BATCHES (4) batches' worth, which pay what a first call pays once.
warmup() {
  local items batch words n
  IFS=: read -r items batch words <<<"$1"
  n=$(( ${WARMUP_BATCHES:-4} * batch ))
  [ "$n" -gt "$items" ] && n=$items
  echo "$n"
}

# peer KIND DTYPES WORKLOAD: PyTorch (scripts/gpu_peer.py) on KIND in DTYPES at WORKLOAD, the median of
# RUNS timed passes (RUNS_AT_SCALE, 1, past 1024 items, where one pass is long enough to time); adds
# its JSON lines to $PEER.
peer() {
  local kind=$1 dtypes=$2 wl=$3 items batch words runs=$RUNS
  IFS=: read -r items batch words <<<"$wl"
  [ "$items" -gt 1024 ] && runs=${RUNS_AT_SCALE:-1}
  say "gpu_peer $kind ($dtypes) on $PEER_DEVICE, workload $wl, $runs timed pass(es)"
  step 150 "$PY" scripts/gpu_peer.py --models "$MODELS" $TINY --kinds "$kind" --dtypes "${dtypes// /,}" \
    --device "$PEER_DEVICE" --items "$items" --batch "$batch" --doc-words "$words" \
    --query-words "$QUERY_WORDS" --runs "$runs" --warmup-items "$(warmup "$wl")" >"$OUT/.peer.out"
  cat "$OUT/.peer.out"
  tag "$OUT/.peer.out" "$wl" >>"$PEER"
}

# rows DTYPES [KINDS [WORKLOADS]]: the table's rows in DTYPES at every workload (WORKLOADS), ours (3),
# then PyTorch (4), each kind (KINDS).
rows() {
  local dtypes=$1 kinds=${2:-$KINDS} workloads=${3:-$WORKLOADS} wl kind dt
  for wl in $workloads; do
    if runs_here "$BENCH"; then
      for kind in $kinds; do
        for dt in $dtypes; do
          ours "$kind" "$kind" "$MODELS/$kind" "$dt" "$wl"
        done
      done
    else
      say "SKIPPED device_bench: $BENCH absent or does not run here"
    fi
    for kind in $kinds; do
      peer "$kind" "$dtypes" "$wl"
    done
  done
}

# --- 2. the random peer model directories (float32), shared by both sides of the table.
say "writing the peer models to $MODELS"
step 240 "$PY" scripts/gpu_peer.py --save "$MODELS" $TINY --device "$PEER_DEVICE"
du -sh "$MODELS"/* 2>/dev/null

# --- 3 and 4. the table's rows in DTYPES (f32 f16): ours and PyTorch at both workloads.
rows "$DTYPES"

# --- 4a. the cross-encoder and the decoder with the cuBLASLt products off (RERANK_CUDA_FUSED_LINEAR=0:
# candle's products, then the bias, the residual and the attention's mask as additions),
# FUSED_AB_KINDS (cross-encoder qwen3-reranker) in FUSED_AB_DTYPES (f32 f16) at the first workload: what
# adding them inside the products gives, in one run.
# ab_rows_at WORKLOADS SUFFIX KINDS DTYPES NAME=VALUE...: each kind of KINDS in each of DTYPES once more
# at each of WORKLOADS with the NAME=VALUE variables set (or --flags for device_bench), the rows
# "KIND-SUFFIX" (none when DTYPES is empty); ab_rows SUFFIX KINDS DTYPES ...: at the first workload.
ab_rows_at() {
  local wls=$1 suffix=$2 kinds=$3 dtypes=$4 wl kind dt
  shift 4
  { [ -n "$dtypes" ] && runs_here "$BENCH"; } || return 0
  for wl in $wls; do
    for kind in $kinds; do
      for dt in $dtypes; do
        ours "$kind-$suffix" "$kind" "$MODELS/$kind" "$dt" "$wl" "$@"
      done
    done
  done
}
ab_rows() { ab_rows_at "${WORKLOADS%% *}" "$@"; }
ab_rows unfused "${FUSED_AB_KINDS-cross-encoder qwen3-reranker}" "${FUSED_AB_DTYPES-f32 f16}" \
  RERANK_CUDA_FUSED_LINEAR=0
# --- 4a'. f32 on TF32 tensor cores (device_bench --tf32: models::allow_tf32), TF32_AB (1) at the
# first workload, the row "cross-encoder-tf32", against PyTorch's exact f32.
if [ "${TF32_AB:-1}" = 1 ] && runs_here "$BENCH"; then
  ours cross-encoder-tf32 cross-encoder "$MODELS/cross-encoder" f32 "${WORKLOADS%% *}" --tf32
fi
# --- 4a''. the cross-encoder with the heads copied into place (RERANK_CUDA_HEADS_IN_PLACE=0: one copy
# of Q, K and V per layer and one of the context, then batched products), HEADS_AB_DTYPES (f32 f16)
# at every workload, the rows "cross-encoder-heads-copied": what reading them in place gives.
ab_rows_at "$WORKLOADS" heads-copied cross-encoder "${HEADS_AB_DTYPES-f32 f16}" RERANK_CUDA_HEADS_IN_PLACE=0
# --- 4a'''. the allocator's pool as the driver leaves it (RERANK_CUDA_POOL_KEEP=0: free memory handed
# back at synchronizations; as built the pool keeps it for the next batches), POOL_AB_KINDS
# (qwen3-reranker cross-encoder) in POOL_AB_DTYPES (f16) at the first workload, the rows
# "KIND-pool-trimmed": what keeping it gives.
ab_rows pool-trimmed "${POOL_AB_KINDS-qwen3-reranker cross-encoder}" "${POOL_AB_DTYPES-f16}" \
  RERANK_CUDA_POOL_KEEP=0
# --- 4a''''. the decoder's strided kernels reading their shapes and strides from candle's parameter
# cache (RERANK_CUDA_PARAM_CACHE=1: uploaded once per layout; as built, one upload per operation),
# PARAM_AB_DTYPES (none by default) at the first workload, the rows "qwen3-reranker-params-cached".
ab_rows params-cached qwen3-reranker "${PARAM_AB_DTYPES-}" RERANK_CUDA_PARAM_CACHE=1
# --- 4a5. the decoder on candle's operations alone (RERANK_CUDA_FUSED_KERNELS=0: a strided copy of
# Q, K and V each, two norms and two rotations, a copy of the context back, the gate and up
# projections as two products, SiLU and the product as two passes, where the crate's kernels of
# src/simd/fused.cu make one pass of each and gate and up are one product), DECODER_AB_DTYPES (f16)
# at every workload (the strided copies grow with the batch), the rows "qwen3-reranker-candle-ops".
ab_rows_at "$WORKLOADS" candle-ops qwen3-reranker "${DECODER_AB_DTYPES-f16}" RERANK_CUDA_FUSED_KERNELS=0

# --- 4b. memory checks of the cuBLASLt products (compute-sanitizer's memcheck, where the machine's
# runtime lets it read the device): the cross-encoders', the embedders' and Qwen3-Reranker's parity
# tests, whose BERT, DeBERTa, ModernBERT and decoder run every kind of fused product (linear layers;
# scores with a key mask, with DeBERTa's c2p term, with a decoder's mask; BERT's per-head products read
# in place, all tokens and the first alone). SANITIZE (1).
if [ "$DRY" != 1 ] && [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1 && runs_here "$IT"; then
  say "compute-sanitizer memcheck: three parity tests on $TEST_DEVICE"
  RERANK_TEST_DEVICE=$TEST_DEVICE RERANK_SHARED_FIXTURES=$GPU_DIR/fixtures RERANK_REQUIRE_FIXTURES=1 \
    step 120 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    "$IT" candle::cross_encoders_match_the_references candle::embedders_match_sentence_transformers \
    candle::qwen3_reranker_matches_the_reference \
    --test-threads=1 --exact
  echo "memcheck exit: $? (0: no error found; 3: errors above)"
fi

# --- 4c. where the device's time goes: Nsight Compute's duration of every kernel of ours in f16
# (cross-encoder and embedder at the second workload's batch and length, Qwen3 at the first's),
# summed by kernel into profile.md, for the next change to start from. PROFILE (1).
if [ "$DRY" != 1 ] && [ "${PROFILE:-1}" = 1 ] && command -v ncu >/dev/null 2>&1 && runs_here "$BENCH"; then
  : >"$OUT/profile_raw.csv"
  for spec in ${PROFILE_SPECS:-cross-encoder:256:128:190 embedder:256:128:190 qwen3-reranker:64:32:120}; do
    IFS=: read -r kind items batch words <<<"$spec"
    say "ncu: $kind f16, $items items in batches of $batch, $words-word documents"
    step 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      "$BENCH" --kind "$kind" --model "$MODELS/$kind" --device "$DEVICE" --dtype f16 --items "$items" \
      --batch "$batch" --doc-words "$words" --query-words "$QUERY_WORDS" --warmup-items 0 \
      >"$OUT/.ncu.out" 2>&1
    grep -v '^"' "$OUT/.ncu.out" | grep -v '^==PROF==' | head -5
    grep '^"' "$OUT/.ncu.out" | sed "s/^/$kind,/" >>"$OUT/profile_raw.csv"
  done
  "$PY" scripts/gpu_profile.py "$OUT/profile_raw.csv" "$OUT/profile.md"
fi

# --- 4c'. the other cross-encoder architectures users pick, random models of gte-reranker-modernbert-
# base's and mxbai-rerank-base-v1's shapes (ARCH_KINDS: cross-encoder-modernbert cross-encoder-deberta)
# in ARCH_DTYPES (f16; empty to leave them out) at the first workload: ours, ours on candle's
# operations alone (RERANK_CUDA_FUSED_KERNELS=0: the heads put in place and back by strided copies,
# ModernBERT's rotations and GeGLU and DeBERTa's position terms as candle's passes; the rows
# "KIND-candle-ops"), then PyTorch.
ARCH_DTYPES=${ARCH_DTYPES-f16}
if [ -n "$ARCH_DTYPES" ]; then
  wl=${WORKLOADS%% *} arch_kinds=${ARCH_KINDS:-cross-encoder-modernbert cross-encoder-deberta}
  say "writing $arch_kinds to $MODELS"
  step 120 "$PY" scripts/gpu_peer.py --save "$MODELS" $TINY --kinds "${arch_kinds// /,}" --device "$PEER_DEVICE"
  if runs_here "$BENCH"; then
    for kind in $arch_kinds; do
      for dt in $ARCH_DTYPES; do
        ours "$kind" cross-encoder "$MODELS/$kind" "$dt" "$wl"
        ours "$kind-candle-ops" cross-encoder "$MODELS/$kind" "$dt" "$wl" RERANK_CUDA_FUSED_KERNELS=0
      done
    done
  fi
  for kind in $arch_kinds; do
    peer "$kind" "$ARCH_DTYPES" "$wl"
  done
fi

# --- 4d. the table's rows in LATE_DTYPES (bf16), both sides, both workloads, once the rest is in.
[ -n "$LATE_DTYPES" ] && rows "$LATE_DTYPES" "${LATE_KINDS:-$KINDS}" "${LATE_WORKLOADS:-$WORKLOADS}"

# --- 4e. the larger shape (bge-reranker-v2-m3's), LARGE_DTYPES (f16) at the first workload: the
# deadline skips it when the rest took the time.
LARGE_DTYPES=${LARGE_DTYPES-f16}  # set and empty: the larger shape is left out
if [ -n "$LARGE_DTYPES" ]; then
  wl=${WORKLOADS%% *}
  say "writing the larger cross-encoder to $MODELS/cross-encoder-large"
  step 120 "$PY" scripts/gpu_peer.py --save "$MODELS" $TINY --kinds cross-encoder-large --device "$PEER_DEVICE"
  if runs_here "$BENCH"; then
    for dt in $LARGE_DTYPES; do
      ours cross-encoder-large cross-encoder "$MODELS/cross-encoder-large" "$dt" "$wl"
    done
  fi
  peer cross-encoder-large "$LARGE_DTYPES" "$wl"
fi

# --- 5. the table.
"$PY" - "$OURS" "$PEER" "$OUT" <<'EOF'
import json, sys
ours_f, peer_f, out = sys.argv[1:4]
def rows(path, impl):
    r = []
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        d.setdefault("impl", impl)
        r.append(d)
    return r
ours, peer = rows(ours_f, "rerank"), rows(peer_f, "pytorch")
with open(f"{out}/gpu_raw.jsonl", "w") as f:
    for d in ours + peer:
        f.write(json.dumps(d) + "\n")
key = lambda d: (d.get("workload"), d.get("kind"), d.get("dtype"))
o, p = {key(d): d for d in ours}, {key(d): d for d in peer}
dev_o = next((d.get("device") for d in ours if d.get("device")), "?")
dev_p = next((d.get("device") for d in peer if d.get("device")), "?")
lines = [f"ours on {dev_o}, PyTorch on {dev_p}; workload = items:batch:document words; items/s, "
         "higher is better; ratio = ours / PyTorch; busy = the device's utilization while ours ran.", "",
         "| workload | kind | dtype | ours items/s | PyTorch items/s | ratio | busy % | tokens/item | PyTorch peer |",
         "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
order = {n: i for i, n in enumerate(["cross-encoder", "cross-encoder-heads-copied", "cross-encoder-unfused", "cross-encoder-tf32", "cross-encoder-pool-trimmed", "embedder", "qwen3-reranker", "qwen3-reranker-unfused", "qwen3-reranker-pool-trimmed", "qwen3-reranker-params-cached", "qwen3-reranker-candle-ops", "cross-encoder-modernbert", "cross-encoder-modernbert-candle-ops", "cross-encoder-deberta", "cross-encoder-deberta-candle-ops", "cross-encoder-large",
                                      "f32", "f16", "bf16"])}
workloads = {w: i for i, w in enumerate(dict.fromkeys(d.get("workload") for d in ours + peer))}
for k in sorted(set(o) | set(p), key=lambda k: (workloads.get(k[0], 9), order.get(k[1], 9), str(k[1]), order.get(k[2], 9), str(k[2]))):
    # The A/B rows (4a) against the same PyTorch run as their kind's.
    base = str(k[1])
    for suffix in ("-unfused", "-tf32", "-heads-copied", "-pool-trimmed", "-params-cached", "-candle-ops"):
        base = base.removesuffix(suffix)
    a, b = o.get(k, {}), p.get(k) or p.get((k[0], base, k[2]), {})
    x, y = a.get("items_per_s"), b.get("items_per_s")
    ratio = f"{x / y:.2f}" if x and y else "n/a"
    fx = f"{x:.1f}" if x else a.get("error", "n/a")
    fy = f"{y:.1f}" if y else b.get("error", "n/a")
    busy = a.get("busy_percent", "n/a")
    lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {fx} | {fy} | {ratio} | {busy} | {b.get('tokens_per_item', 'n/a')} | {b.get('peer', '')} |")
open(f"{out}/gpu_table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
rm -f "$OURS" "$PEER" "$OUT/.threads" "$OUT/.bench.out" "$OUT/.peer.out" "$OUT/.last" "$OUT/.busy" "$OUT/.ncu.out"
say "done"
