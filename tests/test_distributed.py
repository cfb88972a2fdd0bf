"""cemodel.distributed: the local step on Dask workers over partitions of the data plate.

The distributed fit follows the single-process trajectory (the same iterations, minibatches
and steps; only the order in which the items' statistics are added differs), survives a
worker killed in the middle of a task, and sends each worker the model and data once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

distributed = pytest.importorskip("distributed")

from cemodel import distributed as cd  # noqa: E402
from cemodel.api import Model  # noqa: E402
from cemodel.errors import CemError  # noqa: E402
from cemodel.runtime.drivers import DRIVERS  # noqa: E402

RTOL = 1e-8


def _corpus(seed: int = 0, D: int = 40) -> sparse.csr_matrix:
    """Three topics over disjoint blocks of 10 words (plus a little noise), 20 tokens a doc."""
    rng = np.random.default_rng(seed)
    topics = np.full((3, 30), 0.002)
    for k in range(3):
        topics[k, 10 * k:10 * (k + 1)] = 1.0
    topics /= topics.sum(axis=1, keepdims=True)
    theta = rng.dirichlet(np.full(3, 0.2), D)
    return sparse.csr_matrix(np.stack([rng.multinomial(20, t @ topics) for t in theta]))


def _points(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = ([0, 0], [4, 0], [0, 4])
    return np.concatenate([rng.normal(c, 0.7, (67, 2)) for c in centres])[:200]


@pytest.fixture(scope="module")
def client():
    """Two single-threaded worker processes (they inherit CEMODEL_CACHE from conftest)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0",
                                  env={"NUMBA_NUM_THREADS": "1"}) as cluster, \
            distributed.Client(cluster) as dask_client:
        yield dask_client


@pytest.fixture(scope="module")
def lda():
    return Model("lda")


@pytest.fixture(scope="module")
def gmm():
    return Model("gmm")


def _assert_same(got, expected, rtol: float = RTOL) -> None:
    assert got.iterations == expected.iterations
    np.testing.assert_allclose(got.elbo, expected.elbo, rtol=rtol, atol=0)
    assert got.posterior.keys() == expected.posterior.keys()
    for key, value in expected.posterior.items():
        np.testing.assert_allclose(got[key], value, rtol=rtol, atol=1e-12, err_msg=key)


LDA = {"dims": {"K": 3}, "seed": 1}


@pytest.mark.parametrize("options", [
    {"max_iter": 40},
    # warm starts read each document's previous q(theta); empirical Bayes reads them all
    {"max_iter": 15, "tol": 0.0, "warm_start": True, "learn": ("alpha",)},
], ids=["restart-guard", "warm-start-learn"])
def test_lda_mf_matches_one_process(client, lda, options):
    data = {"w": _corpus()}
    expected = lda.module.fit(data, **LDA, **options)
    got = cd.fit(lda, data, client=client, **LDA, **options)
    _assert_same(got, expected)
    assert got.hypers["alpha"] == pytest.approx(expected.hypers["alpha"], rel=RTOL)
    # the workers' sweep counts come back (written there, not sent): the same per iteration
    assert got.notes["local_sweeps"] == expected.notes["local_sweeps"]
    assert len(got.notes["local_sweeps"]) == got.iterations
    # one task per partition and local step; each worker set up at most once
    assert got.notes["dask_tasks"] == 2 * got.iterations
    assert 1 <= got.notes["dask_worker_setups"] <= 2


def test_gmm_mf_matches_one_process(client, gmm):
    data = {"x": _points()}
    options = {"dims": {"K": 3}, "seed": 2, "max_iter": 60}  # k-means++ seeds, on the client
    expected = gmm.module.fit(data, **options)
    got = cd.fit(gmm, data, client=client, **options)
    assert expected.converged and got.converged
    _assert_same(got, expected)


def test_pmf_statistics_kept_per_rating_add_up_over_partitions(client):
    """PMF's rating statistics are kept per rating: each partition returns its own ratings'
    rows (zero elsewhere) and the client adds them, as it adds the keyed ones."""
    pmf = Model("pmf", K=2)
    rng = np.random.default_rng(3)
    data = {"user": rng.integers(0, 10, 120), "item": rng.integers(0, 8, 120),
            "y": rng.normal(size=120)}
    for method, options in (("mf", {"max_iter": 20}), ("svi", {"epochs": 2, "batch_size": 30})):
        expected = pmf.fit(data, method, seed=4, **options)
        got = cd.fit(pmf, data, method=method, client=client, seed=4, **options)
        _assert_same(got, expected)


@pytest.mark.parametrize("method, options", [
    ("svi", {}),
    ("svi+", {"effective_batch_size": 5}),  # per-item weights from the client's noise stream
    ("ssvi-a", {}),  # globals sampled on the client, the draws sent
    ("ssvi", {}),
])
def test_lda_stochastic_methods_follow_the_one_process_trajectory(client, lda, method,
                                                                   options):
    data = {"w": _corpus()}
    options = {**LDA, "epochs": 3, "batch_size": 8, **options}
    expected = DRIVERS[method].run(lda.module, data, **options)
    got = cd.fit(lda, data, method=method, client=client, **options)
    _assert_same(got, expected)
    # 5 minibatch steps and one full-data evaluation per epoch, each split in at most 2 tasks;
    # SSVI-A (a small data set: averaged iterates) evaluates the average once more
    more = 1 if "averaged_steps" in got.notes else 0
    assert 3 * 6 + more <= got.notes["dask_tasks"] <= 2 * (3 * 6 + more)


def test_gmm_svi_with_the_default_client(client, gmm):
    data = {"x": _points()}
    options = {"dims": {"K": 3}, "seed": 3, "epochs": 4, "batch_size": 50}
    expected = gmm.module.fit_svi(data, **options)
    got = cd.fit(gmm, data, method="svi", **options)  # client=None: the fixture's is default
    _assert_same(got, expected)


