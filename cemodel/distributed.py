"""Fit a model on a Dask cluster: the local step runs on the workers over partitions of the
data plate, the global step on the client.

    from cemodel.distributed import fit
    result = fit("stdlib_models/lda.cem", {"w": X}, method="svi", client="local:4",
                 dims={"K": 50}, epochs=5, batch_size=256)

How, and why this way:

* The client runs the method's driver itself (``cemodel.runtime.drivers.DRIVERS``): its random
  draws, step sizes, global updates, ELBO, stopping rule, callbacks, checkpoints and empirical
  Bayes, over the model interface of the generated module in which ``run_local_step`` is this
  layer's executor. Every method therefore follows the single-process trajectory; only the
  order in which the items' statistics are added changes (round-off).
* The executor splits the items of each call among P contiguous partitions of the data plate
  and submits one task per partition that has items. A task is a pure function of (the
  partition's items, the hyperparameters and the globals' expectations, the partition's rows
  of the per-item state) and returns the partition's sufficient statistics,
  its local ELBO terms and its new per-item rows, which the client adds up (in partition
  order) and writes back. Recomputing a task, on a worker that replaced a killed one or on a
  retry, gives the same answer, so nothing is lost or counted twice.
* Which array is which comes from the module's ``ROLES`` table. Per-item state (its
  ``kept_local`` arrays: LDA's q(theta[d]), a mixture's q(z[n]); its ``item`` arrays: the SVI+
  weights, the seed categories) travels with each task, instead of living on a worker: the restart
  guard and warm starts read an item's previous state, the client reads it for empirical
  Bayes, checkpoints and the result, and a recomputed task must start from the same state.
* The model (its source and settings), the data and the start of the globals go to the
  cluster once per fit, as the result of a task every local-step task depends on; each worker
  fetches it, compiles the module and binds the data on its first task (from numba's disk
  cache: ``local:N`` workers inherit ``CEMODEL_CACHE``) and keeps them until the fit ends.
  Later tasks carry only the arguments above.

Each worker holds all the data (bound once): the partitions split the work, not the memory.
The data (once) and each step's arguments pass through the scheduler inside the tasks rather
than as scattered data, which Dask cannot recompute: any worker may die at any time.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .api import Fit, Model
from .compiler import compile_stages, read_source, run_stages
from .errors import CemError, CemInternalError
from .options import check_options, check_workers
from .runtime.driver import FitResult, State, check_applies
from .runtime.drivers import DRIVERS
from .runtime.source import ItemSource

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["NOT_DISTRIBUTED", "fit"]

NOT_DISTRIBUTED = {
    "klc": "KLC-CG optimises q(Z) of all items jointly by conjugate gradients on the whole "
           "data set; it has no local step to partition",
    "gibbs": "its draws come from numba's per-process random stream, seeded once per epoch "
             "for all items, so they would depend on which worker ran which item",
    "cvb0": "its E-step is a kernel of its own (local_step_cvb0), which is not partitioned",
}


def fit(model: str | Path | Model, data: Mapping[str, Any], *, method: str = "mf",
        client: Client | str | None = None, settings: Mapping[str, float] | None = None,
        partitions: int | None = None, retries: int = 2, **options: Any) -> Fit:
    """Fit ``model`` to ``data`` with the local step on a Dask cluster.

    model: a .cem file (or a library name, as ``Model`` takes) compiled with ``settings``
    (``--set``), or a ``Model``.
    method: mf, svi, svi+, ssvi-a or ssvi (klc is refused with the reason); ``local`` (an
    option) mf or exact.
    client: a ``distributed.Client``, a scheduler address (``"tcp://host:8786"``),
    ``"local:N"`` (a cluster of N single-threaded worker processes for this fit), or None for
    the current default client.
    partitions: how many parts the data plate is split into (default: the cluster's
    threads); retries: how often a failed task is retried (a killed worker's tasks are
    recomputed by Dask regardless).
    options: as the generated function takes them (``max_iter``, ``tol``, ``epochs``,
    ``batch_size``, ``seed``, ``dims``, ``hypers``, ``learn``, ``callback``, ...).

    Returns the same ``Fit`` as ``Model.fit``; ``notes`` adds ``dask_partitions``,
    ``dask_tasks`` (tasks submitted) and ``dask_worker_setups`` (times a worker compiled the
    model and bound the data).
    """
    check_options(partitions=partitions, retries=retries)
    if not isinstance(model, Model):
        model = Model(model, **dict(settings or {}))
    elif settings:
        raise CemError("settings: give them to Model(...), or pass the model file")
    local = _check(model, method, options)
    if isinstance(data, ItemSource):
        raise CemError("out-of-core data (a stream from disk) does not run on Dask: every "
                       "worker binds the whole data set once", hint="load the data into memory")
    with _connect(client) as dask_client:
        distributor = _Distributor(dask_client, model, partitions, retries)
        try:
            result = distributor.run(method, data, options)
        finally:
            distributor.close()
    return Fit.of(result, method, local)


def _check(model: Model, method: str, options: dict[str, Any]) -> str:
    """The local step, after refusing what does not apply or is not distributed."""
    check_applies("method", method, model.methods)
    if method in NOT_DISTRIBUTED:
        raise CemError(f"method {method!r} is not distributed: {NOT_DISTRIBUTED[method]}")
    if model.data_plate is None:
        raise CemError("the model has no data plate, so there is no local step to distribute")
    local = options.get("local", "mf")
    check_applies("local step", local, model.local_steps)
    if local in NOT_DISTRIBUTED:
        raise CemError(f"local step {local!r} is not distributed: {NOT_DISTRIBUTED[local]}")
    annealed = options.get("effective_batch_size") is not None
    if method == "svi+" and not annealed:
        raise CemError("method 'svi+' needs effective_batch_size=M (1 ≤ M ≤ batch_size; "
                       "M = batch_size is SVI)")
    if method == "svi" and annealed:
        raise CemError("effective_batch_size turns SVI into SVI+", hint="method='svi+'")
    return local


@contextlib.contextmanager
def _connect(client: Client | str | None) -> Iterator[Client]:
    """The Dask client to use; one made here (and its cluster) is closed afterwards."""
    try:
        import dask
        from distributed import Client
    except ImportError:
        raise CemError("cemodel.distributed needs Dask",
                       hint='pip install "cemodel[dask]"') from None
    # the tasks carry the data and each step's arguments on purpose (see the module doc)
    quiet = dask.config.set({"distributed.admin.large-graph-warning-threshold": "1 PiB"})
    with quiet, contextlib.ExitStack() as owned:
        if isinstance(client, Client):
            yield client
        elif client is None:
            yield _default_client()
        elif isinstance(client, str) and client.startswith("local:"):
            yield owned.enter_context(_local_cluster(client))
        elif isinstance(client, str):
            yield owned.enter_context(_connect_to(Client, client))
        else:
            raise CemError(f"client: expected a Client, an address or 'local:N', found "
                           f"{client!r}")


# how long a scheduler may take to answer: Dask's own default is 30 s, and a wrong address on
# the command line should not cost that (Dask's setting, when shorter, is kept)
CONNECT_TIMEOUT = 5.0


def _connect_to(client_type: type, address: str) -> Client:
    """A client of the scheduler at ``address``; an address Dask cannot read, or a scheduler
    it cannot reach within a few seconds, is a clear error naming the address and why."""
    from dask.config import get as config
    from dask.utils import parse_timedelta

    timeout = min(CONNECT_TIMEOUT, parse_timedelta(config("distributed.comm.timeouts.connect"),
                                                   default="s"))
    try:
        _probe_tcp(address, timeout)
        return client_type(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError, MemoryError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, MemoryError):  # a frame length read from another protocol's bytes
            reason = "the server there answered, but not as a Dask scheduler"
        raise CemError(f"cannot reach the Dask scheduler at {address}: {reason}",
                       hint="check the address (tcp://host:8786) and that the scheduler is "
                            "running, or use a local cluster (--dask local:N, client='local:N')"
                       ) from None


def _probe_tcp(address: str, timeout: float) -> None:
    """For tcp://HOST:PORT, one connection attempt: a refused or unroutable address fails at
    once with the system's reason (Dask would retry it until its timeout)."""
    import socket
    from urllib.parse import urlsplit

    if not address.startswith("tcp://"):
        return
    parts = urlsplit(address)
    if parts.hostname is None or parts.port is None:  # Dask reads it, or says why not
        return
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
        pass


