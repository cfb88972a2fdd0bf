"""cemodel.runtime.run_shares: a kernel over items run in shares, serially or in threads,
with the same numbers either way (no numba: the kernel here is plain Python)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from cemodel.runtime import shares
from cemodel.runtime.shares import run_shares

A_CORE_IS_FREE = shares.a_core_is_free  # the real one (the fixture below replaces it)


@pytest.fixture(autouse=True)
def idle_cores(monkeypatch):
    """The tests decide when threads run; the machine's load (a test beside them) does not."""
    monkeypatch.setattr(shares, "a_core_is_free", lambda: True)


def make_kernel(seen: list):
    """A kernel in the generated form: each of shares start…stop of n sums its items' values
    into its own accumulator row; returns their sums of squares added share by share."""

    def kernel(share_start, share_stop, n_threads, items, values, acc_threads):
        total = 0.0
        for thread in range(share_start, share_stop):
            seen.append((thread, threading.current_thread().name))
            acc_threads[thread] = 0.0
            out = 0.0
            for position in range(thread * items.shape[0] // n_threads,
                                  (thread + 1) * items.shape[0] // n_threads):
                acc_threads[thread] += values[items[position]]
                out += values[items[position]] ** 2
            total += out
        return total

    return kernel


@pytest.mark.parametrize("n_shares", [1, 2, 3])
def test_serial_and_threaded_shares_give_the_same_bits(monkeypatch, n_shares):
    values = np.random.default_rng(0).normal(size=101) * 1e3
    items = np.arange(101)[::-1].copy()
    results = []
    for threshold in (np.inf, 0.0):  # never threads, always threads (after the first call)
        monkeypatch.setattr(shares, "PARALLEL_SECONDS", threshold)
        seen: list = []
        kernel = make_kernel(seen)
        calls_before, threaded_before = shares.threaded_calls()
        for _ in range(2):
            total, per = np.zeros(()), np.full(n_shares, np.nan)  # stale rows are overwritten
            value = run_shares(kernel, n_shares, (items, values, per), ((total, per),))
            results.append((value, float(total)))
        threads = {name for _, name in seen[n_shares:]}  # the second call
        in_threads = threshold == 0.0 and n_shares > 1
        assert ("cemodel-share" in " ".join(threads)) == in_threads
        calls, threaded = shares.threaded_calls()  # the second call's way, counted
        assert (calls - calls_before, threaded - threaded_before) == (2, int(in_threads))
        assert sorted(t for t, _ in seen) == sorted(list(range(n_shares)) * 2)
    assert len(set(results)) == 1  # bit for bit
    value, total = results[0]
    assert total == pytest.approx(values.sum(), rel=1e-12)
    assert value == pytest.approx((values ** 2).sum(), rel=1e-12)


def test_a_small_call_stays_in_one_thread(monkeypatch):
    """Threads only once a call's work reached PARALLEL_SECONDS (the first call is serial)."""
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", 10.0)
    seen: list = []
    kernel = make_kernel(seen)
    per = np.zeros(2)
    for _ in range(3):
        run_shares(kernel, 2, (np.arange(4), np.ones(4), per), ((np.zeros(()), per),))
    assert {name for _, name in seen} == {threading.current_thread().name}


def test_an_error_in_a_threaded_share_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", 0.0)

    def kernel(share_start, share_stop, n_threads, fail):
        if fail and share_start <= 1 < share_stop:
            raise FloatingPointError("share 1")
        return float(share_stop - share_start)

    assert run_shares(kernel, 2, (False,)) == 2.0
    with pytest.raises(FloatingPointError, match="share 1"):
        run_shares(kernel, 2, (True,))


def test_the_faster_way_is_kept_and_the_other_tried_again(monkeypatch):
    """Above the work threshold a kernel runs once each way, keeps the faster (by wall time)
    and tries the other every PROBE_EVERY calls."""
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", 0.0)
    record = shares._Record()
    ways = []
    for _ in range(40):
        threads = record.threads()
        ways.append(threads)
        record.add(threads, 1.0 if threads else 2.0, 1.0)  # threads twice as fast
    assert ways[:3] == [False, True, False]
    later = ways[3:]
    assert sum(later) == len(later) - sum(1 for c in range(3, 40) if c % shares.PROBE_EVERY == 0)


def test_serial_shares_run_in_one_call(monkeypatch):
    """Serially every share runs in one kernel call (its arguments checked once), share by
    share inside it."""
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", np.inf)
    calls: list = []
    seen: list = []
    kernel = make_kernel(seen)

    def counted(*args):
        calls.append(args[:3])
        return kernel(*args)

    per = np.zeros(3)
    run_shares(counted, 3, (np.arange(9), np.ones(9), per), ((np.zeros(()), per),))
    assert calls == [(0, 3, 3)] and [t for t, _ in seen] == [0, 1, 2]


def test_no_threads_while_no_core_is_free(monkeypatch, tmp_path):
    """As many runnable tasks as cores (/proc/loadavg): a share handed to a thread would wait
    for another process's time slice, so the kernel stays in the calling thread."""
    busy, idle = tmp_path / "busy", tmp_path / "idle"
    busy.write_text(f"2.00 1.90 1.50 {os.cpu_count()}/300 4242\n")
    idle.write_text("0.10 0.20 0.30 1/300 4242\n")
    assert not A_CORE_IS_FREE(str(busy))
    assert A_CORE_IS_FREE(str(idle)) == ((os.cpu_count() or 1) > 1)
    assert A_CORE_IS_FREE(str(tmp_path / "missing"))  # not Linux: try
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", 0.0)
    monkeypatch.setattr(shares, "a_core_is_free", lambda: False)
    seen: list = []
    kernel = make_kernel(seen)
    per = np.zeros(2)
    for _ in range(3):
        run_shares(kernel, 2, (np.arange(4), np.ones(4), per), ((np.zeros(()), per),))
    assert {name for _, name in seen} == {threading.current_thread().name}


def test_each_number_of_items_is_timed_on_its_own(monkeypatch):
    """A warm-up on a few items (fast serially) must not decide for the whole data set: the
    records are kept per kernel and number of items."""
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", 0.0)
    seen: list = []
    kernel = make_kernel(seen)
    per = np.zeros(2)
    for items in (np.arange(4), np.arange(4), np.arange(4), np.arange(50), np.arange(50)):
        seen.clear()
        run_shares(kernel, 2, (items, np.ones(50), per), ((np.zeros(()), per),))
    # the 50-item calls start over: the first serial, the second tries the threads
    assert {name for _, name in seen} != {threading.current_thread().name}
    assert {key[1] for key in shares._records if key[0] is kernel} == {4, 50}


def test_a_kernel_that_ran_before_is_timed_from_its_first_call(monkeypatch):
    """After a warm-up on other items the kernel is compiled: the whole data's first (serial)
    call is timed, so its second call tries the threads and its third already takes the
    faster way (serial, threads, faster) instead of a third try."""
    monkeypatch.setattr(shares, "PARALLEL_SECONDS", 0.0)
    seen: list = []
    kernel = make_kernel(seen)
    per = np.zeros(2)
    for _ in range(2):  # the warm-up's number of items
        run_shares(kernel, 2, (np.arange(4), np.ones(50), per), ((np.zeros(()), per),))
    record = shares._records[(kernel, 50)] = shares._Record(compiled=True)
    ways = []
    for _ in range(3):
        threads = record.threads()
        ways.append(threads)
        record.add(threads, 1.0 if threads else 2.0, 1.0)
    assert ways == [False, True, True]
    fresh = shares._Record()  # never ran: the first call compiles and is not timed
    for _ in range(3):
        threads = fresh.threads()
        fresh.add(threads, 1.0 if threads else 2.0, 1.0)
    assert fresh.wall.keys() == {True, False} and fresh.calls == 3
    assert shares._records[(kernel, 4)].compiled is False
    del shares._records[(kernel, 50)]
    run_shares(kernel, 2, (np.arange(50), np.ones(50), per), ((np.zeros(()), per),))
    assert shares._records[(kernel, 50)].compiled is True
