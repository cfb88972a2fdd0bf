"""A kernel over items, run in shares: in threads when the work pays for them.

A generated kernel over the items (the local step, the KLC kernels) computes share ``t`` of
``n`` (a contiguous part of its items) with the share's own scratch arrays and accumulators
(``<name>_threads[t]``) and returns the share's part of its value. ``run_shares`` runs the
shares one after another or on a pool of threads (the kernels are compiled ``nogil``, so
the threads run at once), then sums the accumulators and the values in share order: the
numbers do not depend on how the shares ran, only on how many there are (the thread count
when the fit was prepared, ``--threads``).

Threads pay for themselves only when a call holds enough work: handing a share to another
thread costs tens of microseconds, and on a busy machine the second core may not be free.
Each kernel's shares run in threads only when its previous call took at least
``PARALLEL_SECONDS`` of work (the sum of its shares' times); a first call runs serially
(and compiles the kernel in the calling thread). numba's own parallel loops are not used:
their compile doubles a model's first fit, and their worker threads spin whatever the
work (9× slower than one thread on a 200-point mixture beside a busy process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# a call's work (seconds, summed over its shares) from which its next call runs in threads
PARALLEL_SECONDS = 1e-3

_work: dict[Callable, float] = {}  # kernel -> the work of its last call (seconds)
_pool: dict[int, ThreadPoolExecutor] = {}  # one pool, by its width


def run_shares(kernel: Callable, n_shares: int, args: tuple,
               sums: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> float:
    """``kernel(t, n_shares, *args)`` for every share t; then ``total += per_share[t]``
    for each (total, per_share) of ``sums`` and the kernel's values added, in share order."""
    if n_shares > 1 and _work.get(kernel, 0.0) >= PARALLEL_SECONDS:
        values, seconds = _in_threads(kernel, n_shares, args)
    else:
        done = [_timed(kernel, t, n_shares, args) for t in range(n_shares)]
        values, seconds = [v for v, _ in done], [s for _, s in done]
    _work[kernel] = sum(seconds)
    for total, per_share in sums:
        for t in range(n_shares):
            total += per_share[t]
    value = 0.0
    for v in values:
        value += v
    return value


def _timed(kernel: Callable, share: int, n_shares: int, args: tuple) -> tuple[float, float]:
    clock = time.perf_counter()
    value = kernel(share, n_shares, *args)
    return value, time.perf_counter() - clock


def _in_threads(kernel: Callable, n_shares: int,
                args: tuple) -> tuple[list[float], list[float]]:
    """Shares 1… on the pool, share 0 in the calling thread."""
    pool = _executor(n_shares - 1)
    futures = [pool.submit(_timed, kernel, t, n_shares, args) for t in range(1, n_shares)]
    first = _timed(kernel, 0, n_shares, args)
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
