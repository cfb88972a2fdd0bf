"""Batch MF from several random starts (``starts``, ``trial_iter``): the drivers' side, on
tests/test_drivers.py's plain-numpy fake models (no generated module, no numba)."""

from __future__ import annotations

import numpy as np
import pytest

from cemodel.errors import CemDataError
from cemodel.runtime import State
from cemodel.runtime.drivers import DRIVERS
from tests.test_drivers import COIN_DATA, EXACT_STATE, LatentCoin, _assert_same_fit


class RandomCoin(LatentCoin):
    """LatentCoin from a random start: q(p) drawn from ``seed`` (as a generated module's
    'random' start draws pseudo-counts), so that starts differ."""

    DEFAULT_START = "random"

    def _prepare(self, data, hypers, dims, seed, init, start, max_local_iter, local_tol,
                 share=None) -> State:
        if start not in (None, "random"):
            raise CemDataError(f"the fake starts at random, found {start!r}")
        s = super()._prepare(data, hypers, dims, seed, init, None, max_local_iter, local_tol)
        rng = np.random.default_rng(seed)
        s.lam_p_log[...], s.lam_p_log1m[...] = 20.0 * rng.random(2)
        self.refresh(s)
        return s


def test_mf_with_several_starts_continues_the_best_trial():
    """The kept trial's fit is the single-start fit from its seed, iteration for iteration;
    it is the trial with the highest ELBO; the first trial is ``seed``'s own start."""
    result = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=6, tol=0.0, seed=4,
                               starts=4, trial_iter=1)
    trials = result.notes["starts"]
    assert [t["seed"] for t in trials][0] == 4 and len({t["seed"] for t in trials}) == 4
    assert [t["iterations"] for t in trials] == [1] * 4
    kept = [t for t in trials if t["kept"]]
    assert len(kept) == 1 and kept[0]["elbo"] == max(t["elbo"] for t in trials)
    assert len({t["elbo"] for t in trials}) == 4  # the starts differ
    alone = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=6, tol=0.0,
                              seed=kept[0]["seed"])
    assert result.iterations == 6
    _assert_same_fit(result, alone)
    for trial in trials:  # each trial's ELBO is its own start's first iteration
        single = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=1, tol=0.0,
                                   seed=trial["seed"])
        assert single.elbo[0] == trial["elbo"]


def test_mf_with_several_starts_counts_every_trial_and_reports_the_kept_run():
    seen, scored = [], []
    result = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=5, tol=0.0, starts=3,
                               trial_iter=2, callback=lambda i, e, t: seen.append(i),
                               on_iteration=lambda i, r: scored.append((i, r.iterations)))
    assert seen == [0, 1, 0, 1, 0, 1, 2, 3, 4]  # every trial's iterations, then the kept run's
    assert scored == [(2, 3), (3, 4), (4, 5)]  # the kept run from the choice on
    assert result.iterations == 5 and len(result.notes["starts"]) == 3
    single = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=5, tol=0.0, starts=1)
    assert "starts" not in single.notes


@pytest.mark.parametrize("options, message", [
    ({"starts": 2, "trial_iter": 2, "init": EXACT_STATE}, "init= gives the one start"),
    ({"starts": 2, "trial_iter": 5}, r"trial_iter \(5\) must be below max_iter \(5\)"),
    ({"trial_iter": 2}, "trial_iter sets the iterations of each of several starts"),
    ({"starts": 0}, "starts"),
    ({"starts": 2, "trial_iter": 0}, "trial_iter"),
])
def test_mf_several_starts_refused_where_they_cannot_differ_or_continue(options, message):
    with pytest.raises(CemDataError, match=message):
        DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=5, **options)


def test_mf_several_starts_refused_from_the_prior_start():
    model = LatentCoin()
    model.DEFAULT_START = "prior"
    with pytest.raises(CemDataError, match="start 'prior' is the same for every seed"):
        DRIVERS["mf"].run(model, COIN_DATA, starts=3)


def test_mf_with_several_starts_resumed_continues_the_kept_start(tmp_path):
    """A checkpoint holds the kept start's trajectory: resuming runs no trials again, and a
    resume with other starts is refused."""
    path = tmp_path / "mf.npz"
    options = {"tol": 0.0, "starts": 3, "trial_iter": 2, "seed": 1}
    whole = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=6, **options)
    DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=4, checkpoint=path, **options)
    resumed = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=6, resume=path, **options)
    assert "starts" not in resumed.notes and resumed.iterations == 6
    _assert_same_fit(resumed, whole)
    with pytest.raises(CemDataError, match="starts 3 there, 2 here"):
        DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=6, resume=path,
                          **{**options, "starts": 2})


class LearningCoin(RandomCoin):
    """RandomCoin with a hyperparameter to learn: each ``_learn`` call is recorded (and moves
    a, so that a second call per iteration would change the trace)."""

    LEARNABLE = ("a",)

    def __init__(self) -> None:
        super().__init__()
        self.learned: list[int] = []

    def _learn(self, s: State, learn, rho: float = 1.0, items=None) -> None:
        self.learned.append(len(self.visits))
        s.a = 0.5 * (s.a + 1.0 + s.E_p_log[0] ** 2)


def test_mf_learns_once_per_iteration_and_several_starts_keep_the_single_trace():
    """Empirical Bayes ran twice per iteration in the MF loop (once in the loop, once in its
    step) and once in a trial, so the kept run's trace left the single fit's. (The fake's
    update of a is no empirical-Bayes step: the ELBO may fall, so that is not checked.)"""
    plain_model = LearningCoin()
    plain = DRIVERS["mf"].run(plain_model, COIN_DATA, max_iter=5, tol=0.0, learn=("a",),
                               warn_decrease=False)
    assert len(plain_model.learned) == 4  # before every iteration but the first
    several = DRIVERS["mf"].run(LearningCoin(), COIN_DATA, max_iter=5, tol=0.0,
                                learn=("a",), starts=3, trial_iter=2, warn_decrease=False)
    kept = next(t for t in several.notes["starts"] if t["kept"])
    alone = DRIVERS["mf"].run(LearningCoin(), COIN_DATA, max_iter=5, tol=0.0, learn=("a",),
                              seed=kept["seed"], warn_decrease=False)
    _assert_same_fit(several, alone)
    assert plain.iterations == 5


def test_a_trial_that_converges_still_leaves_a_checkpoint(tmp_path):
    path = tmp_path / "mf.npz"
    result = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=50, tol=1e-3, starts=3,
                               trial_iter=40, checkpoint=path)
    assert result.converged and result.iterations < 40 and path.is_file()
    resumed = DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=50, tol=1e-3, starts=3,
                                trial_iter=40, resume=path)
    _assert_same_fit(resumed, result)


def test_a_resume_with_one_start_of_a_fit_with_several_is_refused(tmp_path):
    path = tmp_path / "mf.npz"
    DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=4, tol=0.0, starts=3, trial_iter=2,
                      checkpoint=path)
    with pytest.raises(CemDataError, match="starts 3 there, 1 here"):
        DRIVERS["mf"].run(RandomCoin(), COIN_DATA, max_iter=6, tol=0.0, resume=path)
