"""The fitting drivers (``cemodel.runtime.drivers``) on fake models written in plain numpy.

A fake model implements ``ModelInterface`` (``cemodel/runtime/drivers/interface.py``), the
names a generated module provides, for models whose posterior is known in closed form. No
generated module and no kernel of the fake's own: only the runtime's pieces the drivers call
(``blend``, cached on disk, the samplers and SSVI's V(β, λ) of a Normal, plain numpy; the
Beta's V compiles numba functions that are not cached, so SSVI runs on a Normal mean here and
on every stdlib model in tests/test_svi.py). The fakes:

- ``BetaBernoulli``: p ~ Beta(a, b), x[n] ~ Bernoulli(p); one global, no local;
- ``NormalMean``: mu ~ Normal(m0, p0), x[n] ~ Normal(mu, tau) with tau known; one global;
- ``LatentCoin``: the coin hidden, z[n] ~ Bernoulli(p), x[n] ~ Normal(MU[z[n]], 1); a global
  and a categorical local, so that mean field iterates and the local step reads E[t(p)];
- ``PerItemBeta``: p[n] ~ Beta(a, b), y[n] ~ Binomial(m[n], p[n]); locals only, no global.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scipy.special import betaln, digamma, entr, expit, gammaln
from scipy.stats import betabinom, norm

from cemodel.errors import CemDataError
from cemodel.runtime import FitResult, State, bind_data
from cemodel.runtime.drivers import DRIVERS, Global, run

A, B = 2.0, 3.0  # the Beta prior of every fake
N = 30
X = (np.random.default_rng(0).random(N) < 0.3).astype(float)  # 30 coin flips
STOCHASTIC = ("svi", "svi+", "ssvi-a", "ssvi")


def _spec(plate: str, observed: dict, covariates: dict | None = None) -> dict[str, Any]:
    """A SPEC (the binder's data layout) with one data plate over N."""
    return {"model": "fake", "dims": {"N": {"default": None, "ragged_over": None}},
            "plates": {plate: {"dim": "N", "parent": None, "ragged": False}},
            "observed": {name: {"plates": [plate], "support": support, "shape": [],
                                "categories": None} for name, support in observed.items()},
            "covariates": covariates or {}}


@dataclass
class Visit:
    """One call of the local step, as the tests see it (a probe, not part of the interface)."""

    items: np.ndarray
    weights: np.ndarray  # item_weight of the items
    p_total: float  # exp E[log p] + exp E[log(1 − p)]: 1 for a draw of p, < 1 for E_q


class BetaBernoulli:
    """p ~ Beta(a, b); x[n] ~ Bernoulli(p) for n in trials: one global, no local.

    Laid out as the golden ``beta_bernoulli``: q(p) in coefficient form, (λ_log, λ_log1m) =
    (α − 1, β − 1); the local step adds Σ w_n x_n and Σ w_n (w: ``item_weight``) to the
    statistics acc_x_0, acc_x_1; ``update_p`` sets λ = η + data_scale · (messages). Not here:
    ``_learn`` (LEARNABLE is empty) and the Gibbs / CVB0 steps (LOCAL_STEPS says no).
    """

    SOURCE_SHA256 = "fake:beta_bernoulli"
    SPEC = _spec("trials", {"x": "binary"})
    METHODS = {"mf": "yes", "svi": "yes", "svi+": "yes", "ssvi-a": "yes", "ssvi": "yes",
               "klc": "no: KLC-CG parameterises a categorical local, and this model has none"}
    LOCAL_STEPS = {"mf": "yes: local mean field", "exact": "yes: no local depends on another",
                   "gibbs": "no: the item has no categorical local to sample",
                   "cvb0": "no: the item has no categorical local to sample"}
    LEARNABLE: tuple[str, ...] = ()
    DATA_PLATE: str | None = "trials"
    STREAMING = "no: the fake binds its data in memory"
    ITEM_DIMS = ("N",)
    ROLES = {"item": ("item_weight",), "data": ("x",), "statistic": ("acc_x_0", "acc_x_1"),
             "global": ("lam_p_log", "lam_p_log1m"), "global_exp": ("E_p_log", "E_p_log1m"),
             "hyper": ("a", "b")}

    def __init__(self, methods: dict[str, str] | None = None) -> None:
        self.METHODS = {**type(self).METHODS, **(methods or {})}
        self.GLOBALS = (Global("p", "beta", lam=("lam_p_log", "lam_p_log1m"),
                               E=("E_p_log", "E_p_log1m"), update=self.update_p, aux_draws=2),)
        self.visits: list[Visit] = []

    def _prepare(self, data, hypers, dims, seed, init, start, max_local_iter, local_tol,
                 share=None) -> State:
        if share is not None or init is not None or start not in (None, "prior"):
            raise CemDataError("the fake starts at its prior, in memory")
        bound = bind_data(self.SPEC, data, dims)
        hypers = {"a": A, "b": B, **(hypers or {})}
        n = bound.dims["N"]
        s = State(bound=bound, a=float(hypers["a"]), b=float(hypers["b"]), x=bound.arrays["x"],
                  all_items=np.arange(n), item_weight=np.ones(n),  # the data plate's items
                  acc_x_0=np.zeros(()), acc_x_1=np.zeros(()),  # the statistics
                  lam_p_log=np.zeros(1), lam_p_log1m=np.zeros(1),  # q(p)
                  E_p_log=np.zeros(1), E_p_log1m=np.zeros(1))
        self.update_p(s, 0.0)  # q(p) starts at the prior
        return s

    def run_local_step(self, s: State, items: np.ndarray, max_local_iter: int,
                       local_tol: float, seeding: bool = False, warm: bool = False,
                       guard: bool = False, evaluate: bool = True,
                       accelerate: bool = False) -> float:
        """Adds the items' statistics to acc_*; returns their ELBO terms (none: no local)."""
        self._visit(s, items)
        w = s.item_weight[items]
        s.acc_x_0[...] += w @ s.x[items]
        s.acc_x_1[...] += w.sum()
        return 0.0

    def update_p(self, s: State, data_scale: float, expect: bool = True) -> None:
        s.lam_p_log[...] = s.a - 1.0 + data_scale * s.acc_x_0
        s.lam_p_log1m[...] = s.b - 1.0 + data_scale * (s.acc_x_1 - s.acc_x_0)
        if expect:
            self.refresh(s)

    def refresh(self, s: State) -> None:
        alpha, beta = s.lam_p_log + 1.0, s.lam_p_log1m + 1.0
        s.E_p_log[...] = digamma(alpha) - digamma(alpha + beta)
        s.E_p_log1m[...] = digamma(beta) - digamma(alpha + beta)

    def elbo_of_globals(self, s: State) -> float:
        """E[log p(p)] + E[log p(statistics | p)] + H[q(p)], H = A(λ) − λ·E[t]."""
        log_joint = ((s.a - 1.0 + s.acc_x_0) * s.E_p_log
                     + (s.b - 1.0 + s.acc_x_1 - s.acc_x_0) * s.E_p_log1m - betaln(s.a, s.b))
        entropy = (betaln(s.lam_p_log + 1.0, s.lam_p_log1m + 1.0)
                   - s.lam_p_log * s.E_p_log - s.lam_p_log1m * s.E_p_log1m)
        return float((log_joint + entropy)[0])

    def _result(self, s: State, trace: list[float], converged: bool, seconds: float,
                items: bool = True) -> FitResult:
        state = {name: getattr(s, name).copy() for name in self.ROLES["global"]}
        posterior = {"p.a": s.lam_p_log[0] + 1.0, "p.b": s.lam_p_log1m[0] + 1.0,
                     "E[log p]": s.E_p_log[0], "E[log1m p]": s.E_p_log1m[0]}
        return FitResult(posterior=posterior, elbo=np.array(trace), iterations=len(trace),
                         converged=converged, seconds=seconds, dims=dict(s.bound.dims),
                         hypers={"a": s.a, "b": s.b}, state=state)

    def _visit(self, s: State, items: np.ndarray) -> None:
        p_total = float(np.exp(s.E_p_log[0]) + np.exp(s.E_p_log1m[0]))
        self.visits.append(Visit(items.copy(), s.item_weight[items].copy(), p_total))


M0, P0, TAU = 0.5, 0.1, 4.0  # NormalMean: the prior's mean and precision, the noise precision
NORMAL_X = 1.3 + np.random.default_rng(6).normal(size=N) / np.sqrt(TAU)


class NormalMean:
    """mu ~ Normal(m0, p0); x[n] ~ Normal(mu, tau), tau known: one global, no local, laid out
    as the golden ``normal_normal`` (λ_value = p·m, λ_square = −p/2); statistics Σ w x,
    Σ w and Σ w x²."""

    SOURCE_SHA256 = "fake:normal_mean"
    SPEC = _spec("points", {"x": "real"})
    METHODS = BetaBernoulli.METHODS
    LOCAL_STEPS = BetaBernoulli.LOCAL_STEPS
    LEARNABLE: tuple[str, ...] = ()
    DATA_PLATE = "points"
    STREAMING = BetaBernoulli.STREAMING
    ITEM_DIMS = ("N",)
    ROLES = {"item": ("item_weight",), "data": ("x",),
             "statistic": ("acc_x_0", "acc_x_1", "acc_x_2"),
             "global": ("lam_mu_value", "lam_mu_square"),
             "global_exp": ("E_mu_value", "E_mu_square")}

    def __init__(self) -> None:
        self.GLOBALS = (Global("mu", "normal", lam=("lam_mu_value", "lam_mu_square"),
                               E=("E_mu_value", "E_mu_square"), update=self.update_mu,
                               aux_draws=1),)

    def _prepare(self, data, hypers, dims, seed, init, start, max_local_iter, local_tol,
                 share=None) -> State:
        bound = bind_data(self.SPEC, data, dims)
        n = bound.dims["N"]
        s = State(bound=bound, x=bound.arrays["x"], all_items=np.arange(n),
                  item_weight=np.ones(n), acc_x_0=np.zeros(()), acc_x_1=np.zeros(()),
                  acc_x_2=np.zeros(()), lam_mu_value=np.zeros(1), lam_mu_square=np.zeros(1),
                  E_mu_value=np.zeros(1), E_mu_square=np.zeros(1))
        self.update_mu(s, 0.0)  # the prior, or an earlier fit's q(mu)
        if init is not None:
            s.lam_mu_value[...], s.lam_mu_square[...] = init["lam_mu_value"], init["lam_mu_square"]
            self.refresh(s)
        return s

    def run_local_step(self, s: State, items: np.ndarray, max_local_iter: int,
                       local_tol: float, seeding: bool = False, warm: bool = False,
                       guard: bool = False, evaluate: bool = True,
                       accelerate: bool = False) -> float:
        w, x = s.item_weight[items], s.x[items]
        s.acc_x_0[...] += w @ x
        s.acc_x_1[...] += w.sum()
        s.acc_x_2[...] += w @ (x * x)
        return 0.0

    def update_mu(self, s: State, data_scale: float, expect: bool = True) -> None:
        s.lam_mu_value[...] = P0 * M0 + data_scale * TAU * s.acc_x_0
        s.lam_mu_square[...] = -0.5 * P0 - data_scale * 0.5 * TAU * s.acc_x_1
        if expect:
            self.refresh(s)

    def refresh(self, s: State) -> None:
        precision = -2.0 * s.lam_mu_square
        s.E_mu_value[...] = s.lam_mu_value / precision
        s.E_mu_square[...] = s.E_mu_value ** 2 + 1.0 / precision

    def elbo_of_globals(self, s: State) -> float:
        m, m2 = s.E_mu_value[0], s.E_mu_square[0]
        prior = 0.5 * np.log(P0 / (2 * np.pi)) - 0.5 * P0 * (m2 - 2 * M0 * m + M0 * M0)
        data = (0.5 * np.log(TAU / (2 * np.pi)) * s.acc_x_1
                - 0.5 * TAU * (s.acc_x_2 - 2 * m * s.acc_x_0 + m2 * s.acc_x_1))
        entropy = 0.5 * np.log(2 * np.pi * np.e / (-2.0 * s.lam_mu_square[0]))
        return float(prior + data + entropy)

    def _result(self, s: State, trace: list[float], converged: bool, seconds: float,
                items: bool = True) -> FitResult:
        precision = -2.0 * s.lam_mu_square[0]
        return FitResult(posterior={"mu.mean": s.lam_mu_value[0] / precision,
                                    "mu.precision": precision},
                         elbo=np.array(trace), iterations=len(trace), converged=converged,
                         seconds=seconds, dims=dict(s.bound.dims), hypers={},
                         state={name: getattr(s, name).copy() for name in self.ROLES["global"]})


MU = np.array([-1.0, 1.0])  # LatentCoin: the mean of x given z = 0, 1
COIN_DATA = {"x": MU[X.astype(int)] + np.random.default_rng(1).normal(size=N)}


class LatentCoin(BetaBernoulli):
    """p ~ Beta(a, b); z[n] ~ Bernoulli(p); x[n] ~ Normal(MU[z[n]], 1): q(z_n = 1) = r_n is a
    local, its statistics Σ w_n r_n and Σ w_n; q(p) as in BetaBernoulli."""

    SOURCE_SHA256 = "fake:latent_coin"
    SPEC = _spec("trials", {"x": "real"})
    ROLES = {**BetaBernoulli.ROLES, "local": ("r",), "known": ("log_lik",)}

    def _prepare(self, data, hypers, dims, seed, init, start, max_local_iter, local_tol,
                 share=None) -> State:
        s = super()._prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol)
        s.r = np.zeros(len(s.x))
        s.log_lik = norm.logpdf(s.x[:, None], MU)  # log p(x_n | z_n = k), columns k = 0, 1
        return s

    def run_local_step(self, s: State, items: np.ndarray, max_local_iter: int,
                       local_tol: float, seeding: bool = False, warm: bool = False,
                       guard: bool = False, evaluate: bool = True,
                       accelerate: bool = False) -> float:
        """Each item's exact q(z_n) given E[t(p)] (or a draw of p); its ELBO terms."""
        self._visit(s, items)
        ll0, ll1 = s.log_lik[items, 0], s.log_lik[items, 1]
        r = s.r[items] = expit(s.E_p_log[0] - s.E_p_log1m[0] + ll1 - ll0)  # exact q(z_n)
        w = s.item_weight[items]
        s.acc_x_0[...] += w @ r
        s.acc_x_1[...] += w.sum()
        return float(np.sum(r * ll1 + (1.0 - r) * ll0 + entr(r) + entr(1.0 - r)))


