"""A kernel over items, run in shares: in threads when the work pays for them.

A generated kernel over the items (the local step, the KLC kernels) computes shares
``start`` to ``stop`` of ``n`` (each a contiguous part of its items, with the share's own
scratch arrays and accumulators ``<name>_threads[t]``), one after another, and returns the
sum of their values in share order. ``run_shares`` runs all the shares in one call, or one
call per share on a pool of threads (the kernels are compiled ``nogil``, so the threads run
at once), then sums the accumulators and the values in share order: the numbers do not
depend on how the shares ran, only on how many there are (``rt.share_count`` when the fit
was prepared: one per thread, fewer for small data). Serially, one call runs them all, so a
kernel's arguments (tens of arrays) are checked once per call, not once per share.

Threads pay for themselves only when a call holds enough work: handing a share to another
thread costs tens of microseconds, and on a busy machine the second core may not be free. So
each kernel chooses by measurement, separately for each number of items it is called on (a
warm-up, the minibatches, the whole data set). Its first call runs serially (and compiles the
kernel in the calling thread: that call's time counts only when the kernel ran before, on
another number of items, so a fit after a warm-up knows both ways after two calls); below
``PARALLEL_SECONDS`` of work (the sum of its shares' times) it stays serial, and so it does
while no core is free (as many runnable tasks as cores, ``/proc/loadavg``: a share handed to a
thread would wait for another process's time slice; on a 2-core machine beside a busy loop, 20
iterations of a 20,000-point mixture ran 11% slower than one thread from the tries alone);
above, it runs once each way and then keeps whichever took less wall time (a running average
per way), trying the other way again every ``PROBE_EVERY`` calls, so that a machine that
becomes busy (or idle) is followed. The numbers are the same either way.
numba's own parallel loops are not used: their compile doubles a model's first fit, and
their worker threads spin whatever the work (9× slower than one thread on a 200-point
mixture beside a busy process).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from .lazy import add_rows

# a call's work (seconds, summed over its shares) from which threads are tried
PARALLEL_SECONDS = 1e-3
PROBE_EVERY = 16  # calls between two tries of the way not taken
AVERAGE = 0.3  # weight of the newest call in a way's running average of wall seconds


class _Record:
    """A kernel's last work and the running average of its wall time per way."""

    def __init__(self, compiled: bool = False) -> None:
        self.work = 0.0
        self.wall: dict[bool, float] = {}  # in threads? -> seconds
        self.calls = 0
        self.threaded = 0  # calls that ran in threads (reported by ``threaded_calls``)
        # the kernel ran before (on another number of items): its first call here does not
        # compile, so its time counts, and the ways are known a call sooner
        self.compiled = compiled

    def threads(self) -> bool:
        if self.calls == 0 or self.work < PARALLEL_SECONDS:  # the first call compiles
            return False
        if not a_core_is_free():
            return False
        for way in (True, False):
            if way not in self.wall:
                return way
        best = self.wall[True] < self.wall[False]
        return (not best) if self.calls % PROBE_EVERY == 0 else best

    def add(self, threads: bool, wall: float, work: float) -> None:
        self.calls += 1
        self.threaded += threads
        self.work = work
        if self.calls == 1 and not self.compiled:  # the first call's time is mostly compiling
            return
        old = self.wall.get(threads)
        self.wall[threads] = wall if old is None else (1 - AVERAGE) * old + AVERAGE * wall


