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

import warnings

import numpy as np
import pytest
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


# SSVI-A's own fixed point: the average of the iterates of the last 5,000 of 10,000 steps
# ρ = 0.05 started at MF's answer, over 8 runs (mu 7.06-7.57, tau 0.13-0.20 between runs)
SSVI_A_FIXED_POINT = np.array([7.36, 0.83, 0.173, 0.078])


def test_ssvi_a_defaults_end_near_its_fixed_point_on_eight_schools(compiled):
    """Before: mu 35-251 of its sds away, E[τ] ~0 (the default 92 steps). Within 1.5 sds,
    not the 0.5 of SVI: SSVI-A's sampled globals leave run-to-run noise that 1,000 steps do
    not average out (within 0.5 sd in 2 of 5 seeds, and still 2 of 5 after 10,000 steps
    averaged; its fixed point itself is known to ±0.1 in mu)."""
    schools = compiled("schools", SCHOOLS)
    near = [_near(_quiet(schools.fit_ssvi_a, SCHOOL_DATA, seed=seed), SSVI_A_FIXED_POINT,
                  1.5) for seed in range(5)]
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
    adaptive = Options(batch_size=8, learning_rate="adaptive")
    small_data_defaults(adaptive, 8)
    assert (adaptive.kappa, adaptive.tau) == (0.7, 10.0)
