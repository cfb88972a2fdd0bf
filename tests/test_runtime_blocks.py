"""Tests for the joint Normal-Gamma and Normal-Wishart blocks of cemodel.runtime.families.

q(mu, tau) = exp(lam . (log tau, tau, tau mu, tau mu^2) - A) and
q(mu, Lambda) = exp(lam . (Lambda, log|Lambda|, Lambda mu, mu^T Lambda mu) - A). We check
(1) usual <-> natural round trips (batched), (2) E[t] = grad A by central differences,
(3) E[t] against Monte Carlo means of the samplers, (4) Normal-Gamma = 1-D Normal-Wishart,
(5) H = A - lam . E[t] against entropies computed independently (scipy + conditional normal).
"""

import numpy as np
import pytest
import scipy.special as sps
import scipy.stats as st
from numpy.testing import assert_allclose

from cemodel import runtime as rt
from cemodel.errors import CemDataError
from cemodel.runtime import families as fam
from cemodel.runtime import parameters as par
from cemodel.runtime import sampling

SEEDS = [0, 1, 2, 3]


def _random_spd(rng: np.random.Generator, shape: tuple, d: int, scale: float = 1.0) -> np.ndarray:
    a = rng.normal(size=(*shape, d, d))
    return scale * (a @ np.swapaxes(a, -1, -2) / d + 0.3 * np.eye(d))


def _antisym(rng: np.random.Generator, d: int) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return a - a.T


def _ng_usual(rng: np.random.Generator, shape: tuple = ()) -> tuple:
    """(mean, beta, shape, rate); shapes down to 0.2 (lam_log < 0)."""
    return (
        rng.normal(0.0, 2.0, size=shape),
        rng.uniform(0.1, 10.0, size=shape),
        rng.uniform(0.2, 20.0, size=shape),
        rng.uniform(0.1, 10.0, size=shape),
    )


def _nw_usual(rng: np.random.Generator, d: int, shape: tuple = ()) -> tuple:
    """(mean, beta, dof, scale) with dof > D - 1."""
    return (
        rng.normal(0.0, 2.0, size=(*shape, d)),
        rng.uniform(0.1, 10.0, size=shape),
        d - 1 + rng.uniform(0.3, 10.0, size=shape),
        _random_spd(rng, shape, d, rng.uniform(0.2, 5.0)),
    )


def _ng_natural(*usual) -> tuple:
    return tuple(float(x) for x in par.normal_gamma_natural(*usual))


def _nw_natural(*usual) -> tuple:
    lam_v, lam_ld, lam_pm, lam_q = par.normal_wishart_natural(*usual)
    return np.ascontiguousarray(lam_v), float(lam_ld), np.ascontiguousarray(lam_pm), float(lam_q)


def _nw_stats(lam_v, lam_ld, lam_pm, lam_q) -> tuple:
    d = lam_pm.shape[0]
    out_v, out_pm = np.empty((d, d)), np.empty(d)
    e_logdet, e_quad = fam.normal_wishart_expected_stats(
        lam_v, lam_ld, lam_pm, lam_q, out_v, out_pm
    )
    return out_v, e_logdet, out_pm, e_quad


def _entropy(log_norm, stats, lam) -> float:
    return log_norm(*lam) - sum(
        float(np.sum(np.asarray(la) * np.asarray(t))) for la, t in zip(lam, stats, strict=True)
    )


def test_exports():
    for name in [
        "normal_gamma_expected_stats", "normal_gamma_log_normalizer", "normal_gamma_natural",
        "normal_gamma_params", "normal_wishart_expected_stats", "normal_wishart_log_normalizer",
        "normal_wishart_natural", "normal_wishart_params",
    ]:
        module = par if name.endswith(("_natural", "_params")) else fam
        assert getattr(rt, name) is getattr(module, name)
    assert rt.sample_normal_gamma is sampling.SAMPLERS["normal_gamma"]
    assert rt.sample_normal_wishart is sampling.SAMPLERS["normal_wishart"]


# ---------------------------------------------------------------------------------------------
# (1) round trips, vectorised over leading batch axes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("batch", [(), (5,), (4, 3)])
def test_normal_gamma_round_trip(seed, batch):
    usual = _ng_usual(np.random.default_rng(600 + seed), batch)
    lam = par.normal_gamma_natural(*usual)
    assert isinstance(lam, tuple) and len(lam) == 4
    back = par.normal_gamma_params(*lam)
    assert isinstance(back, tuple) and len(back) == 4
    for a, b in zip(back, usual, strict=True):
        assert np.shape(a) == np.shape(b)
        assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(par.normal_gamma_natural(*back), lam, strict=True):
        assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_normal_gamma_natural_values():
    lam = par.normal_gamma_natural(1.5, 2.0, 3.0, 4.0)
    assert_allclose(lam, (3.0 - 0.5, -4.0 - 2.0 * 1.5**2 / 2, 2.0 * 1.5, -1.0), rtol=1e-15)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("batch", [(), (5,), (4, 3)])
