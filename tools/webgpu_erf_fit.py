#!/usr/bin/env python3
# webgpu_erf_fit.py: the coefficients of the WGSL erf (web/webgpu/elementwise.js; WGSL has no erf) and the
# error of their float32 evaluation against float64 erf / erfc. Run: python3 tools/webgpu_erf_fit.py (numpy).
#   |x| <  A:  erf(x)  = x * P(x^2)            P of degree 6, fitted for relative error
#   |x| >= A:  erfc(t) = exp(Q(t - C)), t=|x|  Q of degree 10 on [A, B] (log erfc is smooth)
#              erf(x) = sign(x) (1 - erfc(t)); beyond B, erfc(t) < 7.4e-15 counts as 0
# GELU uses erfc directly on the negative side, 0.5 (1 + erf(z)) = 0.5 erfc(-z), so its small
# values there keep their relative precision (1 + erf(z) in float32 would cancel).
# Least squares on Chebyshev nodes of the monomial basis (shifted by C for conditioning).
import math
import numpy as np

A, B = 0.9, 5.5
C = (A + B) / 2


def lsq(fn, lo, hi, deg, var, rel, n=6000):
    k = np.arange(n)
    xs = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    y = np.array([fn(x) for x in xs])
    w = 1 / np.abs(y) if rel else np.ones_like(y)
    M = np.vander(var(xs), deg + 1, increasing=True) * w[:, None]
    return np.linalg.lstsq(M, y * w, rcond=None)[0]


P = lsq(lambda x: math.erf(x) / x, 1e-6, A, 6, lambda x: x * x, True).astype(np.float32)
Q = lsq(lambda t: math.log(math.erfc(t)), A, B, 10, lambda t: t - C, False).astype(np.float32)

f32 = np.float32


def fma(a, b, c):  # float32 fma: exact product and sum in float64, one rounding
    return f32(np.float64(a) * np.float64(b) + np.float64(c))


def horner(c, v):
    r = c[-1]
    for k in c[-2::-1]:
        r = fma(r, v, k)
    return r


def erfc_big(t):  # t >= A, float32
    return f32(math.exp(float(horner(Q, f32(f32(min(t, B)) - f32(C))))))  # exp correctly rounded


def erf32(x):
    x = f32(x)
    t = abs(x)
    if t < A:
        return f32(x * horner(P, f32(x * x)))
    e = erfc_big(t) if t <= B else f32(0)
    return f32(math.copysign(f32(1) - e, x))


def cdf32(z):  # 0.5 (1 + erf(z)), float32
    z = f32(z)
    t = abs(z)
    if t < A:
        return f32(f32(0.5) + f32(0.5) * erf32(z))
    e = erfc_big(t) if t <= B else f32(0)
    return f32(f32(0.5) * e) if z < 0 else f32(f32(1) - f32(0.5) * e)


if __name__ == '__main__':
    print('const ERF_A = %.9g; const ERF_B = %.9g; const ERF_C = %.9g;' % (A, B, f32(C)))
    print('P (x^2, low first):', ', '.join('%.9e' % c for c in P))
    print('Q (t - C, low first):', ', '.join('%.9e' % c for c in Q))
    xs = np.linspace(-6, 6, 240001).astype(np.float32)
    err = ulp = 0.0
    for x in xs:
        r = math.erf(float(x))
        d = abs(float(erf32(x)) - r)
        err = max(err, d)
        ulp = max(ulp, d / float(np.spacing(f32(abs(r)) if r else f32(1e-38))))
    print('erf: max abs error %.3g, max %.2f ulp (float32 evaluation, fused multiply-add, exact exp)' % (err, ulp))
    rel = 0.0
    for x in np.linspace(-5, 5, 100001).astype(np.float32):
        z = f32(x * f32(0.70710678118654752440))
        ref = 0.5 * math.erfc(-float(z) / 1.0) if True else 0
        rel = max(rel, abs(float(cdf32(z)) - ref) / ref)
    print('Phi (GELU cdf): max relative error %.3g on [-5, 5]' % rel)
