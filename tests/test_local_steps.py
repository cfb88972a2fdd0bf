"""The local steps (E-steps) of the stochastic methods: Gibbs, CVB0, exact, mean field.

Gibbs sampling of the assignments with the proportions integrated out must sample their
exact conditional; CVB0 must stop at its fixed point; every local step combines with every
global step that applies (SVI, SSVI-A, SSVI, batch) and reaches the batch MF bound.
"""

from __future__ import annotations

import inspect
import itertools
from pathlib import Path

import numpy as np
import pytest
from scipy.special import gammaln

from cemodel.compiler import compile_model
from cemodel.errors import CemDataError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lda3():
    return compile_model(REPO / "stdlib_models" / "lda.cem", {"K": 3})


def _call(module, kernel: str, s, **overrides):
    """Run a generated kernel with its arguments read from the fit state ``s``."""
    fn = getattr(module, kernel)
    names = inspect.signature(fn.py_func).parameters
    return fn(*[overrides[n] if n in overrides else getattr(s, n) for n in names])


def _exact_marginals(words, log_beta, alpha):
    """p(z_i = k | w, β) with θ ~ Dirichlet(α) integrated out, by enumerating every z."""
    K = log_beta.shape[0]
    n = len(words)
    marg = np.zeros((n, K))
    total = 0.0
    for z in itertools.product(range(K), repeat=n):
        counts = np.bincount(z, minlength=K)
        log_p = (gammaln(alpha + counts).sum() - gammaln(K * alpha + n)
                 + sum(log_beta[k, w] for k, w in zip(z, words, strict=True)))
        p = np.exp(log_p)
        total += p
        for i, k in enumerate(z):
            marg[i, k] += p
    return marg / total


def test_gibbs_frequencies_match_the_exact_conditional(lda3):
    # one document: word 0 once, word 1 twice, word 3 once (4 token instances)
    row = np.array([[1, 2, 0, 1]])
    rng = np.random.default_rng(0)
    beta = rng.dirichlet(np.ones(4), 3)
    alpha = 0.5
    s = lda3._prepare({"w": row}, {"alpha": alpha}, None, 0, None, "random", 100, 1e-3)
    s.E_beta_log[...] = np.log(beta)  # and the copies the local steps read
    s.ET_beta_log[...], s.XT_beta_log[...] = np.log(beta).T, beta.T
    lda3.rt.seed_kernels(1)
    _call(lda3, "local_step_gibbs", s, items=np.array([0]), sweeps=40000, burn_in=100)
    q = s.E_z_onehot[:3]  # the document's rows: words 0, 1, 3
    exact = _exact_marginals([0, 1, 1, 3], np.log(beta), alpha)
    expected = np.array([exact[0], (exact[1] + exact[2]) / 2, exact[3]])
    np.testing.assert_allclose(q, expected, atol=0.015)
    # the proportions get their mean-field update from the averaged q(z)
    np.testing.assert_allclose(s.lam_theta_log[0] + 1.0, alpha + (q * [[1], [2], [1]]).sum(0))


def test_gibbs_is_reproducible_with_its_seed(lda3):
    X = np.random.default_rng(3).poisson(1.0, (30, 12))
    a = lda3.fit_svi({"w": X}, epochs=2, batch_size=10, local="gibbs", seed=5)
    b = lda3.fit_svi({"w": X}, epochs=2, batch_size=10, local="gibbs", seed=5)
    c = lda3.fit_svi({"w": X}, epochs=2, batch_size=10, local="gibbs", seed=6)
    np.testing.assert_array_equal(a.elbo, b.elbo)
    assert not np.array_equal(a.elbo, c.elbo)


def test_cvb0_stops_at_its_fixed_point(lda3):
    X = np.random.default_rng(4).poisson(2.0, (5, 8))
    s = lda3._prepare({"w": X}, {"alpha": 0.3}, None, 0, None, "random", 100, 1e-3)
    for d in range(5):
        _call(lda3, "local_step_cvb0", s, items=np.array([d]), max_local_iter=10000,
              local_tol=1e-13)
        words = np.flatnonzero(X[d])
        q = s.E_z_onehot[:len(words)]
        counts = X[d, words].astype(float)
        expected_counts = 0.3 + (counts[:, None] * q).sum(0)
        # q_i ∝ (α + Σ_{j≠i} q_j)·exp(E[log β])_{·, w_i}, one instance of row i left out
        target = (expected_counts[None, :] - q) * np.exp(s.E_beta_log[:, words].T)
        np.testing.assert_allclose(q, target / target.sum(1, keepdims=True), atol=1e-9)


