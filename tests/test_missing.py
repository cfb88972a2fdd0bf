"""Missing observed entries (NaN or masked) of an observed leaf: integrated out exactly.

Summing a missing leaf entry out drops its factor, so every update must equal that of the
model without the entry (to round-off), and the entry's reported q is its mean-field
conditional q(y_n) ∝ exp E_q[log p(y_n | θ)] (cemodel.missing, codegen/missing.py)."""

from pathlib import Path

import numpy as np
import pytest

from cemodel.compiler import compile_model, compile_stages, run_stages
from cemodel.errors import CemDataError
from tests.helpers import never_decreases

REPO = Path(__file__).resolve().parents[1]
TIGHT = {"max_iter": 500, "tol": 1e-15}
WEIGHTS = {"pi": np.array([0.3, 0.7])}

# a two-component mixture with known weights: a missing x[n] leaves z[n] at its prior and
# the globals see nothing of item n, exactly as if it were not there
FIXED_WEIGHTS = """
model fixed_weights
dim K = 2
dim D
dim N
hyper pi = full(K, 0.5)
hyper m0 = zeros(D)
hyper P0 = eye(D) * 0.01
hyper W0 = eye(D)
plate components k in K:
    mu[k] ~ MultivariateNormal(m0, P0)
    Lambda[k] ~ Wishart(D + 2, W0)
plate points n in N:
    z[n] ~ Categorical(pi)
    observe x[n] ~ MultivariateNormal(mu[z[n]], Lambda[z[n]])
"""

# a matrix y[n, d] with per-entry missingness, and the same model over the given entries
# only (a ragged plate of (column, value) pairs per row): the reference
MATRIX = """
model matrix_rows
dim N
dim D
hyper t0 = 1.0
plate columns d in D:
    mu[d] ~ Normal(0.0, 0.1)
tau ~ Gamma(1.0, 1.0)
plate rows n in N:
    a[n] ~ Normal(0.0, t0)
    plate entries d2 in D:
        observe y[n, d2] ~ Normal(a[n] + mu[d2], tau)
"""
RAGGED = """
model matrix_pairs
dim N
dim D
dim M[N]
hyper t0 = 1.0
plate columns d in D:
    mu[d] ~ Normal(0.0, 0.1)
tau ~ Gamma(1.0, 1.0)
plate rows n in N:
    a[n] ~ Normal(0.0, t0)
    plate entries m in M[n]:
        data col[n, m] : int
        observe y[n, m] ~ Normal(a[n] + mu[col[n, m]], tau)
"""


def _source(text, name):
    return compile_stages(run_stages(text, f"{name}.cem", {}))


def _close(a, b, keys, atol=1e-10):
    for key in keys:
        np.testing.assert_allclose(np.asarray(a[key]), np.asarray(b[key]), rtol=0, atol=atol,
                                   err_msg=key)