def test_workers_compile_once_and_steps_carry_no_data(client, lda, monkeypatch):
    assert set(client.run(os.environ.get, "CEMODEL_CACHE").values()) == {
        os.environ["CEMODEL_CACHE"]}  # the workers reuse the kernels compiled here
    sent: list[tuple] = []
    submit = client.submit

    def recording(fn, *args, **kwargs):
        if fn is cd._local_task:
            sent.append(args)
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(client, "submit", recording)
    data = {"w": _corpus()}
    got = cd.fit(lda, data, client=client, max_iter=10, tol=0.0, **LDA)
    assert got.notes["dask_tasks"] == len(sent) == 20
    assert got.notes["dask_worker_setups"] <= 2  # compiled and bound once per worker, not per task
    setups = {id(args[0]) for args in sent}
    assert len(setups) == 1 and isinstance(sent[0][0], distributed.Future)  # sent once
    data_names = {"w", "tokens_ptr", "tokens_weight"}
    for _setup, items, flags, scalars_and_globals, rows, outputs in sent:
        assert set(flags) == {"max_local_iter", "local_tol", "seeding", "warm", "guard",
                              "evaluate", "accelerate"}
        assert not data_names & (scalars_and_globals.keys() | rows.keys())
        arrays = {k for k, v in scalars_and_globals.items() if isinstance(v, np.ndarray)}
        assert arrays == {"E_beta_log", "XT_beta_log", "ET_beta_log"}
        assert rows.keys() == {"lam_theta_log", "E_theta_log", "X_theta_log", "item_weight",
                               "seed_category"}
        assert all(len(v) == len(items) == 20 for v in rows.values())
        assert outputs == ["acc_w_0"]
    # the workers dropped the fit's copies
    assert set(client.run(lambda: len(cd._WORKER_FITS)).values()) == {0}


class _KillOnce(distributed.WorkerPlugin):
    """Kills its worker (SIGKILL) as the `nth` task whose key starts with `prefix` that it
    runs enters `state`, once per cluster (the marker file)."""

    name = "cemodel-kill-once"

    def __init__(self, marker: str, prefix: str, state: str, nth: int) -> None:
        self.marker, self.prefix, self.state, self.nth = marker, prefix, state, nth
        self.seen = 0

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish != self.state or not str(key).startswith(self.prefix):
            return
        self.seen += 1
        if self.seen == self.nth:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("prefix, state, nth", [
    ("cemodel-local", "executing", 4),  # in the middle of a local step: the task is lost
    ("cemodel-setup", "memory", 1),  # holding the only copy of the model and data
])
def test_a_killed_worker_changes_nothing(client, lda, tmp_path: Path, prefix, state, nth):
    data = {"w": _corpus(1)}
    options = {**LDA, "max_iter": 12, "tol": 0.0}
    undisturbed = cd.fit(lda, data, client=client, **options)
    before = set(client.run(os.getpid).values())
    marker = tmp_path / "killed"
    client.register_plugin(_KillOnce(str(marker), prefix, state, nth), name=_KillOnce.name)
    try:
        got = cd.fit(lda, data, client=client, **options)
    finally:
        client.unregister_worker_plugin(_KillOnce.name)
    assert marker.exists()
    client.wait_for_workers(2, timeout=60)
    assert len(before - set(client.run(os.getpid).values())) == 1  # a worker was replaced
    # the lost work was recomputed from the same inputs: the same numbers, bit for bit
    np.testing.assert_array_equal(got.elbo, undisturbed.elbo)
    for key, value in undisturbed.posterior.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    _assert_same(got, lda.module.fit(data, **options))


def test_local_cluster_by_name(gmm):
    data = {"x": _points(4)}
    options = {"dims": {"K": 3}, "seed": 0, "max_iter": 20}
    got = cd.fit("gmm", data, client="local:1", **options)
    _assert_same(got, gmm.module.fit(data, **options))
    assert got.notes["dask_partitions"] == 1 and got.notes["dask_worker_setups"] == 1


@pytest.mark.parametrize("call, message", [
    ({"method": "klc"}, "method 'klc' is not distributed"),
    ({"local": "gibbs"}, "local step 'gibbs' is not distributed"),
    ({"local": "cvb0"}, "local step 'cvb0' is not distributed"),
    ({"local": "exact"}, "local step 'exact' does not apply"),
    ({"method": "svi+"}, "needs effective_batch_size"),
    ({"client": "local:0"}, "expected local:N with N >= 1"),
    ({"client": 3}, "expected a Client, an address or 'local:N'"),
    ({"partitions": 0}, "partitions: expected a whole number >= 1"),
    ({"settings": {"K": 2}}, "settings: give them to Model"),
])
def test_refusals_say_why(client, lda, call, message):
    call = {"client": client, **call}
    with pytest.raises(CemError, match=message):
        cd.fit(lda, {"w": _corpus()}, **call)


NO_DATA_PLATE = ("model h\ndim G\ndim N\nplate groups g in G:\n    theta[g] ~ Normal(0, 1)\n"
                 "plate observations n in N:\n    data group[n] : int\n"
                 "    observe y[n] ~ Normal(theta[group[n]], 1)\nobserve q ~ Normal(0, 1)\n")


def test_a_model_without_a_data_plate_is_refused(client, tmp_path: Path):
    path = tmp_path / "h.cem"
    path.write_text(NO_DATA_PLATE)
    with pytest.raises(CemError, match="no data plate, so there is no local step"):
        cd.fit(path, {"y": np.zeros(3), "group": np.zeros(3, int), "q": 0.0}, client=client)