def test_normal_wishart_round_trip(seed, d, batch):
    usual = _nw_usual(np.random.default_rng(700 + seed), d, batch)
    lam = par.normal_wishart_natural(*usual)
    assert isinstance(lam, tuple) and len(lam) == 4
    assert lam[0].shape == (*batch, d, d) and np.shape(lam[1]) == batch
    assert lam[2].shape == (*batch, d) and np.shape(lam[3]) == batch
    back = par.normal_wishart_params(*lam)
    assert isinstance(back, tuple) and len(back) == 4
    for a, b in zip(back, usual, strict=True):
        assert np.shape(a) == np.shape(b)
        assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    for a, b in zip(par.normal_wishart_natural(*back), lam, strict=True):
        assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_normal_wishart_params_ignore_antisymmetric_part():
    rng = np.random.default_rng(5)
    lam = list(par.normal_wishart_natural(*_nw_usual(rng, 3, (2,))))
    skewed = list(lam)
    skewed[0] = lam[0] + 0.4 * np.stack([_antisym(rng, 3), _antisym(rng, 3)])
    for a, b in zip(par.normal_wishart_params(*skewed), par.normal_wishart_params(*lam),
                    strict=True):
        assert_allclose(a, b, rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# (2) E[t] = grad A by central differences
# ---------------------------------------------------------------------------------------------


def _fd_grad(log_norm, lam: tuple, rel_step: float = 1e-5) -> list:
    """Central differences of A in each entry of each coefficient, matrix entries one at a
    time (A depends on sym(L), so dA/dL_ij = E[Lambda]_ij since E[Lambda] is symmetric)."""
    arrs = [np.array(x, dtype=np.float64) for x in lam]

    def call(a):
        return log_norm(*[float(x) if x.ndim == 0 else np.ascontiguousarray(x) for x in a])

    def central(s, idx, h):
        plus = [a.copy() for a in arrs]
        minus = [a.copy() for a in arrs]
        plus[s][idx] += h
        minus[s][idx] -= h
        return (call(plus) - call(minus)) / (2.0 * h)

    grads = []
    for s, base in enumerate(arrs):
        g = np.empty_like(base)
        for idx in np.ndindex(base.shape):
            h = rel_step * max(1.0, abs(base[idx]))
            # Richardson extrapolation cancels the O(h^2) error: near the boundary of the
            # natural domain (W^{-1} a small difference of large coefficients) it is ~1e-5.
            g[idx] = (4.0 * central(s, idx, 0.5 * h) - central(s, idx, h)) / 3.0
        grads.append(g)
    return grads


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_gamma_stats_are_gradient(seed):
    lam = _ng_natural(*_ng_usual(np.random.default_rng(100 + seed)))
    stats = fam.normal_gamma_expected_stats(*lam)
    assert len(stats) == 4
    for g, t in zip(_fd_grad(fam.normal_gamma_log_normalizer, lam), stats, strict=True):
        assert_allclose(g, t, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("d", [1, 3])
def test_normal_wishart_stats_are_gradient(seed, d):
    rng = np.random.default_rng(200 + seed)
    lam = list(_nw_natural(*_nw_usual(rng, d)))
    # lam_value need not be symmetric: perturbing one entry must give E[Lambda]_ij.
    lam[0] = np.ascontiguousarray(lam[0] + 0.1 * _antisym(rng, d))
    lam = tuple(lam)
    stats = _nw_stats(*lam)
    for g, t in zip(_fd_grad(fam.normal_wishart_log_normalizer, lam), stats, strict=True):
        assert_allclose(g, t, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_wishart_symmetric_pair_gradient(seed):
    """Perturbing L_ij and L_ji together (a symmetric direction) changes A by 2 E[Lambda]_ij."""
    rng = np.random.default_rng(250 + seed)
    lam_v, lam_ld, lam_pm, lam_q = _nw_natural(*_nw_usual(rng, 3))
    e_value = _nw_stats(lam_v, lam_ld, lam_pm, lam_q)[0]
    h = 1e-6
    for i, j in [(0, 1), (0, 2), (1, 2), (1, 1)]:
        e = np.zeros((3, 3))
        e[i, j] = e[j, i] = 1.0
        plus = fam.normal_wishart_log_normalizer(lam_v + h * e, lam_ld, lam_pm, lam_q)
        minus = fam.normal_wishart_log_normalizer(lam_v - h * e, lam_ld, lam_pm, lam_q)
        assert_allclose((plus - minus) / (2 * h), np.sum(e * e_value), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
def test_closed_forms(seed):
    rng = np.random.default_rng(300 + seed)
    m, beta, a, b = (float(x) for x in _ng_usual(rng))
    assert_allclose(
        fam.normal_gamma_expected_stats(*_ng_natural(m, beta, a, b)),
        (sps.digamma(a) - np.log(b), a / b, m * a / b, 1 / beta + m * m * a / b),
        rtol=1e-12, atol=1e-13,
    )
    assert_allclose(
        fam.normal_gamma_log_normalizer(*_ng_natural(m, beta, a, b)),
        sps.gammaln(a) - a * np.log(b) + 0.5 * np.log(2 * np.pi) - 0.5 * np.log(beta),
        rtol=1e-12,
    )
    d = 3
    mean, beta, dof, scale = _nw_usual(rng, d)
    e_v, e_ld, e_pm, e_q = _nw_stats(*_nw_natural(mean, beta, dof, scale))
    assert_allclose(e_v, dof * scale, rtol=1e-10)
    assert_allclose(e_pm, dof * scale @ mean, rtol=1e-10, atol=1e-12)
    assert_allclose(e_q, d / beta + dof * mean @ scale @ mean, rtol=1e-10)
    closed_ld = (sum(sps.digamma(0.5 * (dof - i)) for i in range(d)) + d * np.log(2.0)
                 + np.linalg.slogdet(scale)[1])
    assert_allclose(e_ld, closed_ld, rtol=1e-10, atol=1e-12)
    closed_a = (0.5 * d * np.log(2 * np.pi / beta) + 0.5 * dof * d * np.log(2.0)
                + 0.5 * dof * np.linalg.slogdet(scale)[1] + sps.multigammaln(0.5 * dof, d))
    assert_allclose(fam.normal_wishart_log_normalizer(*_nw_natural(mean, beta, dof, scale)),
                    closed_a, rtol=1e-10)


def test_normal_wishart_not_positive_definite_raises():
    lam_v, lam_ld, lam_pm, lam_q = _nw_natural(*_nw_usual(np.random.default_rng(9), 2))
    bad = np.ascontiguousarray(-lam_v)  # W^{-1} = 2 sym(lam) + ... is negative definite
    with pytest.raises(CemDataError, match="not positive definite"):
        fam.normal_wishart_log_normalizer(bad, lam_ld, lam_pm, lam_q)
    with pytest.raises(CemDataError, match="not positive definite"):
        _nw_stats(bad, lam_ld, lam_pm, lam_q)


# ---------------------------------------------------------------------------------------------
# (3) Monte Carlo means of the samplers
# ---------------------------------------------------------------------------------------------

N_MC = 20_000


def _assert_mc(samples: np.ndarray, expected, n_se: float = 4.5) -> None:
    samples = samples.reshape(samples.shape[0], -1)
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    expected = np.ravel(expected)
    assert np.all(np.abs(mean - expected) <= n_se * se + 1e-12), (mean, expected, se)


@pytest.mark.parametrize("seed", [0, 1])
def test_normal_gamma_monte_carlo(seed):
    rng = np.random.default_rng(400 + seed)
    usual = tuple(float(x) for x in _ng_usual(rng))
    lam = _ng_natural(*usual)
    expected = fam.normal_gamma_expected_stats(*lam)
    batch = [np.full(N_MC, x) for x in lam]
    out = [np.empty(N_MC) for _ in range(4)]
    sampling.SAMPLERS["normal_gamma"](*batch, rng, *out)
    for o, e in zip(out, expected, strict=True):
        assert np.all(np.isfinite(o))
        _assert_mc(o, e)
    assert_allclose(out[2] ** 2, out[1] * out[3], rtol=1e-10)  # (tau mu)^2 = tau * tau mu^2


def test_normal_gamma_sampler_batch_shape_and_tiny_shape():
    """Leading (4, 3) axes keep their shape; a tiny shape (LDA-style) keeps log tau finite."""
    rng = np.random.default_rng(41)
    usual = list(_ng_usual(rng, (4, 3)))
    usual[2][0, 0] = 1e-3
    lam = par.normal_gamma_natural(*usual)
    out = [np.empty((4, 3)) for _ in range(4)]
    sampling.sample_normal_gamma(*lam, rng, *out)
    for o in out:
        assert np.all(np.isfinite(o))
    assert_allclose(np.exp(out[0]), out[1], rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("d", [1, 3])
def test_normal_wishart_monte_carlo(seed, d):
    rng = np.random.default_rng(500 + seed)
    usual = _nw_usual(rng, d)
    lam = _nw_natural(*usual)
    expected = _nw_stats(*lam)
    batch = (
        np.broadcast_to(lam[0], (N_MC, d, d)),
        np.full(N_MC, lam[1]),
        np.broadcast_to(lam[2], (N_MC, d)),
        np.full(N_MC, lam[3]),
    )
    out = [np.empty((N_MC, d, d)), np.empty(N_MC), np.empty((N_MC, d)), np.empty(N_MC)]
    sampling.SAMPLERS["normal_wishart"](*batch, rng, *out)
    for o, e in zip(out, expected, strict=True):
        assert np.all(np.isfinite(o))
        _assert_mc(o, e)


def test_normal_wishart_sampler_batch_shape():
    rng = np.random.default_rng(51)
    lam = par.normal_wishart_natural(*_nw_usual(rng, 2, (3, 2)))
    out = [np.empty((3, 2, 2, 2)), np.empty((3, 2)), np.empty((3, 2, 2)), np.empty((3, 2))]
    sampling.sample_normal_wishart(*lam, rng, *out)
    assert_allclose(np.linalg.slogdet(out[0])[1], out[1], rtol=1e-12)
    assert np.all(np.linalg.eigvalsh(out[0]) > 0)
    # mu = Lambda^{-1} (Lambda mu) reproduces mu^T Lambda mu
    mu = np.linalg.solve(out[0], out[2][..., None])[..., 0]
    assert_allclose(np.einsum("...i,...i->...", mu, out[2]), out[3], rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# (4) Normal-Gamma = Normal-Wishart with D = 1 (Gamma(a, b) = Wishart(2a, 1/(2b)))
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_gamma_is_one_dimensional_normal_wishart(seed):
    m, beta, a, b = (float(x) for x in _ng_usual(np.random.default_rng(800 + seed)))
    ng = _ng_natural(m, beta, a, b)
    nw = _nw_natural(np.array([m]), beta, 2.0 * a, np.array([[0.5 / b]]))
    # The same density, so the same coefficients of the same statistics; NW orders them
    # (value, logdet, prec_mean, quad), NG (log, value, prec_mean, quad).
    lam_v, lam_ld, lam_pm, lam_q = nw
    assert_allclose((lam_ld, lam_v.item(), lam_pm.item(), lam_q), ng, rtol=1e-12)
    assert_allclose(fam.normal_wishart_log_normalizer(*nw), fam.normal_gamma_log_normalizer(*ng),
                    rtol=1e-12, atol=1e-12)
    e_v, e_ld, e_pm, e_q = _nw_stats(*nw)
    assert_allclose((e_ld, e_v.item(), e_pm.item(), e_q), fam.normal_gamma_expected_stats(*ng),
                    rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# (5) entropies computed independently: H[precision] + E[H[mu | precision]]
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_normal_gamma_entropy(seed):
    m, beta, a, b = (float(x) for x in _ng_usual(np.random.default_rng(900 + seed)))
    lam = _ng_natural(m, beta, a, b)
    h = _entropy(fam.normal_gamma_log_normalizer, fam.normal_gamma_expected_stats(*lam), lam)
    e_log_tau = sps.digamma(a) - np.log(b)
    expected = (st.gamma(a, scale=1.0 / b).entropy()
                + 0.5 * (np.log(2 * np.pi * np.e / beta) - e_log_tau))
    assert_allclose(h, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("d", [1, 3])
def test_normal_wishart_entropy(seed, d):
    mean, beta, dof, scale = _nw_usual(np.random.default_rng(1000 + seed), d)
    lam = _nw_natural(mean, beta, dof, scale)
    stats = _nw_stats(*lam)
    h = _entropy(fam.normal_wishart_log_normalizer, stats, lam)
    e_logdet = (sum(sps.digamma(0.5 * (dof - i)) for i in range(d)) + d * np.log(2.0)
                + np.linalg.slogdet(scale)[1])
    expected = (st.wishart(df=dof, scale=scale).entropy()
                + 0.5 * d * np.log(2 * np.pi * np.e / beta) - 0.5 * e_logdet)
    assert_allclose(h, expected, rtol=1e-10, atol=1e-10)
