"""What a fitted q says without a fit's kernels: exact draws and closed-form marginals.

Every variational family of cemodel in its usual parameters (``fit.posterior``: a Dirichlet's
``alpha``, a Gamma's ``shape`` and ``rate``, ...), as one table keyed by the family's
variational name (``FAMILIES[...].variational``):

* ``draw(family, params, n, rng)``: n exact draws from q, {part: array (n, *plates, *event)};
* ``marginals(family, params)``: each scalar marginal of q as a scipy distribution (mean, sd
  and quantiles in closed form): a Dirichlet's components are Beta(α_k, α₀ − α_k); an MVN's
  coordinates Normal(m_i, √(P⁻¹)_ii); a Wishart's diagonal Λ_ii = W_ii·χ²_ν, i.e.
  Gamma(ν/2, scale 2W_ii), and its off-diagonal Λ_ij a difference of two Gammas; the mean of a
  Normal-Gamma a Student-t with 2a degrees of freedom, loc m and scale √(b / (aβ)); the mean
  of a Normal-Wishart a Student-t with ν − D + 1 degrees of freedom and scale²
  (W⁻¹)_ii / (β(ν − D + 1)).

A joint block (Normal-Gamma, Normal-Wishart) has two parts, ``"mean"`` and ``"precision"``;
every other family one, ``""``. Plain numpy and scipy: nothing here is compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special
import scipy.stats

from .distributions import (
    beta_draws,
    dirichlet_draws,
    gamma_draws,
    mvn_draws,
    normal_gamma_draws,
    normal_wishart_draws,
    wishart_draws,
)

Params = dict[str, np.ndarray]
Draws = dict[str, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Draws
# ---------------------------------------------------------------------------------------------


def _batch(n: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (n, *shape)


def _n(n: int, value: np.ndarray | float) -> np.ndarray:
    """``value`` with the draws' axis in front."""
    value = np.asarray(value, float)
    return np.broadcast_to(value, _batch(n, value.shape))


def _draw_dirichlet(p: Params, n: int, rng: np.random.Generator) -> Draws:
    # β = G / ΣG, G_k ~ Gamma(α_k), normalised in logs (LDA's η = 0.01 underflows G)
    return {"": dirichlet_draws(rng, _n(n, p["alpha"]))}


def _draw_beta(p: Params, n: int, rng: np.random.Generator) -> Draws:
    a, b = np.broadcast_arrays(np.asarray(p["a"], float), np.asarray(p["b"], float))
    return {"": beta_draws(rng, _n(n, a), b)}


def _draw_gamma(p: Params, n: int, rng: np.random.Generator) -> Draws:
    shape, rate = np.broadcast_arrays(np.asarray(p["shape"], float),
                                      np.asarray(p["rate"], float))
    return {"": gamma_draws(rng, _n(n, shape), rate)}


def _draw_normal(p: Params, n: int, rng: np.random.Generator) -> Draws:
    mean = np.asarray(p["mean"], float)
    return {"": mean + rng.standard_normal(_batch(n, mean.shape)) / np.sqrt(p["precision"])}


def _draw_mvn(p: Params, n: int, rng: np.random.Generator) -> Draws:
    return {"": mvn_draws(rng, _n(n, p["mean"]), np.asarray(p["precision"], float))}


def _wishart_params(p: Params, n: int) -> tuple[np.ndarray, np.ndarray]:
    """ν and W with the draws' axis in front."""
    scale, dof = np.asarray(p["scale"], float), np.asarray(p["dof"], float)
    batch = np.broadcast_shapes(dof.shape, scale.shape[:-2])
    return _n(n, np.broadcast_to(dof, batch)), _n(n, np.broadcast_to(scale,
                                                                     batch + scale.shape[-2:]))


def _draw_wishart(p: Params, n: int, rng: np.random.Generator) -> Draws:
    return {"": wishart_draws(rng, *_wishart_params(p, n))}


def _draw_normal_gamma(p: Params, n: int, rng: np.random.Generator) -> Draws:
    # τ ~ Gamma(a, b), μ | τ ~ Normal(m, precision β τ)
    mean, beta, shape, rate = np.broadcast_arrays(
        *(np.asarray(p[k], float) for k in ("mean", "beta", "shape", "rate")))
    mu, tau = normal_gamma_draws(rng, (mean, beta, _n(n, shape), rate))
    return {"mean": mu, "precision": tau}


def _draw_normal_wishart(p: Params, n: int, rng: np.random.Generator) -> Draws:
    # Λ ~ Wishart(ν, W), μ | Λ ~ MVN(m, precision β Λ)
    dof, scale = _wishart_params(p, n)
    mean = np.asarray(p["mean"], float)
    beta = np.broadcast_to(np.asarray(p["beta"], float), mean.shape[:-1])
    mu, lam = normal_wishart_draws(rng, (mean, beta, dof, scale))
    return {"mean": mu, "precision": lam}