class PerItemBeta:
    """p[n] ~ Beta(a, b); y[n] ~ Binomial(m[n], p[n]) for n in items: no global, every latent
    local, its exact q(p_n) = Beta(a + y_n, b + m_n − y_n) set by the local step."""

    SOURCE_SHA256 = "fake:per_item_beta"
    SPEC = _spec("items", {"y": "count"}, {"m": {"plates": ["items"], "kind": "real",
                                                  "shape": []}})
    METHODS = BetaBernoulli.METHODS
    LOCAL_STEPS = BetaBernoulli.LOCAL_STEPS
    LEARNABLE: tuple[str, ...] = ()
    DATA_PLATE = "items"
    STREAMING = BetaBernoulli.STREAMING
    ITEM_DIMS = ("N",)
    ROLES = {"item": ("item_weight",), "data": ("y", "m"), "hyper": ("a", "b"),
             "local": ("lam_p_log", "lam_p_log1m", "E_p_log", "E_p_log1m")}
    GLOBALS: tuple[Global, ...] = ()

    def _prepare(self, data, hypers, dims, seed, init, start, max_local_iter, local_tol,
                 share=None) -> State:
        bound = bind_data(self.SPEC, data, dims)
        n = bound.dims["N"]
        return State(bound=bound, a=A, b=B, **bound.arrays, all_items=np.arange(n),
                     item_weight=np.ones(n),
                     **{name: np.zeros(n) for name in self.ROLES["local"]})

    def run_local_step(self, s: State, items: np.ndarray, max_local_iter: int,
                       local_tol: float, seeding: bool = False, warm: bool = False,
                       guard: bool = False, evaluate: bool = True,
                       accelerate: bool = False) -> float:
        """Each item's exact posterior; its ELBO terms are then log p(y_n | m_n)."""
        y, m = s.y[items], s.m[items]
        alpha, beta = s.a + y, s.b + m - y
        s.lam_p_log[items], s.lam_p_log1m[items] = alpha - 1.0, beta - 1.0
        s.E_p_log[items] = digamma(alpha) - digamma(alpha + beta)
        s.E_p_log1m[items] = digamma(beta) - digamma(alpha + beta)
        log_choose = gammaln(m + 1.0) - gammaln(y + 1.0) - gammaln(m - y + 1.0)
        return float(np.sum(log_choose + betaln(alpha, beta) - betaln(s.a, s.b)))

    def refresh(self, s: State) -> None:
        """No global."""

    def elbo_of_globals(self, s: State) -> float:
        return 0.0

    def _result(self, s: State, trace: list[float], converged: bool, seconds: float,
                items: bool = True) -> FitResult:
        return FitResult(posterior={"p.a": s.lam_p_log + 1.0, "p.b": s.lam_p_log1m + 1.0},
                         elbo=np.array(trace), iterations=len(trace), converged=converged,
                         seconds=seconds, dims=dict(s.bound.dims), hypers={"a": s.a, "b": s.b},
                         state={name: getattr(s, name).copy() for name in self.ROLES["local"]})


