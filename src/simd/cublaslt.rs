//! The candle ports' products on a CUDA device through cuBLASLt (feature `cuda`), each one
//! `cublasLtMatmul` whose epilogue adds what candle would add in passes of its own over the
//! output:
//! - a linear layer, `y = x · Wᵀ + b + r`: the bias added by the epilogue, the residual `r` as
//!   the `C` operand (`beta = 1`). PyTorch's `addmm` adds its bias the same way.
//! - the attention's scores, `s = q · kᵀ + m (+ p)` for every (row, head) of a batch: one
//!   batched product whose epilogue adds the additive key mask `m` (a bias per key, one per
//!   (row, head)), and an optional term `p` of the scores' shape as `C` (DeBERTa's position
//!   terms). candle would add the mask by a broadcast pass over every score.
//!
//! Numbers: the products accumulate in f32 for every format (`CUBLAS_COMPUTE_32F`: f32 stays
//! exact to the references; TF32 only once the process asked for it, `models::allow_tf32`), and
//! the epilogue adds in f32 before the one rounding to the output's format.
//!
//! What they take: operands in f32, f16 or bf16, contiguous (a linear layer: a 2-D `(rows,
//! inputs)` input, a `(outputs, inputs)` weight, a bias `(outputs)` and a residual `(rows,
//! outputs)`; the scores: `q (.., queries, d)`, `k (.., keys, d)`, a mask `(matrices, keys)`), the
//! bias or mask from the start of its own allocation (its address is what cuBLASLt's heuristic
//! reads its alignment from). Anything else returns `None` and candle's operations run it; so
//! does a product for which cuBLASLt offers no algorithm (nothing is queued then).
//! `RERANK_CUDA_FUSED_LINEAR=0` turns the path off for the process.
//!
//! Each kind of product (layout, format, epilogue, alignments) asks cuBLASLt's heuristic for
//! its algorithm once per handle; the answer is kept (`RERANK_CUDA_ALGO_CACHE=0` asks every
//! time). BERT's and XLM-R's attention runs one product per head for its scores and one for
//! its context ([`Gemm::head_scores`], [`Gemm::head_context`]), reading Q, K and V where
//! their stacked projection wrote them (`RERANK_CUDA_HEADS_IN_PLACE=0` copies the heads into
//! place instead, then runs one batched product for each).
//!
//! The layout of a product (which operand is read transposed, the leading dimensions, the
//! batch strides) is [`Gemm`], tested in every build against a column-major product written
//! from the BLAS definition; the device calls themselves run only on a GPU
//! (`scripts/gpu_check.sh`).

/// How a row-major product `y = x · Wᵀ (+ b) (+ r)` is put to a column-major BLAS
/// (`D = op(A) · B + C`, A `m x k`, B `k x n`, D `m x n`): a row-major matrix is its
/// transpose in column-major order, so `yᵀ = W · xᵀ`, with A the weight read transposed
/// (`(inputs, outputs)` column-major, `ld = inputs`), B the rows as they are (`(inputs,
/// rows)` column-major, `ld = inputs`) and D the output (`(outputs, rows)`, `ld = outputs`);
/// a bias of `m` entries is added to every column of D, i.e. to every output row. A is read
/// transposed (`CUBLAS_OP_T`, stored `k x m`) unless `trans_a` is false (stored `m x k`); B
/// never.
///
/// A batch of `batch` such products lies one after the other: product `i` reads A, B, the
/// bias and C, and writes D, `i` strides (in elements) from the first, and the first of each
/// `offset` elements from the start of its operand. The attention's scores are one: `q · kᵀ +
/// mask` is `x · Wᵀ + b` with the queries as the rows, the keys as the weight and the mask as
/// the bias, for each (row, head); so is one head's attention over a batch read where the
/// stacked Q, K, V projection wrote it ([`Gemm::head_scores`], [`Gemm::head_context`]).
///
/// Read by the `cuda` build's product; its test runs in every build.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// A read transposed (stored `k x m`, the linear layers' weights and the keys) or as it
    /// is (stored `m x k`, the values of [`Gemm::head_context`]).
    pub trans_a: bool,
    pub lda: usize,
    pub ldb: usize,
    pub ldd: usize,
    /// The number of products (1: one product).
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    /// D's stride, and C's (C is laid out as D).
    pub stride_d: usize,
    pub stride_bias: usize,
    /// Where the first product's A, B and D (and C) start in their operands, in elements.
    pub offset_a: usize,
    pub offset_b: usize,
    pub offset_d: usize,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl Gemm {
    /// The product of `rows` rows of `inputs` by a weight of `outputs x inputs`.
    pub fn row_major(rows: usize, inputs: usize, outputs: usize) -> Self {
        Gemm {
            m: outputs,
            n: rows,
            k: inputs,
            trans_a: true,
            lda: inputs,
            ldb: inputs,
            ldd: outputs,
            batch: 1,
            stride_a: outputs * inputs,
            stride_b: rows * inputs,
            stride_d: rows * outputs,
            stride_bias: outputs,
            offset_a: 0,
            offset_b: 0,
            offset_d: 0,
        }
    }

    /// `batch` products of this shape, each operand's matrices one after the other.
    pub fn batched(self, batch: usize) -> Self {
        Gemm { batch, ..self }
    }

    /// The same products with each one's bias `stride` elements after the previous one's
    /// (at least `m`: a padded row per product).
    pub fn bias_stride(self, stride: usize) -> Self {
        Gemm {
            stride_bias: stride,
            ..self
        }
    }

    /// Head `h`'s scores over a batch, read where a stacked Q, K, V projection wrote them:
    /// `qkv` `(rows · t, 3 · hidden)` row-major (each row's `t` tokens, Q, K and V side by
    /// side, `heads` heads of `d` in each, `hidden = heads · d`), the scores of the first
    /// `queries` tokens of each row against its `t` keys, plus the row's additive key mask
    /// (a bias `(rows, width)`), written as head `h` of `(rows, heads, queries, t)`. A batch
    /// of `rows` products, one per row: A the keys, B the queries, no copy of either.
    pub fn head_scores(
        (rows, t): (usize, usize),
        (heads, d): (usize, usize),
        queries: usize,
        width: usize,
        h: usize,
    ) -> Self {
        let (hidden, line) = (heads * d, 3 * heads * d);
        Gemm {
            m: t,
            n: queries,
            k: d,
            trans_a: true,
            lda: line,
            ldb: line,
            ldd: t,
            batch: rows,
            stride_a: t * line,
            stride_b: t * line,
            stride_d: heads * queries * t,
            stride_bias: width,
            offset_a: hidden + h * d,
            offset_b: h * d,
            offset_d: h * queries * t,
        }
    }

    /// Head `h`'s context over a batch: its probabilities, head `h` of `(rows, heads,
    /// queries, t)`, times its values, read where the stacked projection `(rows · t, 3 ·
    /// hidden)` wrote them, written in place as columns `h · d ..` of the context `(rows ·
    /// queries, hidden)` that the output projection reads. A batch of `rows` products: A the
    /// values (as they are), B the probabilities.
    pub fn head_context(
        (rows, t): (usize, usize),
        (heads, d): (usize, usize),
        queries: usize,
        h: usize,
    ) -> Self {
        let (hidden, line) = (heads * d, 3 * heads * d);
        Gemm {
            m: d,
            n: queries,
            k: t,
            trans_a: false,
            lda: line,
            ldb: t,
            ldd: hidden,
            batch: rows,
            stride_a: t * line,
            stride_b: heads * queries * t,
            stride_d: queries * hidden,
            stride_bias: 0,
            offset_a: 2 * hidden + h * d,
            offset_b: h * queries * t,
            offset_d: h * d,
        }
    }

    /// How far into each operand the products reach, in elements from its start: what each
    /// operand must hold at least.
    pub fn spans(&self) -> Spans {
        let last = self.batch.saturating_sub(1);
        let reach = |offset: usize, stride: usize, rows: usize, cols: usize, ld: usize| {
            offset + last * stride + cols.saturating_sub(1) * ld + rows
        };
        let (a_rows, a_cols) = match self.trans_a {
            true => (self.k, self.m),
            false => (self.m, self.k),
        };
        Spans {
            a: reach(self.offset_a, self.stride_a, a_rows, a_cols, self.lda),
            b: reach(self.offset_b, self.stride_b, self.k, self.n, self.ldb),
            d: reach(self.offset_d, self.stride_d, self.m, self.n, self.ldd),
            bias: last * self.stride_bias + self.m,
        }
    }
}

