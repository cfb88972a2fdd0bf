"""Hidden Markov models: the MarkovChain family, its exact local step (forward–backward) and
fits that recover the generating parameters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.special import entr

from cemodel.compiler import compile_stages, run_stages
from cemodel.errors import CemDataError, CemModelError
from cemodel.runtime.chain import _log_space, _scaled, chain_posterior

from .conftest import STDLIB
from .helpers import never_decreases


def _brute_force(emission, first, pair):
    """Exact marginals, pairwise marginals and entropy of a short chain by enumeration."""
    n, k = emission.shape
    paths = list(itertools.product(range(k), repeat=n))
    logp = np.array([first[0, p[0]] + sum(emission[t, p[t]] for t in range(n))
                     + sum(pair[t, p[t - 1], p[t]] for t in range(1, n)) for p in paths])
    probs = np.exp(logp - logp.max())
    probs /= probs.sum()
    q, q_pair = np.zeros((n, k)), np.zeros((n, k, k))
    for prob, path in zip(probs, paths, strict=True):
        for t in range(n):
            q[t, path[t]] += prob
        for t in range(1, n):
            q_pair[t, path[t - 1], path[t]] += prob
    return q, q_pair, float(np.sum(entr(probs)))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_forward_backward_equals_enumeration(n):
    rng = np.random.default_rng(n)
    k = 3
    emission = rng.normal(0.0, 2.0, (n, k))
    first = np.tile(rng.normal(size=k), (n, 1))
    pair = rng.normal(0.0, 2.0, (n, k, k))
    q, q_first, q_pair = np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k, k))
    entropy = chain_posterior(emission, first, pair, q, q_first, q_pair, n)
    exact_q, exact_pair, exact_entropy = _brute_force(emission, first, pair)
    np.testing.assert_allclose(q, exact_q, atol=1e-12)
    np.testing.assert_allclose(q_pair, exact_pair, atol=1e-12)
    np.testing.assert_allclose(q_first[0], exact_q[0], atol=1e-12)
    assert np.all(q_first[1:] == 0.0)
    assert entropy == pytest.approx(exact_entropy, abs=1e-12)


def _posterior(emission, first, pair, method=chain_posterior):
    n, k = emission.shape
    q, q_first, q_pair = np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k, k))
    return q, q_pair, method(emission, first, pair, q, q_first, q_pair, n)


def _extreme(rng, n, k):
    """Emission rows around −1e3 (digamma of tiny pseudo-counts), spread over 1e3 within a row;
    the transition 0 → 1 impossible (log-potential −∞), and the chain cannot start in 1."""
    emission = -1e3 + rng.normal(0.0, 3.0, (n, k))
    emission[:, 2] -= 1e3
    first = np.tile(rng.normal(size=k), (n, 1))
    first[:, 1] = -np.inf
    pair = np.tile(rng.normal(0.0, 2.0, (k, k)), (n, 1, 1))
    pair[:, 0, 1] = -np.inf
    return emission, first, pair


@pytest.mark.parametrize("homogeneous", [True, False])
def test_extreme_potentials_equal_enumeration(homogeneous):
    """The scaled recursions (without the log-space fallback) shift each row by its max; a −∞
    transition is a 0 and adds nothing to the energy. Inhomogeneous: the transition changes
    at steps 2 and 4 only."""
    rng = np.random.default_rng(7)
    emission, first, pair = _extreme(rng, 6, 3)
    if not homogeneous:
        pair[2:] += rng.normal(0.0, 2.0, (3, 3))
        pair[4:] -= 50.0
    q, q_pair, entropy = _posterior(emission, first, pair, _scaled)
    exact_q, exact_pair, exact_entropy = _brute_force(emission, first, pair)
    np.testing.assert_allclose(q, exact_q, atol=1e-12)
    np.testing.assert_allclose(q_pair, exact_pair, atol=1e-12)
    assert np.all(q_pair[:, 0, 1] == 0.0)
    assert entropy == pytest.approx(exact_entropy, abs=1e-12)


def test_an_underflowing_chain_is_redone_in_log_space():
    """z_0 = 0 and 0 → 1 impossible, but step 1's emission favours 1 by 1e3 nats: the scaled
    forward pass's c_1 = e^−1000 underflows, and the chain is redone in log space."""
    emission = np.array([[0.0, 0.0], [-1e3, 0.0], [0.0, -2.0]])
    first = np.tile([0.0, -np.inf], (3, 1))
    pair = np.tile([[0.0, -np.inf], [-1.0, 0.0]], (3, 1, 1))
    assert np.isnan(_posterior(emission, first, pair, _scaled)[2])
    q, q_pair, entropy = _posterior(emission, first, pair)
    exact_q, exact_pair, exact_entropy = _brute_force(emission, first, pair)
    np.testing.assert_allclose(q, exact_q, atol=1e-12)
    np.testing.assert_allclose(q_pair, exact_pair, atol=1e-12)
    assert entropy == pytest.approx(exact_entropy, abs=1e-12)


