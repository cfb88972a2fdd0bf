"""The stochastic methods' default settings converge on small data sets (issue 18, findings 3
and 4), on models written here, in no stdlib file.

- Finding 3: on an eight-schools hierarchy SVI's and SVI+'s E[precision] ended at 0.02-0.13
  against MF's 0.52 (posterior sds off by up to 6×), SSVI-A's population mean tens of its sds
  from its own fixed point: ρ_t = (t + 10)^−0.7 over the default 92 steps (or 1,500 of batch
  2) sums to too little for the hierarchy's slow mode.
- Finding 4: SVI+ with a Gibbs local step on a mixture of three linear regressions ended far
  below MF (hundreds of nats, ARI ≈ 0.5; some seeds one component) from the same schedule.

On a small data set (an epoch of fewer than ~10 steps) the default is now ρ_t = (t + 1)^−0.5
for at least 1,000 steps (``svi.small_data_defaults``).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy import optimize
from sklearn.metrics import adjusted_rand_score

from cemodel.compiler import compile_model
from cemodel.runtime.drivers.svi import Options, small_data_defaults

from .test_default_settings import SCHOOLS

SCHOOL_DATA = {"y": np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]),
               "prec": np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]) ** -2.0}

MIXREG = """model mixreg
dim K = 3
dim N
dim P = 2
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    w[k] ~ MVN(zeros(P), eye(P) * 0.01)
    tau[k] ~ Gamma(1.0, 1.0)
plate points n in N:
    data x[n] : vector(P)
    z[n] ~ Categorical(pi)
    observe y[n] ~ Normal(dot(w[z[n]], x[n]), tau[z[n]])
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    def build(name, source):
        path = tmp_path_factory.mktemp(name) / f"{name}.cem"
        path.write_text(source)
        return compile_model(path)
    return build


def _summary(fit) -> np.ndarray:
    """mu's mean and sd, tau's mean and sd."""
    a, b = fit["tau.shape"], fit["tau.rate"]
    return np.array([fit["mu.mean"], fit["mu.precision"] ** -0.5, a / b, np.sqrt(a) / b])


def _near(fit, ref: np.ndarray, sds: float) -> bool:
    """Every mean within ``sds`` of the reference's sd from its mean, every sd within ×1.5."""
    x = _summary(fit)
    means = all(abs(x[i] - ref[i]) <= sds * ref[i + 1] for i in (0, 2))
    return means and all(1 / 1.5 <= x[i] / ref[i] <= 1.5 for i in (1, 3))