def test_collapsed_steps_on_a_mixture_equal_the_exact_conditional():
    # no local proportions: CVB0's q(z) is p(z | y, β), the same as the mean-field step
    model = compile_model(REPO / "stdlib_models" / "bernoulli_mixture.cem", {"K": 4})
    rng = np.random.default_rng(0)
    y = (rng.random((80, 6)) < 0.4).astype(int)
    runs = {local: model.fit_svi({"x": y}, epochs=3, batch_size=20, local=local, seed=2)
            for local in ("mf", "exact", "cvb0")}
    np.testing.assert_allclose(runs["cvb0"].elbo, runs["mf"].elbo, rtol=1e-10)
    np.testing.assert_array_equal(runs["exact"].elbo, runs["mf"].elbo)


def test_a_local_step_that_does_not_apply_is_refused_with_its_reason(lda3):
    X = np.ones((4, 5), dtype=int)
    with pytest.raises(CemDataError, match="local 'z' depends on local 'theta'"):
        lda3.fit_svi({"w": X}, local="exact")
    with pytest.raises(CemDataError, match="expected one of mf, exact, gibbs, cvb0"):
        lda3.fit_svi({"w": X}, local="gibs")
    with pytest.raises(CemDataError, match="burn-in"):
        lda3.fit_svi({"w": X}, local="gibbs", gibbs_sweeps=3, gibbs_burn_in=3)
    # the burn-in left to its default is half the sweeps: 2 sweeps were refused against a
    # burn-in of 5 the user never gave
    assert len(lda3.fit_svi({"w": X}, local="gibbs", gibbs_sweeps=2, epochs=1).elbo) == 1
    gp = compile_model(REPO / "stdlib_models" / "gamma_poisson.cem")
    with pytest.raises(CemDataError, match="no categorical local"):
        gp.fit_svi({"x": np.arange(5)}, local="cvb0")


def _corpus(seed, K=3, V=30, D=120, n=80):
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(V, 0.1), K)
    X = np.zeros((D, V), dtype=int)
    for d in range(D):
        z = rng.choice(K, n, p=rng.dirichlet(np.full(K, 0.3)))
        for k in z:
            X[d, rng.choice(V, p=beta[k])] += 1
    return X


@pytest.mark.parametrize("method, local", [
    ("fit_svi", "gibbs"), ("fit_svi", "cvb0"), ("fit_ssvi_a", "gibbs"),
    ("fit_ssvi_a", "cvb0"), ("fit_ssvi", "mf"), ("fit_ssvi", "gibbs"), ("fit_ssvi", "cvb0"),
    ("fit", "gibbs"), ("fit", "cvb0"),
])
def test_every_local_step_combines_with_every_global_step(lda3, method, local):
    X = _corpus(0)
    batch = lda3.fit({"w": X}, max_iter=100, seed=0)
    options = ({"max_iter": 15} if method == "fit"
               else {"epochs": 15, "batch_size": 30, "tau": 1.0})
    result = getattr(lda3, method)({"w": X}, local=local, seed=0, **options)
    assert np.all(np.isfinite(result.elbo))
    # the mean-field bound of the fitted globals: within 1% of batch mean field; the
    # structured methods fit q(β) to a different (structured) bound, so within 3%
    slack = 0.03 if "ssvi" in method else 0.01
    assert result.elbo[-1] > batch.elbo[-1] - slack * abs(batch.elbo[-1]), (
        result.elbo[-1], batch.elbo[-1])


def test_ssvi_reports_the_steps_it_shortened(lda3):
    X = _corpus(1)
    result = lda3.fit_ssvi({"w": X}, epochs=2, batch_size=40, seed=0)
    assert isinstance(result.notes["shortened_steps"], int)


