// The candle ports' passes of our own on a CUDA device (feature `cuda`; compiled to PTX by build.rs,
// launched by src/simd/fused.rs, whose CPU loops are the definition these kernels follow).
//
// split_heads_T: the stacked Q, K, V projection `all` `(b * t, (heads + 2 kv) * d)` row-major
// into one buffer [Q (b, heads, tq, d) | K (b, kv, p + t, d) | V (b, kv, p + t, d)], each Q and
// K head RMS-normed (when a weight is given) and rotated (RoPE, rotate-half pairing of the two
// halves of a head), V as it is; Q only for the last `tq` tokens of each row (q_from = t - tq);
// the first `p` keys and values of each row are a shared prefix's, `prefix_k` / `prefix_v`
// `(kv, p, d)`, copied for every row.
// swap_axes_T: `x` `(a, b, c, t, d)` into `(a, c, b, t, d)`, a warp per row of `d`: the context
// `(rows, heads, tq, 1, d)` into `(rows, tq, heads, 1, d)` (merge_heads), or heads
// `(1, rows, heads, t, d)` into `(1, heads, rows, t, d)` (heads_first).
// glu_T: `act(gate) * up` `(rows, inputs)` from the stacked projection `(rows, 2 * inputs)`
// (each row's gate, then its up), `act` GELU (erf), GELU (tanh), ReLU or SiLU: one block per row.
// position_bias_T: DeBERTa's relative-position scores `(b, heads, t, t)`, for query i and key j
// `c2p[h, bi t + i, index[i, j]] + p2c[h, bi t + j, index[i, j]]` (each term when told to read
// it), `c2p` / `p2c` `(heads, b t, r)`, `index` `(t, t)` clamped to r - 1: a thread per score.
//
// One warp per head row of `d` elements: lane `l` holds the pairs (i, i + d/2) for i = l, l + 32,
// ... (at most MAX_PAIRS of them), so the norm's sum is a warp reduction and RoPE's partner is
// in the lane's own registers.
// Everything is computed in f32 and rounded once to the output's format.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define WARPS_PER_BLOCK 4
#define MAX_PAIRS 8  // head_dim up to 512

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// Warp `row` does row `row` of `all`, (bi, ti, hi) with hi over heads + 2 kv, or past them one
// of the 2 b kv p rows of the prefix's copies; `q_norm` / `k_norm` may be null (no norm), `cos`
// null (no rotation), else `cos` / `sin` `(b, t, d / 2)`.
template <typename T>
__device__ void split_heads(const T *all, const T *q_norm, const T *k_norm, const T *cos,
                            const T *sin, const T *prefix_k, const T *prefix_v, T *out,
                            unsigned int b, unsigned int t, unsigned int heads, unsigned int kv,
                            unsigned int d, unsigned int q_from, unsigned int p, float eps) {
    const unsigned int lane = threadIdx.x % 32;
    const unsigned int h_all = heads + 2 * kv;
    const unsigned long long own = (unsigned long long)b * t * h_all;
    const unsigned long long copies = (unsigned long long)b * kv * p;
    const unsigned long long row =
        (unsigned long long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const unsigned int tq = t - q_from;
    const unsigned int keys = p + t;
    const unsigned long long k_base = (unsigned long long)b * heads * tq * d;
    const unsigned long long v_base = k_base + (unsigned long long)b * kv * keys * d;
    if (row >= own) {
        // A prefix row: key (or value) pi of head g, copied for row bi.
        const unsigned long long r = row - own;
        if (r >= 2 * copies) return;
        const bool value = r >= copies;
        const unsigned long long c = value ? r - copies : r;  // (bi * kv + g) * p + pi
        const unsigned int pi = (unsigned int)(c % p);
        const unsigned long long bg = c / p;
        const unsigned int g = (unsigned int)(bg % kv);
        const T *src = (value ? prefix_v : prefix_k) + ((unsigned long long)g * p + pi) * d;
        T *dst = out + (value ? v_base : k_base) + (bg * keys + pi) * d;
        for (unsigned int i = lane; i < d; i += 32) dst[i] = src[i];
        return;
    }
    const unsigned int hi = (unsigned int)(row % h_all);
    const unsigned long long token = row / h_all;  // bi * t + ti
    const unsigned int ti = (unsigned int)(token % t);
    const unsigned int bi = (unsigned int)(token / t);
    const unsigned int half_d = d / 2;
    const T *norm = nullptr;
    bool rotate = true;
    unsigned long long at;
    if (hi < heads) {
        if (ti < q_from) return;  // the warp's lanes all leave: no shuffle below is missed
        at = (((unsigned long long)bi * heads + hi) * tq + (ti - q_from)) * d;
        norm = q_norm;
    } else if (hi < heads + kv) {
        at = k_base + (((unsigned long long)bi * kv + (hi - heads)) * keys + p + ti) * d;
        norm = k_norm;
    } else {
        at = v_base + (((unsigned long long)bi * kv + (hi - heads - kv)) * keys + p + ti) * d;
        rotate = false;
    }
    const T *x = all + row * d;
    // Pair j of this lane is (i, i + d/2) for i = lane + 32 j; unrolled, so that the pairs stay
    // in registers.
    float lo[MAX_PAIRS], hi_half[MAX_PAIRS];
    float sum = 0.0f;
#pragma unroll
    for (unsigned int j = 0; j < MAX_PAIRS; ++j) {
        const unsigned int i = lane + 32 * j;
        lo[j] = 0.0f;
        hi_half[j] = 0.0f;
        if (i < half_d) {
            lo[j] = to_f32(x[i]);
            hi_half[j] = to_f32(x[i + half_d]);
            sum += lo[j] * lo[j] + hi_half[j] * hi_half[j];
        }
    }
    if (rotate && norm != nullptr) {
        for (int offset = 16; offset > 0; offset /= 2) {
            sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        }
        const float scale = 1.0f / sqrtf(sum / (float)d + eps);
#pragma unroll
        for (unsigned int j = 0; j < MAX_PAIRS; ++j) {
            const unsigned int i = lane + 32 * j;
            if (i < half_d) {
                lo[j] = lo[j] * scale * to_f32(norm[i]);
                hi_half[j] = hi_half[j] * scale * to_f32(norm[i + half_d]);
            }
        }
    }
    const unsigned long long angle = token * half_d;
#pragma unroll
    for (unsigned int j = 0; j < MAX_PAIRS; ++j) {
        const unsigned int i = lane + 32 * j;
        if (i < half_d) {
            float a = lo[j], c = hi_half[j];
            if (rotate && cos != nullptr) {
                const float co = to_f32(cos[angle + i]), si = to_f32(sin[angle + i]);
                a = lo[j] * co - hi_half[j] * si;
                c = hi_half[j] * co + lo[j] * si;
            }
            out[at + i] = from_f32<T>(a);
            out[at + i + half_d] = from_f32<T>(c);
        }
    }
}

// `x` `(a, b, c, t, d)` into `out` `(a, c, b, t, d)`: one warp per row of `d`.
template <typename T>
__device__ void swap_axes(const T *x, T *out, unsigned int a, unsigned int b, unsigned int c,
                          unsigned int t, unsigned int d) {
    const unsigned int lane = threadIdx.x % 32;
    const unsigned long long rows = (unsigned long long)a * b * c * t;
    const unsigned long long row =
        (unsigned long long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= rows) return;
    const unsigned int ti = (unsigned int)(row % t);
    const unsigned long long abc = row / t;
    const unsigned int ci = (unsigned int)(abc % c);
    const unsigned long long ab = abc / c;
    const unsigned int bi = (unsigned int)(ab % b);
    const unsigned long long ai = ab / b;
    const unsigned long long at = (((ai * c + ci) * b + bi) * t + ti) * d;
    const T *src = x + row * d;
    for (unsigned int i = lane; i < d; i += 32) {
        out[at + i] = src[i];
    }
}

// The gated activations' `act` (fused.rs's `Glu::code`).
#define ACT_GELU 0u
#define ACT_GELU_TANH 1u
#define ACT_RELU 2u
#define ACT_SILU 3u

// `act(g)` in f32.
__device__ __forceinline__ float activate(float g, unsigned int act) {
    switch (act) {
        case ACT_GELU:
            return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
        case ACT_GELU_TANH:
            return 0.5f * g * (1.0f + tanhf(0.7978846f * (g + 0.044715f * g * g * g)));
        case ACT_RELU:
            return fmaxf(g, 0.0f);
        default:
            return g / (1.0f + expf(-g));
    }
}

// `x` `(rows, 2 * inputs)` into `out` `(rows, inputs)`: block `r` does row `r`.
template <typename T>
__device__ void glu(const T *x, T *out, unsigned int inputs, unsigned int act) {
    const T *gate = x + (unsigned long long)blockIdx.x * 2 * inputs;
    const T *up = gate + inputs;
    T *dst = out + (unsigned long long)blockIdx.x * inputs;
    for (unsigned int i = threadIdx.x; i < inputs; i += blockDim.x) {
        dst[i] = from_f32<T>(activate(to_f32(gate[i]), act) * to_f32(up[i]));
    }
}

template <typename T>
__device__ void position_bias(const T *c2p, const T *p2c, const unsigned int *index, T *out,
                              unsigned int b, unsigned int heads, unsigned int t, unsigned int r,
                              unsigned int has_c2p, unsigned int has_p2c) {
    const unsigned long long e = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long tt = (unsigned long long)t * t;
    if (e >= (unsigned long long)b * heads * tt) return;
    const unsigned int ij = (unsigned int)(e % tt);
    const unsigned int i = ij / t, j = ij % t;
    const unsigned long long bh = e / tt;  // bi * heads + h
    const unsigned int h = (unsigned int)(bh % heads), bi = (unsigned int)(bh / heads);
    const unsigned int at = min(index[ij], r - 1);
    const unsigned long long rows = ((unsigned long long)h * b + bi) * t;
    float v = 0.0f;
    if (has_c2p) v += to_f32(c2p[(rows + i) * r + at]);
    if (has_p2c) v += to_f32(p2c[(rows + j) * r + at]);
    out[e] = from_f32<T>(v);
}

#define FUSED_KERNELS(NAME, T)                                                                 \
    extern "C" __global__ void split_heads_##NAME(                                             \
        const T *all, const T *q_norm, const T *k_norm, const T *cos, const T *sin,            \
        const T *prefix_k, const T *prefix_v, T *out, unsigned int b, unsigned int t,          \
        unsigned int heads, unsigned int kv, unsigned int d, unsigned int q_from,              \
        unsigned int p, unsigned int has_norm, unsigned int has_rope, float eps) {             \
        split_heads<T>(all, has_norm ? q_norm : nullptr, has_norm ? k_norm : nullptr,          \
                       has_rope ? cos : nullptr, sin, prefix_k, prefix_v, out, b, t, heads,    \
                       kv, d, q_from, p, eps);                                                 \
    }                                                                                          \
    extern "C" __global__ void swap_axes_##NAME(const T *x, T *out, unsigned int a,            \
                                                unsigned int b, unsigned int c, unsigned int t, \
                                                unsigned int d) {                              \
        swap_axes<T>(x, out, a, b, c, t, d);                                                   \
    }                                                                                          \
    extern "C" __global__ void glu_##NAME(const T *x, T *out, unsigned int inputs,             \
                                          unsigned int act) {                                  \
        glu<T>(x, out, inputs, act);                                                           \
    }                                                                                          \
    extern "C" __global__ void position_bias_##NAME(                                           \
        const T *c2p, const T *p2c, const unsigned int *index, T *out, unsigned int b,         \
        unsigned int heads, unsigned int t, unsigned int r, unsigned int has_c2p,              \
        unsigned int has_p2c) {                                                                \
        position_bias<T>(c2p, p2c, index, out, b, heads, t, r, has_c2p, has_p2c);              \
    }

FUSED_KERNELS(f32, float)
FUSED_KERNELS(f16, __half)
FUSED_KERNELS(bf16, __nv_bfloat16)
