"""Tests for cemodel.runtime.families (coefficient-form exponential families).

For every family and several random parameter settings we check
(1) H = A(lam) - sum_s lam_s . E[t_s] equals scipy.stats' entropy,
(2) E[t] equals central finite differences of A (i.e. E[t] = grad A),
(3) E[t] agrees with closed forms and/or Monte Carlo,
(4) the usual <-> natural parameter conversions round-trip (batched).
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import scipy.special as sps
import scipy.stats as st
from numpy.testing import assert_allclose

from cemodel.runtime import families as fam
from cemodel.runtime import parameters as par

SEEDS = [0, 1, 2, 3]


def _random_spd(rng: np.random.Generator, d: int, scale: float = 1.0) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return scale * (a @ a.T / d + 0.3 * np.eye(d))


def _antisym(rng: np.random.Generator, d: int) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return a - a.T


# ---------------------------------------------------------------------------------------------
# Family adapters: usual params -> natural params, and uniform wrappers around the kernels.
# ---------------------------------------------------------------------------------------------


@dataclass
class Family:
    name: str
    sample: Callable  # rng -> tuple of usual params
    natural: Callable  # usual params -> tuple of natural params (statistic order)
    stats: Callable  # natural params -> tuple of expected statistics (arrays or floats)
    log_norm: Callable  # natural params -> A
    entropy: Callable  # usual params -> scipy entropy
    closed: Callable  # usual params -> tuple of closed-form expected statistics


def _dirichlet_stats(lam):
    out = np.empty_like(lam)
    fam.dirichlet_expected_stats(lam, out)
    return (out,)


def _mvn_stats(lam_v, lam_o):
    d = lam_v.shape[0]
    out_v, out_o = np.empty(d), np.empty((d, d))
    fam.mvn_expected_stats(lam_v, lam_o, out_v, out_o)
    return out_v, out_o


def _mvn_natural(mean, prec):
    lam_v, lam_o = par.mvn_natural(mean, prec)
    return lam_v, np.ascontiguousarray(lam_o)


def _wishart_stats(lam_v, lam_ld):
    out = np.empty_like(lam_v)
    e_logdet = fam.wishart_expected_stats(lam_v, lam_ld, out)
    return out, e_logdet


def _wishart_natural(dof, scale):
    lam_v, lam_ld = par.wishart_natural(dof, scale)
    return np.ascontiguousarray(lam_v), float(lam_ld)


def _categorical_stats(lam):
    out = np.empty_like(lam)
    a = fam.categorical_expected_stats(lam, out)
    assert_allclose(a, sps.logsumexp(lam), rtol=1e-14)
    return (out,)


def _wishart_closed(dof, scale):
    d = scale.shape[0]
    e_logdet = (
        sum(sps.digamma(0.5 * (dof + 1 - i)) for i in range(1, d + 1))
        + d * np.log(2.0)
        + np.linalg.slogdet(scale)[1]
    )
    return dof * scale, e_logdet


def _mvn_closed(mean, prec):
    cov = np.linalg.inv(prec)
    return mean, cov + np.outer(mean, mean)


def _make_families() -> dict[str, Family]:
    fams = [
        Family(
            "dirichlet",
            lambda rng: (np.concatenate([[0.07, 40.0], rng.gamma(2.0, 1.5, size=3) + 0.2]),),
            lambda alpha: par.dirichlet_natural(alpha),
            _dirichlet_stats,
            fam.dirichlet_log_normalizer,
            lambda alpha: st.dirichlet(alpha).entropy(),
            lambda alpha: (sps.digamma(alpha) - sps.digamma(alpha.sum()),),
        ),
        Family(
            "beta",
            lambda rng: (float(rng.uniform(0.2, 20.0)), float(rng.uniform(0.2, 20.0))),
            lambda a, b: tuple(float(x) for x in par.beta_natural(a, b)),
            fam.beta_expected_stats,
            fam.beta_log_normalizer,
            lambda a, b: st.beta(a, b).entropy(),
            lambda a, b: (sps.digamma(a) - sps.digamma(a + b), sps.digamma(b) - sps.digamma(a + b)),
        ),
        Family(
            "gamma",
            lambda rng: (float(rng.uniform(0.3, 30.0)), float(rng.uniform(0.1, 10.0))),
            lambda a, b: tuple(float(x) for x in par.gamma_natural(a, b)),
            fam.gamma_expected_stats,
            fam.gamma_log_normalizer,
            lambda a, b: st.gamma(a, scale=1.0 / b).entropy(),
            lambda a, b: (sps.digamma(a) - np.log(b), a / b),
        ),
        Family(
            "normal",
            lambda rng: (float(rng.normal(0.0, 3.0)), float(rng.uniform(0.05, 20.0))),
            lambda m, tau: tuple(float(x) for x in par.normal_natural(m, tau)),
            fam.normal_expected_stats,
            fam.normal_log_normalizer,
            lambda m, tau: st.norm(m, 1.0 / np.sqrt(tau)).entropy(),
            lambda m, tau: (m, m * m + 1.0 / tau),
        ),
        Family(
            "mvn",
            lambda rng: (rng.normal(0.0, 2.0, size=3), _random_spd(rng, 3, rng.uniform(0.2, 5.0))),
            _mvn_natural,
            _mvn_stats,
            fam.mvn_log_normalizer,
            lambda m, p: st.multivariate_normal(m, np.linalg.inv(p)).entropy(),
            _mvn_closed,
        ),
        Family(
            "wishart",
            lambda rng: (float(rng.uniform(2.3, 12.0)), _random_spd(rng, 3, rng.uniform(0.2, 5.0))),
            _wishart_natural,
            _wishart_stats,
            fam.wishart_log_normalizer,
            lambda dof, w: st.wishart(dof, w).entropy(),
            _wishart_closed,
        ),
        Family(
            "wishart1",
            lambda rng: (float(rng.uniform(0.3, 8.0)), _random_spd(rng, 1, rng.uniform(0.2, 5.0))),
            _wishart_natural,
            _wishart_stats,
            fam.wishart_log_normalizer,
            lambda dof, w: st.wishart(dof, w).entropy(),
            _wishart_closed,
        ),
        Family(
            "categorical",
            lambda rng: (rng.dirichlet(np.full(5, 0.7)),),
            lambda p: (par.categorical_natural(p)[0] + 3.7,),  # lam is unnormalised
            _categorical_stats,
            fam.categorical_log_normalizer,
            lambda p: st.multinomial(1, p).entropy(),
            lambda p: (p,),
        ),
        Family(
            "bernoulli",
            lambda rng: (float(rng.uniform(0.01, 0.99)),),
            lambda p: (float(par.bernoulli_natural(p)[0]),),
            lambda lam: (fam.bernoulli_expected_stats(lam),),
            fam.bernoulli_log_normalizer,
            lambda p: st.bernoulli(p).entropy(),
            lambda p: (p,),
        ),
    ]
    return {f.name: f for f in fams}


FAMILIES = _make_families()
FAMILY_NAMES = list(FAMILIES)


def _pair(lam, stat) -> float:
    """sum_ij lam_ij * stat_ij (Frobenius product; plain product for scalars)."""
    return float(np.sum(np.asarray(lam) * np.asarray(stat)))


def _entropy(f: Family, lam: tuple) -> float:
    stats = f.stats(*lam)
    return f.log_norm(*lam) - sum(_pair(la, t) for la, t in zip(lam, stats, strict=True))


# ---------------------------------------------------------------------------------------------
# (1) entropy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_matches_scipy(name, seed):
    f = FAMILIES[name]
    usual = f.sample(np.random.default_rng(seed))
    lam = f.natural(*usual)
    assert_allclose(_entropy(f, lam), f.entropy(*usual), rtol=1e-9, atol=1e-9)


def test_categorical_entropy_is_minus_sum_plogp():
    p = np.random.default_rng(5).dirichlet(np.ones(7))
    lam = np.log(p) - 2.0
    out = np.empty(7)
    a = fam.categorical_expected_stats(lam, out)
    assert_allclose(a - lam @ out, -np.sum(p * np.log(p)), rtol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_matrix_families_ignore_antisymmetric_part(seed):
    """Only the symmetric part of matrix coefficients matters (Frobenius pairing with sym. t)."""
    rng = np.random.default_rng(seed)
    for name in ["mvn", "wishart"]:
        f = FAMILIES[name]
        usual = f.sample(rng)
        lam = list(f.natural(*usual))
        skewed = list(lam)
        mat = 0 if name == "wishart" else 1
        skewed[mat] = np.ascontiguousarray(lam[mat] + 0.3 * _antisym(rng, lam[mat].shape[0]))
        assert_allclose(f.log_norm(*skewed), f.log_norm(*lam), rtol=1e-13, atol=1e-13)
        for a, b in zip(f.stats(*skewed), f.stats(*lam), strict=True):
            assert_allclose(a, b, rtol=1e-12, atol=1e-13)
        assert_allclose(_entropy(f, skewed), f.entropy(*usual), rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# (2) E[t] = grad A by central differences
# ---------------------------------------------------------------------------------------------


def _fd_grad(log_norm: Callable, lam: tuple, rel_step: float = 1e-5) -> list:
    arrs = [np.array(x, dtype=np.float64) for x in lam]

    def call(a):
        return log_norm(*[float(x) if x.ndim == 0 else np.ascontiguousarray(x) for x in a])

    grads = []
    for s, base in enumerate(arrs):
        g = np.empty_like(base)
        for idx in np.ndindex(base.shape):
            h = rel_step * max(1.0, abs(base[idx]))
            plus = [a.copy() for a in arrs]
            minus = [a.copy() for a in arrs]
            plus[s][idx] += h
            minus[s][idx] -= h
            g[idx] = (call(plus) - call(minus)) / (2.0 * h)
        grads.append(g)
    return grads


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("seed", SEEDS)
def test_expected_stats_are_gradient_of_log_normalizer(name, seed):
    f = FAMILIES[name]
    rng = np.random.default_rng(100 + seed)
    lam = list(f.natural(*f.sample(rng)))
    # Matrix coefficients need not be symmetric: perturbing one entry must give E[t_ij].
    for i, x in enumerate(lam):
        if np.ndim(x) == 2:
            lam[i] = np.ascontiguousarray(x + 0.1 * _antisym(rng, x.shape[0]))
    lam = tuple(lam)
    stats = f.stats(*lam)
    for g, t in zip(_fd_grad(f.log_norm, lam), stats, strict=True):
        assert_allclose(g, t, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# (3) closed forms and Monte Carlo
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("seed", SEEDS)
def test_expected_stats_closed_form(name, seed):
    f = FAMILIES[name]
    usual = f.sample(np.random.default_rng(200 + seed))
    got = f.stats(*f.natural(*usual))
    for a, b in zip(got, f.closed(*usual), strict=True):
        assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def _assert_mc(samples: np.ndarray, expected, n_se: float = 4.0) -> None:
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    assert np.all(np.abs(mean - np.asarray(expected)) <= n_se * se + 1e-12), (mean, expected, se)


N_MC = 200_000


@pytest.mark.parametrize("seed", [0, 1])
def test_wishart_monte_carlo(seed):
    rng = np.random.default_rng(300 + seed)
    dof, scale = FAMILIES["wishart"].sample(rng)
    e_value, e_logdet = _wishart_stats(*_wishart_natural(dof, scale))
    x = st.wishart(dof, scale).rvs(size=N_MC, random_state=rng)
    _assert_mc(np.linalg.slogdet(x)[1], e_logdet)
    _assert_mc(x.reshape(N_MC, -1), e_value.ravel())


@pytest.mark.parametrize("seed", [0, 1])
def test_dirichlet_beta_gamma_monte_carlo(seed):
    rng = np.random.default_rng(400 + seed)
    (alpha,) = FAMILIES["dirichlet"].sample(rng)
    alpha = alpha[2:]  # tiny alpha gives samples that underflow to 0
    x = st.dirichlet(alpha).rvs(size=N_MC, random_state=rng)
    _assert_mc(np.log(x), _dirichlet_stats(*par.dirichlet_natural(alpha))[0])

    a, b = FAMILIES["beta"].sample(rng)
    x = st.beta(a, b).rvs(size=N_MC, random_state=rng)
    e_log, e_log1m = fam.beta_expected_stats(*FAMILIES["beta"].natural(a, b))
    _assert_mc(np.log(x), e_log)
    _assert_mc(np.log1p(-x), e_log1m)

    a, b = FAMILIES["gamma"].sample(rng)
    x = st.gamma(a, scale=1.0 / b).rvs(size=N_MC, random_state=rng)
    e_log, e_x = fam.gamma_expected_stats(*FAMILIES["gamma"].natural(a, b))
    _assert_mc(np.log(x), e_log)
    _assert_mc(x, e_x)


@pytest.mark.parametrize("seed", [0, 1])
def test_mvn_monte_carlo(seed):
    rng = np.random.default_rng(500 + seed)
    mean, prec = FAMILIES["mvn"].sample(rng)
    e_x, e_xx = _mvn_stats(*_mvn_natural(mean, prec))
    x = rng.multivariate_normal(mean, np.linalg.inv(prec), size=N_MC)
    _assert_mc(x, e_x)
    _assert_mc((x[:, :, None] * x[:, None, :]).reshape(N_MC, -1), e_xx.ravel())


def test_bernoulli_and_categorical_extremes():
    for lam in [-800.0, -40.0, -1e-3, 0.0, 1e-3, 40.0, 800.0]:
        assert_allclose(fam.bernoulli_expected_stats(lam), sps.expit(lam), rtol=1e-15)
        assert_allclose(fam.bernoulli_log_normalizer(lam), np.logaddexp(0.0, lam), rtol=1e-15)
    lam = np.array([1000.0, -1000.0, 999.0])
    out = np.empty(3)
    a = fam.categorical_expected_stats(lam, out)
    assert_allclose(a, sps.logsumexp(lam), rtol=1e-15)
    assert_allclose(out, sps.softmax(lam), rtol=1e-14, atol=1e-300)
    assert lam[0] == 1000.0  # input untouched


# ---------------------------------------------------------------------------------------------
# (4) usual <-> natural round trips, vectorised over leading batch axes
# ---------------------------------------------------------------------------------------------


def _batch_spd(rng: np.random.Generator, shape: tuple, d: int) -> np.ndarray:
    a = rng.normal(size=(*shape, d, d))
    return a @ np.swapaxes(a, -1, -2) / d + 0.3 * np.eye(d)


def _round_trip_cases(rng: np.random.Generator) -> dict[str, tuple]:
    b = (4, 3)
    probs = rng.dirichlet(np.ones(5), size=b)
    return {
        "dirichlet": (rng.gamma(2.0, size=(*b, 5)) + 0.1,),
        "beta": (rng.uniform(0.1, 9.0, size=b), rng.uniform(0.1, 9.0, size=b)),
        "gamma": (rng.uniform(0.1, 9.0, size=b), rng.uniform(0.1, 9.0, size=b)),
        "normal": (rng.normal(size=b), rng.uniform(0.1, 9.0, size=b)),
        "mvn": (rng.normal(size=(*b, 3)), _batch_spd(rng, b, 3)),
        "wishart": (rng.uniform(2.5, 9.0, size=b), _batch_spd(rng, b, 3)),
        "categorical": (probs,),
        "bernoulli": (rng.uniform(0.0, 1.0, size=b),),
    }


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "name", ["dirichlet", "beta", "gamma", "normal", "mvn", "wishart", "categorical", "bernoulli"]
)
def test_params_natural_round_trip(name, seed):
    params = getattr(par, f"{name}_params")
    natural = getattr(par, f"{name}_natural")
    usual = _round_trip_cases(np.random.default_rng(600 + seed))[name]
    lam = natural(*usual)
    assert isinstance(lam, tuple)
    back = params(*lam)
    back = back if isinstance(back, tuple) else (back,)
    assert len(back) == len(usual)
    for a, b in zip(back, usual, strict=True):
        assert a.shape == b.shape
        assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # natural -> params -> natural as well
    again = natural(*back)
    for a, b in zip(again, lam, strict=True):
        assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_scalar_conversions():
    assert par.gamma_params(*par.gamma_natural(2.0, 3.0)) == (2.0, 3.0)
    assert_allclose(par.bernoulli_params(*par.bernoulli_natural(0.25)), 0.25, rtol=1e-15)
    mean, prec = par.normal_params(*par.normal_natural(1.5, 4.0))
    assert_allclose((mean, prec), (1.5, 4.0), rtol=1e-15)


def test_batched_conversions_match_row_kernels():
    """Batched numpy helpers and row-level numba kernels agree on the same parameters."""
    rng = np.random.default_rng(7)
    mean, prec = rng.normal(size=(6, 3)), _batch_spd(rng, (6,), 3)
    lam_v, lam_o = par.mvn_natural(mean, prec)
    for i in range(6):
        e_x, _ = _mvn_stats(lam_v[i], np.ascontiguousarray(lam_o[i]))
        assert_allclose(e_x, mean[i], rtol=1e-11, atol=1e-12)
    dof, scale = rng.uniform(2.5, 9.0, size=6), _batch_spd(rng, (6,), 3)
    lam_v, lam_ld = par.wishart_natural(dof, scale)
    for i in range(6):
        e_value, _ = _wishart_stats(np.ascontiguousarray(lam_v[i]), float(lam_ld[i]))
        assert_allclose(e_value, dof[i] * scale[i], rtol=1e-11, atol=1e-12)