# -- the exact answers ------------------------------------------------------------------------

POST_A, POST_B = A + X.sum(), B + N - X.sum()  # q(p) of BetaBernoulli = p(p | x)
POST_MEAN = POST_A / (POST_A + POST_B)
LOG_EVIDENCE = betaln(POST_A, POST_B) - betaln(A, B)  # log p(x)
EXACT_STATE = {"lam_p_log": np.array([POST_A - 1.0]), "lam_p_log1m": np.array([POST_B - 1.0])}
UNIT_STEP = {"kappa": 0.0, "tau": 0.0, "step_scale": 1.0}  # ρ_t = 1


def _mean(result: FitResult) -> float:
    return result["p.a"] / (result["p.a"] + result["p.b"])


def _assert_same_fit(result: FitResult, expected: FitResult, atol: float = 0.0) -> None:
    np.testing.assert_allclose(result.elbo, expected.elbo, rtol=0.0, atol=atol)
    assert result.state.keys() == expected.state.keys()
    for name, value in expected.state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=0.0, atol=atol, err_msg=name)


# -- batch mean field -------------------------------------------------------------------------


def test_mf_reaches_the_exact_posterior_in_one_iteration():
    result = DRIVERS["mf"].run(BetaBernoulli(), {"x": X})
    assert result.iterations == 2 and result.converged  # the second iteration changes nothing
    np.testing.assert_allclose(result.state["lam_p_log"], EXACT_STATE["lam_p_log"], rtol=1e-15)
    np.testing.assert_allclose(result.state["lam_p_log1m"], EXACT_STATE["lam_p_log1m"],
                               rtol=1e-15)
    # at the exact posterior the ELBO is the log marginal likelihood
    np.testing.assert_allclose(result.elbo, [LOG_EVIDENCE] * 2, rtol=0.0, atol=1e-10)


