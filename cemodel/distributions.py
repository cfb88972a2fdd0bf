"""Draws and log densities of the families, in NumPy: what the posterior predictive and the
held-out scores (``cemodel.predictive``, ``cemodel.scoring``) need of each family, as data.

Every function takes parameters with any leading batch axes (one row of a plate each) in the
family's parameter order (``FamilySpec.params``) and works on all rows at once. A posterior
holds the same parameters under the same names (``"mu.mean"``, ``"mu.precision"``), except
where ``Q_NAMES`` renames them, so one table draws from q(β) and from the prior alike.

Small Dirichlet/Beta/Gamma shapes (LDA's eta = 0.01) underflow a plain gamma draw; the draws
use log G(a) = log G(a + 1) + log(U) / a (``cemodel.runtime.sampling.log_gamma_draws``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, gammaln, logsumexp, xlog1py, xlogy

from .errors import CemDataError, CemError
from .runtime.sampling import log_gamma_draws

Array = np.ndarray
_LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass(frozen=True)
class Numeric:
    """A family's draw ``draw(rng, params, step)`` (``step``: each row's position along the
    innermost plate, for a chain) and its log density ``log_density(x, params)``, row by row;
    None where cemodel has none."""

    draw: Callable[[np.random.Generator, tuple[Array, ...], Array | None], Array]
    log_density: Callable[[Array, tuple[Array, ...]], Array] | None = None


def _cholesky(matrix: Array) -> Array:
    try:
        return np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        raise CemDataError("a precision or scale matrix is not positive definite") from None


def gamma_draws(rng: np.random.Generator, shape: Array, rate: Array) -> Array:
    shape, rate = np.broadcast_arrays(shape, rate)
    return np.exp(log_gamma_draws(shape, rng) - np.log(rate))


def dirichlet_draws(rng: np.random.Generator, alpha: Array) -> Array:
    log_g = log_gamma_draws(alpha, rng)
    return np.exp(log_g - logsumexp(log_g, axis=-1, keepdims=True))


def beta_draws(rng: np.random.Generator, a: Array, b: Array) -> Array:
    a, b = np.broadcast_arrays(a, b)
    la, lb = log_gamma_draws(a, rng), log_gamma_draws(b, rng)
    return np.exp(la - np.logaddexp(la, lb))


def mvn_draws(rng: np.random.Generator, mean: Array, precision: Array) -> Array:
    """x = m + L⁻ᵀ ε with P = L Lᵀ: covariance P⁻¹."""
    mean, precision = np.broadcast_arrays(mean[..., None], precision)
    L = _cholesky(precision)
    eps = rng.standard_normal(mean.shape[:-1])
    return mean[..., 0] + np.linalg.solve(np.swapaxes(L, -1, -2), eps[..., None])[..., 0]


def wishart_draws(rng: np.random.Generator, dof: Array, scale: Array) -> Array:
    """Bartlett: Λ = L A Aᵀ Lᵀ, W = L Lᵀ, A lower triangular with A_ii² ~ χ²(ν − i) and
    standard normals below the diagonal."""
    D = scale.shape[-1]
    dof = np.asarray(dof, dtype=float)
    batch = np.broadcast_shapes(dof.shape, scale.shape[:-2])
    dof, scale = np.broadcast_to(dof, batch), np.broadcast_to(scale, batch + (D, D))
    A = np.tril(rng.standard_normal(batch + (D, D)), -1)
    chi2 = 2.0 * gamma_draws(rng, 0.5 * (dof[..., None] - np.arange(D)), np.ones(D))
    A[..., np.arange(D), np.arange(D)] = np.sqrt(chi2)
    LA = _cholesky(scale) @ A
    return LA @ np.swapaxes(LA, -1, -2)


def _categorical(rng: np.random.Generator, p: Array) -> Array:
    u = rng.random(p.shape[:-1] + (1,))
    cdf = np.cumsum(p, axis=-1)
    return np.minimum((cdf < u * cdf[..., -1:]).sum(axis=-1), p.shape[-1] - 1)


def categorical_rows(rng: np.random.Generator, table: Array, rows: Array) -> Array:
    """x_i ~ Categorical(table[rows_i]) by inverse CDF: row r's CDF lies in [r, r + 1] of one
    sorted array, so one search finds every draw (no copy of a row per draw)."""
    cdf = np.cumsum(table, axis=-1)
    cdf = cdf / cdf[:, -1:] + np.arange(len(table))[:, None]
    n = table.shape[-1]
    found = np.searchsorted(cdf.ravel(), rows + rng.random(len(rows)), side="right")
    return np.clip(found - rows * n, 0, n - 1)


def categorical_table_log(x: Array, table: Array, rows: Array) -> Array:
    """log table[rows_i, x_i]."""
    with np.errstate(divide="ignore"):
        return np.log(table[rows, x.astype(np.int64)])


def _markov(rng: np.random.Generator, init: Array, transition: Array, step: Array) -> Array:
    """z_0 ~ init, z_t ~ transition[z_{t−1}]: the rows of a chain are consecutive, ``step``
    their position in it; one pass over the steps, every chain at once."""
    rows = np.arange(len(step))
    init = np.broadcast_to(init, (len(step),) + init.shape[-1:])
    transition = np.broadcast_to(transition, (len(step),) + transition.shape[-2:])
    z = np.zeros(len(step), dtype=np.int64)
    for t in range(int(step.max(initial=-1)) + 1):
        at = rows[step == t]
        probs = init[at] if t == 0 else transition[at, z[at - 1]]
        z[at] = _categorical(rng, probs)
    return z


def _gaussian_chain(rng: np.random.Generator, params: tuple[Array, ...], step: Array) -> Array:
    """x_0 ~ N(m0, P0⁻¹), x_t ~ N(A x_{t−1}, Q⁻¹): the rows of a chain are consecutive, ``step``
    their position in it; one pass over the steps, every chain at once."""
    rows = np.arange(len(step))
    dim = params[0].shape[-1]
    m0, p0, a, q = (np.broadcast_to(p, (len(step),) + p.shape[p.ndim - rank:])
                    for p, rank in zip(params, (1, 2, 2, 2), strict=True))
    x = np.zeros((len(step), dim))
    for t in range(int(step.max(initial=-1)) + 1):
        at = rows[step == t]
        if t == 0:
            x[at] = mvn_draws(rng, m0[at], p0[at])
        else:
            x[at] = mvn_draws(rng, np.einsum("rij,rj->ri", a[at], x[at - 1]), q[at])
    return x


def _mvn_log(x: Array, mean: Array, precision: Array) -> Array:
    """½ log|P| − ½ (x − m)ᵀ P (x − m) − (D/2) log 2π."""
    d = x - mean
    logdet = np.linalg.slogdet(precision)[1]
    return 0.5 * (logdet - np.einsum("...i,...ij,...j->...", d, precision, d)
                  - x.shape[-1] * _LOG_2PI)


def _student_t(rng: np.random.Generator, nu: Array, mean: Array, precision: Array) -> Array:
    """μ + t_ν / √τ."""
    nu, mean, precision = np.broadcast_arrays(nu, mean, precision)
    return mean + rng.standard_t(nu) / np.sqrt(precision)


def _student_t_log(x: Array, nu: Array, mean: Array, precision: Array) -> Array:
    """ln Γ((ν+1)/2) − ln Γ(ν/2) + ½ ln(τ/(νπ)) − (ν+1)/2 · ln(1 + τ(x − μ)²/ν)."""
    return (gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) + 0.5 * np.log(precision / (nu * np.pi))
            - 0.5 * (nu + 1.0) * np.log1p(precision * (x - mean) ** 2 / nu))


def _categorical_log(x: Array, p: Array) -> Array:
    with np.errstate(divide="ignore"):
        return np.log(np.take_along_axis(p, x.astype(np.int64)[..., None], axis=-1)[..., 0])


def _multinomial_log(x: Array, n: Array, p: Array) -> Array:
    """Σ_k x_k log p_k + log n! − Σ_k log x_k!."""
    return (xlogy(x, p).sum(-1) + gammaln(np.asarray(n, dtype=float) + 1.0)
            - gammaln(x + 1.0).sum(-1))


NUMERIC: dict[str, Numeric] = {
    "Dirichlet": Numeric(
        lambda rng, p, s: dirichlet_draws(rng, p[0]),
        lambda x, p: (xlogy(p[0] - 1.0, x).sum(-1) + gammaln(p[0].sum(-1))
                      - gammaln(p[0]).sum(-1))),
    "Categorical": Numeric(lambda rng, p, s: _categorical(rng, p[0]),
                           lambda x, p: _categorical_log(x, p[0])),
    "MarkovChain": Numeric(lambda rng, p, s: _markov(rng, p[0], p[1], s)),
    "GaussianChain": Numeric(lambda rng, p, s: _gaussian_chain(rng, p, s)),
    # a diagonal state noise: Q = diag(noise)
    "GaussianChainDiag": Numeric(lambda rng, p, s: _gaussian_chain(
        rng, (*p[:3], np.asarray(p[3])[..., None, :] * np.eye(np.shape(p[3])[-1])), s)),
    "Beta": Numeric(
        lambda rng, p, s: beta_draws(rng, p[0], p[1]),
        lambda x, p: xlogy(p[0] - 1.0, x) + xlog1py(p[1] - 1.0, -x) - betaln(p[0], p[1])),
    "Bernoulli": Numeric(
        lambda rng, p, s: (rng.random(np.shape(p[0])) < p[0]).astype(np.int64),
        lambda x, p: xlogy(x, p[0]) + xlog1py(1.0 - x, -p[0])),
    "Binomial": Numeric(
        lambda rng, p, s: rng.binomial(np.asarray(p[0], dtype=np.int64), p[1]),
        lambda x, p: (gammaln(p[0] + 1.0) - gammaln(x + 1.0) - gammaln(p[0] - x + 1.0)
                      + xlogy(x, p[1]) + xlog1py(p[0] - x, -p[1]))),
    "Geometric": Numeric(
        lambda rng, p, s: rng.geometric(p[0]),
        lambda x, p: np.log(p[0]) + xlog1py(x - 1.0, -p[0])),
    "NegativeBinomial": Numeric(
        lambda rng, p, s: rng.negative_binomial(p[0], p[1]),
        lambda x, p: (xlogy(p[0], p[1]) + xlog1py(x, -p[1]) + gammaln(x + p[0])
                      - gammaln(p[0]) - gammaln(x + 1.0))),
    "Multinomial": Numeric(
        lambda rng, p, s: rng.multinomial(np.asarray(p[0], dtype=np.int64), p[1]),
        lambda x, p: _multinomial_log(x, p[0], p[1])),
    "Gamma": Numeric(
        lambda rng, p, s: gamma_draws(rng, p[0], p[1]),
        lambda x, p: (xlogy(p[0], p[1]) - gammaln(p[0]) + xlogy(p[0] - 1.0, x) - p[1] * x)),
    "Poisson": Numeric(
        lambda rng, p, s: rng.poisson(p[0]),
        lambda x, p: xlogy(x, p[0]) - p[0] - gammaln(x + 1.0)),
    "Exponential": Numeric(
        lambda rng, p, s: rng.exponential(1.0, np.shape(p[0])) / p[0],
        lambda x, p: np.log(p[0]) - p[0] * x),
    "Normal": Numeric(
        lambda rng, p, s: p[0] + rng.standard_normal(np.broadcast(*p).shape) / np.sqrt(p[1]),
        lambda x, p: 0.5 * (np.log(p[1]) - p[1] * (x - p[0]) ** 2 - _LOG_2PI)),
    "StudentT": Numeric(lambda rng, p, s: _student_t(rng, *p),
                        lambda x, p: _student_t_log(x, *p)),
    "MultivariateNormal": Numeric(lambda rng, p, s: mvn_draws(rng, p[0], p[1]),
                                  lambda x, p: _mvn_log(x, p[0], p[1])),
    "Wishart": Numeric(lambda rng, p, s: wishart_draws(rng, p[0], p[1])),
}

# posterior keys that differ from the family's parameter names
Q_NAMES: dict[str, dict[str, str]] = {
    "Categorical": {"p": "probs"},
    "Normal-Gamma": {"prec_scale": "beta"},
    "Normal-Wishart": {"prec_scale": "beta"},
}


def normal_gamma_draws(rng: np.random.Generator, p: tuple[Array, ...]) -> tuple[Array, Array]:
    """τ ~ Gamma(shape, rate), μ | τ ~ Normal(mean, β·τ): (μ, τ)."""
    mean, beta, shape, rate = p
    tau = gamma_draws(rng, shape, rate)
    return mean + rng.standard_normal(tau.shape) / np.sqrt(beta * tau), tau


def normal_wishart_draws(rng: np.random.Generator, p: tuple[Array, ...]) -> tuple[Array, Array]:
    """Λ ~ Wishart(dof, scale), μ | Λ ~ MVN(mean, β·Λ): (μ, Λ)."""
    mean, beta, dof, scale = p
    precision = wishart_draws(rng, dof, scale)
    return mvn_draws(rng, mean, np.asarray(beta)[..., None, None] * precision), precision


# joint blocks: a draw of the pair (mean, precision)
JOINT: dict[str, Callable[[np.random.Generator, tuple[Array, ...]], tuple[Array, Array]]] = {
    "Normal-Gamma": normal_gamma_draws,
    "Normal-Wishart": normal_wishart_draws,
}


def numeric(family: str, what: str) -> Numeric:
    """The family's numerics, or a CemError saying what cemodel cannot do with it."""
    found = NUMERIC.get(family)
    if found is None or (what == "log density" and found.log_density is None):
        raise CemError(f"{what}: cemodel has no {what} of the {family} family")
    return found
