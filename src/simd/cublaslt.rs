//! The linear layers' product on a CUDA device through cuBLASLt (feature `cuda`): `y = x · Wᵀ
//! + b + r` as one `cublasLtMatmul`, the bias added by its epilogue and the residual `r` as its
//! `C` operand (`beta = 1`), where candle runs a product and then one broadcast addition per
//! term, each a pass over the output. PyTorch's `addmm` adds its bias the same way.
//!
//! Numbers: the products accumulate in f32 for every format (`CUBLAS_COMPUTE_32F`: f32 stays
//! exact to the references; TF32 only once the process asked for it, `models::allow_tf32`), and
//! the epilogue adds in f32 before the one rounding to the output's format.
//!
//! What it takes: a 2-D `(rows, inputs)` input, a `(outputs, inputs)` weight, a bias
//! `(outputs)` and a residual `(rows, outputs)`, all contiguous from the start of their own
//! allocation (cuBLASLt's algorithms may assume 256-byte aligned operands: a view into a larger
//! buffer is left to candle), in f32, f16 or bf16. Anything else returns `None` and candle's
//! operations run it. `RERANK_CUDA_FUSED_LINEAR=0` turns the path off for the process.
//!
//! The layout of the product (which operand is read transposed, the leading dimensions) is
//! [`Gemm`], tested in every build against a column-major product written from the BLAS
//! definition; the device calls themselves run only on a GPU (`scripts/gpu_check.sh`).

/// How a row-major product `y = x · Wᵀ (+ b) (+ r)` is put to a column-major BLAS
/// (`D = op(A) · op(B) + C`, A `m x k`, B `k x n`, D `m x n`): a row-major matrix is its
/// transpose in column-major order, so `yᵀ = W · xᵀ`, with A the weight read transposed
/// (`(inputs, outputs)` column-major, `ld = inputs`), B the rows as they are (`(inputs,
/// rows)` column-major, `ld = inputs`) and D the output (`(outputs, rows)`, `ld = outputs`);
/// a bias of `m` entries is added to every column of D, i.e. to every output row. A is always
/// read transposed (`CUBLAS_OP_T`, stored `k x m`), B never.
///
/// Read by the `cuda` build's product; its test runs in every build.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldd: usize,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl Gemm {
    /// The product of `rows` rows of `inputs` by a weight of `outputs x inputs`.
    pub fn row_major(rows: usize, inputs: usize, outputs: usize) -> Self {
        Gemm {
            m: outputs,
            n: rows,
            k: inputs,
            lda: inputs,
            ldb: inputs,
            ldd: outputs,
        }
    }
}

#[cfg(feature = "cuda")]
pub(crate) use device::{handle, linear, Handle};

/// The product on the device: cuBLASLt through cudarc (candle's copy of it).
#[cfg(feature = "cuda")]
mod device {
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

    /// A cuBLASLt handle and its workspace for one candle CUDA device (one stream), shared by
    /// every layer on it and released with the last of them.
    #[derive(Clone)]
    pub(crate) struct Handle(Arc<Lt>);

    impl std::fmt::Debug for Handle {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cuBLASLt handle")
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
        *ON.get_or_init(|| {
            std::env::var("RERANK_CUDA_FUSED_LINEAR").map_or(true, |v| v.trim() != "0")
        })
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
        let (dtype, device) = (x.dtype(), x.device());
        let dense =
            |t: &Tensor| t.dtype() == dtype && t.is_contiguous() && t.device().same_device(device);
        let fits = matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
            && rows * inputs * outputs > 0
            && inputs == w_inputs
            && dense(x)
            && dense(weight)
            && bias.is_none_or(|b| {
                dense(b) && b.layout().start_offset() == 0 && b.dims() == [outputs]
            })
            && residual.is_none_or(|r| dense(r) && r.dims() == [rows, outputs]);
        if !fits || !device.is_cuda() {
            return Ok(None);
        }
        let op = FusedLinear {
            lt: lt.0.clone(),
            bias: bias.cloned(),
            residual: residual.cloned(),
        };
        x.apply_op2_no_bwd(weight, &op).map(Some)
    }

