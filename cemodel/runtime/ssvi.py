"""The SSVI matrix V(β, λ) of Hoffman & Blei (2015), applied to a vector without forming it.

Structured stochastic VI (Hoffman & Blei 2015, "Stochastic Structured Variational
Inference", algorithm 1) draws the global parameters β ~ q(β) by inversion, β = R(u, λ) with
u uniform, and updates (eq. 7)

    λ' = (1 − ρ) λ + ρ (η + V(β, λ) g),    g = N/|S| Σ_n η̂_n,

    V(β, λ) = (∇²_λ A(λ))⁻¹ (∇_λ R(Q(β))) (∇_β t(β))ᵀ               (eq. 8 and 22).

Writing J = ∂t(R(u, λ))/∂λ at fixed u (rows: statistics, columns: natural parameters) and
F = ∇²A(λ) (the Fisher matrix), V g = F⁻¹ Jᵀ g. Because E_u[t(R(u, λ))] = ∇A(λ), E[J] = F and
E[V] = I exactly; SSVI-A (eq. 10, :mod:`cemodel.runtime.sampling`) is the approximation V ≈ I.

Natural parameters are in this package's coefficient form (see
:mod:`cemodel.runtime.families`): each λ_s is the coefficient of the statistic t_s, so a
Dirichlet has λ = α − 1 and ∂/∂λ = ∂/∂α. Every function works element-wise (row-wise for the
Dirichlet, whose last axis is the simplex) over arbitrary leading batch axes.

V needs only the draw, not how it was made: G ~ Gamma(a, 1) drawn by any method defines
u = P(a, G), which is uniform, so V at (λ, G) is the inversion-based V at that u. The
samplers below therefore reuse ``sampling.log_gamma_draws`` (finite for tiny shapes).

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

Families (appendix C for the Dirichlet). Each family has a sampler ``sample_<fam>_aux``
(the outputs of :mod:`cemodel.runtime.sampling`'s sampler, from the same random stream, plus
the auxiliary draws V needs) and ``ssvi_<fam>(*lam, *aux, *g, *out)`` writing V g:

* Dirichlet: aux log G, G_j ~ Gamma(α_j, 1), β = G / Σ G (eq. 27). With
  d_j = d log G_j/dα_j, Jᵀ g = d ⊙ (g − β Σ_i g_i) (eq. 28) and
  F = diag(ψ'(α)) − ψ'(Σα) 11ᵀ is inverted by Sherman–Morrison, O(K) per row.
* Beta: the two-component Dirichlet, aux log G_a and log G_b.
* Gamma(a, rate b): aux log G, G ~ Gamma(a, 1), x = G / b. J = [[d, 1/b], [x d, x/b]],
  F = [[ψ'(a), 1/b], [1/b, a/b²]], so V g = (g_log + x g_value) [a d − 1, b (ψ'(a) − d)]
  / (a ψ'(a) − 1).
* Normal(mean m, precision p): aux ε ~ N(0, 1), x = m + ε/√p. J = [1, 2x]ᵀ [1, m + x] / p,
  F = [[1/p, 2m/p], [2m/p, 4m²/p + 2/p²]], so V g = (g_value + 2x g_square)
  [1 − √p m ε, √p ε / 2].
* Normal-Gamma(mean m, β, shape a, rate b), t = (log τ, τ, τμ, τμ²): aux log G,
  G ~ Gamma(a, 1), and ε ~ N(0, 1); τ = G / b, μ = m + ε/√(βτ). J by the chain rule through
  (a, b, m, β) (see :func:`ssvi_normal_gamma`); F⁻¹ in closed form: the statistics
  (log τ, τ, τ(μ − m), τ(μ − m)²) = L(m) t are uncorrelated across the blocks
  {log τ, τ}, {τ(μ − m)}, {τ(μ − m)²}, so L F Lᵀ is block diagonal.

MVN, Wishart and Normal-Wishart have no V here (:data:`SSVI_FAMILIES` lists the families
that do).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .families import normal_gamma_params
from .sampling import log_gamma_draws, sample_normal_gamma
from .special import digamma, trigamma

# Not disk-cached: numba would keep a stale copy of a helper from another file that this
# one calls. Generated kernels are cached (keyed by the runtime's fingerprint) together with
# the machine code of every helper they call, so nothing here recompiles on a cached run.
jit = numba.njit(nogil=True)

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


# ---------------------------------------------------------------------------------------------
# samplers that keep the auxiliary draws
# ---------------------------------------------------------------------------------------------


def sample_dirichlet_aux(lam_log: np.ndarray, rng: np.random.Generator, out_log: np.ndarray,
                         aux_log_gamma: np.ndarray) -> None:
    """out_log = log β, β ~ Dirichlet(lam_log + 1) row-wise, as ``sample_dirichlet``; also
    aux_log_gamma = log G, the Gamma(α, 1) draws with β = G / Σ G (same shape as lam_log)."""
    log_g = log_gamma_draws(lam_log + 1.0, rng)
    aux_log_gamma[...] = log_g
    top = log_g.max(axis=-1, keepdims=True)
    out_log[...] = log_g - (top + np.log(np.exp(log_g - top).sum(axis=-1, keepdims=True)))


def sample_beta_aux(lam_log: np.ndarray, lam_log1m: np.ndarray, rng: np.random.Generator,
                    out_log: np.ndarray, out_log1m: np.ndarray, aux_log_gamma_a: np.ndarray,
                    aux_log_gamma_b: np.ndarray) -> None:
    """log p, log(1 − p) of p ~ Beta(lam_log + 1, lam_log1m + 1), as ``sample_beta``; also the
    logs of the Gamma(a, 1), Gamma(b, 1) draws G_a, G_b with p = G_a / (G_a + G_b)."""
    la = log_gamma_draws(lam_log + 1.0, rng)
    lb = log_gamma_draws(lam_log1m + 1.0, rng)
    aux_log_gamma_a[...] = la
    aux_log_gamma_b[...] = lb
    top = np.maximum(la, lb)
    total = top + np.log(np.exp(la - top) + np.exp(lb - top))
    out_log[...] = la - total
    out_log1m[...] = lb - total


def sample_gamma_aux(lam_log: np.ndarray, lam_value: np.ndarray, rng: np.random.Generator,
                     out_log: np.ndarray, out_value: np.ndarray,
                     aux_log_gamma: np.ndarray) -> None:
    """log x, x of x ~ Gamma(shape lam_log + 1, rate −lam_value), as ``sample_gamma``; also
    aux_log_gamma = log G for the unit-rate draw G ~ Gamma(shape, 1), x = G / rate."""
    log_g = log_gamma_draws(lam_log + 1.0, rng)
    aux_log_gamma[...] = log_g
    log_x = log_g - np.log(-lam_value)
    out_log[...] = log_x
    out_value[...] = np.exp(log_x)


def sample_normal_aux(lam_value: np.ndarray, lam_square: np.ndarray, rng: np.random.Generator,
                      out_value: np.ndarray, out_square: np.ndarray,
                      aux_eps: np.ndarray) -> None:
    """x, x² of x ~ Normal(mean, precision −2·lam_square), as ``sample_normal``; also
    aux_eps = ε ~ N(0, 1) with x = mean + ε / √precision."""
    precision = -2.0 * lam_square
    eps = rng.standard_normal(precision.shape)
    aux_eps[...] = eps
    x = lam_value / precision + eps / np.sqrt(precision)
    out_value[...] = x
    out_square[...] = x * x


def sample_normal_gamma_aux(lam_log: np.ndarray, lam_value: np.ndarray,
                            lam_prec_mean: np.ndarray, lam_quad: np.ndarray,
                            rng: np.random.Generator, out_log: np.ndarray,
                            out_value: np.ndarray, out_prec_mean: np.ndarray,
                            out_quad: np.ndarray, aux_log_gamma: np.ndarray,
                            aux_eps: np.ndarray) -> None:
    """log τ, τ, τμ, τμ² of τ ~ Gamma(a, b), μ | τ ~ Normal(m, precision βτ): the draw of
    ``sample_normal_gamma``, which also writes aux_log_gamma = log G for the unit-rate draw
    G ~ Gamma(a, 1), τ = G / b, and aux_eps = ε ~ N(0, 1) with μ = m + ε / √(βτ) (both shaped
    like lam_log)."""
    sample_normal_gamma(lam_log, lam_value, lam_prec_mean, lam_quad, rng, out_log, out_value,
                        out_prec_mean, out_quad, aux_log_gamma, aux_eps)


# ---------------------------------------------------------------------------------------------
# V g
# ---------------------------------------------------------------------------------------------


def _log_sum_exp(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    top = np.maximum(u, v)
    return top + np.log(np.exp(u - top) + np.exp(v - top))


def ssvi_dirichlet(lam_log: np.ndarray, aux_log_gamma: np.ndarray, g_log: np.ndarray,
                   out_log: np.ndarray) -> None:
    """out_log = V g for q = Dirichlet(α = lam_log + 1) row-wise (last axis the simplex), at
    the draw whose log-gammas ``sample_dirichlet_aux`` left in aux_log_gamma.

    With d = d log G/dα, Jᵀ g = d ⊙ (g − β Σ g) and F = D − c 11ᵀ, D = diag ψ'(α),
    c = ψ'(Σα): F⁻¹ y = D⁻¹ y + D⁻¹1 · c 1ᵀD⁻¹y / (1 − c 1ᵀD⁻¹1) (Sherman–Morrison).
    out_log may be g_log."""
    alpha = np.asarray(lam_log, dtype=float) + 1.0
    log_g = np.asarray(aux_log_gamma, dtype=float)
    d, tri = _derivative_and_trigamma(alpha, log_g, True)
    top = log_g.max(axis=-1, keepdims=True)
    beta = np.exp(log_g - top)
    beta /= beta.sum(axis=-1, keepdims=True)
    inv_tri = 1.0 / tri
    z = d * (g_log - beta * np.sum(g_log, axis=-1, keepdims=True)) * inv_tri
    c = _trigamma(alpha.sum(axis=-1, keepdims=True))
    coef = c * z.sum(axis=-1, keepdims=True) / (1.0 - c * inv_tri.sum(axis=-1, keepdims=True))
    out_log[...] = z + coef * inv_tri


def ssvi_beta(lam_log: np.ndarray, lam_log1m: np.ndarray, aux_log_gamma_a: np.ndarray,
              aux_log_gamma_b: np.ndarray, g_log: np.ndarray, g_log1m: np.ndarray,
              out_log: np.ndarray, out_log1m: np.ndarray) -> None:
    """(out_log, out_log1m) = V (g_log, g_log1m) for q = Beta(a = lam_log + 1,
    b = lam_log1m + 1), element-wise, at the draw whose log-gammas ``sample_beta_aux`` left
    in the aux arrays (the two-component Dirichlet: Jᵀ g = (p_b g_log − p_a g_log1m)
    (d_a, −d_b), F = [[ψ'(a) − ψ'(a+b), −ψ'(a+b)], [−ψ'(a+b), ψ'(b) − ψ'(a+b)]]).
    The outputs may be the g arrays."""
    a = np.asarray(lam_log, dtype=float) + 1.0
    b = np.asarray(lam_log1m, dtype=float) + 1.0
    log_total = _log_sum_exp(aux_log_gamma_a, aux_log_gamma_b)
    pa = np.exp(aux_log_gamma_a - log_total)
    pb = np.exp(aux_log_gamma_b - log_total)
    w = pb * g_log - pa * g_log1m
    da, ta = _derivative_and_trigamma(a, aux_log_gamma_a, True)
    db, tb = _derivative_and_trigamma(b, aux_log_gamma_b, True)
    tab = _trigamma(a + b)
    ya = w * da
    yb = -w * db
    det = ta * tb - tab * (ta + tb)
    va = ((tb - tab) * ya + tab * yb) / det
    vb = (tab * ya + (ta - tab) * yb) / det
    out_log[...] = va
    out_log1m[...] = vb


def _a_trigamma_minus_one(a: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """a ψ'(a) − 1 > 0, without the cancellation of a ψ'(a) ≈ 1 for a large shape: there
    the asymptotic series 1/(2a) + 1/(6a²) − 1/(30a⁴) + 1/(42a⁶) (DLMF 5.15.8)."""
    a = np.asarray(a, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        inv = 1.0 / a
        series = inv * (0.5 + inv * (1.0 / 6.0 + inv * inv * (-1.0 / 30.0 + inv * inv / 42.0)))
    return np.where(a > 1e3, series, a * tri - 1.0)


def ssvi_gamma(lam_log: np.ndarray, lam_value: np.ndarray, aux_log_gamma: np.ndarray,
               g_log: np.ndarray, g_value: np.ndarray, out_log: np.ndarray,
               out_value: np.ndarray) -> None:
    """(out_log, out_value) = V (g_log, g_value) for q = Gamma(shape a = lam_log + 1,
    rate b = −lam_value), element-wise, at the draw ``sample_gamma_aux`` left in
    aux_log_gamma: V g = (g_log + x g_value) [a d − 1, b (ψ'(a) − d)] / (a ψ'(a) − 1).
    The outputs may be the g arrays."""
    a = np.asarray(lam_log, dtype=float) + 1.0
    rate = -np.asarray(lam_value, dtype=float)
    x = np.exp(aux_log_gamma) / rate
    d, tri = _derivative_and_trigamma(a, aux_log_gamma, True)
    scale = (g_log + x * g_value) / _a_trigamma_minus_one(a, tri)
    v_log = scale * (a * d - 1.0)
    v_value = scale * rate * (tri - d)
    out_log[...] = v_log
    out_value[...] = v_value


def ssvi_normal(lam_value: np.ndarray, lam_square: np.ndarray, aux_eps: np.ndarray,
                g_value: np.ndarray, g_square: np.ndarray, out_value: np.ndarray,
                out_square: np.ndarray) -> None:
    """(out_value, out_square) = V (g_value, g_square) for q = Normal(mean m, precision
    p = −2·lam_square), element-wise, at the draw ``sample_normal_aux`` left in aux_eps:
    V g = (g_value + 2x g_square) [1 − √p m ε, √p ε / 2]. The outputs may be the g arrays."""
    precision = -2.0 * np.asarray(lam_square, dtype=float)
    mean = lam_value / precision
    root = np.sqrt(precision)
    x = mean + aux_eps / root
    scale = g_value + 2.0 * x * g_square
    v_value = scale * (1.0 - root * mean * aux_eps)
    v_square = scale * (0.5 * root * aux_eps)
    out_value[...] = v_value
    out_square[...] = v_square


def _normal_gamma_usual(lam_log, lam_value, lam_prec_mean, lam_quad):
    """(a, b, m, β) of the Normal-Gamma coefficients, as float arrays."""
    mean, beta, shape, rate = normal_gamma_params(lam_log, lam_value, lam_prec_mean, lam_quad)
    return shape, rate, mean, beta


def _normal_gamma_jacobian(lam_log, lam_value, lam_prec_mean, lam_quad, aux_log_gamma,
                           aux_eps, d=None) -> np.ndarray:
    """J = ∂t(R(u, λ))/∂λ at fixed (u, ε), shape (..., 4, 4) (rows: statistics log τ, τ,
    τμ, τμ²; columns: λ in the same order), at the draw ``sample_normal_gamma_aux`` left in
    the aux arrays; ``d`` = d log G/da if already computed. See :func:`ssvi_normal_gamma`."""
    a, b, m, beta = _normal_gamma_usual(lam_log, lam_value, lam_prec_mean, lam_quad)
    log_g = np.asarray(aux_log_gamma, dtype=float)
    eps = np.asarray(aux_eps, dtype=float)
    if d is None:
        d = _derivative_and_trigamma(a, log_g, False)[0]
    a, b, m, beta, log_g, eps, d = np.broadcast_arrays(a, b, m, beta, log_g, eps, d)
    zero = np.zeros(a.shape)
    tau = np.exp(log_g) / b
    w = eps * np.sqrt(tau / beta)  # τ (μ − m)
    t3 = tau * m + w  # τμ
    sigma = np.stack([d, 1.0 / b, m / b, m * m / b], axis=-1)  # ∂ log τ/∂λ
    e4 = np.stack([zero, zero, zero, np.ones(a.shape)], axis=-1)
    dm = np.stack([zero, zero, 1.0 / beta, 2.0 * m / beta], axis=-1)  # ∂m/∂λ
    dw = w[..., None] * (0.5 * sigma + e4 / beta[..., None])
    tau_sigma = tau[..., None] * sigma
    rows = [
        sigma,
        tau_sigma,
        m[..., None] * tau_sigma + tau[..., None] * dm + dw,
        (m * m)[..., None] * tau_sigma + 2.0 * t3[..., None] * dm + 2.0 * m[..., None] * dw
        + (2.0 * eps * eps / (beta * beta))[..., None] * e4,
    ]
    return np.stack(rows, axis=-2)


def _normal_gamma_fisher(lam_log, lam_value, lam_prec_mean, lam_quad) -> np.ndarray:
    """F = ∇²A(λ) = ∂E[t]/∂λ, shape (..., 4, 4), written out entry by entry (for tests;
    :func:`ssvi_normal_gamma` uses the closed-form inverse)."""
    a, b, m, beta = np.broadcast_arrays(*_normal_gamma_usual(lam_log, lam_value, lam_prec_mean,
                                                             lam_quad))
    tri = _trigamma(a)
    r = a / (b * b)
    k = a / (b * beta)
    f = np.empty(a.shape + (4, 4))
    f[..., 0, :] = np.stack([tri, 1.0 / b, m / b, m * m / b], axis=-1)
    f[..., 1, 1:] = np.stack([r, r * m, r * m * m], axis=-1)
    f[..., 2, 2] = k + r * m * m
    f[..., 2, 3] = 2.0 * k * m + r * m ** 3
    f[..., 3, 3] = 2.0 / (beta * beta) + 4.0 * k * m * m + r * m ** 4
    for i in range(1, 4):
        f[..., i, :i] = f[..., :i, i]
    return f


def ssvi_normal_gamma(lam_log: np.ndarray, lam_value: np.ndarray, lam_prec_mean: np.ndarray,
                      lam_quad: np.ndarray, aux_log_gamma: np.ndarray, aux_eps: np.ndarray,
                      g_log: np.ndarray, g_value: np.ndarray, g_prec_mean: np.ndarray,
                      g_quad: np.ndarray, out_log: np.ndarray, out_value: np.ndarray,
                      out_prec_mean: np.ndarray, out_quad: np.ndarray) -> None:
    """out = V g for the Normal-Gamma q(μ, τ) (β = −2·lam_quad, m = lam_prec_mean/β,
    a = lam_log + ½, b = −lam_value − βm²/2; statistics log τ, τ, τμ, τμ²), element-wise, at
    the draw ``sample_normal_gamma_aux`` left in aux_log_gamma (log G) and aux_eps (ε).

    J, through (a, b, m, β): τ = G/b and ∂b/∂λ = −(0, 1, m, m²), so with d = d log G/da
    σ = ∂ log τ/∂λ = (d, 1/b, m/b, m²/b); ∂m/∂λ = (0, 0, 1, 2m)/β, ∂ log β/∂λ = −2e₄/β;
    w = τ(μ − m) = ε√(τ/β) has ∂w = w (σ/2 + e₄/β). Then ∂τ = τσ,
    ∂(τμ) = mτσ + τ ∂m + ∂w and ∂(τμ²) = m²τσ + 2τμ ∂m + 2m ∂w + (2ε²/β²) e₄.

    F: z = √(βτ)(μ − m) ~ N(0, 1) is independent of τ, so the statistics L t =
    (log τ, τ, τ(μ − m), τ(μ − m)²) = (log τ, τ, √(τ/β) z, z²/β), L the shear
    t₃ − m t₂, t₄ − 2m t₃ + m² t₂, have covariance L F Lᵀ = D = [[ψ'(a), 1/b], [1/b, a/b²]]
    ⊕ a/(bβ) ⊕ 2/β². Hence V g = Lᵀ D⁻¹ L Jᵀ g, with the Gamma block inverted as in
    :func:`ssvi_gamma`. The outputs may be the g arrays."""
    a, b, m, beta = _normal_gamma_usual(lam_log, lam_value, lam_prec_mean, lam_quad)
    d, tri = _derivative_and_trigamma(a, aux_log_gamma, True)
    jac = _normal_gamma_jacobian(lam_log, lam_value, lam_prec_mean, lam_quad, aux_log_gamma,
                                 aux_eps, d)
    g = (g_log, g_value, g_prec_mean, g_quad)
    y1, y2, y3, y4 = (sum(g[s] * jac[..., s, k] for s in range(4)) for k in range(4))
    # L y (y₄ − 2m y₃ + m² y₂ = y₄ − 2m (y₃ − m y₂) − m² y₂), then D⁻¹
    y3 = y3 - m * y2
    y4 = y4 - 2.0 * m * y3 - m * m * y2
    det = a * tri - 1.0
    z1 = (a * y1 - b * y2) / det
    z2 = b * (b * tri * y2 - y1) / det
    z3 = (b * beta / a) * y3
    z4 = (0.5 * beta * beta) * y4
    # Lᵀ z
    out_log[...] = z1
    out_value[...] = z2 - m * z3 + m * m * z4
    out_prec_mean[...] = z3 - 2.0 * m * z4
    out_quad[...] = z4


SSVI_FAMILIES = {
    "dirichlet": (sample_dirichlet_aux, ssvi_dirichlet, 1),
    "beta": (sample_beta_aux, ssvi_beta, 2),
    "gamma": (sample_gamma_aux, ssvi_gamma, 1),
    "normal": (sample_normal_aux, ssvi_normal, 1),
    "normal_gamma": (sample_normal_gamma_aux, ssvi_normal_gamma, 2),
}
"""family → (sampler, ssvi, n_aux) for the families that have V.

Calling convention, with ``lam`` the family's natural-parameter arrays in statistic order
(as in ``families.<fam>_natural``), ``stats`` the arrays the sampled t(β) goes to, ``g``
the natural-gradient arrays (statistic order) and ``out`` where V g goes::

    sampler(*lam, rng, *stats, *aux)        # = sampling.SAMPLERS[fam] plus the aux draws
    ssvi(*lam, *aux, *g, *out)              # out = V(β, λ) g; out may be g itself

Every aux array has the shape of the first λ array (the whole λ array, batch axes included):
dirichlet 1 (log of the Gamma(α, 1) draws), beta 2 (log G_a, log G_b), gamma 1 (log of the
unit-rate Gamma draw), normal 1 (the standard-normal draw ε), normal_gamma 2 (log G of the
unit-rate Gamma draw for τ, then ε of μ). V depends only on λ and aux,
so ``stats`` may be overwritten between the two calls.
"""


# Where each family's coefficients are valid: (lower, upper) per statistic, None = unbounded.
# Dirichlet/Beta/Gamma shapes α = λ + 1 > 0; Gamma rate b = −λ > 0; Normal precision −2λ > 0.
_DOMAIN = {
    "dirichlet": ((-1.0, None),),
    "beta": ((-1.0, None), (-1.0, None)),
    "gamma": ((-1.0, None), (None, 0.0)),
    "normal": ((None, None), (None, 0.0)),
}


# Normal-Gamma (lam_log, lam_value, lam_prec_mean, lam_quad): the box part of its domain,
# shape a = lam_log + ½ > 0 and β = −2·lam_quad > 0; the rate b > 0 is not a box constraint:
# with lam_quad < 0, b = −lam_value + lam_prec_mean²/(4·lam_quad) > 0 ⇔
# 4·lam_quad·lam_value − lam_prec_mean² > 0 (the natural parameter space, convex).
_NORMAL_GAMMA_BOX = ((-0.5, None), (None, None), (None, None), (None, 0.0))


def _normal_gamma_rate_form(lam_value, lam_prec_mean, lam_quad):
    """4·lam_quad·lam_value − lam_prec_mean² (= −4·lam_quad·b, > 0 inside the domain)."""
    return 4.0 * lam_quad * lam_value - lam_prec_mean * lam_prec_mean


def in_domain(family: str, lams) -> np.ndarray | bool:
    """Element-wise: are the natural parameters ``lams`` (statistic order, coefficient form)
    valid for ``family``? A bool array of their common shape (per element, not per Dirichlet
    row); True for families with no constraint recorded here (MVN, Wishart, …). NaN is
    invalid. For the box families only the arrays that have a bound are looked at."""
    if family == "normal_gamma":
        lam_log, lam_value, lam_prec_mean, lam_quad = (np.asarray(v) for v in lams)
        return ((lam_log > -0.5) & (lam_quad < 0.0)
                & (_normal_gamma_rate_form(lam_value, lam_prec_mean, lam_quad) > 0.0))
    ok = True
    for lam, (low, high) in zip(lams, _DOMAIN.get(family, ()), strict=False):
        lam = np.asarray(lam)
        if low is not None:
            ok = ok & (lam > low)
        if high is not None:
            ok = ok & (lam < high)
    return ok


def _normal_gamma_rate_limit(olds: tuple, news: tuple) -> np.ndarray:
    """The smallest r > 0 at which q(r) = 4 (l₄ + r δ₄)(l₂ + r δ₂) − (l₃ + r δ₃)² reaches 0
    (∞ if none), δ = new − old, q(0) > 0. With q = c₀ + c₁ r + c₂ r² and D = c₁² − 4 c₂ c₀:
    c₂ < 0 gives one positive root; c₂ ≥ 0 gives positive roots only if c₁ < 0 and D ≥ 0, the
    smaller being 2c₀/(−c₁ + √D). Both as the cancellation-free one of the two root forms.
    Where q(0) ≤ 0 already (an invalid old λ), 0."""
    _, l2, l3, l4 = olds
    d2, d3, d4 = (new - old for old, new in zip(olds[1:], news[1:], strict=True))
    c0 = _normal_gamma_rate_form(l2, l3, l4)
    c1 = 4.0 * (l4 * d2 + l2 * d4) - 2.0 * l3 * d3
    c2 = 4.0 * d4 * d2 - d3 * d3
    disc = c1 * c1 - 4.0 * c2 * c0
    root = np.sqrt(np.where(disc > 0.0, disc, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        small_c1 = 2.0 * c0 / (root - c1)  # c₁ ≤ 0: no cancellation in √D − c₁
        large_c1 = (c1 + root) / (-2.0 * c2)  # c₁ > 0 (then c₂ < 0 for a root > 0)
    crosses = (disc >= 0.0) & ((c2 < 0.0) | (c1 < 0.0))
    limit = np.where(crosses, np.where(c1 <= 0.0, small_c1, large_c1), np.inf)
    return np.where(c0 > 0.0, limit, 0.0)


def ssvi_blend(family: str, rho: float, olds: tuple, news: tuple, margin: float = 0.5) -> int:
    """λ ← λ_old + ρ_r (λ̂ − λ_old) in place of ``news``, with ρ_r = ρ unless that step would
    leave the family's domain for row r (one distribution: a Dirichlet row, one scalar
    otherwise); then ρ_r = ``margin`` × the largest step that stays inside. V(β, λ) is unbiased
    but heavy-tailed (its noise is largest along the Dirichlet's concentration, where the
    Fisher matrix is nearly singular), so a full step can make λ̂ invalid. Returns the number
    of rows whose step was shortened. The Normal-Gamma's domain is not a box (see
    :func:`in_domain`): its limit is the least of the box limits and the first root of the
    rate's quadratic along the line (:func:`_normal_gamma_rate_limit`)."""
    vector = family == "dirichlet"
    shape = olds[0].shape[:-1] if vector else olds[0].shape
    limit = np.full(shape, np.inf)
    if family == "normal_gamma":
        limit = np.minimum(limit, _normal_gamma_rate_limit(olds, news))
    box = _NORMAL_GAMMA_BOX if family == "normal_gamma" else _DOMAIN[family]
    for old, new, (low, high) in zip(olds, news, box, strict=True):
        delta = new - old
        for bound, sign in ((low, -1.0), (high, 1.0)):
            if bound is None:
                continue
            # old + r·delta must stay strictly on the valid side of bound
            toward = sign * delta > 0
            room = np.where(toward, (bound - old) / np.where(toward, delta, 1.0), np.inf)
            room = room.min(axis=-1) if vector else room
            limit = np.minimum(limit, room)
    step = np.where(rho < limit, rho, margin * limit)
    short = int(np.count_nonzero(rho >= limit))
    weight = step[..., None] if vector else step
    for old, new in zip(olds, news, strict=True):
        new[...] = old + weight * (new - old)
    return short