def test_mf_iterates_on_a_model_with_a_local_and_never_lowers_the_elbo():
    result = DRIVERS["mf"].run(LatentCoin(), COIN_DATA, tol=1e-12)
    assert result.converged and 4 <= result.iterations < 200
    assert np.all(np.diff(result.elbo) >= -1e-12)


# -- SVI and SVI+ -----------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [None, 1000])
def test_svi_with_full_batches_and_unit_steps_is_mf(batch_size):
    model = BetaBernoulli()
    result = DRIVERS["svi"].run(model, {"x": X}, epochs=3, batch_size=batch_size, **UNIT_STEP)
    mf = DRIVERS["mf"].run(BetaBernoulli(), {"x": X})
    assert len(result.elbo) == 3 and not result.converged
    np.testing.assert_allclose(result.elbo, mf.elbo[0], rtol=0.0, atol=1e-12)
    for name, value in mf.state.items():
        np.testing.assert_allclose(result.state[name], value, rtol=0.0, atol=1e-12)
    # a batch larger than the data is all of it: each epoch one step, then the ELBO pass
    assert [len(v.items) for v in model.visits] == [N] * 6


def test_svi_with_minibatches_ends_near_the_posterior():
    model = BetaBernoulli()
    result = DRIVERS["svi"].run(model, {"x": X}, epochs=40, batch_size=6, seed=1)
    assert len(result.elbo) == 40  # one value per epoch
    assert [len(v.items) for v in model.visits] == ([6] * 5 + [N]) * 40  # then an ELBO pass
    # the posterior's sd is 0.077; the minibatch noise leaves q(p) near it, not at it
    assert abs(_mean(result) - POST_MEAN) < 0.005
    assert 0.0 < abs(result["p.a"] - POST_A) < 0.05 * POST_A