def a_core_is_free(loadavg: str = "/proc/loadavg") -> bool:
    """Whether another core than the caller's is idle now: the runnable tasks of the whole
    machine (``/proc/loadavg``'s fourth field, the caller's thread among them) fewer than the
    cores. True where that cannot be read (not Linux)."""
    try:
        with open(loadavg) as file:
            running = int(file.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running < (os.cpu_count() or 1)


# by kernel and number of items: a warm-up on 20 documents, the minibatches and the full data
# set are different amounts of work, and a way timed on one must not decide for another (a
# record kept across them chose one thread for a whole corpus from the warm-up's timings)
_records: dict[tuple[Callable, int], _Record] = {}
_items_at: dict[Callable, int | None] = {}  # where a kernel's ``items`` is in ``args``


def threaded_calls() -> tuple[int, int]:
    """(calls of ``run_shares`` so far, those that ran in threads), over every kernel: a
    benchmark's evidence of which way a fit ran."""
    return (sum(r.calls for r in _records.values()),
            sum(r.threaded for r in _records.values()))


def _items_length(kernel: Callable, args: tuple) -> int:
    """The length of the kernel's ``items`` argument (0 if it takes none)."""
    if kernel not in _items_at:
        code = getattr(kernel, "py_func", kernel).__code__
        names = code.co_varnames[3:code.co_argcount]  # after share_start, share_stop, n
        _items_at[kernel] = names.index("items") if "items" in names else None
    at = _items_at[kernel]
    return 0 if at is None else len(args[at])
_pool: dict[int, ThreadPoolExecutor] = {}  # one pool, by its width
_only_rows: dict[int, tuple[int, np.ndarray]] = {}  # id(total) -> (axis, rows): only_rows


@contextmanager
def only_rows(statistics: Sequence[tuple[np.ndarray, int, np.ndarray]]) -> Iterator[None]:
    """Within: of each (total, axis, rows), only those rows along ``axis`` can receive
    statistics (the categories of a minibatch, ``drivers.lazy``), so ``run_shares`` adds up
    and zeroes the shares' copies there only, not over every category."""
    for total, axis, rows in statistics:
        _only_rows[id(total)] = (axis, rows)
    try:
        yield
    finally:
        for total, _, _ in statistics:
            _only_rows.pop(id(total), None)


def run_shares(kernel: Callable, n_shares: int, args: tuple,
               sums: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> float:
    """``kernel(0, n_shares, n_shares, *args)`` (every share, one call), or
    ``kernel(t, t + 1, n_shares, *args)`` for every share t on the threads; then
    ``total += per_share[t]`` for each (total, per_share) of ``sums`` and the values added,
    in share order, each share's statistics zeroed for the next call (a single share's
    are a view of the total: ``rt.thread_copies``)."""
    key = (kernel, _items_length(kernel, args))
    if key not in _records:
        _records[key] = _Record(compiled=any(k is kernel for k, _ in _records))
    record = _records[key]
    threads = n_shares > 1 and record.threads()
    clock = time.perf_counter()
    if threads:
        values, seconds = _in_threads(kernel, n_shares, args)
    else:
        value, second = _timed(kernel, 0, n_shares, n_shares, args)
        values, seconds = [value], [second]
    record.add(threads, time.perf_counter() - clock, sum(seconds))
    for total, per_share in sums:
        if per_share.shape[0] == 1 and np.may_share_memory(total, per_share):
            continue  # one share added straight into the total (rt.thread_copies)
        rows = _only_rows.get(id(total))
        for t in range(n_shares):
            if rows is not None:
                add_rows(total, per_share[t], rows[0], rows[1])
                continue
            total += per_share[t]
            per_share[t] = 0.0  # zero for the next call: the kernels add to them
    value = 0.0
    for v in values:
        value += v
    return value


def _timed(kernel: Callable, start: int, stop: int, n_shares: int,
           args: tuple) -> tuple[float, float]:
    clock = time.perf_counter()
    value = kernel(start, stop, n_shares, *args)
    return value, time.perf_counter() - clock


def _in_threads(kernel: Callable, n_shares: int,
                args: tuple) -> tuple[list[float], list[float]]:
    """Shares 1… on the pool, share 0 in the calling thread."""
    pool = _executor(n_shares - 1)
    futures = [pool.submit(_timed, kernel, t, t + 1, n_shares, args)
               for t in range(1, n_shares)]
    first = _timed(kernel, 0, 1, n_shares, args)
    done = [first, *(f.result() for f in futures)]
    return [v for v, _ in done], [s for _, s in done]


def _executor(width: int) -> ThreadPoolExecutor:
    """The pool, widened when more shares are asked of it than it has threads."""
    if not _pool or max(_pool) < width:
        for old in _pool.values():
            old.shutdown(wait=False)
        _pool.clear()
        _pool[width] = ThreadPoolExecutor(max_workers=width, thread_name_prefix="cemodel-share")
    return next(iter(_pool.values()))