def _default_client() -> Client:
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        raise CemError("no Dask client: pass client= a Client, a scheduler address or "
                       "'local:N'") from None


@contextlib.contextmanager
def _local_cluster(name: str) -> Iterator[Client]:
    """``local:N``: N worker processes of one thread on this machine, for one fit."""
    from distributed import Client, LocalCluster

    try:
        workers = check_workers(name)
    except CemError as exc:
        raise CemError(f"client: {exc.message}") from None
    # numba's threads share the machine's cores among the worker processes
    threads = max(1, (os.cpu_count() or 1) // workers)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0",
                      env={"NUMBA_NUM_THREADS": str(threads)}) as cluster, \
            Client(cluster) as client:
        yield client


# ---------------------------------------------------------------------------------------------
# The client's side
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    """What a worker needs once per fit: the model, the data and how the client prepared."""

    key: str
    source: str
    filename: str
    settings: dict[str, float]
    collapse: tuple[str, ...] | None
    module_file: str  # the generated module's name (a hash of its source): must match
    data: Mapping[str, Any]
    prepare: dict[str, Any]  # _prepare's arguments but the data


class _Distributor:
    """The generated module's interface with ``run_local_step`` on the cluster (see the module
    doc): what the drivers are given in place of the module."""

    def __init__(self, client: Client, model: Model, partitions: int | None,
                 retries: int) -> None:
        if partitions is None:
            partitions = sum(client.nthreads().values())
            if partitions == 0:
                raise CemError("the Dask cluster has no workers")
        self.client, self.model, self.module = client, model, model.module
        self.partitions, self.retries = int(partitions), int(retries)
        self.roles = {name: role for role, names in self.module.ROLES.items() for name in names}
        self.setup: _Setup | None = None
        self.setup_future: Any = None
        self.n_items = 0
        self.bounds = np.zeros(1, dtype=np.int64)  # partition p: items bounds[p]:bounds[p + 1]
        self.tasks = self.worker_setups = self.calls = 0

    def __getattr__(self, name: str) -> Any:
        """Everything but _prepare, run_local_step and GLOBALS is the module's own."""
        return getattr(self.module, name)

    @property
    def GLOBALS(self) -> tuple[Any, ...]:  # noqa: N802 (the module's name for it)
        """The module's globals, none of them ``alone`` (SVI's lazy step): the local step runs
        on the workers' own copies of the data, which compact arrays and renumbered
        categories made on the client cannot reach."""
        return tuple(g if g.lazy is None or not g.lazy.alone else
                     replace(g, lazy=replace(g.lazy, alone=False))
                     for g in self.module.GLOBALS)

    def run(self, method: str, data: Mapping[str, Any], options: dict[str, Any]) -> FitResult:
        """The method's driver over this interface."""
        result = DRIVERS[method].run(self, data, **options)
        result.notes.update(dask_partitions=self.partitions, dask_tasks=self.tasks,
                            dask_worker_setups=self.worker_setups)
        return result

    def close(self) -> None:
        """Free the workers' copies of this fit (a worker that died has none)."""
        if self.setup is None:
            return
        with contextlib.suppress(Exception):
            self.client.run(_forget, self.setup.key)
        self.setup_future.release()
        self.setup = None

    def _prepare(self, data: Any, hypers: Any, dims: Any, seed: int, init: Any, start: Any,
                 max_local_iter: int, local_tol: float) -> State:
        """The module's _prepare (its seeding local step, if any, runs here), then the setup
        of the workers: the globals start where the client's did."""
        state = self.module._prepare(data, hypers, dims, seed, init, start, max_local_iter,
                                     local_tol)
        # the workers' globals are never read (every step sends their expectations); a start
        # from the client's skips their start (a seeding pass, random draws)
        prepare = dict(hypers=hypers, dims=dims, seed=seed, start=None,
                       max_local_iter=max_local_iter, local_tol=local_tol,
                       init={name: getattr(state, name)
                             for name in self.module.ROLES.get("global", ())})
        self.n_items = len(state.all_items)
        self.bounds = np.array([p * self.n_items // self.partitions
                                for p in range(self.partitions + 1)])
        for name in self._names("kept_local", "item", "item_count"):
            rows = np.shape(getattr(state, name))[:1]
            if rows != (self.n_items,):
                raise CemInternalError(f"the per-item array {name!r}: expected one row per "
                                       f"item ({self.n_items}), found {rows}")
        text, filename = read_source(self.model.path)
        key = uuid.uuid4().hex
        self.setup = _Setup(key, text, filename, dict(self.model.settings),
                            self.model.collapse, Path(self.module.__file__).name, data,
                            prepare)
        # a task, not scattered data: if every worker holding it dies, Dask recomputes it
        self.setup_future = self.client.submit(_hold, self.setup, key=f"cemodel-setup-{key}")
        return state

    def _names(self, *roles: str) -> list[str]:
        return [name for name, role in self.roles.items() if role in roles]

    def _sent(self, s: State) -> dict[str, Any]:
        """What every task gets from the client: the globals' expectations (E[t], or a draw
        under SSVI-A) and the hyperparameters and knowns that empirical Bayes may move."""
        sent = {name: getattr(s, name) for name in self._names("global_exp", "hyper")}
        sent.update({name: getattr(s, name) for name in self._names("known")
                     if not isinstance(getattr(s, name), np.ndarray)})
        return sent

    def run_local_step(self, s: State, items: np.ndarray, max_local_iter: int,
                       local_tol: float, seeding: bool = False, warm: bool = False,
                       guard: bool = False, evaluate: bool = True,
                       accelerate: bool = False) -> float:
        """run_local_step over the partitions: statistics added, per-item rows written."""
        assert self.setup is not None, "_prepare comes first"
        flags = dict(max_local_iter=max_local_iter, local_tol=local_tol, seeding=seeding,
                     warm=warm, guard=guard, evaluate=evaluate, accelerate=accelerate)
        sent, outputs = self._sent(s), self._names("statistic", "entry_statistic")
        rows = self._names("kept_local", "item")
        items = np.asarray(items)
        owner = np.searchsorted(self.bounds, items, side="right") - 1
        parts, futures = [], []
        for part in range(self.partitions):
            mine = items[owner == part]
            if len(mine) == 0:
                continue
            parts.append(mine)
            futures.append(self.client.submit(
                _local_task, self.setup_future, mine, flags, sent,
                {name: getattr(s, name)[mine] for name in rows}, outputs,
                key=f"cemodel-local-{self.setup.key}-{self.calls}-{part}", retries=self.retries))
        self.calls += 1
        self.tasks += len(futures)
        elbo = 0.0
        for mine, (stats, part_elbo, new_rows, fresh) in zip(
                parts, self.client.gather(futures), strict=True):
            for name in outputs:  # the local step adds to the statistics the driver zeroed
                getattr(s, name)[...] += stats[name]
            for name, value in new_rows.items():
                getattr(s, name)[mine] = value
            elbo += part_elbo
            self.worker_setups += fresh
        return elbo