def test_svi_epoch_visits_every_item_once_in_minibatches():
    model = BetaBernoulli()
    DRIVERS["svi"].run(model, {"x": X}, epochs=2, batch_size=7, seed=1)
    assert [len(v.items) for v in model.visits] == [7, 7, 7, 7, 2, N] * 2  # the last one short
    first, second = (np.concatenate([v.items for v in model.visits[k:k + 5]]) for k in (0, 6))
    assert sorted(first) == sorted(second) == list(range(N))
    assert not np.array_equal(first, second)  # a new permutation each epoch


def test_svi_steps_follow_the_step_size_schedule():
    """Full batches: every λ̂ is the posterior's λ*, so λ_T = λ* + Π_t (1 − ρ_t) (η − λ*) with
    ρ_t = step_scale · (t + τ)^−κ."""
    options = {"kappa": 0.7, "tau": 2.0, "step_scale": 0.8}
    result = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, epochs=4, batch_size=None, **options)
    rho = 0.8 * (np.arange(1, 5) + 2.0) ** -0.7
    left = np.prod(1.0 - rho)  # of the start, the prior η
    for name, prior in (("lam_p_log", A - 1.0), ("lam_p_log1m", B - 1.0)):
        expected = EXACT_STATE[name] + left * (prior - EXACT_STATE[name])
        np.testing.assert_allclose(result.state[name], expected, rtol=1e-13)


def test_svi_plus_with_m_equal_to_the_batch_size_is_svi():
    options = {"epochs": 5, "batch_size": 6, "seed": 3}
    svi = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, **options)
    plus = DRIVERS["svi+"].run(BetaBernoulli(), {"x": X}, effective_batch_size=6, **options)
    _assert_same_fit(plus, svi)


def test_svi_plus_with_a_smaller_m_perturbs_the_weights_around_one():
    options = {"epochs": 5, "batch_size": 6, "seed": 3}
    svi = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, **options)
    model = BetaBernoulli()
    plus = DRIVERS["svi+"].run(model, {"x": X}, effective_batch_size=2, **options)
    steps = [v.weights for v in model.visits if len(v.items) == 6]
    assert len(steps) == 25
    for weights in steps:  # 1 + ε_n − ε̄: mean 1, variance |S|/M − 1 = 2
        assert abs(weights.mean() - 1.0) < 1e-12 and np.std(weights) > 0.1
    assert all(np.all(v.weights == 1.0) for v in model.visits if len(v.items) == N)  # ELBO
    assert not np.allclose(plus.state["lam_p_log"], svi.state["lam_p_log"])


