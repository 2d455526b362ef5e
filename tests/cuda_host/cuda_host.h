// Just enough of CUDA to run the crate's kernels (src/simd/*.cu) on the host, compiled as C++20
// by g++: no GPU is needed to check a kernel's index arithmetic, its reductions and its rounding
// against the host definition it follows (the unit tests of src/simd/fused.rs do).
//
// What it emulates, and nothing more:
// - `__global__`, `__device__`, `__forceinline__` (plain functions), and the device's `min`;
// - `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (x only: the kernels launch 1-D grids);
// - `__shfl_xor_sync` on a full warp (a float), each of a warp's 32 lanes a host thread that
//   meets the others at a barrier; a shuffle while a lane of the warp has returned is undefined
//   on a GPU and aborts here;
// - `__half` / `__nv_bfloat16` with their conversions to and from f32 (round to nearest even,
//   subnormals, infinities and NaN as the hardware converts them);
// - `launch(grid, block, kernel)`: every block of the grid in turn, its threads at once.

#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline

using std::min;

struct Dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

inline thread_local Dim3 threadIdx;
inline thread_local Dim3 blockIdx;
inline Dim3 blockDim;
inline Dim3 gridDim;

// ---------------------------------------------------------------------------------------------
// Half-precision formats.

struct __half {
    uint16_t bits;
};
struct __nv_bfloat16 {
    uint16_t bits;
};

inline uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float __half2float(__half h) {
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    const uint32_t exp = (h.bits >> 10) & 0x1fu;
    const uint32_t man = h.bits & 0x3ffu;
    if (exp == 0x1f) return float_of(sign | 0x7f800000u | (man << 13));  // inf, NaN
    if (exp != 0) return float_of(sign | ((exp + 112) << 23) | (man << 13));
    // Zero or subnormal: man * 2^-24, exact in f32.
    const float v = std::ldexp((float)man, -24);
    return sign ? -v : v;
}

inline __half __float2half_rn(float f) {
    const uint32_t u = bits_of(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const float a = std::fabs(f);
    if (std::isnan(f)) return {(uint16_t)(sign | 0x7e00u)};
    if (a >= 65520.0f) return {(uint16_t)(sign | 0x7c00u)};  // rounds to infinity
    if (a < 6.103515625e-05f) {
        // Subnormal (or zero): a multiple of 2^-24, rounded to nearest even by nearbyint.
        const float m = std::nearbyint(std::ldexp(a, 24));
        return {(uint16_t)(sign | (uint16_t)m)};
    }
    // Normal: drop 13 mantissa bits, rounding to nearest even (a carry may raise the exponent).
    uint32_t au = bits_of(a);
    const uint32_t lsb = (au >> 13) & 1u;
    au += 0xfffu + lsb;
    const uint32_t exp = (au >> 23) - 112;
    const uint32_t man = (au >> 13) & 0x3ffu;
    return {(uint16_t)(sign | (exp << 10) | man)};
}

inline float __bfloat162float(__nv_bfloat16 b) { return float_of((uint32_t)b.bits << 16); }

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    const uint32_t u = bits_of(f);
    if (std::isnan(f)) return {(uint16_t)((u >> 16) | 0x40u)};
    const uint32_t lsb = (u >> 16) & 1u;
    return {(uint16_t)((u + 0x7fffu + lsb) >> 16)};
}

// ---------------------------------------------------------------------------------------------
// Warps.

struct Warp {
    explicit Warp(unsigned int lanes) : lanes(lanes), alive(lanes), meet((std::ptrdiff_t)lanes) {}
    unsigned int lanes;
    std::atomic<unsigned int> alive;
    std::barrier<> meet;
    float slots[32];
};

inline thread_local Warp *this_warp = nullptr;

inline float __shfl_xor_sync(unsigned int mask, float value, int offset) {
    Warp &w = *this_warp;
    const unsigned int lane = threadIdx.x % 32;
    if (mask != 0xffffffffu || w.alive.load() != 32) {
        std::fprintf(stderr, "__shfl_xor_sync: not every lane of warp %u takes part\n",
                     threadIdx.x / 32);
        std::abort();
    }
    w.slots[lane] = value;
    w.meet.arrive_and_wait();
    const float other = w.slots[lane ^ (unsigned int)offset];
    w.meet.arrive_and_wait();
    return other;
}

// Every block of `grid` blocks of `block` threads in turn, its threads at once, each running
// `kernel()` with its own `threadIdx` and `blockIdx`.
template <typename Kernel>
void launch(unsigned int grid, unsigned int block, Kernel kernel) {
    gridDim = Dim3{grid, 1, 1};
    blockDim = Dim3{block, 1, 1};
    for (unsigned int b = 0; b < grid; ++b) {
        std::vector<std::unique_ptr<Warp>> warps;
        for (unsigned int first = 0; first < block; first += 32) {
            warps.push_back(std::make_unique<Warp>(std::min(32u, block - first)));
        }
        std::vector<std::thread> threads;
        threads.reserve(block);
        for (unsigned int t = 0; t < block; ++t) {
            threads.emplace_back([&, t, b] {
                threadIdx = Dim3{t, 1, 1};
                blockIdx = Dim3{b, 1, 1};
                this_warp = warps[t / 32].get();
                kernel();
                // A returned lane no longer meets the others: a later shuffle of its warp aborts.
                this_warp->alive.fetch_sub(1);
                this_warp->meet.arrive_and_drop();
            });
        }
        for (auto &t : threads) t.join();
    }
}