# ---------------------------------------------------------------------------------------------
# The workers' side
# ---------------------------------------------------------------------------------------------


@dataclass
class _WorkerFit:
    """A worker's compiled module and bound state for one fit."""

    module: Any
    state: Any
    lock: threading.Lock  # a worker with several threads runs one task of a fit at a time


_WORKER_FITS: dict[str, _WorkerFit] = {}
_WORKER_LOCK = threading.Lock()


def _hold(setup: _Setup) -> _Setup:
    return setup


def _worker_fit(setup: _Setup) -> tuple[_WorkerFit, bool]:
    """This worker's module and state for the fit, made on its first task (True if now)."""
    with _WORKER_LOCK:
        found = _WORKER_FITS.get(setup.key)
        if found is not None:
            return found, False
        stages = run_stages(setup.source, setup.filename, setup.settings, setup.collapse)
        module = compile_stages(stages)
        if Path(module.__file__).name != setup.module_file:
            raise CemError(f"a worker generated {Path(module.__file__).name}, the client "
                           f"{setup.module_file}: install the same cemodel on both")
        state = module._prepare(setup.data, **setup.prepare)
        made = _WorkerFit(module, state, threading.Lock())
        _WORKER_FITS[setup.key] = made
        return made, True


def _local_task(setup: _Setup, items: np.ndarray, flags: dict[str, Any], sent: dict[str, Any],
                rows: dict[str, np.ndarray], outputs: list[str],
                ) -> tuple[dict[str, np.ndarray], float, dict[str, np.ndarray], bool]:
    """The local step over ``items``: a pure function of its arguments (the worker's state
    only caches the data, scratch and the rows written here first)."""
    made, fresh = _worker_fit(setup)
    item_inputs = set(made.module.ROLES.get("item", ()))
    with made.lock:
        s = made.state
        for name, value in sent.items():
            setattr(s, name, value)
        for name, value in rows.items():
            getattr(s, name)[items] = value
        for name in outputs:
            getattr(s, name)[...] = 0.0
        elbo = made.module.run_local_step(s, items, **flags)
        stats = {name: getattr(s, name).copy() for name in outputs}
        counts = made.module.ROLES.get("item_count", ())  # written here, not sent: returned
        new_rows = {name: getattr(s, name)[items] for name in (*rows, *counts)
                    if name not in item_inputs}
    return stats, float(elbo), new_rows, fresh


def _forget(key: str) -> None:
    with _WORKER_LOCK:
        _WORKER_FITS.pop(key, None)
