"""SVI's lazy step (``runtime.drivers.lazy``): a Dirichlet global over the categories of
observed data moved only at the minibatch's categories.

The lazy step is SVI's step, computed differently: every test here compares it with the
eager step (every entry moved at every step) on the same model, data and seed, and would
fail if a column were caught up with the wrong decay, a row total drifted, or a statistic
were left non-zero for the next step."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from cemodel.codegen.context import emit_context
from cemodel.codegen.lazy import lazy_columns
from cemodel.codegen.lowering import lower
from cemodel.compiler import compile_model, read_source, run_stages
from cemodel.runtime import lazy as kernels
from cemodel.runtime.drivers import lazy, svi
from cemodel.runtime.special import digamma

CATEGORICAL_MIXTURE = """model catmix
dim K = 3
dim V
dim N
hyper eta = 0.5
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    phi[k] ~ Dirichlet(eta, V)
plate items n in N:
    z[n] ~ Categorical(pi)
    observe x[n] ~ Categorical(phi[z[n]])
"""


# the observed categories x also index another global (mu[x[n], z[n]]): the local step reads
# E[mu] at x, so it must see the categories as they are (not renumbered, ``alone``)
READ_ELSEWHERE = CATEGORICAL_MIXTURE.replace("model catmix", "model readx").replace(
    "plate items n in N:", """plate cats v in V:
    plate kinds k in K:
        mu[v, k] ~ Normal(0.0, 1.0)
