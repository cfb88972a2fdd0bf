"""Every method `cemodel check` lists reaches MF's optimum with default settings (issue 18,
findings 2-4), on models written here, in no stdlib file.

- A sparse count mixture (finding 2): from random pseudo-counts and ten epochs of two steps,
  SVI, SVI+, SSVI-A, SSVI and averaged SVI ended ~50% below MF's ELBO with two components
  merged (ARI 0.73 on data set 204), and KLC from N(0, 1) logits did (ARI 0.76 on 200). The
  default start of a mixture is now the k-means++ seeds for every method (KLC: θ from q(Z)
  after the seeded start), and a stochastic fit on a small data set runs enough steps to
  forget its start (``default_epochs``).
- SVI+ (finding 4): Definition 1's negative weights made λ̂ of a Dirichlet invalid and the
  fit stopped at step 1; the step is now shortened where it would leave the domain.
- A Normal hierarchy (finding 3): its population mean has no symmetry to break, so its
  default start is the prior, not a draw from a vague prior (sd 100).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from cemodel.codegen.lowering import lower
from cemodel.compiler import compile_model, run_stages
from cemodel.runtime.drivers.adaptive import AdaptiveRate
from cemodel.runtime.drivers.svi import KAPPA, START_WEIGHT, TAU, Options, default_epochs

COUNT_MIXTURE = """model count_mixture
dim K = 4
dim V
dim N
pi ~ Dirichlet(1.0, K)
plate components k in K:
    phi[k] ~ Dirichlet(0.1, V)
plate items n in N:
    data total[n] : int
    z[n] ~ Categorical(pi)
    observe x[n] ~ Multinomial(total[n], phi[z[n]])
"""

SCHOOLS = """model schools
dim G
mu ~ Normal(0.0, 0.0001)
tau ~ Gamma(1.0, 1.0)
plate schools g in G:
    data prec[g] : real
    theta[g] ~ Normal(mu, tau)
    observe y[g] ~ Normal(theta[g], prec[g])
"""

BILINEAR = """model bilinear
dim U
dim I
dim D = 2
plate things i in I:
    b[i] ~ MVN(zeros(D), eye(D))
plate ratings u in U:
    a[u] ~ MVN(zeros(D), eye(D))
    plate cols i2 in I:
        observe r[u, i2] ~ Normal(dot(a[u], b[i2]), 4.0)