    /// The custom operation on `(x, weight)`: the bias and the residual ride along, read
    /// under their own storage locks (shared locks, like the two candle takes for `x` and
    /// `weight`).
    struct FusedLinear {
        lt: Arc<Lt>,
        bias: Option<Tensor>,
        residual: Option<Tensor>,
    }

    impl CustomOp2 for FusedLinear {
        fn name(&self) -> &'static str {
            "rerank-cublaslt-linear"
        }

        fn cpu_fwd(
            &self,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> candle_core::Result<(CpuStorage, Shape)> {
            candle_core::bail!("the cuBLASLt linear layer runs on CUDA devices only")
        }

        fn cuda_fwd(
            &self,
            x: &CudaStorage,
            x_layout: &Layout,
            w: &CudaStorage,
            w_layout: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let (rows, inputs) = x_layout.shape().dims2()?;
            let (outputs, _) = w_layout.shape().dims2()?;
            let gemm = Gemm::row_major(rows, inputs, outputs);
            let bias = self.bias.as_ref().map(Tensor::storage_and_layout);
            let residual = self.residual.as_ref().map(Tensor::storage_and_layout);
            let operands = Operands {
                x: (x, x_layout.start_offset()),
                w: (w, w_layout.start_offset()),
                bias: bias.as_ref().map(operand).transpose()?,
                residual: residual.as_ref().map(operand).transpose()?,
            };
            let lt = &self.lt;
            let out = match x.dtype() {
                DType::F32 => {
                    lt.run::<f32>(&x.device, gemm, &operands, sys::cudaDataType::CUDA_R_32F)
                }
                DType::F16 => {
                    lt.run::<f16>(&x.device, gemm, &operands, sys::cudaDataType::CUDA_R_16F)
                }
                DType::BF16 => {
                    lt.run::<bf16>(&x.device, gemm, &operands, sys::cudaDataType::CUDA_R_16BF)
                }
                other => candle_core::bail!("cuBLASLt linear: no product for {other:?}"),
            }?;
            Ok((out, Shape::from((rows, outputs))))
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
    }

    // SAFETY: cuBLASLt's functions may be called from any host thread with the same handle;
    // every product through it is queued on its device's one stream, which orders the uses of
    // the workspace.
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
            // SAFETY: each descriptor is created once, in `Lt::matmul`, and dropped once.
            let _ = unsafe { (self.1)(self.0) };
        }
    }

    /// The largest power of two, at most 256, that divides the device address `at`: what a
    /// cuBLASLt algorithm may assume of the operand there.
    fn alignment(at: u64) -> u32 {
        1 << at.trailing_zeros().min(8)
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
            let lt = Arc::new(Lt { handle, workspace });
            live.push((device.id(), Arc::downgrade(&lt)));
            Ok(Handle(lt))
        }

        /// One product in `T` (`ty`, its cuBLASLt name) on `device`: a new output,
        /// `gemm.m · gemm.n` long.
        fn run<T: CudaDType + DeviceRepr>(
            &self,
            device: &CudaDevice,
            gemm: Gemm,
            ops: &Operands,
            ty: sys::cudaDataType,
        ) -> candle_core::Result<CudaStorage> {
            let stream = device.cuda_stream();
            let (x, w) = (view::<T>(ops.x)?, view::<T>(ops.w)?);
            let bias = ops.bias.map(view::<T>).transpose()?;
            let residual = ops.residual.map(view::<T>).transpose()?;
            // SAFETY: every element is written by the product before it is read.
            let mut out = unsafe { device.alloc::<T>(gemm.m * gemm.n)? };
            {
                let (w_ptr, _w) = w.device_ptr(&stream);
                let (x_ptr, _x) = x.device_ptr(&stream);
                let bias = bias.as_ref().map(|b| b.device_ptr(&stream));
                let residual = residual.as_ref().map(|r| r.device_ptr(&stream));
                let (out_ptr, _out) = out.device_ptr_mut(&stream);
                let pointers = Pointers {
                    a: w_ptr,
                    b: x_ptr,
                    bias: bias.as_ref().map(|(p, _)| *p),
                    c: residual.as_ref().map(|(p, _)| *p),
                    d: out_ptr,
                };
                // SAFETY: every pointer is a live allocation of `T` of the size `gemm` reads or
                // writes (shapes and contiguity checked by `linear`), on `stream`, which orders
                // this product after the operations that wrote them, as candle's own products
                // are ordered; the guards above keep them alive until it is queued.
                unsafe { self.matmul(gemm, ty, &pointers, &stream) }.map_err(cublas_error)?;
            }
            Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
        }

        /// `D = op(A) · B (+ C) (+ bias)` as `gemm` lays it out, in `ty` with f32
        /// accumulation, queued on `stream`.
        ///
        /// # Safety
        /// The pointers must be live device allocations of `ty` large enough for `gemm`,
        /// ordered on `stream`.
        unsafe fn matmul(
            &self,
            gemm: Gemm,
            ty: sys::cudaDataType,
            p: &Pointers,
            stream: &Arc<CudaStream>,
        ) -> Result<(), result::CublasError> {
            use sys::cublasLtMatmulDescAttributes_t as Desc;
            use sys::cublasLtMatmulPreferenceAttributes_t as Pref;
            // A failure to bind shows as the product's own error below.
            let _ = stream.context().bind_to_thread();
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
            // A (the weight) read transposed, B (the rows) as it is.
            let (transa, transb) = (1i32, 0i32);
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
            let layout = |rows: usize, cols: usize, ld: usize| {
                result::create_matrix_layout(ty, rows as u64, cols as u64, ld as i64)
                    .map(|l| Owned(l, result::destroy_matrix_layout))
            };
            let a = layout(gemm.k, gemm.m, gemm.lda)?;
            let b = layout(gemm.k, gemm.n, gemm.ldb)?;
            let d = layout(gemm.m, gemm.n, gemm.ldd)?;
            let pref = Owned(result::create_matmul_pref()?, result::destroy_matmul_pref);
            let workspace = WORKSPACE_BYTES as u64;
            let c = p.c.unwrap_or(p.d);
            let [align_a, align_b, align_c, align_d] = [p.a, p.b, c, p.d].map(alignment);
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
            let (alpha, beta) = (1f32, if p.c.is_some() { 1f32 } else { 0f32 });
            let (workspace_ptr, _w) = self.workspace.device_ptr(stream);
            result::matmul(
                self.handle,
                desc.0,
                ptr(&alpha),
                ptr(&beta),
                p.a as *const c_void,
                a.0,
                p.b as *const c_void,
                b.0,
                c as *const c_void,
                d.0,
                p.d as *mut c_void,
                d.0,
                &heuristic.algo,
                workspace_ptr as *mut c_void,
                WORKSPACE_BYTES,
                stream.cu_stream() as sys::cudaStream_t,
            )
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

    /// A column-major BLAS product as its reference documentation defines it, with A read
    /// transposed (stored `k x m`) as the product reads it: `D = Aᵀ · B + C` (`alpha = beta =
    /// 1`), then the bias epilogue `D[i, j] += bias[i]`.
    fn blas(g: Gemm, a: &[f32], b: &[f32], c: Option<&[f32]>, bias: Option<&[f32]>) -> Vec<f32> {
        assert!(g.lda >= g.k && a.len() >= g.lda * (g.m - 1) + g.k);
        assert!(g.ldb >= g.k && b.len() >= g.ldb * (g.n - 1) + g.k);
        let op_a = |i: usize, p: usize| a[p + i * g.lda];
        let mut d = vec![0f32; g.ldd * g.n];
        for j in 0..g.n {
            for i in 0..g.m {
                let dot: f32 = (0..g.k).map(|p| op_a(i, p) * b[p + j * g.ldb]).sum();
                let c = c.map_or(0.0, |c| c[i + j * g.ldd]);
                d[i + j * g.ldd] = dot + c + bias.map_or(0.0, |b| b[i]);
            }
        }
        d
    }

    #[test]
    fn the_row_major_plan_gives_x_times_w_transposed_plus_bias_plus_residual() {
        for (rows, inputs, outputs) in [(3, 4, 5), (1, 7, 2), (6, 1, 1)] {
            let value = |i: usize, s: f32| ((i * 7 + 3) % 11) as f32 * s - 1.0;
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
}