plate items n in N:""") + "    observe y[n] ~ Normal(mu[x[n], z[n]], 1.0)\n"


def _layout(path: str) -> dict:
    text, filename = read_source(path)
    plan = run_stages(text, filename, {}, None).plan
    ctx = emit_context(plan, lower(plan))
    return {name: lazy_columns(ctx, name) for name in plan.globals}


def test_the_rule_takes_dirichlets_over_observed_categories_only():
    lda = _layout("stdlib_models/lda.cem")["beta"]
    assert (lda.size, lda.index, lda.pointer, lda.statistics) == (
        "n_V", "w", "tokens_ptr", (("acc_w_0", 0),))
    assert lda.transposed == ("ET_beta_log", "XT_beta_log")
    mixture = _layout("stdlib_models/mixture_of_multinomials.cem")
    # phi's categories are the observed words; pi's are the latent class: every entry moves
    assert mixture["phi"] is not None and mixture["pi"] is None
    hmm = _layout("stdlib_models/hmm.cem")
    assert hmm["phi"] is not None and hmm["A"] is None and hmm["pi0"] is None
    assert all(v is None for v in _layout("stdlib_models/gmm.cem").values())


def _data(kind: str, rng: np.random.Generator, V: int) -> dict:
    if kind == "ragged":
        return {"w": [rng.integers(0, V, size=rng.integers(1, 12)) for _ in range(200)]}
    if kind == "sequences":
        return {"x": [rng.integers(0, V, size=rng.integers(2, 15)) for _ in range(80)]}
    x = rng.integers(0, V, size=600)
    if kind == "dense and read":
        return {"x": x, "y": rng.normal(x / 10.0, 1.0)}
    return {"x": x}


def _module(name: str, compiled, tmp_path):
    if name not in ("catmix", "readx"):
        return compiled(name)
    path = tmp_path / f"{name}.cem"
    path.write_text(CATEGORICAL_MIXTURE if name == "catmix" else READ_ELSEWHERE)
    return compile_model(path)


def _with_layout(module, **changes):
    """The module's globals with each lazy layout changed (e.g. a path the rule did not
    choose for it)."""
    return tuple(g if g.lazy is None else dataclasses.replace(
        g, lazy=dataclasses.replace(g.lazy, **changes)) for g in module.GLOBALS)


@pytest.mark.parametrize("name, kind, layout", [
    ("lda", "ragged", {}), ("hmm", "sequences", {}), ("catmix", "dense", {}),
    ("readx", "dense and read", {}),
    # the paths the rule chose for none of them: the update kernel on the compact statistics
    # (not direct), and the full-size arrays (not alone)
    ("lda", "ragged", {"direct": False}), ("lda", "ragged", {"alone": False}),
    ("hmm", "sequences", {"alone": False, "direct": False})])
def test_lazy_steps_follow_the_eager_steps(name, kind, layout, compiled, tmp_path,
                                           monkeypatch):
    """LDA (ragged tokens), an HMM (eager transition globals beside the lazy emissions), a
    mixture of categoricals written here (one category per item) and one whose categories
    index another global too: traces and posteriors equal to round-off, with the
    minibatch's N ramped and with the decay renormalised every few steps (a long fit's
    path)."""
    module = _module(name, compiled, tmp_path)
    assert any(g.lazy is not None for g in module.GLOBALS)
    monkeypatch.setattr(module, "GLOBALS", _with_layout(module, **layout))
    V = 40
    data = _data(kind, np.random.default_rng(0), V)
    eager = tuple(dataclasses.replace(g, lazy=None) for g in module.GLOBALS)

    def fits():
        return [module.fit_svi(data, dims={"V": V}, epochs=3, batch_size=16, seed=seed, **kw)
                for seed, kw in ((1, {}), (2, {"ramp": True, "kappa": 0.5, "tau": 1.0}))]

    lazy_fits = fits()
    monkeypatch.setattr(lazy, "_SMALLEST_SCALE", -2.0)
    renormalised = fits()
    monkeypatch.setattr(module, "GLOBALS", eager)
    eager_fits = fits()
    for fit in (*lazy_fits, *renormalised):
        assert fit.iterations == 3
    for mine, theirs in zip(lazy_fits + renormalised, eager_fits + eager_fits, strict=True):
        np.testing.assert_allclose(mine.elbo, theirs.elbo, rtol=1e-11)
        for key, value in theirs.posterior.items():
            np.testing.assert_allclose(mine.posterior[key], value, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("local", ["gibbs", "cvb0"])
def test_collapsed_local_steps_run_on_the_compact_arrays(local, compiled, monkeypatch):
    """The collapsed E-steps read the renumbered words and write the compact statistics like
    the mean-field one: the same fit as the eager step's."""
    module = compiled("lda")
    data = _data("ragged", np.random.default_rng(2), 40)

    def fit():
        return module.fit_svi(data, dims={"V": 40}, epochs=3, batch_size=16, seed=1,
                              local=local)

    lazy_fit = fit()
    monkeypatch.setattr(module, "GLOBALS",
                        tuple(dataclasses.replace(g, lazy=None) for g in module.GLOBALS))
    eager_fit = fit()
    np.testing.assert_allclose(lazy_fit.elbo, eager_fit.elbo, rtol=1e-11)
    np.testing.assert_allclose(lazy_fit["beta.alpha"], eager_fit["beta.alpha"], rtol=1e-9)


def test_lazy_step_is_chosen_for_plain_svi_only(compiled):
    module = compiled("lda")
    data = _data("ragged", np.random.default_rng(1), 30)

    def begun(**options):
        run = svi.begin(module, data, dims={"V": 30}, epochs=1, batch_size=8, **options)
        first = run.o.step_scale * (run.step + run.o.tau) ** (-run.o.kappa)
        return lazy.applies(module, run.o, first)

    assert begun()
    assert begun(local="gibbs")
    assert not begun(effective_batch_size=4)  # SVI+: the noise reaches every entry
    assert not begun(sample_globals=True)  # SSVI-A draws the whole global
    assert not begun(learning_rate="adaptive")
    assert not begun(learn=("eta",))  # the prior P itself moves
    assert not begun(step_scale=20.0)  # ρ_1 ≥ 1: nothing to defer


