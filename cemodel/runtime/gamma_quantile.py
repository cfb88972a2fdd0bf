"""d log R̂(u; a)/da for the Gamma(a, 1) quantile R̂: the quantile derivative that SSVI's
V(β, λ) (:mod:`cemodel.runtime.ssvi`, :mod:`cemodel.runtime.ssvi_matrix`) needs for every
family drawn through Gamma variables (Dirichlet, Beta, Gamma, Normal-Gamma, Wishart,
Normal-Wishart).

Quantile derivatives (appendix B, eq. 23–24). For x = R̂(u; a), the Gamma(a, 1) quantile,
at fixed u = P(a, x) (P the regularised lower incomplete gamma function)

    d log x / da = −(∂P/∂a)(a, x) / (x p(x; a)),

computed in log space by :func:`gamma_log_quantile_shape_derivative` from one of

* the series P(a, x) = x^a e^{−x}/Γ(a) Σ_n x^n / (a (a+1) ⋯ (a+n)), differentiated term by
  term (each term gets a factor log x − ψ(a + n + 1)); for a ≤ 50 and x < a + 1;
* the continued fraction of Γ(a, x) = x^a e^{−x} h(a, x) (modified Lentz), carrying h and
  ∂h/∂a (forward mode), so that d log x/da = h (log x − ψ(a)) + ∂h/∂a; for a ≤ 50 and
  x ≥ a + 1;
* the integral obtained from ∂P/∂a = ∫₀ˣ (log t − ψ(a)) p(t; a) dt by t = x e^{∓s}:

      x ≤ a:  d log x/da = ∫₀^∞ (ψ(a) − log x + s) exp(−(a − x) s − x (e^{−s} − 1 + s)) ds
      x > a:  d log x/da = ∫₀^∞ (log x − ψ(a) + s) exp(−(x − a) s − x (e^{s} − 1 − s)) ds

  (the second from ∂P/∂a = −∫ₓ^∞ …); the exponent φ(s) is convex, increasing and ≥ 0.
  For a > 50 (where series and fraction need O(√a) terms in the bulk) and
  κ = |x − a|/√x ≤ 5, an expansion of this integral in powers of 1/√x (ten terms, moments
  of e^{−κt − t²/2}), and the series for x < a/4; otherwise (far tails of large shapes, or
  if series or fraction fail to converge) Gauss–Legendre panels between the points where
  φ = 0, 1, 3, 6, …, 45.

Measured against mpmath (``mp.diff`` of the regularised incomplete gamma function) the
relative error is below ~1e-12 for shapes 1e-3 … 1e5 and quantile levels 1e-12 … 1 − 1e-12
(the expansion alone: below 3e-12 for a > 50, κ ≤ 5). Cost per element: ~0.1 µs for x ≪ 1,
≤ 0.5 µs in the bulk (series up to a = 50), ~0.3 µs for the expansion, ~5 µs for the
panels (rare: only beyond 5 standard deviations of a large shape).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .special import digamma, trigamma

# Not disk-cached: numba would keep a stale copy of a helper from another file that this
# one calls. Generated kernels are cached (keyed by the runtime's fingerprint) together with
# the machine code of every helper they call, so nothing here recompiles on a cached run.
jit = numba.njit(nogil=True, error_model="numpy")

# Shapes up to this use the series / continued fraction (at most a few hundred terms).
_SERIES_MAX_SHAPE = 50.0
# Above it the expansion in 1/√x, for |x − a| / √x up to this (else the integral).
_ASYM_MAX_KAPPA = 5.0
_ASYM_TERMS = 10
_MAX_TERMS = 500
_EPS = 1e-16
_TINY = 1e-300
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_SQRT_HALF = math.sqrt(0.5)
# Levels of the exponent φ(s) that delimit the quadrature panels; e^{-45} ≈ 3e-20.
_LEVELS = np.array([0.0, 1.0, 3.0, 6.0, 10.0, 15.0, 21.0, 28.0, 36.0, 45.0])
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


# ---------------------------------------------------------------------------------------------
# d log R̂(u; a) / da for the Gamma(a, 1) quantile R̂
# ---------------------------------------------------------------------------------------------


@jit
def _expm1_minus_neg(s: float) -> float:
    """e^{−s} − 1 + s ≥ 0 for s ≥ 0, without cancellation at small s."""
    if s < 0.1:
        acc = 1.0
        for k in range(12, 2, -1):
            acc = 1.0 - s / k * acc
        return 0.5 * s * s * acc
    return math.expm1(-s) + s


@jit
def _expm1_minus(s: float) -> float:
    """e^{s} − 1 − s ≥ 0 for s ≥ 0, without cancellation at small s."""
    if s < 0.1:
        acc = 1.0
        for k in range(12, 2, -1):
            acc = 1.0 + s / k * acc
        return 0.5 * s * s * acc
    return math.expm1(s) - s


@jit
def _phi(s: float, c: float, x: float, upper: bool) -> tuple[float, float]:
    """The quadrature exponent φ(s) and φ'(s) (see the module docstring), c = |x − a|."""
    if upper:
        return c * s + x * _expm1_minus(s), c + x * math.expm1(s)
    return c * s + x * _expm1_minus_neg(s), c - x * math.expm1(-s)


