"""Draws from the variational families, returned as sufficient statistics t(β).

SSVI-A (Hoffman & Blei 2015, eq. 10) runs the local step with t(β) of a sample β ~ q(β)
in place of E_q[t(β)]. Each sampler takes the natural parameters (coefficient form, as the
generated modules hold them) and writes t(β) into the arrays where E[t] lives.

Small Dirichlet/Beta/Gamma shapes (LDA's eta = 0.01) underflow a plain gamma draw to 0,
whose log is −inf; log-gammas use log G(a) = log G(a + 1) + log(U) / a (Marsaglia & Tsang
2000), so log β stays finite.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import scipy.stats

from ..errors import CemDataError
from .parameters import normal_gamma_params, normal_wishart_params
from .special import _NOT_POSITIVE_DEFINITE


@contextmanager
def _positive_definite():
    """A scale or precision that is not positive definite in floating point (a posterior on a
    scale too far from its prior's) is the runtime's clear data error, not LinAlgError."""
    try:
        yield
    except np.linalg.LinAlgError:
        raise CemDataError(_NOT_POSITIVE_DEFINITE) from None


def log_gamma_draws(shape: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """log of Gamma(shape, 1) draws, finite even for tiny shapes."""
    shape = np.asarray(shape, dtype=float)
    boosted = rng.standard_gamma(shape + 1.0)
    u = rng.random(shape.shape)
    return np.log(boosted) + np.log(u) / shape


def sample_dirichlet(lam_log: np.ndarray, rng: np.random.Generator,
                     out_log: np.ndarray) -> None:
    """out_log = log β, β ~ Dirichlet(lam_log + 1), row by row (last axis)."""
    log_g = log_gamma_draws(lam_log + 1.0, rng)
    top = log_g.max(axis=-1, keepdims=True)
    out_log[...] = log_g - (top + np.log(np.exp(log_g - top).sum(axis=-1, keepdims=True)))


def sample_beta(lam_log: np.ndarray, lam_log1m: np.ndarray, rng: np.random.Generator,
                out_log: np.ndarray, out_log1m: np.ndarray) -> None:
    """log p and log(1 − p) of p ~ Beta(lam_log + 1, lam_log1m + 1)."""
    la = log_gamma_draws(lam_log + 1.0, rng)
    lb = log_gamma_draws(lam_log1m + 1.0, rng)
    top = np.maximum(la, lb)
    total = top + np.log(np.exp(la - top) + np.exp(lb - top))
    out_log[...] = la - total
    out_log1m[...] = lb - total


def sample_gamma(lam_log: np.ndarray, lam_value: np.ndarray, rng: np.random.Generator,
                 out_log: np.ndarray, out_value: np.ndarray) -> None:
    """log x and x of x ~ Gamma(shape = lam_log + 1, rate = −lam_value)."""
    log_x = log_gamma_draws(lam_log + 1.0, rng) - np.log(-lam_value)
    out_log[...] = log_x
    out_value[...] = np.exp(log_x)


def sample_normal(lam_value: np.ndarray, lam_square: np.ndarray, rng: np.random.Generator,
                  out_value: np.ndarray, out_square: np.ndarray) -> None:
    """x and x² of x ~ Normal(mean, precision) with precision = −2·lam_square."""
    precision = -2.0 * lam_square
    x = lam_value / precision + rng.standard_normal(precision.shape) / np.sqrt(precision)
    out_value[...] = x
    out_square[...] = x * x


def sample_mvn(lam_value: np.ndarray, lam_outer: np.ndarray, rng: np.random.Generator,
               out_value: np.ndarray, out_outer: np.ndarray) -> None:
    """x and x xᵀ of x ~ MVN(mean, precision P = −2·sym(lam_outer)), per leading row (all
    rows at once: numpy's stacked LAPACK calls, the draws in row order)."""
    P = -(lam_outer + np.swapaxes(lam_outer, -1, -2))
    with _positive_definite():
        L = np.linalg.cholesky(P)
    mean = np.linalg.solve(P, lam_value[..., None])[..., 0]
    # x = mean + L^{-T} ε has covariance P^{-1}
    eps = rng.standard_normal(lam_value.shape)
    x = mean + np.linalg.solve(np.swapaxes(L, -1, -2), eps[..., None])[..., 0]
    out_value[...] = x
    out_outer[...] = x[..., :, None] * x[..., None, :]


def sample_wishart(lam_value: np.ndarray, lam_logdet: np.ndarray, rng: np.random.Generator,
                   out_value: np.ndarray, out_logdet: np.ndarray) -> None:
    """Λ and log|Λ| of Λ ~ Wishart(dof = 2·lam_logdet + D + 1, scale = (−2·sym(lam_value))⁻¹)."""
    D = lam_value.shape[-1]
    for row in np.ndindex(lam_value.shape[:-2]):
        dof = 2.0 * lam_logdet[row] + D + 1.0
        with _positive_definite():
            scale = np.linalg.inv(-(lam_value[row] + lam_value[row].T))
            draw = np.atleast_2d(scipy.stats.wishart(df=dof, scale=scale).rvs(random_state=rng))
        out_value[row] = draw
        out_logdet[row] = np.linalg.slogdet(draw)[1]


def sample_normal_gamma(lam_log: np.ndarray, lam_value: np.ndarray, lam_prec_mean: np.ndarray,
                        lam_quad: np.ndarray, rng: np.random.Generator, out_log: np.ndarray,
                        out_value: np.ndarray, out_prec_mean: np.ndarray, out_quad: np.ndarray,
                        aux_log_gamma: np.ndarray | None = None,
                        aux_eps: np.ndarray | None = None) -> None:
    """log τ, τ, τμ and τμ² of τ ~ Gamma(a, b), μ | τ ~ Normal(m, precision β·τ), the usual
    parameters from ``normal_gamma_params``: τ = G / b with G ~ Gamma(a, 1), μ = m + ε/√(βτ).
    The aux arrays, if given, receive log G and ε (what SSVI's V needs)."""
    mean, beta, shape, rate = normal_gamma_params(lam_log, lam_value, lam_prec_mean, lam_quad)
    log_g = log_gamma_draws(shape, rng)
    log_tau = log_g - np.log(rate)
    tau = np.exp(log_tau)
    eps = rng.standard_normal(beta.shape)
    mu = mean + eps / np.sqrt(beta * tau)
    if aux_log_gamma is not None:
        aux_log_gamma[...] = log_g
    if aux_eps is not None:
        aux_eps[...] = eps
    out_log[...] = log_tau
    out_value[...] = tau
    out_prec_mean[...] = tau * mu
    out_quad[...] = tau * mu * mu


def sample_normal_wishart(lam_value: np.ndarray, lam_logdet: np.ndarray,
                          lam_prec_mean: np.ndarray, lam_quad: np.ndarray,
                          rng: np.random.Generator, out_value: np.ndarray,
                          out_logdet: np.ndarray, out_prec_mean: np.ndarray,
                          out_quad: np.ndarray) -> None:
    """Λ, log|Λ|, Λμ and μᵀΛμ of Λ ~ Wishart(ν, W), μ | Λ ~ MVN(m, precision β·Λ), per
    leading row, the usual parameters from ``normal_wishart_params``."""
    with _positive_definite():
        means, betas, dofs, scales = normal_wishart_params(lam_value, lam_logdet,
                                                           lam_prec_mean, lam_quad)
    for row in np.ndindex(lam_value.shape[:-2]):
        mean, beta = means[row], betas[row]
        with _positive_definite():
            draw = np.atleast_2d(scipy.stats.wishart(df=dofs[row], scale=scales[row]).rvs(
                random_state=rng))
            L = np.linalg.cholesky(beta * draw)
        # μ = m + L^{-T} ε has covariance (β Λ)^{-1}
        mu = mean + np.linalg.solve(L.T, rng.standard_normal(len(mean)))
        prec_mean = draw @ mu
        out_value[row] = draw
        out_logdet[row] = np.linalg.slogdet(draw)[1]
        out_prec_mean[row] = prec_mean
        out_quad[row] = mu @ prec_mean


SAMPLERS = {
    "dirichlet": sample_dirichlet,
    "beta": sample_beta,
    "gamma": sample_gamma,
    "normal": sample_normal,
    "mvn": sample_mvn,
    "wishart": sample_wishart,
    "normal_gamma": sample_normal_gamma,
    "normal_wishart": sample_normal_wishart,
}


def start_at_draw(family: str, lam_value: np.ndarray, lam_second: np.ndarray,
                  rng: np.random.Generator) -> None:
    """Move the mean of each Normal / MVN row to a draw from its current q, keeping its
    precision: a random start that breaks the symmetry of bilinear models (PMF's u·v, factor
    analysis), whose mean-field updates stay at 0 from a start at the prior mean."""
    if family == "normal":
        precision = -2.0 * lam_second
        x = lam_value / precision + rng.standard_normal(precision.shape) / np.sqrt(precision)
        lam_value[...] = precision * x
        return
    draw = np.empty_like(lam_value)
    sample_mvn(lam_value, lam_second, rng, draw, np.empty_like(lam_second))
    precision = -(lam_second + np.swapaxes(lam_second, -1, -2))
    lam_value[...] = np.matmul(precision, draw[..., None])[..., 0]


def start_gamma_near_mean(lam_log: np.ndarray, lam_value: np.ndarray,
                          rng: np.random.Generator, concentration: float = 1e4) -> None:
    """Start each Gamma row as a concentrated q near its current mean, perturbed by a
    Gamma(100, 1/100) ratio (about 14%): shape = c·g1, rate = c·g2 / mean. As Hoffman et al.
    (2010) start GaP-NMF. It breaks the symmetry of products of Gamma variables (θ_k W_fk H_kt
    stay exchangeable from a start at the prior), and a stochastic method's first draws from
    it are near the mean, not the prior's wild draws (shape α/K = 0.02: log θ spread ±50)."""
    mean = (lam_log + 1.0) / -lam_value
    shape = concentration * rng.gamma(100.0, 0.01, lam_log.shape)
    rate = concentration * rng.gamma(100.0, 0.01, lam_log.shape) / mean
    lam_log[...] = shape - 1.0
    lam_value[...] = -rate
