"""Statistics kept per data entry (``plan.Accumulator.entries``).

A factor whose statistics are keyed by two observed indices (PMF's rating of user u and
item i) would need a users × items array, and every global update would contract over all of
it. The plan keeps those statistics per entry instead, and the kernels that read them bind the
indices from the data: one loop over the ratings, scattered into the rows they reach."""

from __future__ import annotations

import numpy as np
import pytest

from cemodel.api import Model
from cemodel.compiler import read_source, run_stages


@pytest.fixture(scope="module")
def pmf():
    return Model("pmf", K=2)


def _ratings(seed: int, users: int, items: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    user, item = rng.integers(0, users, n), rng.integers(0, items, n)
    truth_u, truth_v = rng.normal(size=(users, 2)), rng.normal(size=(items, 2))
    y = np.einsum("nk,nk->n", truth_u[user], truth_v[item]) + 0.3 * rng.normal(size=n)
    return {"y": y, "user": user, "item": item}


def _plan(name: str):
    text, filename = read_source(f"stdlib_models/{name}.cem")
    return run_stages(text, filename, {}, None).plan


def test_two_observed_indices_are_kept_per_entry_one_stays_a_key():
    pmf = {a.name: a for a in _plan("pmf").stored_accumulators}
    assert pmf["acc_y_2"].entries == ("$g0", "$g1") and pmf["acc_y_2"].key == ()
    assert pmf["acc_y_2"].plates == ("ratings",)
    assert not pmf["acc_y_0"].per_entry  # Σ present(y): no index at all
    # LDA's word counts are keyed by one observed index (the word) and a topic: kept by key
    assert not any(a.per_entry for a in _plan("lda").stored_accumulators)


def test_pmf_mean_field_fixed_point_is_the_closed_form_of_each_factor(pmf):
    """At MF's fixed point each q is its closed-form update given the others, computed here in
    numpy from the ratings (independently of the generated scatter loops)."""
    data = _ratings(0, users=7, items=5, n=80)
    fit = pmf.fit(data, "mf", seed=1, max_iter=3000, tol=0.0)
    p = fit.posterior
    user, item, y, c = data["user"], data["item"], data["y"], 1.0
    Etau = p["tau.shape"] / p["tau.rate"]
    for rows, other, index_rows, index_other in (("u", "v", user, item), ("v", "u", item, user)):
        Ev, Evv = p[f"E[value {other}]"], p[f"E[outer {other}]"]
        for r in range(p[f"{rows}.mean"].shape[0]):
            mine = index_rows == r
            precision = c * np.eye(2) + Etau * Evv[index_other[mine]].sum(axis=0)
            shift = Etau * (y[mine, None] * Ev[index_other[mine]]).sum(axis=0)
            np.testing.assert_allclose(p[f"{rows}.precision"][r], precision, rtol=1e-8)
            np.testing.assert_allclose(p[f"{rows}.mean"][r], np.linalg.solve(precision, shift),
                                       rtol=1e-7, atol=1e-10)
    # q(tau): shape a0 + N/2, rate b0 + ½ Σ E[(y − uᵀv)²]
    Eu, Euu = p["E[value u]"][user], p["E[outer u]"][user]
    Ev, Evv = p["E[value v]"][item], p["E[outer v]"][item]
    sq = y**2 - 2 * y * np.einsum("nk,nk->n", Eu, Ev) + np.einsum("nij,nij->n", Euu, Evv)
    assert p["tau.shape"] == pytest.approx(1.0 + len(y) / 2, rel=1e-12)
    assert p["tau.rate"] == pytest.approx(1.0 + sq.sum() / 2, rel=1e-8)


def test_a_huge_users_by_items_grid_costs_only_its_ratings(pmf):
    """200,000 users × 100,000 items would be 160 GB per users × items array (refused by the
    memory check before): per entry it is 60 ratings."""
    data = _ratings(2, users=40, items=30, n=60)
    fit = pmf.fit(data, "mf", seed=0, max_iter=3, dims={"U": 200_000, "I": 100_000})
    assert fit.posterior["u.mean"].shape == (200_000, 2)
    assert np.all(np.diff(fit.elbo) >= -1e-9 * np.abs(fit.elbo[1:]))


TAGGED = """
model tagged
dim V
dim T
dim D
dim L[D]
plate words v in V:
    lw[v] ~ Gamma(1.0, 1.0)
plate tags t in T:
    lt[t] ~ Gamma(1.0, 1.0)
plate docs d in D:
    plate tokens n in L[d]:
        data word[d, n] : int
        data tag[d, n] : int
        observe c[d, n] ~ Poisson(lw[word[d, n]] * lt[tag[d, n]])
"""


def test_entries_of_a_ragged_plate_are_its_flat_tokens(tmp_path):
    """Two observed indices per token of a document: the statistics are kept per token (the
    ragged plate's flat index), and MF's fixed point is each Gamma's closed form."""
    path = tmp_path / "tagged.cem"
    path.write_text(TAGGED)
    model = Model(path)
    assert model.module.ROLES["entry_statistic"] == ("acc_c_2",)
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 8, 30)
    word = [rng.integers(0, 9, n) for n in lengths]
    tag = [rng.integers(0, 4, n) for n in lengths]
    count = [rng.poisson(2.0, n).astype(float) for n in lengths]
    fit = model.fit({"word": word, "tag": tag, "c": count}, "mf", max_iter=3000, tol=0.0)
    p = fit.posterior
    w, t, c = np.concatenate(word), np.concatenate(tag), np.concatenate(count)
    E_lw, E_lt = p["lw.shape"] / p["lw.rate"], p["lt.shape"] / p["lt.rate"]
    # the rates converge slowly (lw·lt has a scale only the priors pin): a wrong index or a
    # token counted twice would be off by O(1)
    np.testing.assert_allclose(p["lw.shape"], 1.0 + np.bincount(w, c, 9), rtol=1e-12)
    np.testing.assert_allclose(p["lw.rate"], 1.0 + np.bincount(w, E_lt[t], 9), rtol=1e-6)
    np.testing.assert_allclose(p["lt.rate"], 1.0 + np.bincount(t, E_lw[w], 4), rtol=1e-6)