# -- linear regression: NaN, masked and removed ---------------------------------------------
@pytest.fixture(scope="module")
def regression():
    model = compile_model(REPO / "stdlib_models" / "linear_regression.cem")
    r = np.random.default_rng(0)
    x = r.normal(size=(40, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3 * r.normal(size=40)
    gone = np.zeros(40, dtype=bool)
    gone[[3, 7, 20]] = True
    return model, x, y, gone


def test_regression_masked_equals_removed(regression):
    model, x, y, gone = regression
    with_nan = model.fit({"x": x, "y": np.where(gone, np.nan, y)}, **TIGHT)
    masked = model.fit({"x": x, "y": np.ma.masked_array(y, mask=gone)}, **TIGHT)
    removed = model.fit({"x": x[~gone], "y": y[~gone]}, **TIGHT)
    _close(with_nan, removed, removed.keys())
    _close(with_nan, masked, removed.keys(), atol=0.0)
    assert with_nan.elbo[-1] == pytest.approx(removed.elbo[-1], abs=1e-9)
    assert never_decreases(with_nan.elbo)


def test_regression_missing_posterior_is_its_conditional(regression):
    model, x, y, gone = regression
    fit = model.fit({"x": x, "y": np.where(gone, np.nan, y)}, **TIGHT)
    q = fit.missing["y"]
    np.testing.assert_array_equal(q["index"][:, 0], np.flatnonzero(gone))
    # q(y_n) ∝ exp E[log N(y_n | x_n·w, τ)] = N(x_n·E[w], 1 / E[τ])
    np.testing.assert_allclose(q["mean"], x[gone] @ fit["E[value w]"], rtol=1e-12)
    np.testing.assert_allclose(q["variance"], 1.0 / fit["E[value tau]"], rtol=1e-12)
    assert not model.fit({"x": x, "y": y}, max_iter=2).missing


def test_regression_svi_masked_equals_removed(regression):
    """A full batch each step (scale 1): SVI on the masked data takes the removed data's
    steps; minibatches carry the mask with their items."""
    model, x, y, gone = regression
    options = dict(epochs=5, seed=3)
    masked = model.fit_svi({"x": x, "y": np.where(gone, np.nan, y)}, batch_size=40, **options)
    removed = model.fit_svi({"x": x[~gone], "y": y[~gone]}, batch_size=37, **options)
    _close(masked, removed, removed.keys())
    small = model.fit_svi({"x": x, "y": np.where(gone, np.nan, y)}, batch_size=10, epochs=40,
                          seed=1)
    exact = model.fit({"x": x[~gone], "y": y[~gone]}, **TIGHT)
    np.testing.assert_allclose(small["w.mean"], exact["w.mean"], atol=0.05)


# -- a mixture -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixture():
    model = _source(FIXED_WEIGHTS, "fixed_weights")
    r = np.random.default_rng(1)
    z = r.random(60) < 0.7
    x = np.where(z[:, None], [3.0, 3.0], [-3.0, 0.0]) + r.normal(size=(60, 2))
    gone = np.zeros(60, dtype=bool)
    gone[[0, 5, 33, 59]] = True
    start = model.fit({"x": x}, max_iter=3, hypers=WEIGHTS).state  # one start for both
    return model, x, gone, start


def test_mixture_masked_equals_removed(mixture):
    model, x, gone, start = mixture
    masked_x = np.where(gone[:, None], np.nan, x)
    masked = model.fit({"x": masked_x}, init=start, hypers=WEIGHTS, **TIGHT)
    removed = model.fit({"x": x[~gone]}, init=start, hypers=WEIGHTS, **TIGHT)
    _close(masked, removed, [k for k in removed.keys() if not k.startswith(("z.", "E[onehot z"))])
    np.testing.assert_allclose(masked["z.probs"][~gone], removed["z.probs"], rtol=0, atol=1e-10)
    # a missing item's z is its prior, and its x the conditional given it
    np.testing.assert_allclose(masked["z.probs"][gone], np.tile([0.3, 0.7], (4, 1)), atol=1e-12)
    q = masked.missing["x"]
    r = masked["z.probs"][gone]
    E_L = masked["E[value Lambda]"]
    precision = np.einsum("nk,kij->nij", r, E_L)
    covariance = np.linalg.inv(precision)
    mean = np.einsum("nij,nk,kjl,kl->ni", covariance, r, E_L, masked["mu.mean"])
    np.testing.assert_allclose(q["covariance"], covariance, rtol=1e-10)
    np.testing.assert_allclose(q["mean"], mean, rtol=1e-10)
    assert never_decreases(masked.elbo)


# -- per-entry missingness in a matrix ---------------------------------------------------------
@pytest.fixture(scope="module")
def matrix():
    dense, pairs = _source(MATRIX, "matrix_rows"), _source(RAGGED, "matrix_pairs")
    r = np.random.default_rng(2)
    y = r.normal(size=(12, 4)) + np.array([0.0, 1.0, -1.0, 2.0]) + r.normal(size=(12, 1))
    gone = r.random((12, 4)) < 0.25
    gone[3] = True  # a row with every entry missing: a[3] keeps its prior
    return dense, pairs, y, gone


def test_matrix_entries_masked_equal_removed(matrix):
    dense, pairs, y, gone = matrix
    masked = dense.fit({"y": np.ma.masked_array(y, mask=gone)}, **TIGHT)
    cols = [np.flatnonzero(~g) for g in gone]
    removed = pairs.fit({"y": [y[n, c] for n, c in enumerate(cols)], "col": cols}, **TIGHT)
    _close(masked, removed, ["mu.mean", "mu.precision", "tau.shape", "tau.rate"])
    assert never_decreases(masked.elbo)
    q = masked.missing["y"]
    assert len(q["index"]) == gone.sum()
    n, d = q["index"].T
    # q(y_nd) = N(E[a_n] + E[mu_d], 1 / E[τ])
    np.testing.assert_allclose(q["mean"], masked["a.mean"][n] + masked["mu.mean"][d],
                               rtol=1e-12)
    np.testing.assert_allclose(q["variance"], 1.0 / masked["E[value tau]"], rtol=1e-12)
    np.testing.assert_allclose(masked["a.mean"][3], 0.0, atol=1e-12)


# -- every method of a mixture with latent weights ---------------------------------------------
@pytest.fixture(scope="module")
def means():
    model = compile_model(REPO / "stdlib_models" / "gmm_means.cem", {"K": 2})
    r = np.random.default_rng(1)
    z = r.random(80) < 0.6
    x = np.where(z[:, None], [3.0, 3.0], [-3.0, 0.0]) + r.normal(size=(80, 2))
    gone = np.zeros(80, dtype=bool)
    gone[[0, 5, 33, 59, 60]] = True
    fit = model.fit({"x": np.where(gone[:, None], np.nan, x)}, max_iter=300, tol=1e-12)
    return model, x, gone, fit


def test_latent_weights_count_the_missing_items_prior(means):
    """z[n] of a missing x[n] is its conditional given π alone, so it still counts in q(π)."""
    model, x, gone, fit = means
    assert never_decreases(fit.elbo)
    E_log_pi = fit["E[log pi]"]
    prior = np.exp(E_log_pi - E_log_pi.max())
    np.testing.assert_allclose(fit["z.probs"][gone], np.tile(prior / prior.sum(), (5, 1)),
                               atol=1e-8)  # the last local step ran with the last-but-one π
    np.testing.assert_allclose(fit["pi.alpha"].sum(), 1.0 * 2 + 80)


@pytest.mark.parametrize("method", ["svi", "svi+", "svi-avg", "ssvi-a", "ssvi", "klc"])
def test_every_method_fits_masked_data(means, method):
    """Each method the model lists runs on the masked data and reaches the MF answer (SVI's
    noise: a few hundredths on these well-separated means, as on the complete data: SVI+ is
    0.04 off after 100 epochs on both; KLC's bound: 1e-3)."""
    from cemodel.runtime.drivers import DRIVERS

    model, x, gone, exact = means
    data = {"x": np.ma.masked_array(x, mask=np.repeat(gone[:, None], 2, axis=1))}
    if DRIVERS[method].stochastic:
        options = {"epochs": 30, "batch_size": 20, "seed": 0}
        if method == "svi+":
            options.update(epochs=100, effective_batch_size=10)
        if method == "ssvi":  # (its V step is the slow one)
            options.update(epochs=10)
        tol = 0.1
    else:
        options, tol = {"max_iter": 300}, 1e-3
    fit = DRIVERS[method].run(model, data, **options)
    np.testing.assert_allclose(fit["mu.mean"], exact["mu.mean"], atol=tol)
    np.testing.assert_allclose(fit.missing["x"]["mean"], exact.missing["x"]["mean"], atol=tol)


@pytest.mark.parametrize("local", ["exact", "gibbs", "cvb0"])
def test_every_local_step_fits_masked_data(means, local):
    """The local steps draw or count a missing item's z from its prior part alone."""
    model, x, gone, exact = means
    fit = model.fit_svi({"x": np.where(gone[:, None], np.nan, x)}, local=local, epochs=30,
                        batch_size=20, seed=0)
    np.testing.assert_allclose(fit["mu.mean"], exact["mu.mean"], atol=0.1)


# -- refusals ----------------------------------------------------------------------------------
PARENT = """
model observed_parent
dim K = 2
dim N
pi ~ Dirichlet(1.0, K)
plate groups k in K:
    mu[k] ~ Normal(0.0, 0.01)
plate points n in N:
    observe g[n] ~ Categorical(pi)
    observe y[n] ~ Normal(mu[g[n]], 1.0)
"""


def test_refusals_name_the_variable_place_and_reason(regression, means):
    model, x, y, gone = regression
    bad_x = x.copy()
    bad_x[4, 1] = np.nan
    with pytest.raises(CemDataError, match=r"data 'x'.*covariate.*NaN\) at points\[4\]"):
        model.fit({"x": bad_x, "y": y}, max_iter=2)
    with pytest.raises(CemDataError, match=r"data 'x'.*masked\) at points\[2\]"):
        model.fit({"x": np.ma.masked_array(x, mask=np.arange(120).reshape(40, 3) == 6),
                   "y": y}, max_iter=2)
    mixture, points = means[0], means[1].copy()
    points[7, 0] = np.nan  # one coordinate of a vector observation
    with pytest.raises(CemDataError, match=r"missing only as a whole.*points\[7\]"):
        mixture.fit({"x": points}, max_iter=2)


def test_a_missing_entry_of_an_observed_parent_is_refused():
    model = _source(PARENT, "observed_parent")
    assert model.SPEC["observed"]["y"]["missing"] == "yes"
    assert model.SPEC["observed"]["g"]["missing"].startswith(
        "no: g is read by y (observed_parent.cem:10:5)")
    g = np.ma.masked_array([0, 1, 1, 0], mask=[False, True, False, False])
    y = np.array([0.1, 2.0, 1.9, np.nan])
    with pytest.raises(CemDataError, match=r"data 'g'.*masked\) at points\[1\]: g is read "
                                           r"by y \(observed_parent.cem:10:5\)"):
        model.fit({"g": g, "y": y}, max_iter=2)
    with pytest.raises(CemDataError, match=r"data 'g'.*\(NaN\) at points\[1\]: g is read"):
        model.fit({"g": np.array([0.0, np.nan, 1.0, 0.0]), "y": y}, max_iter=2)
    fit = model.fit({"g": g.filled(0), "y": y}, max_iter=5)  # a missing leaf y is fine
    assert fit.missing["y"]["index"].tolist() == [[3]]


def test_ragged_and_scoring_refuse_missing_entries():
    from cemodel.runtime.binding import bind_data

    lda = compile_model(REPO / "stdlib_models" / "lda.cem", {"K": 2})
    docs = [np.array([0, 1, 2]), np.ma.masked_array([1, 2], mask=[True, False])]
    with pytest.raises(CemDataError, match=r"data 'w'.*masked array"):
        lda.fit({"w": docs}, max_iter=2)
    spec = compile_model(REPO / "stdlib_models" / "normal_normal.cem").SPEC
    name = next(iter(spec["observed"]))
    with pytest.raises(CemDataError, match="complete data only"):
        bind_data(spec, {name: np.array([1.0, np.nan])})  # scoring, the predictive: refused


def test_saved_fits_and_arviz_hold_the_missing_entries(regression, tmp_path):
    from cemodel.api import Model, load_result

    _, x, y, gone = regression
    model = Model(REPO / "stdlib_models" / "linear_regression.cem")
    fit = model.fit({"x": x, "y": np.where(gone, np.nan, y)}, max_iter=50)
    fit.save(tmp_path / "fit.npz")
    loaded = load_result(tmp_path / "fit.npz", model)
    assert set(loaded.missing["y"]) == {"index", "mean", "variance"}
    np.testing.assert_array_equal(loaded.missing["y"]["mean"], fit.missing["y"]["mean"])
    pytest.importorskip("arviz")
    variational = fit.to_arviz(draws=10, seed=0).variational
    np.testing.assert_array_equal(variational["missing(y).mean"], fit.missing["y"]["mean"])
    assert variational["missing(y).index"].shape == (3, 1)
    fit.save(tmp_path / "fit.nc", draws=10, seed=0)
    loaded = load_result(tmp_path / "fit.nc", model)
    np.testing.assert_array_equal(loaded.missing["y"]["index"], fit.missing["y"]["index"])
    assert not any(key.startswith("missing") for key in loaded.posterior)


def test_masked_integer_leaves_counts_and_categories():
    """An integer array misses entries only through a mask; q of a missing count is
    Poisson(exp Σ_k q(z=k) E[log rate_k]), of a missing category softmax(E[log p])."""
    counts = compile_model(REPO / "stdlib_models" / "poisson_mixture.cem", {"K": 2})
    r = np.random.default_rng(4)
    x = r.poisson(np.where(r.random(50) < 0.5, 2.0, 20.0))
    gone = np.zeros(50, dtype=bool)
    gone[[1, 2, 40]] = True
    fit = counts.fit({"x": np.ma.masked_array(x, mask=gone)}, **TIGHT)
    assert never_decreases(fit.elbo)
    q_z = fit["z.probs"][gone]
    np.testing.assert_allclose(fit.missing["x"]["rate"],
                               np.exp(q_z @ fit["E[log rate]"]), rtol=1e-12)
    dice = compile_model(REPO / "stdlib_models" / "dirichlet_categorical.cem")
    rolls = np.ma.masked_array(r.integers(0, 6, size=30), mask=np.arange(30) % 7 == 0)
    fit = dice.fit({"x": rolls}, **TIGHT)
    removed = dice.fit({"x": rolls.compressed()}, **TIGHT)
    np.testing.assert_allclose(fit["p.alpha"], removed["p.alpha"], rtol=0, atol=1e-12)
    expected = np.exp(fit["E[log p]"]) / np.exp(fit["E[log p]"]).sum()
    np.testing.assert_allclose(fit.missing["x"]["probs"], np.tile(expected, (5, 1)),
                               rtol=1e-12)


def test_data_whose_every_observed_entry_is_missing_is_refused(compiled):
    """It fitted the prior and reported convergence with ELBO 0; it is refused as data with
    no entries is. One observed entry is enough."""
    from cemodel.errors import CemDataError

    module = compiled("gamma_poisson")
    with pytest.raises(CemDataError, match=r"every entry of the observed data \('x'\) is "
                                           r"missing \(NaN or masked\): nothing to fit"):
        module.fit({"x": np.array([np.nan, np.nan, np.nan])})
    with pytest.raises(CemDataError, match="nothing to fit"):
        module.fit({"x": np.ma.masked_all(4)})
    assert np.isfinite(module.fit({"x": np.array([np.nan, 2.0])}).elbo[-1])
