"""SSVI's V(β, λ) (Hoffman & Blei 2015, eq. 8) for the matrix families: multivariate normal,
Wishart and Normal-Wishart globals (the scalar families are in :mod:`cemodel.runtime.ssvi`).

V as a gradient in the mean parameters. With f(λ) = gᵀ t(R(u, λ)) at a fixed draw u and
μ = ∇A(λ) = E[t] the mean parameters, Jᵀ g = ∇_λ f = (∂μ/∂λ)ᵀ ∇_μ f = F ∇_μ f (F = ∇²A
is ∂μ/∂λ, symmetric), so

    V g = F⁻¹ Jᵀ g = ∇_μ f,

the derivative of gᵀ t(β) with respect to the mean parameters, the draw's noise held fixed.
It is computed by the chain rule through usual parameters θ (reverse mode: ∇_θ f, then
∇_μ f from the differential dθ(dμ)), without forming J or F. Matrix statistics pair with
their coefficients by the Frobenius product, and A depends on sym(λ) only, so each matrix
block works in the symmetric matrices: g enters as sym(g) and V g's matrix parts are
symmetric (E[V] is the identity on symmetric coefficients, the projection sym(·) on all).

Reparameterisations (appendix A, eq. 13: independent univariate draws, then a transform).
Φ(M) is the lower triangle of M with its diagonal halved; the Cholesky factor L of S moves
by dL = L Φ(L⁻¹ dS L⁻ᵀ), so a gradient L̄ = ∂f/∂L gives ∇_S f = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)
(:func:`_cholesky_adjoint`).

* MVN (mean m, covariance Σ = P⁻¹, P = −2 sym(λ_outer)), t = (x, x xᵀ): aux ε ~ N(0, I),
  x = m + L ε with L = chol(Σ). h = ∂f/∂x = g_value + 2 sym(g_outer) x; ∇_Σ f = C =
  sym(L⁻ᵀ Φ(Lᵀ h εᵀ) L⁻¹); with μ = (m, Σ + m mᵀ): V g = (h − 2 C m, C). For D = 1 this is
  :func:`cemodel.runtime.ssvi.ssvi_normal`.
* Wishart (dof ν = 2 λ_logdet + D + 1, scale W = (−2 sym(λ_value))⁻¹), t = (Λ, log|Λ|):
  the Bartlett decomposition Λ = L A Aᵀ Lᵀ, L = chol(W), A lower triangular with
  A_ii = √(2 G_i), G_i ~ Gamma(a_i = (ν − i)/2, 1) (so A_ii² ~ χ²(ν − i)), i = 0 … D−1, and
  A_ij ~ N(0, 1) below the diagonal. aux: one D × D array, log G_i on the diagonal and the
  normals below it. With d_i = d log G_i/da_i (the Gamma quantile derivative,
  :mod:`cemodel.runtime.gamma_quantile`), d log A_ii/dν = d_i/4 and d log|Λ|/dν = Σ d_i/2:
  ∂f/∂ν = Σ_i (∂f/∂A)_ii A_ii d_i/4 + g_logdet Σ_i d_i/2 and ∇_W f = (Cholesky adjoint of
  ∂f/∂L) + g_logdet W⁻¹ (:func:`_wishart_gradients`). μ = (νW, Σ_i ψ(a_i) + D log 2 +
  log|W|): dμ₁ = W dν + ν dW, dμ₂ = s dν + ⟨W⁻¹, dW⟩ (s = ½ Σ ψ'(a_i)) give
  V g = ((f_W − k W⁻¹)/ν, k), k = (f_ν − ⟨f_W, W⟩/ν)/(s − D/ν) (:func:`_wishart_mean_gradient`;
  s − D/ν = Σ_i [(a_i ψ'(a_i) − 1)/(2a_i) + i/((ν − i)ν)] > 0, summed without cancellation).
  For D = 1 this is :func:`cemodel.runtime.ssvi.ssvi_gamma` (shape ν/2, rate 1/(2W)).
* Normal-Wishart (m, β, ν = 2 λ_logdet + D, W; Λ ~ Wishart(ν, W), μ | Λ ~ MVN(m, βΛ)),
  t = (Λ, log|Λ|, Λμ, μᵀΛμ): Λ by Bartlett as above, whose Cholesky factor is L A, and
  μ = m + (L A)⁻ᵀ ε/√β, ε ~ N(0, I). aux: the Bartlett array, and ε on the diagonal of a
  second D × D array. With w = L A ε: Λμ = Λm + w/√β and μᵀΛμ = mᵀΛm + 2 mᵀw/√β + |ε|²/β,
  so f is the Wishart f with Ĝ = sym(g₁ + g₃mᵀ) + g₄ m mᵀ plus rᵀ w/√β + g₄|ε|²/β,
  r = g₃ + 2 g₄ m. Mean parameters μ₃ = μ₁ m and μ₄ = D/β + mᵀ μ₁ m give
  dm = μ₁⁻¹(dμ₃ − dμ₁ m), dβ = −(β²/D)(dμ₄ + mᵀ dμ₁ m − 2 mᵀ dμ₃), so with v = μ₁⁻¹ f_m and
  c = −(β²/D) f_β: V g = (V₁ − sym(v mᵀ) + c m mᵀ, k, v − 2c m, c), (V₁, k) the Wishart
  part (:func:`ssvi_normal_wishart`). For D = 1 this is
  :func:`cemodel.runtime.ssvi.ssvi_normal_gamma`.

Domains (:func:`matrix_in_domain`, :func:`matrix_blend`): each family's natural parameter
space is a positive definite matrix M(λ), affine in λ, and a lower bound on λ_logdet:
MVN M = −2 sym(λ_outer); Wishart M = −2 sym(λ_value) and ν > D − 1 (λ_logdet > −1);
Normal-Wishart M = [[−2 sym(λ_value), λ_prec_mean], [λ_prec_meanᵀ, −2 λ_quad]] (by the
Schur complement, β > 0 and W⁻¹ ≻ 0) and ν > D − 1 (λ_logdet > −½). Along a step
M₀ + r Δ = L₀ (I + r K) L₀ᵀ with K = L₀⁻¹ Δ L₀⁻ᵀ, so M stays positive definite exactly
for r < −1/min eig(K) (∞ if min eig(K) ≥ 0): an exact limit, no halving search. A
distribution whose V-step would cross it takes SSVI-A's step instead (:func:`matrix_blend`).
"""