def test_column_kernels_match_eager_blends_over_many_steps():
    """The kernels alone, against the eager recursion in numpy: random column sets, a
    shared prior row, and E[log β] at the visited columns from the running row totals."""
    rng = np.random.default_rng(3)
    rows, V, prior_value = 4, 25, -0.5
    lam = rng.gamma(2.0, 1.0, (rows, V)) + prior_value
    eager = lam.copy()
    state = lazy.LazyGlobal(
        None, np.ascontiguousarray(lam.T), np.full((V, 1), prior_value),
        np.full(rows, V * (prior_value + 1.0)), (lam - prior_value).sum(axis=1),
        np.zeros(V), np.zeros(V, dtype=np.bool_))
    scale = 0.0
    E = np.zeros((rows, V))
    for t in range(1, 60):
        rho = (t + 2.0) ** -0.6
        columns = np.unique(rng.integers(0, V, size=6))
        n = columns.size
        caught_up, ET, E_columns = np.empty((n, rows)), np.empty((n, rows)), np.empty((rows, n))
        kernels.dirichlet_compact(state.lt, state.prior, state.last, scale, state.total_prior,
                                  state.excess, columns, caught_up, ET, ET[:0], E_columns, ET,
                                  True, False, False)
        kernels.scatter_columns(columns, ET, ET[:0], E_columns, ET, E, E, E, E, True, False,
                                False)
        totals = (eager + 1.0).sum(axis=1)
        expected = np.array([[digamma(eager[r, v] + 1.0) - digamma(totals[r])
                              for v in columns] for r in range(rows)])
        np.testing.assert_allclose(E[:, columns], expected, rtol=1e-12, atol=1e-12)
        hat = np.full((rows, V), prior_value)
        hat[:, columns] += rng.gamma(1.0, 3.0, (rows, columns.size))
        eager = (1.0 - rho) * eager + rho * hat
        assert kernels.blend_columns(state.lt, caught_up, np.ascontiguousarray(hat[:, columns]),
                                     state.prior, state.excess, columns, rho, -1.0, False, 1.0)
        scale += math.log1p(-rho)
        state.last[columns] = scale
        np.testing.assert_allclose(state.excess, (eager - prior_value).sum(axis=1), rtol=1e-12)
    kernels.catch_up(state.lt, state.prior, state.last, scale, np.arange(V))
    np.testing.assert_allclose(state.lt.T, eager, rtol=1e-12)


@pytest.mark.parametrize("bad", [-5.0, np.nan])
def test_a_step_leaving_the_domain_is_refused(bad):
    lt = np.full((3, 2), 0.5)
    hat = np.array([[0.0, bad], [0.0, 0.0]])
    caught_up = np.full((2, 2), 0.5)  # lt's rows 0 and 2
    assert not kernels.blend_columns(lt, caught_up, hat, np.zeros((3, 1)), np.zeros(2),
                                     np.array([0, 2]), 0.5, -1.0, False, 1.0)
    # the compact statistic S of a direct global, λ̂ = P + data_scale · S
    S = np.array([[0.0, 0.0], [bad, 0.0]])
    assert not kernels.blend_columns(lt, caught_up, S, np.zeros((3, 1)), np.zeros(2),
                                     np.array([0, 2]), 0.5, -1.0, True, 1.0)


def test_column_sets_of_ragged_and_dense_items():
    mark = np.zeros(10, dtype=np.bool_)
    values = np.array([3, 1, 3, 9, 0, 12, -1, 4])
    pointer = np.array([0, 3, 4, 8])
    assert kernels.ragged_columns(values, pointer, np.array([0, 2]), mark).tolist() == [0, 1, 3, 4]
    assert not mark.any()
    assert kernels.dense_columns(np.array([[5, 5], [2, 11]]), mark).tolist() == [2, 5]


