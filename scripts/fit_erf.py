#!/usr/bin/env python3
"""Fits the rational erf of `src/models/layers/kernels.rs`: erf(x) ~ x P(x^2) / Q(x^2) on [0, 4].

P has degree 6 and Q degree 4 (Q(0) = 1). The fit is a linearized least-squares problem,
`x P(t) - erf(x) Q(t)` divided by the previous Q, on Chebyshev nodes, reweighted by each
node's error a few dozen times (Lawson's iteration) so that the largest error shrinks toward
the minimax one. It prints the coefficients rounded to float32, highest degree first (the order
the kernel's Horner loops take), and the largest error of the float32 evaluation the kernel
does (Horner's rule in float32; the kernel's fused multiply-adds round less).

Usage: python scripts/fit_erf.py   (numpy)
"""
from math import erf

import numpy as np

DEG_P, DEG_Q, NODES, ROUNDS = 6, 4, 6000, 120


def fit():
    x = (np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES)[::-1] + 1.0) * 2.0
    f = np.array([erf(v) for v in x])
    t = x * x
    q_prev, weight = np.ones(NODES), np.full(NODES, 1.0 / NODES)
    for _ in range(ROUNDS):
        a = np.hstack([
            np.vstack([x * t**k for k in range(DEG_P + 1)]).T,
            -np.vstack([f * t**k for k in range(1, DEG_Q + 1)]).T,
        ])
        scale = np.sqrt(weight) / q_prev
        sol, *_ = np.linalg.lstsq(a * scale[:, None], f * scale, rcond=None)
        p, q = sol[:DEG_P + 1], np.concatenate([[1.0], sol[DEG_P + 1:]])
        q_prev = np.polyval(q[::-1], t)
        err = np.abs(x * np.polyval(p[::-1], t) / q_prev - f)
        weight = weight * (err + 1e-30)
        weight /= weight.sum()
    return p.astype(np.float32), q.astype(np.float32)


def horner32(coeffs, t):
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = (acc * t + c).astype(np.float32)
    return acc


def main():
    p, q = fit()
    xs = np.linspace(0.0, 4.0, 400_001).astype(np.float32)
    ts = xs * xs
    got = (xs * horner32(p, ts) / horner32(q, ts)).astype(np.float64)
    want = np.array([erf(float(v)) for v in xs])
    print("P", [str(c) for c in p[::-1]])
    print("Q", [str(c) for c in q[::-1]])
    print(f"largest |error| in float32 on [0, 4]: {np.max(np.abs(got - want)):.3g}")


if __name__ == "__main__":
    main()