def _draw_bernoulli(p: Params, n: int, rng: np.random.Generator) -> Draws:
    prob = np.asarray(p["p"], float)
    return {"": (rng.random(_batch(n, prob.shape)) < prob).astype(np.int8)}


def _draw_categorical(p: Params, n: int, rng: np.random.Generator) -> Draws:
    """Labels by inverse CDF, a few draws at a time (n × items × K would not fit)."""
    cdf = np.cumsum(np.asarray(p["probs"], float), axis=-1)
    cdf /= cdf[..., -1:]
    out = np.empty(_batch(n, cdf.shape[:-1]), dtype=np.int32)
    step = max(1, 10**7 // max(cdf.size, 1))
    for start in range(0, n, step):
        u = rng.random((min(step, n - start), *cdf.shape[:-1], 1))
        out[start:start + step] = np.minimum((u >= cdf).sum(axis=-1), cdf.shape[-1] - 1)
    return {"": out}


SAMPLERS: dict[str, Callable[[Params, int, np.random.Generator], Draws]] = {
    "dirichlet": _draw_dirichlet, "beta": _draw_beta, "gamma": _draw_gamma,
    "normal": _draw_normal, "mvn": _draw_mvn, "wishart": _draw_wishart,
    "normal_gamma": _draw_normal_gamma, "normal_wishart": _draw_normal_wishart,
    "bernoulli": _draw_bernoulli, "categorical": _draw_categorical,
}

# the parts of each family's draws: a joint block's mean and precision, else the variable
PARTS = {family: (("mean", "precision") if family.startswith("normal_") else ("",))
         for family in SAMPLERS}


def draw(family: str, params: Params, n: int, rng: np.random.Generator) -> Draws:
    """n exact draws from q, {part: array (n, *plates, *event)}."""
    return SAMPLERS[family]({k: np.asarray(v) for k, v in params.items()}, n, rng)


# ---------------------------------------------------------------------------------------------
# Closed-form marginals
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marginal:
    """Each scalar marginal of one part of q, elementwise over ``mean.shape``."""

    mean: np.ndarray
    sd: np.ndarray
    quantile: Callable[[float], np.ndarray]  # the inverse CDF at a probability


def _scipy(dist: scipy.stats.rv_continuous | scipy.stats.rv_discrete) -> Marginal:
    return Marginal(np.asarray(dist.mean(), float), np.asarray(dist.std(), float), dist.ppf)


def _diagonal(matrix: np.ndarray) -> np.ndarray:
    return np.diagonal(matrix, axis1=-2, axis2=-1)


def _student_t(dof: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> Marginal:
    dist = scipy.stats.t(dof, loc, scale)
    with np.errstate(invalid="ignore", divide="ignore"):  # sd: ∞ for ν ≤ 2
        sd = np.where(dof > 2, scale * np.sqrt(dof / np.maximum(dof - 2, 1e-300)), np.inf)
    return Marginal(np.asarray(dist.mean(), float), np.asarray(sd, float), dist.ppf)


def _wishart_entries(dof: np.ndarray, scale: np.ndarray) -> Marginal:
    """Λ_ij of Λ ~ Wishart(ν, W). Its 2 × 2 block has the characteristic function
    (1 − 2iθt + σ²t²)^(−ν/2) with θ = W_ij, σ² = W_ii W_jj − W_ij²: Λ_ij = A − B with
    A ~ Gamma(ν/2, scale θ + r), B ~ Gamma(ν/2, scale r − θ), r = √(θ² + σ²) (the diagonal:
    B = 0, Gamma(ν/2, 2W_ii)). Mean νW_ij, variance ν(W_ij² + W_ii W_jj)."""
    dof = np.asarray(dof, float)[..., None, None]
    diag = _diagonal(scale)
    theta = scale
    r = np.sqrt(diag[..., :, None] * diag[..., None, :])  # √(θ² + σ²)
    mean = dof * scale
    sd = np.sqrt(dof * (scale**2 + diag[..., :, None] * diag[..., None, :]))
    a_scale, b_scale = r + theta, np.maximum(r - theta, 0.0)

    def quantile(q: float) -> np.ndarray:
        return gamma_difference_quantile(q, dof / 2.0 + 0 * scale, a_scale, b_scale)

    return Marginal(mean, sd, quantile)


def gamma_difference_quantile(q: float, shape: np.ndarray, a_scale: np.ndarray,
                              b_scale: np.ndarray, nodes: int = 400) -> np.ndarray:
    """The q-quantile of A − B, A ~ Gamma(k, a_scale), B ~ Gamma(k, b_scale) independent,
    elementwise: F(x) = E_B[F_A(x + B)] by Gauss–Legendre quadrature over B's quantiles, then
    bisection (B's scale 0: A's own quantile)."""
    shape, a_scale, b_scale = np.broadcast_arrays(*(np.asarray(x, float)
                                                    for x in (shape, a_scale, b_scale)))
    exact = b_scale <= 1e-12 * a_scale
    out = np.asarray(scipy.stats.gamma.ppf(q, shape, scale=a_scale), float)
    if exact.all():
        return out
    k, sa, sb = shape[~exact], a_scale[~exact], b_scale[~exact]
    u, w = scipy.special.roots_legendre(nodes)
    u, w = (u + 1.0) / 2.0, w / 2.0
    b = scipy.special.gammaincinv(k, u[:, None]) * sb  # B's quantiles: nodes × entries

    def cdf(x: np.ndarray) -> np.ndarray:
        return (w[:, None] * scipy.special.gammainc(k, np.maximum(x + b, 0.0) / sa)).sum(0)

    far = 1.0 - min(q, 1 - q) / 4
    lo = -scipy.special.gammaincinv(k, far) * sb
    hi = scipy.special.gammaincinv(k, far) * sa
    for _ in range(50):  # bisection: 2^-50 of the bracket
        mid = (lo + hi) / 2.0
        below = cdf(mid) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    out[~exact] = (lo + hi) / 2.0
    return out


def _marginal_dirichlet(p: Params) -> dict[str, Marginal]:
    alpha = np.asarray(p["alpha"], float)
    return {"": _scipy(scipy.stats.beta(alpha, alpha.sum(axis=-1, keepdims=True) - alpha))}


def _marginal_mvn(p: Params) -> dict[str, Marginal]:
    var = _diagonal(np.linalg.inv(p["precision"]))
    return {"": _scipy(scipy.stats.norm(p["mean"], np.sqrt(var)))}


def _marginal_normal_gamma(p: Params) -> dict[str, Marginal]:
    a, b = np.asarray(p["shape"], float), np.asarray(p["rate"], float)
    return {"mean": _student_t(2.0 * a, np.asarray(p["mean"], float),
                               np.sqrt(b / (a * p["beta"]))),
            "precision": _scipy(scipy.stats.gamma(a, scale=1.0 / b))}


def _marginal_normal_wishart(p: Params) -> dict[str, Marginal]:
    scale = np.asarray(p["scale"], float)
    dof = np.asarray(p["dof"], float) - scale.shape[-1] + 1.0  # ν − D + 1
    var = _diagonal(np.linalg.inv(scale)) / (np.asarray(p["beta"])[..., None] * dof[..., None])
    return {"mean": _student_t(np.broadcast_to(dof[..., None], var.shape),
                               np.asarray(p["mean"], float), np.sqrt(var)),
            "precision": _wishart_entries(p["dof"], scale)}


def _marginal_categorical(p: Params) -> dict[str, Marginal]:
    """The label's distribution over 0..K−1 (what a summary of drawn labels shows)."""
    probs = np.asarray(p["probs"], float)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    k = np.arange(probs.shape[-1])
    mean = probs @ k
    sd = np.sqrt(np.maximum(probs @ k**2 - mean**2, 0.0))
    cdf = np.cumsum(probs, axis=-1)

    def quantile(q: float) -> np.ndarray:
        return np.minimum((cdf < q - 1e-12).sum(axis=-1), k[-1]).astype(float)

    return {"": Marginal(mean, sd, quantile)}


MARGINALS: dict[str, Callable[[Params], dict[str, Marginal]]] = {
    "dirichlet": _marginal_dirichlet,
    "beta": lambda p: {"": _scipy(scipy.stats.beta(p["a"], p["b"]))},
    "gamma": lambda p: {"": _scipy(scipy.stats.gamma(p["shape"], scale=1.0 / p["rate"]))},
    "normal": lambda p: {"": _scipy(scipy.stats.norm(p["mean"], 1.0 / np.sqrt(p["precision"])))},
    "mvn": _marginal_mvn,
    "wishart": lambda p: {"": _wishart_entries(p["dof"], p["scale"])},
    "normal_gamma": _marginal_normal_gamma,
    "normal_wishart": _marginal_normal_wishart,
    "bernoulli": lambda p: {"": _scipy(scipy.stats.bernoulli(p["p"]))},
    "categorical": _marginal_categorical,
}


def marginals(family: str, params: Params) -> dict[str, Marginal]:
    """Each part's scalar marginals of q (see the module docstring)."""
    return MARGINALS[family]({k: np.asarray(v, float) for k, v in params.items()})


def central_interval(marginal: Marginal, prob: float) -> tuple[np.ndarray, np.ndarray]:
    """The equal-tailed interval holding ``prob`` of each marginal."""
    tail = (1.0 - prob) / 2.0
    return (np.asarray(marginal.quantile(tail), float),
            np.asarray(marginal.quantile(1.0 - tail), float))