from __future__ import annotations

import numpy as np

from .gamma_quantile import _a_trigamma_minus_one, _derivative_and_trigamma
from .sampling import _positive_definite, log_gamma_draws

MATRIX_FAMILIES = ("mvn", "wishart", "normal_wishart")


# ---------------------------------------------------------------------------------------------
# linear algebra over leading batch axes
# ---------------------------------------------------------------------------------------------


def _t(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + _t(a))


def _mv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """a @ x for a batch of matrices and vectors."""
    return (a @ x[..., None])[..., 0]


def _outer(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x[..., :, None] * y[..., None, :]


def _diagonal(a: np.ndarray) -> np.ndarray:
    return np.diagonal(a, axis1=-2, axis2=-1)


def _cholesky_adjoint(chol: np.ndarray, bar: np.ndarray) -> np.ndarray:
    """∇_S f = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹) for L = chol(S) and L̄ = ∂f/∂L (Φ: the lower triangle,
    diagonal halved), from dL = L Φ(L⁻¹ dS L⁻ᵀ) and ⟨M, Φ(X)⟩ = ⟨Φ(M), X⟩."""
    inner = _t(chol) @ bar
    phi = np.tril(inner, -1) + 0.5 * _diag_matrix(_diagonal(inner))
    inv = np.linalg.inv(chol)
    return _sym(_t(inv) @ phi @ inv)


def _diag_matrix(v: np.ndarray) -> np.ndarray:
    out = np.zeros(v.shape + v.shape[-1:])
    idx = np.arange(v.shape[-1])
    out[..., idx, idx] = v
    return out


# ---------------------------------------------------------------------------------------------
# multivariate normal: x = m + chol(Σ) ε
# ---------------------------------------------------------------------------------------------


def _mvn_usual(lam_value, lam_outer) -> tuple[np.ndarray, np.ndarray]:
    """(m, L): the mean and L = chol(Σ), Σ = (−2 sym(λ_outer))⁻¹."""
    with _positive_definite():
        cov = _sym(np.linalg.inv(-2.0 * _sym(np.asarray(lam_outer, dtype=float))))
        chol = np.linalg.cholesky(cov)
    return _mv(cov, np.asarray(lam_value, dtype=float)), chol


def sample_mvn_aux(lam_value: np.ndarray, lam_outer: np.ndarray, rng: np.random.Generator,
                   out_value: np.ndarray, out_outer: np.ndarray, aux_eps: np.ndarray) -> None:
    """x and x xᵀ of x ~ MVN(mean, precision P = −2 sym(lam_outer)) per leading row, drawn as
    x = m + L ε with L = chol(P⁻¹); aux_eps = ε ~ N(0, I) (shaped like lam_value)."""
    mean, chol = _mvn_usual(lam_value, lam_outer)
    eps = rng.standard_normal(mean.shape)
    x = mean + _mv(chol, eps)
    aux_eps[...] = eps
    out_value[...] = x
    out_outer[...] = _outer(x, x)


def ssvi_mvn(lam_value: np.ndarray, lam_outer: np.ndarray, aux_eps: np.ndarray,
             g_value: np.ndarray, g_outer: np.ndarray, out_value: np.ndarray,
             out_outer: np.ndarray) -> None:
    """(out_value, out_outer) = V (g_value, g_outer) for q = MVN at the draw
    ``sample_mvn_aux`` left in aux_eps: V g = (h − 2 C m, C), h = g_value + 2 sym(g_outer) x,
    C = sym(L⁻ᵀ Φ(Lᵀ h εᵀ) L⁻¹) (module docstring). The outputs may be the g arrays."""
    mean, chol = _mvn_usual(lam_value, lam_outer)
    eps = np.asarray(aux_eps, dtype=float)
    x = mean + _mv(chol, eps)
    h = g_value + 2.0 * _mv(_sym(np.asarray(g_outer, dtype=float)), x)
    cov_grad = _cholesky_adjoint(chol, _outer(h, eps))
    v_value = h - 2.0 * _mv(cov_grad, mean)
    out_value[...] = v_value
    out_outer[...] = cov_grad


# ---------------------------------------------------------------------------------------------
# Wishart by the Bartlett decomposition
# ---------------------------------------------------------------------------------------------


def _shapes(dof: np.ndarray, dim: int) -> np.ndarray:
    """a_i = (ν − i)/2, i = 0 … D−1: the Gamma shapes of the Bartlett diagonal."""
    return 0.5 * (np.asarray(dof, dtype=float)[..., None] - np.arange(dim))


def _bartlett_draw(dof: np.ndarray, dim: int, rng: np.random.Generator) -> np.ndarray:
    """The Bartlett aux array: log G_i, G_i ~ Gamma((ν − i)/2, 1), on the diagonal, N(0, 1)
    below it, 0 above it."""
    log_g = log_gamma_draws(_shapes(dof, dim), rng)
    aux = np.tril(rng.standard_normal(log_g.shape + (dim,)), -1)
    idx = np.arange(dim)
    aux[..., idx, idx] = log_g
    return aux


def _bartlett_factor(aux: np.ndarray) -> np.ndarray:
    """A: the aux array's lower triangle, with √(2 G_i) on the diagonal."""
    aux = np.asarray(aux, dtype=float)
    out = np.tril(aux, -1)
    idx = np.arange(aux.shape[-1])
    out[..., idx, idx] = np.exp(0.5 * (np.log(2.0) + aux[..., idx, idx]))
    return out


def _wishart_draw(chol_scale: np.ndarray, aux: np.ndarray):
    """(A, L A, Λ, log|Λ|) of the Bartlett draw Λ = (L A)(L A)ᵀ, L = chol(W)."""
    factor = _bartlett_factor(aux)
    chol_draw = chol_scale @ factor
    log_det = 2.0 * np.sum(np.log(_diagonal(chol_scale)), axis=-1) + np.sum(
        np.log(2.0) + _diagonal(np.asarray(aux, dtype=float)), axis=-1)
    return factor, chol_draw, chol_draw @ _t(chol_draw), log_det


def _wishart_usual(lam_value, lam_logdet, dof_offset: int):
    """(ν, W⁻¹ = −2 sym(λ_value), W, chol(W)), ν = 2 λ_logdet + D + dof_offset."""
    lam_value = np.asarray(lam_value, dtype=float)
    dim = lam_value.shape[-1]
    scale_inv = -2.0 * _sym(lam_value)
    with _positive_definite():
        scale = _sym(np.linalg.inv(scale_inv))
        chol = np.linalg.cholesky(scale)
    return 2.0 * np.asarray(lam_logdet, dtype=float) + dim + dof_offset, scale_inv, scale, chol


def sample_wishart_aux(lam_value: np.ndarray, lam_logdet: np.ndarray,
                       rng: np.random.Generator, out_value: np.ndarray, out_logdet: np.ndarray,
                       aux_bartlett: np.ndarray) -> None:
    """Λ and log|Λ| of Λ ~ Wishart(dof 2 lam_logdet + D + 1, scale (−2 sym(lam_value))⁻¹) per
    leading row, by the Bartlett decomposition; aux_bartlett (shaped like lam_value) holds
    log G_i on its diagonal and the normals below it (module docstring)."""
    dof, _, _, chol = _wishart_usual(lam_value, lam_logdet, 1)
    aux = _bartlett_draw(dof, chol.shape[-1], rng)
    _, _, draw, log_det = _wishart_draw(chol, aux)
    aux_bartlett[...] = aux
    out_value[...] = draw
    out_logdet[...] = log_det


def _wishart_gradients(chol, factor, d, g_mat, g_logdet, scale_inv, bar_chol=0.0,
                       bar_factor_diag=0.0):
    """(∂f/∂ν, ∇_W f) for f = ⟨g_mat, Λ⟩ + g_logdet log|Λ| (g_mat symmetric) plus terms whose
    gradients with respect to L and to diag(A) are ``bar_chol`` and ``bar_factor_diag``."""
    inner = _t(chol) @ g_mat @ chol
    bar_l = 2.0 * g_mat @ chol @ factor @ _t(factor) + bar_chol
    bar_a = 2.0 * _diagonal(inner @ factor) + bar_factor_diag
    g_logdet = np.asarray(g_logdet, dtype=float)
    f_dof = (0.25 * np.sum(bar_a * _diagonal(factor) * d, axis=-1)
             + 0.5 * g_logdet * np.sum(d, axis=-1))
    f_scale = _cholesky_adjoint(chol, bar_l) + g_logdet[..., None, None] * scale_inv
    return f_dof, f_scale


def _wishart_mean_gradient(dof, scale, scale_inv, shapes, tri, f_dof, f_scale):
    """(∇_μ₁ f, ∇_μ₂ f) for μ = (νW, E log|Λ|) from (∂f/∂ν, ∇_W f) (module docstring)."""
    dim = scale.shape[-1]
    idx = np.arange(dim)
    curvature = np.sum(_a_trigamma_minus_one(shapes, tri) / (2.0 * shapes)
                       + idx / ((dof[..., None] - idx) * dof[..., None]), axis=-1)
    k = (f_dof - np.sum(f_scale * scale, axis=(-2, -1)) / dof) / curvature
    return (f_scale - k[..., None, None] * scale_inv) / dof[..., None, None], k


def ssvi_wishart(lam_value: np.ndarray, lam_logdet: np.ndarray, aux_bartlett: np.ndarray,
                 g_value: np.ndarray, g_logdet: np.ndarray, out_value: np.ndarray,
                 out_logdet: np.ndarray) -> None:
    """(out_value, out_logdet) = V (g_value, g_logdet) for q = Wishart at the Bartlett draw
    ``sample_wishart_aux`` left in aux_bartlett (module docstring). The outputs may be the g
    arrays."""
    dof, scale_inv, scale, chol = _wishart_usual(lam_value, lam_logdet, 1)
    shapes = _shapes(dof, chol.shape[-1])
    d, tri = _derivative_and_trigamma(shapes, _diagonal(np.asarray(aux_bartlett)), True)
    factor = _bartlett_factor(aux_bartlett)
    f_dof, f_scale = _wishart_gradients(chol, factor, d, _sym(np.asarray(g_value, dtype=float)),
                                        g_logdet, scale_inv)
    v_value, v_logdet = _wishart_mean_gradient(dof, scale, scale_inv, shapes, tri, f_dof,
                                               f_scale)
    out_value[...] = v_value
    out_logdet[...] = v_logdet


# ---------------------------------------------------------------------------------------------
# Normal-Wishart: Bartlett for Λ, μ = m + (L A)⁻ᵀ ε / √β
# ---------------------------------------------------------------------------------------------


def _normal_wishart_usual(lam_value, lam_logdet, lam_prec_mean, lam_quad):
    """(β, m, ν, W⁻¹, W, chol(W)) of the coefficients (``parameters.normal_wishart_params``)."""
    beta = -2.0 * np.asarray(lam_quad, dtype=float)
    mean = np.asarray(lam_prec_mean, dtype=float) / beta[..., None]
    shifted = np.asarray(lam_value, dtype=float) + 0.5 * beta[..., None, None] * _outer(mean,
                                                                                         mean)
    dof, scale_inv, scale, chol = _wishart_usual(shifted, lam_logdet, 0)
    return beta, mean, dof, scale_inv, scale, chol


def sample_normal_wishart_aux(lam_value: np.ndarray, lam_logdet: np.ndarray,
                              lam_prec_mean: np.ndarray, lam_quad: np.ndarray,
                              rng: np.random.Generator, out_value: np.ndarray,
                              out_logdet: np.ndarray, out_prec_mean: np.ndarray,
                              out_quad: np.ndarray, aux_bartlett: np.ndarray,
                              aux_eps: np.ndarray) -> None:
    """Λ, log|Λ|, Λμ and μᵀΛμ of Λ ~ Wishart(ν, W), μ | Λ ~ MVN(m, precision βΛ) per leading
    row: Λ by Bartlett (aux_bartlett as for the Wishart), μ = m + (L A)⁻ᵀ ε/√β with
    ε ~ N(0, I) on the diagonal of aux_eps (both aux arrays shaped like lam_value)."""
    beta, mean, dof, _, _, chol = _normal_wishart_usual(lam_value, lam_logdet, lam_prec_mean,
                                                        lam_quad)
    dim = chol.shape[-1]
    aux = _bartlett_draw(dof, dim, rng)
    eps = rng.standard_normal(mean.shape)
    _, chol_draw, draw, log_det = _wishart_draw(chol, aux)
    root = np.sqrt(beta)
    w = _mv(chol_draw, eps)  # Λ(μ − m) √β
    draw_mean = _mv(draw, mean)
    aux_bartlett[...] = aux
    aux_eps[...] = _diag_matrix(eps)
    out_value[...] = draw
    out_logdet[...] = log_det
    out_prec_mean[...] = draw_mean + w / root[..., None]
    out_quad[...] = (np.sum(mean * draw_mean, axis=-1) + 2.0 * np.sum(mean * w, axis=-1) / root
                     + np.sum(eps * eps, axis=-1) / beta)


def ssvi_normal_wishart(lam_value: np.ndarray, lam_logdet: np.ndarray,
                        lam_prec_mean: np.ndarray, lam_quad: np.ndarray,
                        aux_bartlett: np.ndarray, aux_eps: np.ndarray, g_value: np.ndarray,
                        g_logdet: np.ndarray, g_prec_mean: np.ndarray, g_quad: np.ndarray,
                        out_value: np.ndarray, out_logdet: np.ndarray,
                        out_prec_mean: np.ndarray, out_quad: np.ndarray) -> None:
    """out = V g for the Normal-Wishart q(μ, Λ) at the draw ``sample_normal_wishart_aux``
    left in the aux arrays (module docstring). The outputs may be the g arrays."""
    beta, mean, dof, scale_inv, scale, chol = _normal_wishart_usual(
        lam_value, lam_logdet, lam_prec_mean, lam_quad)
    dim = chol.shape[-1]
    shapes = _shapes(dof, dim)
    d, tri = _derivative_and_trigamma(shapes, _diagonal(np.asarray(aux_bartlett)), True)
    eps = _diagonal(np.asarray(aux_eps, dtype=float))
    factor, chol_draw, draw, _ = _wishart_draw(chol, aux_bartlett)
    root = np.sqrt(beta)[..., None]
    g3 = np.asarray(g_prec_mean, dtype=float)
    g4 = np.asarray(g_quad, dtype=float)[..., None]
    w = _mv(chol_draw, eps)
    r = g3 + 2.0 * g4 * mean  # ∂f/∂w · √β
    g_mat = _sym(np.asarray(g_value, dtype=float) + _outer(g3, mean)) + g4[..., None] * _outer(
        mean, mean)
    f_dof, f_scale = _wishart_gradients(
        chol, factor, d, g_mat, g_logdet, scale_inv,
        bar_chol=_outer(r, _mv(factor, eps)) / root[..., None],
        bar_factor_diag=_mv(_t(chol), r) * eps / root)
    v_value, v_logdet = _wishart_mean_gradient(dof, scale, scale_inv, shapes, tri, f_dof,
                                                f_scale)
    f_mean = _mv(draw, g3) + 2.0 * g4 * (_mv(draw, mean) + w / root)
    f_beta = (-0.5 * np.sum(r * w, axis=-1) / (beta * np.sqrt(beta))
              - g4[..., 0] * np.sum(eps * eps, axis=-1) / (beta * beta))
    v = _mv(scale_inv, f_mean) / dof[..., None]  # μ₁⁻¹ f_m
    c = -(beta * beta / dim) * f_beta
    out_value[...] = (v_value - _sym(_outer(v, mean))
                      + c[..., None, None] * _outer(mean, mean))
    out_logdet[...] = v_logdet
    out_prec_mean[...] = v - 2.0 * c[..., None] * mean
    out_quad[...] = c


# ---------------------------------------------------------------------------------------------
# domains
# ---------------------------------------------------------------------------------------------


def _domain_parts(family: str, lams) -> tuple[np.ndarray, np.ndarray | None, float]:
    """(M, λ_logdet or None, its lower bound): the positive definite matrix of the family's
    natural parameter space (module docstring) and its scalar constraint."""
    lam_value = np.asarray(lams[0], dtype=float)
    if family == "mvn":
        return -2.0 * _sym(np.asarray(lams[1], dtype=float)), None, 0.0
    if family == "wishart":
        return -2.0 * _sym(lam_value), np.asarray(lams[1], dtype=float), -1.0
    prec_mean = np.asarray(lams[2], dtype=float)
    quad = np.asarray(lams[3], dtype=float)
    top = np.concatenate([-2.0 * _sym(lam_value), prec_mean[..., :, None]], axis=-1)
    bottom = np.concatenate([prec_mean, -2.0 * quad[..., None]], axis=-1)[..., None, :]
    return np.concatenate([top, bottom], axis=-2), np.asarray(lams[1], dtype=float), -0.5


def _min_eigenvalue(matrices: np.ndarray) -> np.ndarray:
    """The least eigenvalue of each symmetric matrix; NaN where it is not finite."""
    finite = np.all(np.isfinite(matrices), axis=(-2, -1))
    safe = np.where(finite[..., None, None], matrices, 0.0)
    return np.where(finite, np.linalg.eigvalsh(safe)[..., 0], np.nan)


def matrix_in_domain(family: str, lams) -> np.ndarray:
    """Per distribution (the leading axes): are the coefficients valid? M positive definite
    and λ_logdet above its bound; NaN is invalid."""
    matrix, logdet, low = _domain_parts(family, lams)
    ok = _min_eigenvalue(matrix) > 0.0
    return ok if logdet is None else ok & (logdet > low)


def matrix_step_limit(family: str, olds: tuple, news: tuple) -> np.ndarray:
    """Per distribution, the largest r such that old + r (new − old) stays valid for every
    r' < r (∞ if all r > 0 do; 0 where old is already invalid): −1/min eig(L₀⁻¹ Δ L₀⁻ᵀ) for
    the matrix, (bound − old)/δ for λ_logdet. A step that is not finite is not limited (it
    leaves a NaN that the driver's domain check reports)."""
    m_old, ld_old, low = _domain_parts(family, olds)
    m_new, ld_new, _ = _domain_parts(family, news)
    delta = m_new - m_old
    valid = _min_eigenvalue(m_old) > 0.0
    safe_old = np.where(valid[..., None, None], m_old, np.eye(m_old.shape[-1]))
    inv = np.linalg.inv(np.linalg.cholesky(safe_old))
    least = _min_eigenvalue(inv @ delta @ _t(inv))
    with np.errstate(divide="ignore"):
        limit = np.where(least < 0.0, -1.0 / least, np.inf)  # NaN compares False: ∞
    if ld_old is not None:
        step = ld_new - ld_old
        toward = step < 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.minimum(limit, np.where(toward, (low - ld_old) / step, np.inf))
        valid &= ld_old > low
    return np.where(valid, limit, 0.0)


def matrix_blend(family: str, rho: float, olds: tuple, news: tuple, margin: float,
                 plain: tuple | None = None) -> int:
    """``ssvi.ssvi_blend`` for a matrix family: per distribution the step ρ towards ``news``
    where that stays valid. Elsewhere the step goes towards ``plain`` (SSVI-A's λ̂: V = I),
    if given: V's noise on a Gaussian's precision grows with the distance, in posterior
    standard deviations, between its mean and the minibatch's (tens while a mixture's
    components move), and a step shortened towards the positive definite boundary leaves a
    nearly singular precision; in a 2-D mixture such components lost all their points and
    died. Whatever still reaches the boundary takes ``margin`` × :func:`matrix_step_limit`.
    Returns how many distributions did not take the V-step ρ."""
    limit = matrix_step_limit(family, olds, news)
    short = rho >= limit
    if plain is not None:
        for new, fallback in zip(news, plain, strict=True):
            new[...] = np.where(short.reshape(short.shape + (1,) * (new.ndim - short.ndim)),
                                fallback, new)
        limit = matrix_step_limit(family, olds, news)
    step = np.where(rho < limit, rho, margin * limit)
    for old, new in zip(olds, news, strict=True):
        weight = step.reshape(step.shape + (1,) * (new.ndim - step.ndim))
        new[...] = old + weight * (new - old)
    return int(np.count_nonzero(short))
