"""Missing observed entries (NaN or masked) of an observed leaf: integrated out exactly.

Summing a missing leaf entry out drops its factor, so every update must equal that of the
model without the entry (to round-off), and the entry's reported q is its mean-field
conditional q(y_n) ∝ exp E_q[log p(y_n | θ)] (cemodel.missing, codegen/missing.py)."""

from pathlib import Path

import numpy as np
import pytest

from cemodel.compiler import compile_model, compile_stages, run_stages
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
