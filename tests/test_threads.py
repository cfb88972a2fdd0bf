"""The local step shares the items among threads (rt.run_shares) with per-thread scratch
arrays and accumulators: 1 and 2 threads give the same fit to floating-point tolerance."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from cemodel.runtime import driver

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                reason="needs numba with at least 2 threads")


@pytest.fixture(autouse=True)
def one_share_per_thread(monkeypatch):
    """These data sets are small: without this they would get one share whatever the thread
    count (rt.share_count), and the comparisons below would compare a fit with itself."""
    monkeypatch.setattr(driver, "ENTRIES_PER_SHARE", 1)


def _with_threads(n, fit):
    previous = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        return fit()
    finally:
        numba.set_num_threads(previous)


def _corpus(seed=0, K=4, V=40, D=150, n=60):
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(V, 0.2), K)
    X = np.zeros((D, V), dtype=np.int64)
    for d in range(D):
        z = rng.choice(K, n, p=rng.dirichlet(np.full(K, 0.3)))
        np.add.at(X[d], [rng.choice(V, p=beta[k]) for k in z], 1)
    return X


@pytest.mark.parametrize("method", ["fit", "fit_svi"])
def test_lda_one_and_two_threads_agree(compiled, method):
    lda = compiled("lda", K=4)
    data = {"w": _corpus()}
    # a fixed number of inner sweeps: a document whose change sits at local_tol within
    # round-off would stop a sweep earlier with one thread than with two (the statistics are
    # added in another order), a discrete step that this comparison of arithmetic is not about
    inner = {"max_local_iter": 40, "local_tol": 0.0}
    options = ({"max_iter": 15, "tol": 0.0, **inner} if method == "fit"
               else {"epochs": 3, "batch_size": 40, **inner})
    one = _with_threads(1, lambda: getattr(lda, method)(data, seed=1, **options))
    two = _with_threads(2, lambda: getattr(lda, method)(data, seed=1, **options))
    np.testing.assert_allclose(two.elbo, one.elbo, rtol=1e-10)
    np.testing.assert_allclose(two["beta.alpha"], one["beta.alpha"], rtol=1e-9)
    np.testing.assert_allclose(two["theta.alpha"], one["theta.alpha"], rtol=1e-9)


def test_gmm_one_and_two_threads_agree(compiled):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(-3, 1, (200, 2)), rng.normal(3, 1, (200, 2))])
    gmm = compiled("gmm", K=3)
    one = _with_threads(1, lambda: gmm.fit({"x": x}, max_iter=30, tol=0.0))
    two = _with_threads(2, lambda: gmm.fit({"x": x}, max_iter=30, tol=0.0))
    np.testing.assert_allclose(two.elbo, one.elbo, rtol=1e-10)
    np.testing.assert_allclose(two["mu.mean"], one["mu.mean"], rtol=1e-8, atol=1e-10)


def test_the_same_thread_count_is_deterministic(compiled):
    lda = compiled("lda", K=4)
    data = {"w": _corpus(1)}
    a = _with_threads(2, lambda: lda.fit(data, max_iter=5, tol=0.0))
    b = _with_threads(2, lambda: lda.fit(data, max_iter=5, tol=0.0))
    np.testing.assert_array_equal(a.elbo, b.elbo)


def test_cli_threads_option(tmp_path, capsys):
    from cemodel.cli import main

    data = tmp_path / "x.npz"
    np.savez(data, x=np.random.default_rng(0).integers(0, 2, 100))
    model = "stdlib_models/beta_bernoulli.cem"
    assert main(["fit", model, "--data", str(data), "--threads", "1", "--quiet",
                 "-o", str(tmp_path / "p.npz")]) == 0
    assert main(["fit", model, "--data", str(data), "--threads", "0",
                 "-o", str(tmp_path / "q.npz")]) == 2
    assert "--threads: expected 1 to" in capsys.readouterr().err


def test_small_data_gets_one_share_and_the_same_bits_on_any_thread_count(compiled,
                                                                         monkeypatch):
    """rt.share_count: below 2 × ENTRIES_PER_SHARE data entries the local step is one share,
    so 1 and 2 threads run the same arithmetic (and a 2-thread machine pays nothing for its
    second thread on small data)."""
    monkeypatch.setattr(driver, "ENTRIES_PER_SHARE", 16384)
    x = np.random.default_rng(3).normal(size=(300, 2))  # 600 entries
    gmm = compiled("gmm", K=2)
    s = _with_threads(2, lambda: gmm._prepare({"x": x}, None, None, 0, None, None, 100, 1e-3))
    assert s.acc_x_0_threads.shape[0] == 1
    one = _with_threads(1, lambda: gmm.fit({"x": x}, max_iter=20, tol=0.0))
    two = _with_threads(2, lambda: gmm.fit({"x": x}, max_iter=20, tol=0.0))
    assert one.elbo.tolist() == two.elbo.tolist()
    monkeypatch.setattr(driver, "ENTRIES_PER_SHARE", 300)  # 600 entries: two shares
    s = _with_threads(2, lambda: gmm._prepare({"x": x}, None, None, 0, None, None, 100, 1e-3))
    assert s.acc_x_0_threads.shape[0] == 2