"""


@pytest.fixture(scope="module")
def count_mixture(tmp_path_factory):
    path = tmp_path_factory.mktemp("count") / "count_mixture.cem"
    path.write_text(COUNT_MIXTURE)
    return compile_model(path)


def count_data(seed: int) -> tuple[np.ndarray, dict]:
    """300 count vectors from 4 sparse, well-separated components over 50 words."""
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(np.full(50, 0.1), 4)
    z = rng.integers(0, 4, 300)
    total = rng.integers(20, 60, 300)
    x = np.stack([rng.multinomial(t, phi[k]) for t, k in zip(total, z, strict=True)])
    return z, {"x": x, "total": total}


ENTRY = {"svi": ("fit_svi", {}), "svi+": ("fit_svi", {"effective_batch_size": 128}),
         "ssvi-a": ("fit_ssvi_a", {}), "ssvi": ("fit_ssvi", {}), "klc": ("fit_klc", {})}


@pytest.mark.parametrize("data_seed", [200, 204])
def test_every_listed_method_reaches_mf_on_a_sparse_count_mixture(count_mixture, data_seed):
    listed = [m for m, why in count_mixture.METHODS.items() if why.startswith("yes")]
    assert {"svi", "svi+", "ssvi-a", "ssvi", "klc"} <= set(listed)
    truth, data = count_data(data_seed)
    mf = count_mixture.fit(data, seed=0)
    assert adjusted_rand_score(truth, mf["z.probs"].argmax(1)) == 1.0
    for method in (m for m in listed if m in ENTRY):
        entry, options = ENTRY[method]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SVI's ELBO may dip between epochs
            fit = getattr(count_mixture, entry)(data, seed=0, **options)
        gap = (mf.elbo[-1] - fit.elbo[-1]) / abs(mf.elbo[-1])
        ari = adjusted_rand_score(truth, fit["z.probs"].argmax(1))
        assert gap < 0.01 and ari >= 0.95, (method, gap, ari)


def test_svi_plus_shortens_a_step_that_would_leave_the_dirichlet_domain(count_mixture):
    """|S|/M = 2: weights 1 + ε_n − ε̄ with sd 1, a sixth of them below 0; with this data set
    and seed λ̂ of phi was invalid in 3 steps (the fit stopped at the first: "the annealing
    noise moved q(phi) outside its domain")."""
    _, data = count_data(203)
    fit = count_mixture.fit_svi(data, seed=3, effective_batch_size=128)
    assert fit.notes["shortened_steps"] > 0
    assert np.all(fit["phi.alpha"] > 0) and np.isfinite(fit.elbo[-1])
    mf = count_mixture.fit(data, seed=0)
    assert (mf.elbo[-1] - fit.elbo[-1]) / abs(mf.elbo[-1]) < 0.01


def _start(source: str) -> str:
    return lower(run_stages(source, "test.cem").plan).default_start


def test_a_normal_hierarchy_starts_at_its_prior_and_a_bilinear_model_from_a_draw():
    assert _start(SCHOOLS) == "prior"
    assert _start(BILINEAR) == "random"


@pytest.mark.parametrize("n_items, batch", [(300, 256), (8, 256), (10_000, 100)])
def test_default_epochs_forget_the_start(n_items, batch):
    o = Options(batch_size=batch, kappa=KAPPA, tau=TAU)  # the schedule's defaults
    epochs = default_epochs(o, n_items)
    steps = epochs * -(-n_items // batch)
    rho = (np.arange(1, steps + 1) + o.tau) ** (-o.kappa)
    assert epochs >= 10
    if epochs > 10:  # as few epochs as forget it
        assert np.prod(1 - rho) < START_WEIGHT
        fewer = (epochs - 1) * -(-n_items // batch)
        assert np.prod(1 - rho[:fewer]) >= START_WEIGHT


def test_the_adaptive_rate_is_one_without_noise_and_falls_with_it():
    exact = [np.array([2.0, -1.0]), np.array([[0.5]])]
    rate = AdaptiveRate([exact])
    assert [rate.rho(exact) for _ in range(3)] == [1.0, 1.0, 1.0]
    rng = np.random.default_rng(0)
    noisy = AdaptiveRate([[rng.normal(size=50)] for _ in range(5)])
    rhos = [noisy.rho([rng.normal(size=50)]) for _ in range(200)]
    assert rhos[0] < 0.5 and max(rhos[-50:]) < 0.1  # mean 0: the steps shrink


SCHOOL_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOL_SD = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def test_svi_with_the_adaptive_rate_reaches_mf_on_a_small_hierarchy(tmp_path):
    """Eight schools (finding 3): with the decaying ρ_t, SVI's E[τ] ended at 0.015 against
    MF's 0.52 (posterior sds 6× too wide); the adaptive rate steps as MF does where the
    minibatch is the whole data set, and ends on MF's fixed point."""
    path = tmp_path / "schools.cem"
    path.write_text(SCHOOLS)
    module = compile_model(path)
    data = {"y": SCHOOL_Y, "prec": SCHOOL_SD ** -2.0}
    mf = module.fit(data, max_iter=5000, tol=1e-12)
    svi = module.fit_svi(data, seed=0, learning_rate="adaptive")
    sd = mf["mu.precision"] ** -0.5
    assert abs(svi["mu.mean"] - mf["mu.mean"]) < 0.5 * sd
    assert svi["mu.precision"] == pytest.approx(mf["mu.precision"], rel=0.1)
    assert svi["tau.shape"] / svi["tau.rate"] == pytest.approx(
        mf["tau.shape"] / mf["tau.rate"], rel=0.05)


def test_the_adaptive_rate_is_refused_where_it_would_damp_chosen_noise(count_mixture, tmp_path):
    from cemodel.errors import CemError

    _, data = count_data(200)
    for options in ({"effective_batch_size": 128}, {"checkpoint": tmp_path / "run.ckpt"}):
        with pytest.raises(CemError, match="learning_rate"):
            count_mixture.fit_svi(data, learning_rate="adaptive", **options)
    with pytest.raises(CemError, match="SSVI.s V-noise"):
        count_mixture.fit_ssvi(data, learning_rate="adaptive")