/// How many elements of each operand a [`Gemm`] reads or writes, from the operand's start
/// ([`Gemm::spans`]); C is laid out as D.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spans {
    pub a: usize,
    pub b: usize,
    pub d: usize,
    pub bias: usize,
}

#[cfg(feature = "cuda")]
pub(crate) use device::{handle, head_context, head_scores, linear, open_device, scores, Handle};

/// The product on the device: cuBLASLt through cudarc (candle's copy of it).
#[cfg(feature = "cuda")]
mod device {
    use std::collections::HashMap;
    use std::ffi::c_void;
    use std::sync::{Arc, Mutex, OnceLock, Weak};

    use candle_core::cuda_backend::cudarc::cublaslt::{result, sys};
    use candle_core::cuda_backend::cudarc::driver::{
        CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, DeviceRepr,
    };
    use candle_core::cuda_backend::{CudaDType, DeviceId};
    use candle_core::{
        backend::BackendStorage, CpuStorage, CudaDevice, CudaStorage, CustomOp2, DType, Layout,
        Shape, Storage, StorageRef, Tensor,
    };
    use half::{bf16, f16};

    use super::Gemm;

    /// cuBLASLt's workspace: 32 MiB, NVIDIA's recommendation for Hopper (more than enough
    /// before it).
    const WORKSPACE_BYTES: usize = 32 << 20;

    /// The most algorithms a handle remembers ([`Lt::algos`]) before it forgets them all.
    const MAX_ALGOS: usize = 4096;

    /// A cuBLASLt handle and its workspace for one candle CUDA device (one stream), shared by
    /// every layer on it and released with the last of them.
    #[derive(Clone)]
    pub(crate) struct Handle(Arc<Lt>);