# -- SSVI-A and SSVI --------------------------------------------------------------------------
NORMAL_PRECISION = P0 + TAU * N  # q(mu) of NormalMean = p(mu | x)
NORMAL_MEAN = (P0 * M0 + TAU * NORMAL_X.sum()) / NORMAL_PRECISION


def test_mf_on_iteration_sees_the_fit_so_far():
    """on_iteration(iteration, result) after every iteration, with the trace so far; the
    last result is the fit's answer, and the callback's time is not the fit's."""
    seen = []

    def slow(iteration, result):
        seen.append((iteration, len(result.elbo), float(result["p.a"])))
        time.sleep(0.05)

    result = DRIVERS["mf"].run(BetaBernoulli(), {"x": X}, max_iter=3, tol=-1.0,
                               on_iteration=slow)  # tol < 0: every iteration runs
    assert [s[:2] for s in seen] == [(0, 1), (1, 2), (2, 3)]
    assert seen[-1][2] == result["p.a"] == POST_A
    assert result.seconds < 0.05


def test_ssvi_a_ends_near_the_posterior():
    result = DRIVERS["ssvi-a"].run(BetaBernoulli(), {"x": X}, epochs=40, batch_size=6, seed=2)
    # a small data set: the last half's iterates averaged, and the ELBO at their average last
    assert len(result.elbo) == 41 and "shortened_steps" not in result.notes
    assert result.notes["averaged_steps"] == 20 * -(-N // 6)
    assert abs(_mean(result) - POST_MEAN) < 0.02


def test_ssvi_ends_near_the_posterior():
    result = DRIVERS["ssvi"].run(NormalMean(), {"x": NORMAL_X}, epochs=40, batch_size=6,
                                 seed=2)
    assert len(result.elbo) == 40 and "shortened_steps" in result.notes
    sd = NORMAL_PRECISION ** -0.5
    assert abs(result["mu.mean"] - NORMAL_MEAN) < sd  # V's noise: near, not at
    assert 0.3 * NORMAL_PRECISION < result["mu.precision"] < 3.0 * NORMAL_PRECISION


def test_ssvi_warms_up_with_svi_steps_then_applies_v():
    """With a local (LatentCoin), SSVI's first warmup_steps steps (45 with ρ_t =
    (t + 10)^−0.7) are SVI's bit for bit; the next one draws p and applies V."""
    from cemodel.runtime.drivers.svi import Options, warmup_steps

    warm = warmup_steps(Options(kappa=0.7, tau=10.0))  # SSVI's schedule
    assert warm == 45
    assert warmup_steps(Options(tau=0.0, kappa=0.5)) == 1  # ρ_1 = 1 forgets the start
    for epochs, same in ((warm, True), (warm + 1, False)):  # full batches: a step per epoch
        # one schedule for both (SSVI does not take the small-data default)
        fits = [DRIVERS[method].run(LatentCoin(), COIN_DATA, epochs=epochs, batch_size=None,
                                    kappa=0.7, tau=10.0)
                for method in ("svi", "ssvi")]
        assert np.array_equal(fits[0].state["lam_p_log"], fits[1].state["lam_p_log"]) == same


def test_ssvi_applies_v_at_the_draw_the_local_step_saw(monkeypatch):
    """Every V-step's aux draws (log G_a, log G_b of p = G_a / (G_a + G_b)) rebuild the p
    the local step read: V (tested against E[V] = I in test_ssvi_runtime) is evaluated at
    the same draw, not a fresh one."""
    from cemodel.runtime.drivers import svi

    seen = []
    original = svi._v_step

    def checked(run, g, rho):
        log_a, log_b = run.aux[g.name]
        log_p = log_a - np.logaddexp(log_a, log_b)
        seen.append(float(np.max(np.abs(log_p - run.s.E_p_log))))
        original(run, g, rho)

    monkeypatch.setattr(svi, "_v_step", checked)
    DRIVERS["ssvi"].run(LatentCoin(), COIN_DATA, epochs=60, batch_size=None)
    assert len(seen) == 60 - svi.warmup_steps(svi.Options(kappa=0.7, tau=10.0)) > 0
    assert max(seen) < 1e-12


def test_ssvi_without_a_local_takes_ssvi_a_steps():
    """Without a latent local, E[V g | g] = g: SSVI's step is SSVI-A's (here, with nothing
    reading the draw, SVI's), bit for bit, after the warm-up too."""
    # one schedule for both (SSVI does not take the small-data default)
    options = {"epochs": 30, "batch_size": None, "kappa": 0.7, "tau": 10.0}
    fits = [DRIVERS[method].run(NormalMean(), {"x": NORMAL_X}, **options)
            for method in ("ssvi-a", "ssvi")]
    _assert_same_fit(fits[1], fits[0])


def test_ssvi_control_variate_at_the_posterior_stays_there():
    """With the control variate the step is ρ V (λ̂ − λ): no data noise at the optimum of a
    model without locals (full batches), so from the exact posterior it does not move."""
    model = NormalMean()
    mf = DRIVERS["mf"].run(model, {"x": NORMAL_X})
    result = DRIVERS["ssvi"].run(NormalMean(), {"x": NORMAL_X}, epochs=5, batch_size=None,
                                 control_variate=True, init=mf.state)
    np.testing.assert_allclose(result["mu.mean"], NORMAL_MEAN, rtol=1e-10)
    np.testing.assert_allclose(result["mu.precision"], NORMAL_PRECISION, rtol=1e-10)


def test_ssvi_a_local_step_sees_a_draw_of_the_global():
    for method, is_draw in (("svi", False), ("ssvi-a", True)):
        model = LatentCoin()
        DRIVERS[method].run(model, COIN_DATA, epochs=2, batch_size=10)
        steps = [v.p_total for v in model.visits if len(v.items) == 10]
        passes = [v.p_total for v in model.visits if len(v.items) == N]
        # a draw of p: exp(log p) + exp(log(1 − p)) = 1; E_q (Jensen) stays below 1
        assert np.allclose(steps, 1.0, rtol=0.0, atol=1e-12) == is_draw, method
        assert max(passes) < 1.0 - 1e-3  # the ELBO pass is at E_q, after the refresh


def test_ssvi_a_without_a_local_is_svi():
    """The draw goes where the local step reads E[t(p)], and this model has no local step to
    read it: λ, the ELBO trace and the minibatches are SVI's."""
    options = {"epochs": 4, "batch_size": 7, "seed": 5}
    svi = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, **options)
    _assert_same_fit(DRIVERS["ssvi-a"].run(BetaBernoulli(), {"x": X}, average=False,
                                           **options), svi)
    # on a small data set SSVI-A averages its iterates by default (as svi-avg does)
    averaged = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, average=True, **options)
    assert averaged.notes["averaged_steps"] == 2 * -(-N // 7)
    _assert_same_fit(DRIVERS["ssvi-a"].run(BetaBernoulli(), {"x": X}, **options), averaged)


# -- a model with no global variable ----------------------------------------------------------

Y = np.random.default_rng(4).binomial(np.arange(N) % 5 + 1, 0.4).astype(float)
M = (np.arange(N) % 5 + 1).astype(float)


@pytest.mark.parametrize("method", ["mf", *STOCHASTIC])
def test_without_a_global_every_method_is_per_item_mean_field(method):
    options = {} if method == "mf" else {"epochs": 3, "batch_size": 7}
    if method == "svi+":
        options["effective_batch_size"] = 2
    result = DRIVERS[method].run(PerItemBeta(), {"y": Y, "m": M}, **options)
    np.testing.assert_allclose(result.state["lam_p_log"], A + Y - 1.0, rtol=0.0, atol=1e-12)
    np.testing.assert_allclose(result.state["lam_p_log1m"], B + M - Y - 1.0, rtol=0.0,
                               atol=1e-12)
    log_evidence = betabinom.logpmf(Y, M, A, B).sum()
    np.testing.assert_allclose(result.elbo, log_evidence, rtol=0.0, atol=1e-10)
    # mf: two sweeps; stochastic: an ELBO per epoch, and one at the average where averaged
    assert len(result.elbo) == (2 if method == "mf" else 3 + ("averaged_steps" in result.notes))


# -- the registry and the options -------------------------------------------------------------


def test_svi_plus_needs_an_effective_batch_size_and_svi_refuses_one():
    with pytest.raises(CemDataError, match="needs effective_batch_size"):
        DRIVERS["svi+"].run(BetaBernoulli(), {"x": X}, epochs=1)
    with pytest.raises(CemDataError, match="turns SVI into SVI\\+"):
        DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, epochs=1, effective_batch_size=2)
    # an M above the batch was capped at it without a word (plain SVI under SVI+'s name)
    with pytest.raises(CemDataError, match="expected M ≤ batch_size = 4, found 10"):
        DRIVERS["svi+"].run(BetaBernoulli(), {"x": X}, epochs=1, batch_size=4,
                            effective_batch_size=10)