@jit
def _panel(lo: float, hi: float, f0: float, c: float, x: float, upper: bool) -> float:
    """∫_lo^hi (f0 + s) e^{−φ(s)} ds by 8-point Gauss–Legendre."""
    half = 0.5 * (hi - lo)
    mid = lo + half
    acc = 0.0
    for i in range(_GL_NODES.shape[0]):
        s = mid + half * _GL_NODES[i]
        acc += _GL_WEIGHTS[i] * (f0 + s) * math.exp(-_phi(s, c, x, upper)[0])
    return half * acc


@jit
def _dlogq_integral(a: float, log_x: float, psi_a: float) -> float:
    """The integral of the module docstring by Gauss–Legendre panels (any a > 0, any x)."""
    x = math.exp(log_x)
    upper = x > a
    if upper:
        c = x - a
        f0 = log_x - psi_a
    else:
        c = a - x
        f0 = psi_a - log_x
    total = 0.0
    lo = 0.0
    for k in range(1, _LEVELS.shape[0]):
        level = _LEVELS[k]
        # Root of φ(s) = level by Newton from the root s_q of c s + x s²/2 = level (φ's
        # quadratic Taylor polynomial). For x > a, φ ≥ that polynomial and φ ≥ x (e^s − 1 − s),
        # so s = min(s_q, log(1 + level/x + s_q)) is right of the root and Newton descends
        # monotonically (φ is convex). For x ≤ a, s_q is left of the root, which is at most
        # (level + x)/a since φ ≥ a s − x. The panel edges need not be exact; only the last
        # one sets the (e^{-45}) truncation.
        s = 2.0 * level / (c + math.sqrt(c * c + 2.0 * x * level))
        if upper:
            s = min(s, math.log1p(level / x + s))
            s_max = s
        else:
            s_max = (level + x) / a
        for _ in range(60):
            p, dp = _phi(s, c, x, upper)
            step = (p - level) / dp
            s = min(s - step, s_max)
            if not abs(step) > 1e-8 * s:
                break
        if not s > lo:
            continue
        # e^{∓s} varies on a unit scale: keep panels to [s, 2s] while that matters.
        while lo < 64.0 and s > 2.0 * max(lo, 0.5):
            cut = 2.0 * max(lo, 0.5)
            total += _panel(lo, cut, f0, c, x, upper)
            lo = cut
        total += _panel(lo, s, f0, c, x, upper)
        lo = s
    return total


@jit
def _dlogq_series(a: float, log_x: float, psi_a: float) -> float:
    """Σ_n x^n/(a)_{n+1} (ψ(a+n+1) − log x); nan if not converged within _MAX_TERMS."""
    x = math.exp(log_x)
    coef = 1.0 / a
    psi = psi_a + 1.0 / a
    total = 0.0
    for n in range(_MAX_TERMS):
        total += coef * (psi - log_x)
        nxt = a + n + 1.0
        coef *= x / nxt
        psi += 1.0 / nxt
        if x < nxt and coef * (abs(psi - log_x) + 1.0) <= _EPS * abs(total):
            return total
    return np.nan