def test_stochastic_empirical_bayes_moves_towards_the_batch_value(lda3):
    X = _corpus(2)
    start = {"alpha": 1.0, "eta": 1.0}
    result = lda3.fit_svi({"w": X}, epochs=10, batch_size=30, learn=("alpha", "eta"),
                          hypers=start, seed=0)
    assert result.hypers["alpha"] < 0.9 and result.hypers["eta"] < 0.9
    # rho = 1 on all items is the batch update
    E_log = np.log(np.random.default_rng(0).dirichlet(np.ones(3), len(X)))
    s = lda3._prepare({"w": X}, start, None, 0, None, "random", 100, 1e-3)
    s.E_theta_log[...] = E_log
    lda3._learn(s, ("alpha",), 1.0, np.arange(len(X)))
    t = lda3._prepare({"w": X}, start, None, 0, None, "random", 100, 1e-3)
    t.E_theta_log[...] = E_log
    lda3._learn(t, ("alpha",))
    assert s.alpha == t.alpha and 0.5 < t.alpha < 2.0


def test_ramp_grows_n_over_the_first_epoch(lda3):
    X = _corpus(3)
    plain = lda3.fit_svi({"w": X}, epochs=2, batch_size=30, seed=0)
    ramped = lda3.fit_svi({"w": X}, epochs=2, batch_size=30, seed=0, ramp=True)
    assert not np.array_equal(plain.elbo, ramped.elbo)
    assert np.all(np.isfinite(ramped.elbo))


def test_on_epoch_sees_the_fit_so_far_and_evaluate_false_skips_the_bound(lda3):
    X = _corpus(4)
    seen = []
    result = lda3.fit_svi({"w": X}, epochs=3, batch_size=40, seed=0, evaluate=False,
                          on_epoch=lambda epoch, r: seen.append((epoch, r["beta.alpha"].sum())))
    assert [e for e, _ in seen] == [0, 1, 2] and len(result.elbo) == 0
    assert seen[-1][1] == pytest.approx(result["beta.alpha"].sum())


def test_mf_reports_the_inner_sweeps_of_its_local_step(lda3):
    """notes['local_sweeps']: the mean inner sweeps per item in each iteration, counted by the
    kernel: exactly max_local_iter where no sweep can pass the test (local_tol = 0), between 1
    and the cap otherwise, fewer from warm starts than restarts."""
    data = {"w": _corpus(5)}
    fixed = lda3.fit(data, max_iter=3, tol=0.0, max_local_iter=7, local_tol=0.0, seed=0)
    assert fixed.notes["local_sweeps"] == [7.0, 7.0, 7.0]
    cold = lda3.fit(data, max_iter=6, tol=0.0, seed=0)
    warm = lda3.fit(data, max_iter=6, tol=0.0, seed=0, warm_start=True)
    for fit in (cold, warm):
        assert len(fit.notes["local_sweeps"]) == 6
        assert all(1.0 <= n <= 100.0 for n in fit.notes["local_sweeps"])
    assert sum(warm.notes["local_sweeps"][1:]) < sum(cold.notes["local_sweeps"][1:])
    # a model whose local step needs no sweeps (one local per item) reports none
    gmm = compile_model(REPO / "stdlib_models" / "gmm.cem", {"K": 2})
    points = np.random.default_rng(0).normal(size=(40, 2))
    assert "local_sweeps" not in gmm.fit({"x": points}, max_iter=2).notes


def test_a_compiled_local_step_gives_the_same_bits_in_one_call_or_in_threads(lda3,
                                                                             monkeypatch):
    """The generated kernel runs its shares in one call (serially) or one call per share on
    the threads; the fit is the same to the last bit either way."""
    import numba

    from cemodel.runtime import driver, shares

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads for 2 shares")
    monkeypatch.setattr(driver, "ENTRIES_PER_SHARE", 1)  # small data: 2 shares all the same
    monkeypatch.setattr(shares, "a_core_is_free", lambda: True)  # threads whatever the load
    data = {"w": _corpus(6)}
    fits = []
    previous = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        prepared = lda3._prepare(data, None, None, 0, None, None, 100, 1e-3)
        assert prepared.acc_w_0_threads.shape[0] == 2
        for threshold in (np.inf, 0.0):  # never threads; threads from the second call
            monkeypatch.setattr(shares, "PARALLEL_SECONDS", threshold)
            shares._records.clear()
            fits.append(lda3.fit(data, max_iter=5, tol=0.0, seed=0))
    finally:
        numba.set_num_threads(previous)
    serial, threaded = fits
    assert serial.elbo.tolist() == threaded.elbo.tolist()
    for key, value in serial.posterior.items():
        assert np.array_equal(value, threaded.posterior[key]), key