def _quiet(fit, *args, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ELBO of a stochastic fit may dip
        return fit(*args, **options)


@pytest.mark.parametrize("options", [{}, {"batch_size": 2}, {"effective_batch_size": 4},
                                     {"batch_size": 2, "effective_batch_size": 1}],
                         ids=["svi", "svi-batch2", "svi+", "svi+-batch2"])
def test_svi_and_svi_plus_defaults_reach_mf_on_eight_schools(compiled, options):
    """Before: E[τ] 1.8-2.2 MF sds below MF's (0.02 against 0.52), mu's sd 6.6× MF's."""
    schools = compiled("schools", SCHOOLS)
    ref = _summary(schools.fit(SCHOOL_DATA, max_iter=5000, tol=1e-12))  # MF's fixed point
    near = [_near(_quiet(schools.fit_svi, SCHOOL_DATA, seed=seed, **options), ref, 0.5)
            for seed in range(5)]
    assert sum(near) >= 4, near


@functools.cache
def ssvi_a_fixed_point(draws: int = 1_000_000) -> np.ndarray:
    """SSVI-A's exact fixed point on eight schools, written here in numpy: λ = E_q(β;λ)[λ̂(β)]
    where β = (mu, tau) ~ q and λ̂ is eq. 10's step on all 8 schools given the draw:

        theta_g | β ~ N(m_g, 1/(prec_g + tau)),  m_g = (prec_g y_g + tau mu)/(prec_g + tau)
        mu:  precision 1e-4 + G tau,  precision·mean Σ_g tau m_g
        tau: shape 1 + G/2,  rate 1 + ½ Σ_g ((m_g − mu)² + 1/(prec_g + tau))

    The expectation over β by common random numbers (the same normal and Gamma(1 + G/2)
    draws at every λ), the fixed point in (mu's mean, tau's rate) by a root finder; returns
    mu's mean and sd, tau's mean and sd. Two sets of draws agree to 0.01 in mu."""
    y, prec = SCHOOL_DATA["y"], SCHOOL_DATA["prec"]
    groups, shape = len(y), 1.0 + len(y) / 2
    rng = np.random.default_rng(0)
    normal, gamma = rng.standard_normal(draws), rng.gamma(shape, 1.0, draws)

    def step(x: np.ndarray) -> np.ndarray:
        mean, rate = x
        mu = mean + normal / np.sqrt(1e-4 + groups * shape / rate)
        tau = gamma / rate
        total = prec[:, None] + tau
        m = (prec[:, None] * y[:, None] + tau * mu) / total
        new_mean = (tau * m.sum(0)).mean() / (1e-4 + groups * tau.mean())
        new_rate = 1.0 + 0.5 * ((m - mu) ** 2 + 1 / total).sum(0).mean()
        return np.array([new_mean, new_rate]) - x

    mean, rate = optimize.fsolve(step, [7.0, 30.0], xtol=1e-10)
    return np.array([mean, (1e-4 + groups * shape / rate) ** -0.5, shape / rate,
                     np.sqrt(shape) / rate])


@pytest.mark.long
def test_the_ssvi_a_fixed_point_is_where_long_ssvi_a_runs_end(compiled):
    """The numpy fixed point is SSVI-A's: 100,000 steps of fit_ssvi_a averaged over their last
    half end within 0.3 of its sds of it (measured: 0.12 and 0.07 in mu)."""
    schools = compiled("schools", SCHOOLS)
    ref = ssvi_a_fixed_point()
    for seed in range(2):
        fit = _quiet(schools.fit_ssvi_a, SCHOOL_DATA, seed=seed, epochs=100_000,
                     evaluate=False)
        assert fit.notes["averaged_steps"] == 50_000
        assert _near(fit, ref, 0.3), (_summary(fit), ref)


def test_ssvi_a_defaults_end_near_its_fixed_point_on_eight_schools(compiled):
    """Before: mu 35-251 of its sds away, E[τ] ~0 (the default 92 steps); with 1,000 steps
    of the small-data schedule, 4 of 10 seeds within 0.5 sd. Now 10,000 steps averaged over
    their last half (svi.small_data_defaults): 17 of 20 seeds (0-19), 5 of these 5."""
    schools = compiled("schools", SCHOOLS)
    ref = ssvi_a_fixed_point()
    fits = [_quiet(schools.fit_ssvi_a, SCHOOL_DATA, seed=seed) for seed in range(5)]
    assert all(fit.notes["averaged_steps"] == 5000 for fit in fits)
    near = [_near(fit, ref, 0.5) for fit in fits]
    assert sum(near) >= 4, near


def _regressions(seed: int, n: int = 120) -> tuple[np.ndarray, dict]:
    """Three lines y = w_k·(1, x) + N(0, 0.3²), n points, and their true components."""
    rng = np.random.default_rng(seed)
    weights = np.array([[3.0, -2.0], [-3.0, 1.0], [0.5, 4.0]])
    z = rng.integers(0, 3, n)
    x = np.column_stack([np.ones(n), rng.normal(0, 2, n)])
    return z, {"x": x, "y": (weights[z] * x).sum(1) + rng.normal(0, 0.3, n)}


@pytest.mark.parametrize("local", ["gibbs", "mf"])
def test_svi_plus_defaults_reach_mf_on_a_mixture_of_regressions(compiled, local):
    """Before: ended below MF with components merged."""
    mixreg = compiled("mixreg", MIXREG)
    for seed in (0, 1):
        _, data = _regressions(300 + seed)
        mf = mixreg.fit(data, seed=seed)
        fit = _quiet(mixreg.fit_svi, data, seed=seed, effective_batch_size=60, local=local)
        assert fit.elbo[-1] > mf.elbo[-1] - 0.01 * abs(mf.elbo[-1]), (seed, fit.elbo[-1])
        # MF's own assignments, not the truth: regressions cross, and MF's ARI is below 1
        assert adjusted_rand_score(mf["z.probs"].argmax(1), fit["z.probs"].argmax(1)) >= 0.9


def test_ssvi_defaults_reach_mf_on_a_mixture_of_regressions(compiled):
    """Before (the default epochs, 92 steps here, and a warm-up to 10% of the start): 31-95%
    below MF on seeds 0-5, components merged; now at least 3,000 steps, warm-up to 1%."""
    mixreg = compiled("mixreg", MIXREG)
    for seed in (0, 1):
        _, data = _regressions(300 + seed)
        mf = mixreg.fit(data, seed=seed)
        fit = _quiet(mixreg.fit_ssvi, data, seed=seed)
        assert fit.elbo[-1] > mf.elbo[-1] - 0.01 * abs(mf.elbo[-1]), (seed, fit.elbo[-1])
        assert adjusted_rand_score(mf["z.probs"].argmax(1), fit["z.probs"].argmax(1)) >= 0.9


def test_the_small_data_schedule_applies_only_where_no_schedule_is_chosen():
    small = Options(batch_size=8)
    small_data_defaults(small, 8)
    assert (small.kappa, small.tau, small.epochs) == (0.5, 1.0, 1000)
    large = Options(batch_size=100)
    small_data_defaults(large, 10_000)
    assert (large.kappa, large.tau, large.epochs) == (0.7, 10.0, 10)
    chosen = Options(batch_size=8, kappa=0.6)
    small_data_defaults(chosen, 8)
    assert (chosen.kappa, chosen.tau) == (0.6, 10.0) and chosen.epochs < 1000
    ssvi = Options(batch_size=8, sample_globals=True, apply_v=True)  # V's noise grows with ρ
    small_data_defaults(ssvi, 8)
    assert (ssvi.kappa, ssvi.tau, ssvi.epochs, ssvi.average) == (0.7, 10.0, 3000, False)
    adaptive = Options(batch_size=8, learning_rate="adaptive")
    small_data_defaults(adaptive, 8)
    assert (adaptive.kappa, adaptive.tau) == (0.7, 10.0)