@jit
def _dlogq_cf(a: float, log_x: float, psi_a: float) -> float:
    """h (log x − ψ(a)) + ∂h/∂a for Γ(a, x) = x^a e^{−x} h, h by the continued fraction
    1/(x+1−a− 1(1−a)/(x+3−a− 2(2−a)/(x+5−a− …))) (modified Lentz), each quantity carried
    with its a-derivative; nan if not converged within _MAX_TERMS."""
    x = math.exp(log_x)
    b = x + 1.0 - a  # db/da = −1
    c = 1.0 / _TINY
    dc = 0.0
    d = 1.0 / b
    dd = d * d
    h = d
    dh = dd
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        dan = float(i)
        b += 2.0
        dd = dan * d + an * dd - 1.0
        d = an * d + b
        if abs(d) < _TINY:
            d = _TINY
        dc = -1.0 + dan / c - an * dc / (c * c)
        c = b + an / c
        if abs(c) < _TINY:
            c = _TINY
        d = 1.0 / d
        dd = -dd * d * d
        delta = d * c
        ddelta = dd * c + d * dc
        dh = dh * delta + h * ddelta
        h *= delta
        if abs(delta - 1.0) < _EPS and abs(ddelta * h) < _EPS * abs(dh):
            return h * (log_x - psi_a) + dh
    return np.nan


def _asymptotic_coefficients(n_terms: int) -> np.ndarray:
    """P[j, n]: exp(−Σ_{m≥1} τ^m t^{m+2}/(m+2)!) = Σ_j τ^j Σ_n P[j, n] t^n, by the recurrence
    F_j = −(1/j) Σ_{m=1..j} m s_m F_{j−m} for F = exp(−Σ_m s_m τ^m). P[j] is non-zero only at
    n = j + 2, j + 4, …, 3j (and P[0, 0] = 1)."""
    width = 3 * n_terms + 1
    coef = np.zeros((n_terms + 1, width))
    coef[0, 0] = 1.0
    for j in range(1, n_terms + 1):
        for m in range(1, j + 1):
            coef[j, m + 2:] -= m / math.factorial(m + 2) / j * coef[j - m, :width - m - 2]
    return coef


_ASYM_COEF = _asymptotic_coefficients(_ASYM_TERMS)


@jit
def _dlogq_asymptotic(a: float, log_x: float, psi_a: float) -> float:
    """The integral (module docstring) with s = σ t, σ = x^{−1/2}: the exponent becomes
    κ t + t²/2 + Σ_{m≥1} τ^m t^{m+2}/(m+2)! with κ = |x − a| σ, τ = ±σ (+ for x > a); the
    τ-series of the exponential of the last sum, integrated term by term against
    e^{−κt − t²/2} (moments I_n by I_n = (n−1) I_{n−2} − κ I_{n−1}, I_0 the Mills ratio).
    Relative error below 1e-11 for a > 50 and κ ≤ 5 (10 terms)."""
    x = math.exp(log_x)
    sigma = 1.0 / math.sqrt(x)
    if x > a:
        kappa = (x - a) * sigma
        tau = sigma
        f0 = log_x - psi_a
    else:
        kappa = (a - x) * sigma
        tau = -sigma
        f0 = psi_a - log_x
    n_mom = _ASYM_COEF.shape[1] + 1
    moments = np.empty(n_mom)
    moments[0] = _SQRT_HALF_PI * math.exp(0.5 * kappa * kappa) * math.erfc(kappa * _SQRT_HALF)
    moments[1] = 1.0 - kappa * moments[0]
    for n in range(2, n_mom):
        moments[n] = (n - 1) * moments[n - 2] - kappa * moments[n - 1]
    total = 0.0
    for j in range(_ASYM_COEF.shape[0] - 1, 0, -1):
        acc = 0.0
        for n in range(j + 2, 3 * j + 1, 2):
            acc += _ASYM_COEF[j, n] * (f0 * moments[n] + sigma * moments[n + 1])
        total = (total + acc) * tau
    total += f0 * moments[0] + sigma * moments[1]
    return sigma * total