@pytest.mark.parametrize("method", ["mf", *STOCHASTIC, "klc"])
def test_a_method_the_model_rules_out_is_refused_with_its_reason(method):
    reason = f"no: the fake says no to {method}"
    model = BetaBernoulli(methods={method: reason})
    expected = f"method '{method}' does not apply to this model: the fake says no to {method}"
    with pytest.raises(CemDataError, match=re.escape(expected)):
        run(method, model, {"x": X}, **({"effective_batch_size": 2} if method == "svi+" else {}))
    assert not model.visits


def test_an_unknown_method_is_refused():
    with pytest.raises(CemDataError, match="expected one of mf, svi"):
        run("svi++", BetaBernoulli(), {"x": X})


@pytest.mark.parametrize("method", ["mf", *STOCHASTIC])
def test_an_unknown_option_is_a_type_error_naming_it(method):
    options = {"effective_batch_size": 2} if method == "svi+" else {}
    with pytest.raises(TypeError, match="epoch_count"):
        DRIVERS[method].run(BetaBernoulli(), {"x": X}, epoch_count=3, **options)


# -- checkpoints: resume = uninterrupted ------------------------------------------------------


def test_mf_resumed_is_mf_uninterrupted(tmp_path):
    data, path = COIN_DATA, tmp_path / "mf.npz"
    whole = DRIVERS["mf"].run(LatentCoin(), data, max_iter=6, tol=0.0)
    first = DRIVERS["mf"].run(LatentCoin(), data, max_iter=2, tol=0.0, checkpoint=path)
    resumed = DRIVERS["mf"].run(LatentCoin(), data, max_iter=6, tol=0.0, resume=path)
    assert whole.iterations == 6 and not whole.converged
    assert not np.array_equal(first.state["lam_p_log"], whole.state["lam_p_log"])  # moving
    _assert_same_fit(resumed, whole)