    impl std::fmt::Debug for Handle {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cuBLASLt handle")
        }
    }

    /// CUDA device `n` with a stream of its own, which every host thread that uses a model on
    /// it queues to: how the crate opens a CUDA device (`layers::candle::candle_device`).
    ///
    /// candle's `Device::new_cuda` queues each host thread's operations to that thread's
    /// default stream (`CU_STREAM_PER_THREAD`), with nothing ordering one thread's work after
    /// another's: the weights copied by the thread that loaded a model would be read by another
    /// thread's kernels unordered, and two threads scoring at once would share a [`Handle`]'s
    /// workspace on two streams. On one stream every operation runs after those queued before
    /// it, whichever thread queued them.
    pub(crate) fn open_device(n: usize) -> candle_core::Result<candle_core::Device> {
        let device = candle_core::Device::new_cuda_with_stream(n)?;
        if let candle_core::Device::Cuda(cuda) = &device {
            // SAFETY: no buffer exists on this device yet, and every one it will hold is used
            // and freed (stream-ordered) on its one stream only, which orders them all.
            // cudarc's per-buffer events, which a stream of one's own turns on, would only add
            // driver calls to every operation.
            unsafe { cuda.disable_event_tracking() };
            // Only speed depends on it: a driver that refuses leaves the pool as it was.
            if let Err(e) = keep_freed_memory(cuda) {
                tracing::debug!(
                    target: "rerank::device",
                    "the allocator's pool stays as the driver set it: {e}"
                );
            }
        }
        Ok(device)
    }

    /// Lets the stream-ordered allocator's pool on `device` keep the memory freed into it for
    /// the allocations that follow (its release threshold at the maximum), as PyTorch's caching
    /// allocator keeps its blocks: with the driver's default threshold of 0, the pool may hand
    /// its free memory back at every synchronization, and the next batch's buffers are then
    /// mapped anew. The process holds on to its peak use, as a PyTorch process does.
    /// `RERANK_CUDA_POOL_KEEP=0` (read once) leaves the driver's default, a check for the GPU
    /// runs; so does a device without stream-ordered allocation.
    fn keep_freed_memory(device: &CudaDevice) -> candle_core::Result<()> {
        use candle_core::cuda_backend::cudarc::driver::{result, sys};
        static ON: OnceLock<bool> = OnceLock::new();
        let context = device.cuda_stream().context().clone();
        if !on_unless_zero(&ON, "RERANK_CUDA_POOL_KEEP") || !context.has_async_alloc() {
            return Ok(());
        }
        let driver = |e: result::DriverError| candle_core::Error::Cuda(Box::new(e));
        context.bind_to_thread().map_err(driver)?;
        let attribute = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        let mut threshold = u64::MAX;
        // SAFETY: the device is the context's own, and the release threshold is a 64-bit
        // unsigned integer, which `threshold` is.
        unsafe {
            let pool = result::device::get_default_mem_pool(context.cu_device()).map_err(driver)?;
            result::mem_pool::set_attribute(pool, attribute, (&raw mut threshold).cast())
                .map_err(driver)
        }
    }

    /// The handle for the device `t` is on: `None` off CUDA devices or with
    /// `RERANK_CUDA_FUSED_LINEAR=0`.
    pub(crate) fn handle(t: &Tensor) -> candle_core::Result<Option<Handle>> {
        match t.device() {
            candle_core::Device::Cuda(device) if enabled() => Lt::for_device(device).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether the path is on: unless `RERANK_CUDA_FUSED_LINEAR` is `0` (read once).
    fn enabled() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        on_unless_zero(&ON, "RERANK_CUDA_FUSED_LINEAR")
    }

    /// Whether the switch `name` is on: unless that variable is `0`, read once into `cell`.
    fn on_unless_zero(cell: &OnceLock<bool>, name: &str) -> bool {
        *cell.get_or_init(|| std::env::var(name).map_or(true, |v| v.trim() != "0"))
    }

    /// `x · weightᵀ + bias + residual` on cuBLASLt through `lt`, or `None` when the operands
    /// are not as the module says.
    pub(crate) fn linear(
        lt: &Handle,
        x: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        residual: Option<&Tensor>,
    ) -> candle_core::Result<Option<Tensor>> {
        let (Ok((rows, inputs)), Ok((outputs, w_inputs))) = (x.dims2(), weight.dims2()) else {
            return Ok(None);
        };
        let fits = inputs == w_inputs
            && dense(x, x)
            && dense(weight, x)
            && bias.is_none_or(|b| whole(b, x) && b.dims() == [outputs])
            && residual.is_none_or(|r| dense(r, x) && r.dims() == [rows, outputs]);
        if !fits {
            return Ok(None);
        }
        let op = Fused {
            lt: lt.0.clone(),
            products: vec![Gemm::row_major(rows, inputs, outputs)],
            shape: Shape::from((rows, outputs)),
            bias: bias.cloned(),
            residual: residual.cloned(),
        };
        op.apply(x, weight)
    }

    /// The attention's scores `q · kᵀ (+ mask) (+ plus)` on cuBLASLt through `lt`, one batched
    /// product for every (row, head): `q` `(.., queries, d)` and `k` `(.., keys, d)` with the
    /// same leading dimensions, `mask` `(matrices, width)` (one additive row per matrix, i.e.
    /// per (row, head): a bias per key, in its first `keys` columns; a row padded to a wider
    /// `width` keeps every row's start as aligned as the first's), `plus` of the scores' shape
    /// `(.., queries, keys)`. `None` when the operands are not as the module says, or the
    /// path is off ([`fused_scores`]).
    pub(crate) fn scores(
        lt: &Handle,
        q: &Tensor,
        k: &Tensor,
        mask: Option<&Tensor>,
        plus: Option<&Tensor>,
    ) -> candle_core::Result<Option<Tensor>> {
        let (qd, kd) = (q.dims(), k.dims());
        let rank = qd.len();
        if rank < 2 || kd.len() != rank || qd[..rank - 2] != kd[..rank - 2] {
            return Ok(None);
        }
        let (queries, d, keys) = (qd[rank - 2], qd[rank - 1], kd[rank - 2]);
        let matrices: usize = qd[..rank - 2].iter().product();
        let mut shape = qd[..rank - 2].to_vec();
        shape.extend([queries, keys]);
        let width = match mask.map(|m| m.dims()) {
            None => keys,
            Some(&[rows, width]) if rows == matrices && width >= keys => width,
            Some(_) => return Ok(None),
        };
        let fits = fused_scores()
            && kd[rank - 1] == d
            && dense(q, q)
            && dense(k, q)
            && mask.is_none_or(|m| whole(m, q))
            && plus.is_none_or(|p| dense(p, q) && p.dims() == shape.as_slice());
        if !fits {
            return Ok(None);
        }
        let op = Fused {
            lt: lt.0.clone(),
            products: vec![Gemm::row_major(queries, d, keys)
                .batched(matrices)
                .bias_stride(width)],
            shape: Shape::from(shape),
            bias: mask.cloned(),
            residual: plus.cloned(),
        };
        op.apply(q, k)
    }

    /// Whether a handle remembers the heuristic's algorithms ([`Lt::algos`]): unless
    /// `RERANK_CUDA_ALGO_CACHE` is `0` (read once), which asks the heuristic for every product,
    /// as a check of the cache.
    fn cache_algos() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        on_unless_zero(&ON, "RERANK_CUDA_ALGO_CACHE")
    }

    /// Whether host threads take turns calling cuBLASLt on one handle ([`Lt::calls`]): unless
    /// `RERANK_CUDA_LT_LOCK` is `0` (read once), which lets them call at once, as a check for
    /// the GPU runs (cuBLAS documents its calls as thread-safe on one handle; the lock tells
    /// whether concurrent calls are what mixes up the work of calls run at once).
    fn lock_calls() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        on_unless_zero(&ON, "RERANK_CUDA_LT_LOCK")
    }

    /// Whether the attention's batched scores run on cuBLASLt ([`scores`]): unless
    /// `RERANK_CUDA_FUSED_SCORES` is `0` (read once), which leaves them to candle's product
    /// and additions while the linear layers stay fused, a check for the GPU runs.
    fn fused_scores() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        on_unless_zero(&ON, "RERANK_CUDA_FUSED_SCORES")
    }

    /// The workspace every product may use: [`WORKSPACE_BYTES`], or none with
    /// `RERANK_CUDA_LT_WORKSPACE=0` (read once), which keeps the heuristic to algorithms
    /// without one (no split reductions through it), a check for the GPU runs.
    fn workspace_bytes() -> usize {
        static ON: OnceLock<bool> = OnceLock::new();
        match on_unless_zero(&ON, "RERANK_CUDA_LT_WORKSPACE") {
            true => WORKSPACE_BYTES,
            false => 0,
        }
    }

    /// Whether one head's products per batch run in place ([`head_scores`], [`head_context`]):
    /// unless `RERANK_CUDA_HEADS_IN_PLACE` is `0` (read once), which leaves the attention to
    /// the copy of the heads and the batched products.
    fn heads_in_place() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        on_unless_zero(&ON, "RERANK_CUDA_HEADS_IN_PLACE")
    }

    /// The scores of every head, `(rows, heads, queries, t)`, read where the stacked Q, K, V
    /// projection `qkv` `(rows · t, 3 · hidden)` wrote them, plus each row's additive key
    /// `mask` `(rows, width)` (`width >= t`): one product per head ([`Gemm::head_scores`]),
    /// no copy of the heads. `None` when the operands are not as the module says, or the
    /// path is off ([`heads_in_place`]).
    pub(crate) fn head_scores(
        lt: &Handle,
        qkv: &Tensor,
        mask: &Tensor,
        (rows, t): (usize, usize),
        heads: usize,
        queries: usize,
    ) -> candle_core::Result<Option<Tensor>> {
        let Ok((mask_rows, width)) = mask.dims2() else {
            return Ok(None);
        };
        let Some(d) = head_dim(qkv, (rows, t), heads) else {
            return Ok(None);
        };
        let fits =
            (1..=t).contains(&queries) && mask_rows == rows && width >= t && whole(mask, qkv);
        if !fits {
            return Ok(None);
        }
        let op = Fused {
            lt: lt.0.clone(),
            products: (0..heads)
                .map(|h| Gemm::head_scores((rows, t), (heads, d), queries, width, h))
                .collect(),
            shape: Shape::from((rows, heads, queries, t)),
            bias: Some(mask.clone()),
            residual: None,
        };
        op.apply(qkv, qkv)
    }

    /// The context `(rows · queries, hidden)` of every head: the probabilities `probs` `(rows,
    /// heads, queries, t)` times the values, read where the stacked projection `qkv` `(rows ·
    /// t, 3 · hidden)` wrote them, each head's written in place ([`Gemm::head_context`]).
    /// `None` when the operands are not as the module says, or the path is off.
    pub(crate) fn head_context(
        lt: &Handle,
        probs: &Tensor,
        qkv: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let Ok((rows, heads, queries, t)) = probs.dims4() else {
            return Ok(None);
        };
        let Some(d) = head_dim(qkv, (rows, t), heads) else {
            return Ok(None);
        };
        if !dense(probs, qkv) {
            return Ok(None);
        }
        let op = Fused {
            lt: lt.0.clone(),
            products: (0..heads)
                .map(|h| Gemm::head_context((rows, t), (heads, d), queries, h))
                .collect(),
            shape: Shape::from((rows * queries, heads * d)),
            bias: None,
            residual: None,
        };
        op.apply(probs, qkv)
    }

    /// The head size `d` of `qkv` when it is the output `(rows · t, 3 · heads · d)` of a stacked
    /// Q, K, V projection, dense on its CUDA device, and the per-head products are on
    /// ([`heads_in_place`]); `None` otherwise. What [`head_scores`] and [`head_context`] both
    /// check of it.
    fn head_dim(qkv: &Tensor, (rows, t): (usize, usize), heads: usize) -> Option<usize> {
        let (lines, line) = qkv.dims2().ok()?;
        let d = line / (3 * heads).max(1);
        let fits = heads_in_place()
            && heads > 0
            && d > 0
            && line == 3 * heads * d
            && lines == rows * t
            && dense(qkv, qkv);
        fits.then_some(d)
    }

    /// Whether `t` can be an operand of a product in `like`'s format on its CUDA device:
    /// f32, f16 or bf16, not empty, contiguous.
    fn dense(t: &Tensor, like: &Tensor) -> bool {
        matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16)
            && t.dtype() == like.dtype()
            && t.elem_count() > 0
            && t.is_contiguous()
            && t.device().is_cuda()
            && t.device().same_device(like.device())
    }

    /// [`dense`], and from the start of its own allocation: a bias, whose alignment
    /// cuBLASLt's heuristic reads from its address.
    fn whole(t: &Tensor, like: &Tensor) -> bool {
        dense(t, like) && t.layout().start_offset() == 0
    }

    /// Products `x · weightᵀ (+ bias) (+ residual)` as each of `products` lays it out (a batch
    /// of them when its `batch > 1`), writing parts of one output of `shape`: one product, or
    /// one per head. The bias and the residual ride along, read under their own storage locks
    /// (shared locks, like the two candle takes for `x` and `weight`).
    struct Fused {
        lt: Arc<Lt>,
        products: Vec<Gemm>,
        shape: Shape,
        bias: Option<Tensor>,
        residual: Option<Tensor>,
    }

    impl Fused {
        /// The product's output, or `None` when cuBLASLt has no algorithm for it (nothing was
        /// queued: candle's operations run it instead).
        fn apply(&self, x: &Tensor, weight: &Tensor) -> candle_core::Result<Option<Tensor>> {
            match x.apply_op2_no_bwd(weight, self) {
                Ok(out) => Ok(Some(out)),
                Err(e) if unplanned(&e) => {
                    tracing::debug!(
                        target: "rerank::device",
                        gemm = ?self.products.first(),
                        dtype = ?x.dtype(),
                        "cuBLASLt has no algorithm for this product; candle's operations run it: {e}"
                    );
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        }
    }

    impl CustomOp2 for Fused {
        fn name(&self) -> &'static str {
            "rerank-cublaslt-product"
        }

        fn cpu_fwd(
            &self,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> candle_core::Result<(CpuStorage, Shape)> {
            candle_core::bail!("the cuBLASLt products run on CUDA devices only")
        }

        fn cuda_fwd(
            &self,
            x: &CudaStorage,
            x_layout: &Layout,
            w: &CudaStorage,
            w_layout: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let bias = self.bias.as_ref().map(Tensor::storage_and_layout);
            let residual = self.residual.as_ref().map(Tensor::storage_and_layout);
            let operands = Operands {
                x: (x, x_layout.start_offset()),
                w: (w, w_layout.start_offset()),
                bias: bias.as_ref().map(operand).transpose()?,
                residual: residual.as_ref().map(operand).transpose()?,
            };
            let job = Job {
                device: &x.device,
                products: &self.products,
                len: self.shape.elem_count(),
                ops: &operands,
            };
            let lt = &self.lt;
            let out = match x.dtype() {
                DType::F32 => lt.run::<f32>(&job, sys::cudaDataType::CUDA_R_32F),
                DType::F16 => lt.run::<f16>(&job, sys::cudaDataType::CUDA_R_16F),
                DType::BF16 => lt.run::<bf16>(&job, sys::cudaDataType::CUDA_R_16BF),
                other => candle_core::bail!("cuBLASLt product: none for {other:?}"),
            }?;
            Ok((out, self.shape.clone()))
        }
    }

    /// A product cuBLASLt could not plan (its descriptors or its heuristic refused it): the
    /// error of a product of which nothing was queued.
    #[derive(Debug)]
    struct Unplanned(result::CublasError);

    impl std::fmt::Display for Unplanned {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cuBLASLt could not plan the product: {}", self.0)
        }
    }

    impl std::error::Error for Unplanned {}

    /// Whether `e` is an [`Unplanned`] product, under any context candle wrapped it in.
    fn unplanned(e: &candle_core::Error) -> bool {
        match e {
            candle_core::Error::Cuda(inner) => inner.downcast_ref::<Unplanned>().is_some(),
            candle_core::Error::WithBacktrace { inner, .. }
            | candle_core::Error::Context { inner, .. } => unplanned(inner),
            _ => false,
        }
    }

    /// A locked operand's CUDA storage and its offset (an error for another device's).
    fn operand<'a>(
        (storage, layout): &'a (StorageRef<'_>, &Layout),
    ) -> candle_core::Result<(&'a CudaStorage, usize)> {
        match &**storage {
            Storage::Cuda(s) => Ok((s, layout.start_offset())),
            _ => candle_core::bail!("cuBLASLt linear: an operand is not on the CUDA device"),
        }
    }

    /// An operand's elements of `T` from its offset on.
    fn view<T: CudaDType>(
        (storage, offset): (&CudaStorage, usize),
    ) -> candle_core::Result<CudaView<'_, T>> {
        Ok(storage.as_cuda_slice::<T>()?.slice(offset..))
    }

    /// What [`Lt::run`] runs: `products` on `device`, writing one output of `len` elements, on
    /// `ops`.
    struct Job<'a> {
        device: &'a CudaDevice,
        products: &'a [Gemm],
        len: usize,
        ops: &'a Operands<'a>,
    }

    /// The operands' storages and their layouts' offsets, in elements (each contiguous from
    /// there: [`linear`] checked).
    struct Operands<'a> {
        x: (&'a CudaStorage, usize),
        w: (&'a CudaStorage, usize),
        bias: Option<(&'a CudaStorage, usize)>,
        residual: Option<(&'a CudaStorage, usize)>,
    }

    fn cublas_error(e: result::CublasError) -> candle_core::Error {
        candle_core::Error::Cuda(Box::new(e))
    }

    /// Device addresses of one product's operands: `A` (the weight), `B` (the rows), the
    /// bias, `C` (the residual; `D` itself with `beta = 0` when there is none) and the
    /// output `D`.
    struct Pointers {
        a: u64,
        b: u64,
        bias: Option<u64>,
        c: Option<u64>,
        d: u64,
    }

    /// A cuBLASLt handle and its workspace on one device.
    struct Lt {
        handle: sys::cublasLtHandle_t,
        workspace: CudaSlice<u8>,
        /// The algorithm the heuristic picked for each kind of product planned on this handle
        /// ([`Key`]): asked once, not once per product (a layer's products repeat every batch).
        algos: Mutex<HashMap<Key, sys::cublasLtMatmulAlgo_t>>,
        /// Held while a job's products are planned and queued ([`Lt::run`]), so that host
        /// threads call cuBLASLt on this handle one at a time (unless `RERANK_CUDA_LT_LOCK=0`:
        /// [`lock_calls`]). Queuing takes microseconds and waits for nothing on the device.
        calls: Mutex<()>,
    }

    /// What the heuristic's choice depends on: the layout, the format, TF32 or not, the
    /// epilogue, whether C is read, and the alignments of the four matrices and the bias.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    struct Key {
        gemm: Gemm,
        ty: sys::cudaDataType,
        tf32: bool,
        bias: bool,
        c: bool,
        align: [u32; 5],
    }

    // SAFETY: cuBLASLt's functions may be called from any host thread with the same handle;
    // every product through it is queued on its device's one stream (`open_device`: every
    // host thread queues to it), which orders the uses of the workspace.
    unsafe impl Send for Lt {}
    unsafe impl Sync for Lt {}

    impl Drop for Lt {
        fn drop(&mut self) {
            // SAFETY: created by `Lt::for_device`, destroyed once, after its last product was
            // queued (a queued product keeps its own reference).
            let _ = unsafe { result::destroy_handle(self.handle) };
        }
    }

    /// A cuBLASLt descriptor destroyed when dropped.
    struct Owned<T: Copy>(T, unsafe fn(T) -> Result<(), result::CublasError>);

    impl<T: Copy> Drop for Owned<T> {
        fn drop(&mut self) {
            // SAFETY: each descriptor is created once, in `Lt::plan`, and dropped once.
            let _ = unsafe { (self.1)(self.0) };
        }
    }

    /// The largest power of two, at most 256, that divides the device address `at` and the
    /// byte stride `stride` (0 for none): what a cuBLASLt algorithm may assume of every matrix
    /// of the operand there.
    fn alignment(at: u64, stride: u64) -> u32 {
        1 << (at | stride).trailing_zeros().min(8)
    }

    impl Lt {
        /// The handle of `device`, shared while any layer on it holds it.
        fn for_device(device: &CudaDevice) -> candle_core::Result<Handle> {
            static LIVE: Mutex<Vec<(DeviceId, Weak<Lt>)>> = Mutex::new(Vec::new());
            let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
            live.retain(|(_, lt)| lt.strong_count() > 0);
            let found = live.iter().find(|(id, _)| *id == device.id());
            if let Some(lt) = found.and_then(|(_, lt)| lt.upgrade()) {
                return Ok(Handle(lt));
            }
            device
                .cuda_stream()
                .context()
                .bind_to_thread()
                .map_err(|e| candle_core::Error::Cuda(Box::new(e)))?;
            // SAFETY: the workspace is only ever handed to cuBLASLt as scratch space.
            let workspace = unsafe { device.alloc::<u8>(WORKSPACE_BYTES)? };
            let handle = result::create_handle().map_err(cublas_error)?;
            let lt = Arc::new(Lt {
                handle,
                workspace,
                algos: Mutex::new(HashMap::new()),
                calls: Mutex::new(()),
            });
            live.push((device.id(), Arc::downgrade(&lt)));
            Ok(Handle(lt))
        }

        /// The job's products (each a batch of products when its `batch > 1`) in `T` (`ty`, its
        /// cuBLASLt name) on its device, writing one new output of its `len` elements, which
        /// together they write whole. Every product is planned before any is queued, so that an
        /// [`Unplanned`] error leaves nothing queued; one that would reach past an operand is
        /// refused.
        fn run<T: CudaDType + DeviceRepr>(
            &self,
            job: &Job,
            ty: sys::cudaDataType,
        ) -> candle_core::Result<CudaStorage> {
            let Job {
                device,
                products,
                len,
                ops,
            } = *job;
            let stream = device.cuda_stream();
            let (x, w) = (view::<T>(ops.x)?, view::<T>(ops.w)?);
            let bias = ops.bias.map(view::<T>).transpose()?;
            let residual = ops.residual.map(view::<T>).transpose()?;
            for g in products {
                let spans = g.spans();
                let within = spans.a <= w.len()
                    && spans.b <= x.len()
                    && spans.d <= len
                    && bias.as_ref().is_none_or(|b| spans.bias <= b.len())
                    && residual.as_ref().is_none_or(|r| spans.d <= r.len());
                if !within {
                    candle_core::bail!("cuBLASLt product {g:?} reaches past its operands");
                }
            }
            // SAFETY: every element is written by the products before it is read.
            let mut out = unsafe { device.alloc::<T>(len)? };
            {
                let (w_ptr, _w) = w.device_ptr(&stream);
                let (x_ptr, _x) = x.device_ptr(&stream);
                let bias = bias.as_ref().map(|b| b.device_ptr(&stream));
                let residual = residual.as_ref().map(|r| r.device_ptr(&stream));
                let (out_ptr, _out) = out.device_ptr_mut(&stream);
                let size = std::mem::size_of::<T>() as u64;
                let at = |base: u64, offset: usize| base + offset as u64 * size;
                let pointers: Vec<Pointers> = products
                    .iter()
                    .map(|g| Pointers {
                        a: at(w_ptr, g.offset_a),
                        b: at(x_ptr, g.offset_b),
                        bias: bias.as_ref().map(|(p, _)| *p),
                        c: residual.as_ref().map(|(p, _)| at(*p, g.offset_d)),
                        d: at(out_ptr, g.offset_d),
                    })
                    .collect();
                // A failure to bind shows as the products' own errors below.
                let _ = stream.context().bind_to_thread();
                let _calls =
                    lock_calls().then(|| self.calls.lock().unwrap_or_else(|e| e.into_inner()));
                let unplanned = |e| candle_core::Error::Cuda(Box::new(Unplanned(e)));
                let plans = products
                    .iter()
                    .zip(&pointers)
                    // SAFETY: the pointers are live allocations of `T`, each product within
                    // them (checked above).
                    .map(|(g, p)| unsafe { self.plan(*g, ty, p) })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(unplanned)?;
                for (plan, p) in plans.iter().zip(&pointers) {
                    // SAFETY: every pointer is a live allocation of `T` that the product stays
                    // within (checked above), on `stream`, which orders this product after the
                    // operations that wrote them, as candle's own products are ordered; the
                    // guards above keep them alive until it is queued.
                    unsafe { self.matmul(plan, p, &stream) }?;
                }
            }
            Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
        }

        /// `D = op(A) · B (+ C) (+ bias)` as `plan` lays it out, on the operands at `p`, with
        /// f32 accumulation, queued on `stream`.
        ///
        /// # Safety
        /// The pointers must be live device allocations large enough for the planned product,
        /// ordered on `stream`.
        unsafe fn matmul(
            &self,
            plan: &Plan,
            p: &Pointers,
            stream: &Arc<CudaStream>,
        ) -> candle_core::Result<()> {
            let (alpha, beta) = (1f32, if p.c.is_some() { 1f32 } else { 0f32 });
            let (workspace_ptr, _w) = self.workspace.device_ptr(stream);
            result::matmul(
                self.handle,
                plan.desc.0,
                ptr(&alpha),
                ptr(&beta),
                p.a as *const c_void,
                plan.a.0,
                p.b as *const c_void,
                plan.b.0,
                p.c.unwrap_or(p.d) as *const c_void,
                plan.d.0,
                p.d as *mut c_void,
                plan.d.0,
                &plan.algo,
                workspace_ptr as *mut c_void,
                workspace_bytes(),
                stream.cu_stream() as sys::cudaStream_t,
            )
            .map_err(cublas_error)
        }

        /// The descriptors of the product `gemm` in `ty` on the operands at `p`, and the
        /// algorithm cuBLASLt's heuristic picks for them (asked once per [`Key`]). Queues
        /// nothing.
        ///
        /// # Safety
        /// The pointers must be live device allocations of `ty` large enough for `gemm`
        /// (their values give the alignments the heuristic assumes).
        unsafe fn plan(
            &self,
            gemm: Gemm,
            ty: sys::cudaDataType,
            p: &Pointers,
        ) -> Result<Plan, result::CublasError> {
            use sys::cublasLtMatmulDescAttributes_t as Desc;
            use sys::cublasLtMatmulPreferenceAttributes_t as Pref;
            use sys::cublasLtMatrixLayoutAttribute_t as LayoutAttr;
            // f32 on TF32 tensor cores only when the process allowed it (`models::allow_tf32`,
            // candle's switch for its own f32 products).
            let tf32 = ty == sys::cudaDataType::CUDA_R_32F
                && candle_core::cuda_backend::gemm_reduced_precision_f32();
            let compute = match tf32 {
                true => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                false => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            };
            let desc = Owned(
                result::create_matmul_desc(compute, sys::cudaDataType::CUDA_R_32F)?,
                result::destroy_matmul_desc,
            );
            let set = |attr: Desc, value: *const c_void, size: usize| {
                result::set_matmul_desc_attribute(desc.0, attr, value, size)
            };
            // A (the weight, the keys) read transposed unless `trans_a` is off; B as it is.
            let (transa, transb) = (i32::from(gemm.trans_a), 0i32);
            set(Desc::CUBLASLT_MATMUL_DESC_TRANSA, ptr(&transa), 4)?;
            set(Desc::CUBLASLT_MATMUL_DESC_TRANSB, ptr(&transb), 4)?;
            let epilogue = match &p.bias {
                Some(bias) => {
                    set(Desc::CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptr(bias), 8)?;
                    sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS
                }
                None => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            };
            set(Desc::CUBLASLT_MATMUL_DESC_EPILOGUE, ptr(&epilogue), 4)?;
            if let (Some(_), true) = (&p.bias, gemm.batch > 1) {
                let stride = gemm.stride_bias as i64;
                set(
                    Desc::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                    ptr(&stride),
                    8,
                )?;
            }
            // Each operand `rows x cols` column-major, `ld` apart, and `stride` apart from one
            // product of a batch to the next.
            type Matrix = Owned<sys::cublasLtMatrixLayout_t>;
            let layout =
                |rows: usize, cols: usize, ld: usize, stride: usize| -> Result<Matrix, _> {
                    let l = Owned(
                        result::create_matrix_layout(ty, rows as u64, cols as u64, ld as i64)?,
                        result::destroy_matrix_layout,
                    );
                    if gemm.batch > 1 {
                        let (count, stride) = (gemm.batch as i32, stride as i64);
                        let count_attr = LayoutAttr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT;
                        result::set_matrix_layout_attribute(l.0, count_attr, ptr(&count), 4)?;
                        let stride_attr = LayoutAttr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET;
                        result::set_matrix_layout_attribute(l.0, stride_attr, ptr(&stride), 8)?;
                    }
                    Ok(l)
                };
            let a = match gemm.trans_a {
                true => layout(gemm.k, gemm.m, gemm.lda, gemm.stride_a)?,
                false => layout(gemm.m, gemm.k, gemm.lda, gemm.stride_a)?,
            };
            let b = layout(gemm.k, gemm.n, gemm.ldb, gemm.stride_b)?;
            let d = layout(gemm.m, gemm.n, gemm.ldd, gemm.stride_d)?;
            // What an algorithm may assume of every matrix of an operand: its first address
            // and, in a batch, each stride from it.
            let size = element_bytes(ty);
            let batched = |stride: usize| match gemm.batch > 1 {
                true => (stride * size) as u64,
                false => 0,
            };
            let align_a = alignment(p.a, batched(gemm.stride_a));
            let align_b = alignment(p.b, batched(gemm.stride_b));
            let align_c = alignment(p.c.unwrap_or(p.d), batched(gemm.stride_d));
            let align_d = alignment(p.d, batched(gemm.stride_d));
            let key = Key {
                gemm,
                ty,
                tf32,
                bias: p.bias.is_some(),
                c: p.c.is_some(),
                align: [
                    align_a,
                    align_b,
                    align_c,
                    align_d,
                    alignment(p.bias.unwrap_or(0), 0),
                ],
            };
            let known = match cache_algos() {
                true => self
                    .algos
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&key)
                    .copied(),
                false => None,
            };
            if let Some(algo) = known {
                return Ok(Plan {
                    desc,
                    a,
                    b,
                    d,
                    algo,
                });
            }
            let pref = Owned(result::create_matmul_pref()?, result::destroy_matmul_pref);
            let workspace = workspace_bytes() as u64;
            let prefs: [(Pref, *const c_void, usize); 5] = [
                (
                    Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    ptr(&workspace),
                    8,
                ),
                (
                    Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    ptr(&align_a),
                    4,
                ),
                (
                    Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    ptr(&align_b),
                    4,
                ),
                (
                    Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    ptr(&align_c),
                    4,
                ),
                (
                    Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                    ptr(&align_d),
                    4,
                ),
            ];
            for (attr, value, size) in prefs {
                result::set_matmul_pref_attribute(pref.0, attr, value, size)?;
            }
            let heuristic =
                result::get_matmul_algo_heuristic(self.handle, desc.0, a.0, b.0, d.0, d.0, pref.0)?;
            let algo = heuristic.algo;
            let mut algos = self.algos.lock().unwrap_or_else(|e| e.into_inner());
            // Every batch length makes new kinds; a server that saw many keeps the latest.
            if algos.len() >= MAX_ALGOS {
                algos.clear();
            }
            algos.insert(key, algo);
            Ok(Plan {
                desc,
                a,
                b,
                d,
                algo,
            })
        }
    }

    /// A planned product: its descriptors (C is laid out as D) and its algorithm.
    struct Plan {
        desc: Owned<sys::cublasLtMatmulDesc_t>,
        a: Owned<sys::cublasLtMatrixLayout_t>,
        b: Owned<sys::cublasLtMatrixLayout_t>,
        d: Owned<sys::cublasLtMatrixLayout_t>,
        algo: sys::cublasLtMatmulAlgo_t,
    }

    /// The size of one element of `ty` (one of the three formats the products take).
    fn element_bytes(ty: sys::cudaDataType) -> usize {
        match ty {
            sys::cudaDataType::CUDA_R_32F => 4,
            _ => 2,
        }
    }

    /// `value`'s address, as cuBLASLt's attribute setters take it.
    fn ptr<T>(value: &T) -> *const c_void {
        (value as *const T).cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of column-major BLAS products as cuBLASLt's documentation defines them, with A
    /// read transposed (stored `k x m`) or as it is (stored `m x k`) as `g.trans_a` says: for
    /// each product `i` of `g.batch`, its operands `i` strides on from their offsets, `D =
    /// op(A) · B + C` (`alpha = beta = 1`), then the bias epilogue `D[r, j] += bias[r]`, written
    /// into `d` (C read from `d` as it was).
    fn blas_into(g: Gemm, a: &[f32], b: &[f32], c: bool, bias: Option<&[f32]>, d: &mut [f32]) {
        let spans = g.spans();
        assert!(a.len() >= spans.a && b.len() >= spans.b && d.len() >= spans.d);
        assert!(bias.is_none_or(|bias| bias.len() >= spans.bias));
        assert!(g.ldb >= g.k && g.ldd >= g.m);
        assert!(g.lda >= if g.trans_a { g.k } else { g.m });
        for i in 0..g.batch {
            let (a, b) = (
                &a[g.offset_a + i * g.stride_a..],
                &b[g.offset_b + i * g.stride_b..],
            );
            let op_a = |r: usize, p: usize| match g.trans_a {
                true => a[p + r * g.lda],
                false => a[r + p * g.lda],
            };
            for j in 0..g.n {
                for r in 0..g.m {
                    let dot: f32 = (0..g.k).map(|p| op_a(r, p) * b[p + j * g.ldb]).sum();
                    let at = g.offset_d + i * g.stride_d + r + j * g.ldd;
                    let c = if c { d[at] } else { 0.0 };
                    d[at] = dot + c + bias.map_or(0.0, |b| b[i * g.stride_bias + r]);
                }
            }
        }
    }

    /// [`blas_into`] a new output, as long as the products reach, C given apart.
    fn blas(g: Gemm, a: &[f32], b: &[f32], c: Option<&[f32]>, bias: Option<&[f32]>) -> Vec<f32> {
        let mut d = match c {
            Some(c) => c[..g.spans().d].to_vec(),
            None => vec![0f32; g.spans().d],
        };
        blas_into(g, a, b, c.is_some(), bias, &mut d);
        d
    }

    /// `count` additive key masks of `keys` keys, a different one each: 0 for a key, -100 for
    /// padding, in rows padded to `width` (a multiple of 4) with values no key may read (NaN).
    fn masks(count: usize, keys: usize) -> (usize, Vec<f32>) {
        let width = keys.next_multiple_of(4);
        let mask = (0..count * width)
            .map(|i| match (i / width, i % width) {
                (_, j) if j >= keys => f32::NAN,
                (m, j) if (m + j) % 3 == 2 => -100.0,
                _ => 0.0,
            })
            .collect();
        (width, mask)
    }

    fn value(i: usize, s: f32) -> f32 {
        ((i * 7 + 3) % 11) as f32 * s - 1.0
    }

    #[test]
    fn the_row_major_plan_gives_x_times_w_transposed_plus_bias_plus_residual() {
        for (rows, inputs, outputs) in [(3, 4, 5), (1, 7, 2), (6, 1, 1)] {
            let x: Vec<f32> = (0..rows * inputs).map(|i| value(i, 0.25)).collect();
            let w: Vec<f32> = (0..outputs * inputs).map(|i| value(i, 0.5)).collect();
            let bias: Vec<f32> = (0..outputs).map(|i| i as f32 * 0.1).collect();
            let residual: Vec<f32> = (0..rows * outputs).map(|i| value(i, 0.125)).collect();
            // The weight is A, the rows B, the residual C, all as they lie row-major.
            let g = Gemm::row_major(rows, inputs, outputs);
            let got = blas(g, &w, &x, Some(&residual), Some(&bias));
            assert_eq!(got.len(), rows * outputs);
            for r in 0..rows {
                for o in 0..outputs {
                    let dot: f32 = (0..inputs)
                        .map(|p| x[r * inputs + p] * w[o * inputs + p])
                        .sum();
                    let want = dot + residual[r * outputs + o] + bias[o];
                    // The output read row-major: row r, column o.
                    assert_eq!(
                        got[r * outputs + o],
                        want,
                        "{rows}x{inputs}x{outputs}: {r}, {o}"
                    );
                }
            }
        }
    }

    /// The attention's scores as `scores` plans them: for each of `matrices` (row, head)
    /// pairs, `q (queries, d) · kᵀ (d, keys) + mask[matrix] + plus`, row-major, the matrices
    /// one after the other, as `(.., queries, keys)`.
    #[test]
    fn the_batched_plan_gives_each_matrix_its_scores_plus_its_own_mask() {
        for (matrices, queries, keys, d) in [(3, 4, 5, 2), (2, 1, 6, 3), (4, 3, 3, 1)] {
            let q: Vec<f32> = (0..matrices * queries * d)
                .map(|i| value(i, 0.25))
                .collect();
            let k: Vec<f32> = (0..matrices * keys * d).map(|i| value(i, 0.5)).collect();
            let (width, mask) = masks(matrices, keys);
            let plus: Vec<f32> = (0..matrices * queries * keys)
                .map(|i| value(i, 0.125))
                .collect();
            let g = Gemm::row_major(queries, d, keys)
                .batched(matrices)
                .bias_stride(width);
            let got = blas(g, &k, &q, Some(&plus), Some(&mask));
            assert_eq!(got.len(), matrices * queries * keys);
            for m in 0..matrices {
                for i in 0..queries {
                    for j in 0..keys {
                        let dot: f32 = (0..d)
                            .map(|p| q[(m * queries + i) * d + p] * k[(m * keys + j) * d + p])
                            .sum();
                        let at = (m * queries + i) * keys + j;
                        let want = dot + plus[at] + mask[m * width + j];
                        assert_eq!(
                            got[at], want,
                            "{matrices}x{queries}x{keys}x{d}: {m} {i} {j}"
                        );
                    }
                }
            }
        }
    }

    /// One head's products over a batch as `head_scores` and `head_context` plan them, read
    /// where a stacked Q, K, V projection wrote them: every head's scores (plus its row's key
    /// mask) and context equal those computed from their definitions, and together the
    /// products write every element of their outputs (which the device allocates without
    /// initializing) once.
    #[test]
    fn the_per_head_plans_read_the_stacked_projection_in_place_and_fill_their_outputs() {
        for (rows, t, heads, d, queries) in [(2, 5, 3, 2, 5), (3, 4, 2, 3, 1), (1, 1, 1, 1, 1)] {
            let (hidden, line) = (heads * d, 3 * heads * d);
            let qkv: Vec<f32> = (0..rows * t * line).map(|i| value(i, 0.25)).collect();
            let (width, mask) = masks(rows, t);
            // Q, K, V of row r, token i, head h, component p.
            let at = |part: usize, r: usize, i: usize, h: usize, p: usize| {
                qkv[(r * t + i) * line + part * hidden + h * d + p]
            };
            let mut scores = vec![f32::NAN; rows * heads * queries * t];
            for h in 0..heads {
                let g = Gemm::head_scores((rows, t), (heads, d), queries, width, h);
                blas_into(g, &qkv, &qkv, false, Some(&mask), &mut scores);
            }
            let mut context = vec![f32::NAN; rows * queries * hidden];
            for h in 0..heads {
                let g = Gemm::head_context((rows, t), (heads, d), queries, h);
                blas_into(g, &qkv, &scores, false, None, &mut context);
            }
            let case = format!("{rows}x{t}, {heads} heads of {d}, {queries} queries");
            for (r, h, i) in (0..rows * heads * queries)
                .map(|x| (x / (heads * queries), x / queries % heads, x % queries))
            {
                let row = &scores[((r * heads + h) * queries + i) * t..][..t];
                for (j, &got) in row.iter().enumerate() {
                    let dot: f32 = (0..d).map(|p| at(0, r, i, h, p) * at(1, r, j, h, p)).sum();
                    assert_eq!(got, dot + mask[r * width + j], "{case}: {r} {h} {i} {j}");
                }
                for p in 0..d {
                    let want: f32 = (0..t).map(|j| row[j] * at(2, r, j, h, p)).sum();
                    let got = context[(r * queries + i) * hidden + h * d + p];
                    assert_eq!(got, want, "{case}: context {r} {h} {i} {p}");
                }
            }
        }
    }
}