@jit
def _dlog_quantile_da(a: float, log_x: float, psi_a: float) -> float:
    """d log R̂(u; a)/da at u = P(a, x) for x = exp(log_x), given psi_a = ψ(a) (scalar)."""
    if not (a > 0.0 and log_x < np.inf):
        return np.nan
    if a <= _SERIES_MAX_SHAPE:
        if log_x < math.log(a + 1.0):
            out = _dlogq_series(a, log_x, psi_a)
        else:
            out = _dlogq_cf(a, log_x, psi_a)
        if out == out:
            return out
    else:
        x = math.exp(log_x)
        if abs(x - a) <= _ASYM_MAX_KAPPA * math.sqrt(x):
            return _dlogq_asymptotic(a, log_x, psi_a)
        if x < 0.25 * a:  # far lower tail: the series converges geometrically (ratio < 1/4)
            out = _dlogq_series(a, log_x, psi_a)
            if out == out:
                return out
    return _dlogq_integral(a, log_x, psi_a)


@jit
def _dlogq_flat(shape: np.ndarray, log_x: np.ndarray, out: np.ndarray,
                out_trigamma: np.ndarray) -> None:
    """out = d log R̂/da and out_trigamma = ψ'(shape) per element, each unless empty."""
    with_derivative = out.shape[0] > 0
    with_trigamma = out_trigamma.shape[0] > 0
    for i in range(shape.shape[0]):
        a = shape[i]
        if with_derivative:
            out[i] = _dlog_quantile_da(a, log_x[i], digamma(a))
        if with_trigamma:
            out_trigamma[i] = trigamma(a)


def _derivative_and_trigamma(shape, log_x, with_trigamma: bool):
    a, lx = np.broadcast_arrays(np.asarray(shape, dtype=float), np.asarray(log_x, dtype=float))
    out = np.empty(a.shape)
    tri = np.empty(a.shape if with_trigamma else (0,))
    _dlogq_flat(np.ascontiguousarray(a).ravel(), np.ascontiguousarray(lx).ravel(),
                out.reshape(-1), tri.reshape(-1))
    return out, tri


def _trigamma(x) -> np.ndarray:
    """ψ'(x) element-wise (numba; scipy's polygamma is ~10× slower)."""
    x = np.ascontiguousarray(x, dtype=float)
    out = np.empty(x.shape)
    _dlogq_flat(x.reshape(-1), x.reshape(-1), np.empty(0), out.reshape(-1))
    return out


def gamma_log_quantile_shape_derivative(shape, log_x):
    """d log R̂(u; a)/da at fixed u = P(a, x), R̂ the Gamma(a, 1) quantile (eq. 23).

    ``shape`` (a > 0) and ``log_x`` (log of the Gamma(a, 1) draw x = R̂(u; a)) broadcast
    together; returns an array of the broadcast shape (a float for scalar inputs). Equals
    −(∂P/∂a)(a, x) / (x p(x; a)); for x → 0 it tends to (ψ(a + 1) − log x) / a.
    """
    out = _derivative_and_trigamma(shape, log_x, False)[0]
    return float(out) if out.ndim == 0 else out


def _a_trigamma_minus_one(a: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """a ψ'(a) − 1 > 0, without the cancellation of a ψ'(a) ≈ 1 for a large shape: there
    the asymptotic series 1/(2a) + 1/(6a²) − 1/(30a⁴) + 1/(42a⁶) (DLMF 5.15.8)."""
    a = np.asarray(a, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        inv = 1.0 / a
        series = inv * (0.5 + inv * (1.0 / 6.0 + inv * inv * (-1.0 / 30.0 + inv * inv / 42.0)))
    return np.where(a > 1e3, series, a * tri - 1.0)