def test_shares_add_up_only_the_minibatchs_categories(compiled, monkeypatch):
    """Two shares (as on two cores): their copies of the word counts are added up and zeroed
    at the minibatch's words only (``rt.shares.only_rows``); a word left non-zero in a copy
    would be counted again at the next step, one missed would be lost."""
    from cemodel.runtime import driver

    monkeypatch.setattr(driver, "thread_count", lambda: 2)
    monkeypatch.setattr(driver, "ENTRIES_PER_SHARE", 1)
    module = compiled("lda")
    data = _data("ragged", np.random.default_rng(4), 40)
    fit = module.fit_svi(data, dims={"V": 40}, epochs=3, batch_size=16, seed=5)
    monkeypatch.setattr(module, "GLOBALS",
                        tuple(dataclasses.replace(g, lazy=None) for g in module.GLOBALS))
    eager = module.fit_svi(data, dims={"V": 40}, epochs=3, batch_size=16, seed=5)
    np.testing.assert_allclose(fit.elbo, eager.elbo, rtol=1e-11)
    np.testing.assert_allclose(fit["beta.alpha"], eager["beta.alpha"], rtol=1e-9)


def test_compact_arrays_only_where_nothing_else_reads_the_categories(compiled, tmp_path):
    """The local step runs on the minibatch's categories renumbered (``alone``) unless
    another variable reads them: readx's y ~ Normal(mu[x[n], z[n]], 1) makes q(z) read E[mu]
    at x, and on renumbered categories it would read the wrong rows (the fit differs from
    the eager step's, which is why the rule refuses it). LDA's update is the one statistic
    plus the prior (``direct``)."""
    lda = {g.name: g.lazy for g in compiled("lda").GLOBALS}["beta"]
    assert lda.alone and lda.direct
    readx = _module("readx", compiled, tmp_path)
    phi = {g.name: g.lazy for g in readx.GLOBALS}["phi"]
    assert not phi.alone and phi.direct
    data = _data("dense and read", np.random.default_rng(0), 40)

    def fit(globals_):
        readx.GLOBALS = globals_
        return readx.fit_svi(data, dims={"V": 40}, epochs=2, batch_size=16, seed=1)

    compiled_globals, forced = readx.GLOBALS, _with_layout(readx, alone=True)
    try:
        eager = fit(tuple(dataclasses.replace(g, lazy=None) for g in compiled_globals))
        wrong = fit(forced)
    finally:
        readx.GLOBALS = compiled_globals
    assert abs(wrong.elbo[-1] - eager.elbo[-1]) > 1e-3 * abs(eager.elbo[-1])


def test_e_itself_is_left_to_settle_only_where_the_local_step_reads_its_copies(compiled):
    """LDA's local step reads E[log β] only through its transposed copies (a step then skips
    the row-major E, one cache line per visited entry); the HMM's reads E itself."""
    lda = {g.name: g.lazy for g in compiled("lda").GLOBALS}
    assert lda["beta"].transposed == ("ET_beta_log", "XT_beta_log")
    assert lda["beta"].expected is False
    assert {g.name: g.lazy for g in compiled("hmm").GLOBALS}["phi"].expected is True


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_rows_are_added_and_zeroed_along_any_axis(axis):
    """``add_rows`` / ``zero_rows`` touch exactly the given entries along ``axis``, whether the
    moved array has a 2-D view (axis 0, or a last axis) or not (a middle axis of three)."""
    rng = np.random.default_rng(3)
    total, part = rng.random((5, 6, 4)), rng.random((5, 6, 4))
    rows = np.array([0, 3])
    want_total, want_part = np.moveaxis(total.copy(), axis, 0), np.moveaxis(part.copy(), axis, 0)
    want_total[rows] += want_part[rows]
    want_part[rows] = 0.0
    kernels.add_rows(total, part, axis, rows)
    np.testing.assert_array_equal(np.moveaxis(total, axis, 0), want_total)
    np.testing.assert_array_equal(np.moveaxis(part, axis, 0), want_part)
    kernels.zero_rows(total, axis, rows)
    want_total[rows] = 0.0
    np.testing.assert_array_equal(np.moveaxis(total, axis, 0), want_total)