@pytest.mark.parametrize("method", STOCHASTIC)
def test_stochastic_fit_resumed_is_the_fit_uninterrupted(tmp_path, method):
    """Minibatches (the permutation stream), SVI+'s noise stream, SSVI's draws and its count
    of shortened steps."""
    data, path = COIN_DATA, tmp_path / f"{method}.npz"
    options: dict[str, Any] = {"batch_size": 7, "seed": 11}
    fake, lam = LatentCoin, "lam_p_log"
    if method == "svi+":
        options["effective_batch_size"] = 3
    if method == "ssvi":  # a Normal global (its V is plain numpy)
        data, fake, lam = {"x": NORMAL_X}, NormalMean, "lam_mu_value"
    whole = DRIVERS[method].run(fake(), data, epochs=5, **options)
    first = DRIVERS[method].run(fake(), data, epochs=2, checkpoint=path, **options)
    resumed = DRIVERS[method].run(fake(), data, epochs=5, resume=path, **options)
    assert not np.array_equal(first.state[lam], whole.state[lam])  # moving
    _assert_same_fit(resumed, whole)
    assert resumed.notes == whole.notes


# -- stopping ---------------------------------------------------------------------------------


def test_noisy_stop_ends_a_flat_trace_after_window_plus_patience_epochs():
    result = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, epochs=50, batch_size=None,
                                tol=1e-6, window=2, patience=3, **UNIT_STEP)
    assert result.converged and len(result.elbo) == 2 + 3


def test_noisy_stop_ends_a_minibatch_fit_early():
    options = {"epochs": 20, "batch_size": 6, "seed": 1}
    never = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, **options)
    assert not never.converged and len(never.elbo) == 20  # without tol: every epoch
    result = DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, tol=1e-3, **options)
    assert result.converged and len(result.elbo) < 20


# -- options the drivers refuse ---------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [0, -5, 2.5])
def test_a_batch_size_that_is_not_a_count_of_items_is_refused(batch_size):
    with pytest.raises(CemDataError, match="batch_size: expected a whole number"):
        DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, epochs=1, batch_size=batch_size)


def test_a_stopping_rule_without_the_elbo_it_reads_is_refused():
    with pytest.raises(CemDataError, match="tol: the stopping rule reads the per-epoch ELBO"):
        DRIVERS["svi"].run(BetaBernoulli(), {"x": X}, epochs=3, tol=1e-3, evaluate=False)


@pytest.mark.parametrize("method, option", [("svi", "sample_globals"), ("ssvi-a", "apply_v"),
                                            ("ssvi", "sample_globals")])
def test_the_registry_refuses_options_that_would_change_the_method(method, option):
    with pytest.raises(CemDataError, match="the method decides this"):
        DRIVERS[method].run(NormalMean(), {"x": NORMAL_X}, epochs=1, **{option: False})


def test_a_keyword_the_method_does_not_take_is_refused_with_its_options():
    """As the stochastic driver does: the method named and every option it takes listed (it
    was Python's bare 'fit() got an unexpected keyword argument')."""
    with pytest.raises(TypeError, match=r"epochs for method 'mf'; its options: hypers, dims, "
                                        r"max_iter"):
        DRIVERS["mf"].run(LatentCoin(), COIN_DATA, epochs=3)
    with pytest.raises(TypeError, match=r"max_iter; the options of a stochastic fit"):
        DRIVERS["svi"].run(LatentCoin(), COIN_DATA, max_iter=3)
