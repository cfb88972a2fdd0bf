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

The quantile derivative d log R̂(u; a)/da of the Gamma(a, 1) quantile (appendix B, eq. 23–24)
is :func:`cemodel.runtime.gamma_quantile.gamma_log_quantile_shape_derivative`.

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

MVN, Wishart and Normal-Wishart: :mod:`cemodel.runtime.ssvi_matrix` (registered in
:data:`SSVI_FAMILIES` below, with their domains in :func:`in_domain` and :func:`ssvi_blend`).
"""

from __future__ import annotations

import numpy as np

from ..numerics import NATURAL_BOX
from .gamma_quantile import (  # noqa: F401 (re-exported: ssvi.gamma_log_quantile_…)
    _a_trigamma_minus_one,
    _derivative_and_trigamma,
    _dlogq_integral,
    _trigamma,
    gamma_log_quantile_shape_derivative,
)
from .parameters import normal_gamma_params
from .sampling import log_gamma_draws, sample_normal_gamma
from .special import all_above, all_below
from .ssvi_matrix import (
    MATRIX_FAMILIES,
    matrix_blend,
    matrix_in_domain,
    sample_mvn_aux,
    sample_normal_wishart_aux,
    sample_wishart_aux,
    ssvi_mvn,
    ssvi_normal_wishart,
    ssvi_wishart,
)

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
    "mvn": (sample_mvn_aux, ssvi_mvn, 1),
    "wishart": (sample_wishart_aux, ssvi_wishart, 1),
    "normal_wishart": (sample_normal_wishart_aux, ssvi_normal_wishart, 2),
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
unit-rate Gamma draw for τ, then ε of μ), mvn 1 (ε, shaped like the mean), wishart 1 (the
Bartlett array: log G_i on the diagonal, the normals below it), normal_wishart 2 (the
Bartlett array, then ε on the diagonal of a D × D array). V depends only on λ and aux,
so ``stats`` may be overwritten between the two calls.
"""


# Normal-Gamma (lam_log, lam_value, lam_prec_mean, lam_quad): the box part of its domain,
# shape a = lam_log + ½ > 0 and β = −2·lam_quad > 0; the rate b > 0 is not a box constraint:
# with lam_quad < 0, b = −lam_value + lam_prec_mean²/(4·lam_quad) > 0 ⇔
# 4·lam_quad·lam_value − lam_prec_mean² > 0 (the natural parameter space, convex).
_NORMAL_GAMMA_BOX = ((-0.5, None), (None, None), (None, None), (None, 0.0))


def _normal_gamma_rate_form(lam_value, lam_prec_mean, lam_quad):
    """4·lam_quad·lam_value − lam_prec_mean² (= −4·lam_quad·b, > 0 inside the domain)."""
    return 4.0 * lam_quad * lam_value - lam_prec_mean * lam_prec_mean


def all_in_domain(family: str, lams) -> bool:
    """np.all(in_domain(family, lams)), for the box families in one pass per array without
    temporaries (every stochastic step checks every global)."""
    if family in MATRIX_FAMILIES or family == "normal_gamma":
        return bool(np.all(in_domain(family, lams)))
    for lam, (low, high) in zip(lams, NATURAL_BOX.get(family, ()), strict=False):
        lam = np.asarray(lam, dtype=float)
        if low is not None and not all_above(lam, low):
            return False
        if high is not None and not all_below(lam, high):
            return False
    return True


def in_domain(family: str, lams) -> np.ndarray | bool:
    """Element-wise: are the natural parameters ``lams`` (statistic order, coefficient form)
    valid for ``family``? A bool array of their common shape (per element, not per Dirichlet
    row; per distribution, the leading axes, for MVN, Wishart and Normal-Wishart:
    ``ssvi_matrix.matrix_in_domain``). NaN is invalid. For the box families only the arrays
    that have a bound are looked at."""
    if family in MATRIX_FAMILIES:
        return matrix_in_domain(family, lams)
    if family == "normal_gamma":
        lam_log, lam_value, lam_prec_mean, lam_quad = (np.asarray(v) for v in lams)
        return ((lam_log > -0.5) & (lam_quad < 0.0)
                & (_normal_gamma_rate_form(lam_value, lam_prec_mean, lam_quad) > 0.0))
    ok = True
    for lam, (low, high) in zip(lams, NATURAL_BOX.get(family, ()), strict=False):
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


def ssvi_blend(family: str, rho: float, olds: tuple, news: tuple, margin: float = 0.5,
               plain: tuple | None = None) -> int:
    """λ ← λ_old + ρ_r (λ̂ − λ_old) in place of ``news``, with ρ_r = ρ unless that step would
    leave the family's domain for row r (one distribution: a Dirichlet row, one scalar
    otherwise); then ρ_r = ``margin`` × the largest step that stays inside. V(β, λ) is unbiased
    but heavy-tailed (its noise is largest along the Dirichlet's concentration, where the
    Fisher matrix is nearly singular), so a full step can make λ̂ invalid. Returns the number
    of rows whose step was shortened. The Normal-Gamma's domain is not a box (see
    :func:`in_domain`): its limit is the least of the box limits and the first root of the
    rate's quadratic along the line (:func:`_normal_gamma_rate_limit`). MVN, Wishart and
    Normal-Wishart (one distribution per leading index) stay positive definite by the exact
    eigenvalue limit of ``ssvi_matrix.matrix_step_limit``; there a distribution whose step
    would leave the domain steps towards ``plain`` (SSVI-A's λ̂, V = I) instead, if given
    (``ssvi_matrix.matrix_blend``)."""
    if family in MATRIX_FAMILIES:
        return matrix_blend(family, rho, olds, news, margin, plain)
    vector = family == "dirichlet"
    shape = olds[0].shape[:-1] if vector else olds[0].shape
    limit = np.full(shape, np.inf)
    if family == "normal_gamma":
        limit = np.minimum(limit, _normal_gamma_rate_limit(olds, news))
    box = _NORMAL_GAMMA_BOX if family == "normal_gamma" else NATURAL_BOX[family]
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