def test_a_long_chain_equals_log_space_forward_backward():
    """400 steps, K = 4, the transition changing every 50 steps: the scaled recursions against
    the log-space ones (3K² exp per step, the fallback), as a chain this long cannot be
    enumerated. Entropies to 1e-9: each is log Z − energy (both ~2e3 here) to round-off."""
    rng = np.random.default_rng(3)
    n, k = 400, 4
    emission = rng.normal(0.0, 2.0, (n, k))
    first = np.tile(rng.normal(size=k), (n, 1))
    pair = np.repeat(np.log(rng.dirichlet(np.ones(k), size=(n // 50, k))), 50, axis=0)
    q, q_pair, entropy = _posterior(emission, first, pair, _scaled)
    log_q, log_pair, log_entropy = _posterior(emission, first, pair, _log_space)
    np.testing.assert_allclose(q, log_q, atol=1e-12)
    np.testing.assert_allclose(q_pair, log_pair, atol=1e-12)
    assert entropy == pytest.approx(log_entropy, abs=1e-9)


def _sample_hmm(rng, pi0, A, phi, lengths):
    sequences, states = [], []
    for length in lengths:
        z = np.empty(length, dtype=int)
        z[0] = rng.choice(len(pi0), p=pi0)
        for t in range(1, length):
            z[t] = rng.choice(len(pi0), p=A[z[t - 1]])
        states.append(z)
        sequences.append(np.array([rng.choice(phi.shape[1], p=phi[s]) for s in z]))
    return sequences, states


TRUE_A = np.array([[0.85, 0.10, 0.05], [0.10, 0.80, 0.10], [0.05, 0.15, 0.80]])
TRUE_PHI = np.array([[0.60, 0.30, 0.05, 0.03, 0.01, 0.01],
                     [0.02, 0.08, 0.60, 0.25, 0.03, 0.02],
                     [0.01, 0.02, 0.03, 0.04, 0.40, 0.50]])


@pytest.fixture(scope="module")
def hmm(compiled):
    return compiled("hmm", K=3)


@pytest.fixture(scope="module")
def sequences():
    rng = np.random.default_rng(0)
    lengths = rng.integers(40, 80, 60)
    return _sample_hmm(rng, np.array([0.5, 0.3, 0.2]), TRUE_A, TRUE_PHI, lengths)


def test_mf_recovers_the_transition_matrix(hmm, sequences):
    x, _ = sequences
    best = max((hmm.fit({"x": x}, dims={"V": 6}, max_iter=300, seed=seed)
                for seed in range(3)), key=lambda r: r.elbo[-1])
    assert never_decreases(best.elbo)
    phi = best["phi.alpha"] / best["phi.alpha"].sum(1, keepdims=True)
    # states are found up to relabelling: match them by their emissions
    rows, cols = linear_sum_assignment(-phi @ TRUE_PHI.T)
    order = cols.argsort()
    A = best["A.alpha"] / best["A.alpha"].sum(1, keepdims=True)
    np.testing.assert_allclose(A[np.ix_(order, order)], TRUE_A, atol=0.05)
    np.testing.assert_allclose(phi[order], TRUE_PHI, atol=0.05)


def _forward_backward(log_emission, log_first, log_pair):
    """q(z_t = k) of one chain, scaled forward–backward in numpy."""
    n, k = log_emission.shape
    emission = np.exp(log_emission - log_emission.max(1, keepdims=True))
    first, pair = np.exp(log_first - log_first.max()), np.exp(log_pair - log_pair.max())
    forward, backward = np.zeros((n, k)), np.ones((n, k))
    forward[0] = first * emission[0]
    forward[0] /= forward[0].sum()
    for t in range(1, n):
        forward[t] = (forward[t - 1] @ pair) * emission[t]
        forward[t] /= forward[t].sum()
    for t in range(n - 2, -1, -1):
        backward[t] = pair @ (emission[t + 1] * backward[t + 1])
        backward[t] /= backward[t].sum()
    q = forward * backward
    return q / q.sum(1, keepdims=True)


def test_the_smoothed_state_probabilities_are_forward_backward_of_the_fit(sequences):
    """model.smoothed_states gives a MarkovChain's q(z_t = k) per sequence: forward–backward
    under exp E[log π0], exp E[log A], exp E[log φ] of the fit, and the true states (ARI)."""
    from sklearn.metrics import adjusted_rand_score

    import cemodel

    model = cemodel.Model(STDLIB / "hmm.cem", K=3)
    x, z = sequences
    fit = max((model.fit({"x": x}, dims={"V": 6}, max_iter=300, seed=seed)
               for seed in range(3)), key=lambda r: r.elbo[-1])
    found = model.smoothed_states({"x": x[:5]}, fit)["z"].probs
    assert [p.shape for p in found] == [(len(seq), 3) for seq in x[:5]]
    e_log_pi0 = fit["E[log pi0]"]
    e_log_a, e_log_phi = fit["E[log A]"], fit["E[log phi]"]
    for probs, seq in zip(found, x[:5], strict=True):
        expected = _forward_backward(e_log_phi[:, seq].T, e_log_pi0, e_log_a)
        np.testing.assert_allclose(probs, expected, rtol=0, atol=1e-10)
    every = model.smoothed_states({"x": x}, fit)["z"].probs
    states = np.concatenate([p.argmax(1) for p in every])
    assert adjusted_rand_score(np.concatenate(z), states) >= 0.6


def test_the_local_step_is_the_exact_chain_posterior(hmm, sequences):
    """update_z in the generated module against enumeration, with the fitted globals."""
    from .helpers import call_kernel as _call

    x, _ = sequences
    short = [seq[:5] for seq in x[:3]]
    fitted = hmm.fit({"x": x}, dims={"V": 6}, max_iter=50)
    state = hmm._prepare({"x": short}, None, {"V": 6}, 0, fitted.state, None, 1, 0.0)
    k = 3
    scratch = {name: np.zeros((5, k)) for name in ("lam_z_onehot", "lam_z_first", "E_z_onehot",
                                                   "E_z_first")}
    scratch.update(lam_z_pair=np.zeros((5, k, k)), E_z_pair=np.zeros((5, k, k)),
                   H_z=np.zeros(1))
    e_log_phi, e_log_a, e_log_pi0 = state.E_phi_log, state.E_A_log, state.E_pi0_log[0]
    for item in range(3):
        _call(hmm.update_z, state, {"i_seqs": item, "with_children": True, **scratch})
        emission = e_log_phi[:, short[item]].T
        q, q_pair, entropy = _brute_force(emission, np.tile(e_log_pi0, (5, 1)),
                                          np.tile(e_log_a, (5, 1, 1)))
        np.testing.assert_allclose(scratch["E_z_onehot"], q, atol=1e-10)
        np.testing.assert_allclose(scratch["E_z_pair"], q_pair, atol=1e-10)
        assert scratch["H_z"][0] == pytest.approx(entropy, abs=1e-9)


def test_stochastic_methods_reach_the_batch_bound(hmm, sequences):
    x, _ = sequences
    batch = hmm.fit({"x": x}, dims={"V": 6}, max_iter=300, seed=1)
    svi = hmm.fit_svi({"x": x}, dims={"V": 6}, epochs=60, batch_size=20, seed=1,
                      init=batch.state)
    assert svi.elbo[-1] == pytest.approx(batch.elbo[-1], rel=0.01)
    structured = hmm.fit_ssvi_a({"x": x}, dims={"V": 6}, epochs=20, batch_size=20, seed=1,
                                init=batch.state)
    assert np.all(np.isfinite(structured.elbo))
    assert structured.elbo[-1] == pytest.approx(batch.elbo[-1], rel=0.03)


def test_sequences_as_a_matrix_and_refused_as_counts(hmm):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 6, (8, 12))  # 8 sequences of length 12
    as_rows = hmm.fit({"x": x}, dims={"V": 6}, max_iter=5)
    as_list = hmm.fit({"x": list(x)}, dims={"V": 6}, max_iter=5)
    np.testing.assert_allclose(as_rows.elbo, as_list.elbo, rtol=1e-12)
    import scipy.sparse as sp

    with pytest.raises(CemDataError, match="in order"):
        hmm.fit({"x": sp.csr_matrix(x)}, dims={"V": 6})


GAUSSIAN_HMM = """model ghmm
dim K = 2
dim S
dim T[S]
pi0 ~ Dirichlet(1.0, K)
plate states k in K:
    A[k] ~ Dirichlet(1.0, K)
    mu[k] ~ Normal(0, 0.01)
    tau[k] ~ Gamma(2, 2)
plate seqs s in S:
    plate steps t in T[s]:
        z[s, t] ~ MarkovChain(pi0, A)
        observe y[s, t] ~ Normal(mu[z[s, t]], tau[z[s, t]])
"""


def test_a_gaussian_hmm_written_here_fits():
    """Not a library model: Gaussian emissions with unknown means and precisions."""
    module = compile_stages(run_stages(GAUSSIAN_HMM, "ghmm.cem", {}))
    rng = np.random.default_rng(5)
    sequences = []
    for _ in range(30):
        z = [0]
        for _ in range(59):
            z.append(z[-1] if rng.random() < 0.9 else 1 - z[-1])
        sequences.append(np.where(np.array(z) == 0, -2.0, 3.0) + rng.normal(0, 0.5, 60))
    result = max((module.fit({"y": sequences}, max_iter=200, seed=s) for s in range(3)),
                 key=lambda r: r.elbo[-1])
    assert never_decreases(result.elbo)
    np.testing.assert_allclose(np.sort(result["mu.mean"]), [-2.0, 3.0], atol=0.1)
    A = result["A.alpha"] / result["A.alpha"].sum(1, keepdims=True)
    np.testing.assert_allclose(np.diag(A), [0.9, 0.9], atol=0.05)


POISSON_HMM = """model phmm
dim K = 2
dim S
dim T[S]
pi0 ~ Dirichlet(1.0, K)
plate states k in K:
    A[k] ~ Dirichlet(1.0, K)
    lam[k] ~ Gamma(1.0, 0.1)
plate seqs s in S:
    plate steps t in T[s]:
        z[s, t] ~ MarkovChain(pi0, A)
        observe x[s, t] ~ Poisson(lam[z[s, t]])
"""


def _poisson_sequences():
    rng = np.random.default_rng(10)
    A, lam, sequences = np.array([[0.95, 0.05], [0.1, 0.9]]), np.array([2.0, 15.0]), []
    for _ in range(40):
        z = [0]
        for _ in range(rng.integers(80, 200) - 1):
            z.append(rng.choice(2, p=A[z[-1]]))
        sequences.append(rng.poisson(lam[np.array(z)]))
    return sequences


def test_a_poisson_hmm_leaves_the_symmetric_start_from_seed_steps():
    """Both states start alike (Gamma rates have no pseudo-counts to jitter): the start picks
    k-means++ seed *steps* and gives each one state for the first update, as a mixture's
    seed items. The fit used to stay at lam = [6.33, 6.33] on every seed."""
    module = compile_stages(run_stages(POISSON_HMM, "phmm.cem", {}))
    assert module.DEFAULT_START == "seeds"
    sequences = _poisson_sequences()
    fits = [module.fit({"x": sequences}, seed=seed) for seed in range(3)]
    for result in fits:
        assert never_decreases(result.elbo)
        rates = np.sort(result["lam.shape"] / result["lam.rate"])
        np.testing.assert_allclose(rates, [2.0, 15.0], rtol=0.05)
    assert np.ptp([r.elbo[-1] for r in fits]) < 1e-6 * abs(fits[0].elbo[-1])
    random = module.fit({"x": sequences}, start="random")
    np.testing.assert_allclose(np.sort(random["lam.shape"] / random["lam.rate"]), [2.0, 15.0],
                               rtol=0.05)
    with pytest.raises(CemDataError, match="start: expected 'seeds' or 'random', found 'kmeans'"):
        module.fit({"x": sequences}, start="kmeans")


def test_a_model_with_one_start_refuses_another():
    module = compile_stages(run_stages(
        "model coin\ndim N\np ~ Beta(1.0, 1.0)\nplate flips n in N:\n"
        "    observe x[n] ~ Bernoulli(p)\n", "coin.cem", {}))
    with pytest.raises(CemDataError, match="expected 'prior' .* found 'seeds'"):
        module.fit({"x": np.array([1, 0, 1])}, start="seeds")


@pytest.mark.parametrize(("text", "message", "line"), [
    ("model m\ndim K = 2\ndim N\npi0 ~ Dirichlet(1.0, K)\nplate states k in K:\n"
     "    A[k] ~ Dirichlet(1.0, K)\nplate steps n in N:\n    z[n] ~ MarkovChain(pi0, A)\n"
     "    observe x[n] ~ Categorical(pi0)\n",
     "must sit in a plate of time steps directly inside the data plate", 8),
    ("model m\ndim K = 2\ndim J = 3\ndim S\ndim T[S]\npi0 ~ Dirichlet(1.0, K)\n"
     "plate rows j in J:\n    A[j] ~ Dirichlet(1.0, K)\nplate seqs s in S:\n"
     "    plate steps t in T[s]:\n        z[s, t] ~ MarkovChain(pi0, A)\n"
     "        observe x[s, t] ~ Categorical(pi0)\n",
     "init has length (K) but the transition matrix is (J, K)", 11),
])
def test_chain_errors_are_located(text, message, line):
    with pytest.raises(CemModelError, match=message.replace("(", r"\(").replace(")", r"\)")) \
            as info:
        run_stages(text, "m.cem", {})
    assert info.value.span.line == line


def test_a_flat_ragged_array_is_refused_with_the_two_forms_that_work(hmm):
    with pytest.raises(CemDataError) as info:
        hmm.fit({"x": np.array([0, 1, 2, 1, 0, 1])})
    assert "one array per element of seqs" in info.value.hint
    assert "'steps_ptr' (length S + 1)" in info.value.hint
    # what was given, not its first element's shape ("found an array of shape ()")
    assert "found one array of shape (6,) (its elements would be the seqs)" in str(info.value)
