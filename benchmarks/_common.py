"""Shared by ``lda_mf.py`` and ``lda_svi.py``: the corpus as both scripts cut and split it, and
each fit in a fresh process with its own peak memory.

Peak memory. Every (method, K) fit runs in a new process (multiprocessing "spawn": a fresh
interpreter, not a fork), which loads the corpus itself, so nothing of another fit or of the
parent is in its memory. It reports two numbers:

* ``peak MB``: the process's peak resident set size over its whole life (imports, corpus, any
  warm-up, the fit), from ``VmHWM`` in ``/proc/self/status``. Not ``ru_maxrss``: a spawned
  child's ``getrusage(RUSAGE_SELF).ru_maxrss`` includes the parent's peak at the moment it was
  started (Linux carries the high-water mark of the pre-``exec`` address space over), so it
  would report the parent's memory. ``ru_maxrss`` is used only where ``/proc`` is missing.
* ``fit MB``: the peak during the fit minus the resident size just before it (corpus loaded,
  input prepared, warm-up done): the memory the fit itself adds. The high-water mark is reset
  just before the fit (``echo 5 > /proc/self/clear_refs``), so a larger earlier peak (a numba
  compilation, say) does not hide the fit's.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
TEST_FRACTION = 0.2
SPLIT_SEED = 0


def set_single_thread() -> None:
    """One thread for BLAS, OpenMP and numba: call before numpy, scipy or numba load."""
    for variable in THREAD_VARIABLES:
        os.environ[variable] = "1"


def check_single_thread() -> None:
    """In a fit's process: the thread variables are 1 (inherited, or set by the script's
    preamble when the child imports it), or the fit would not be one core against one."""
    wrong = {v: os.environ.get(v) for v in THREAD_VARIABLES if os.environ.get(v) != "1"}
    if wrong:
        raise RuntimeError(f"not single-threaded in the fit's process: {wrong}")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_split(corpus: str, max_docs: int | None):
    """``(X, vocab, X_train, X_test)``: the corpus, cut to its first ``max_docs`` documents
    (the vocabulary, i.e. the columns, unchanged), split 80/20 by
    ``cemodel.evaluation.split_documents(seed=0)``."""
    repo = Path(__file__).resolve().parents[1]
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from cemodel import evaluation
    from cemodel.datasets import load_corpus

    X, vocab = load_corpus(corpus)
    if max_docs is not None and max_docs < X.shape[0]:
        X = X[:max_docs]
    X_train, X_test = evaluation.split_documents(X, test_fraction=TEST_FRACTION,
                                                 seed=SPLIT_SEED)
    return X, vocab, X_train, X_test


def corpus_label(corpus: str, max_docs: int | None, n_docs: int) -> str:
    return corpus + (f" (first {n_docs} documents)" if max_docs is not None else "")


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


class FitMemory:
    """``start()`` just before a fit, ``stop()`` just after; then ``peak_mb`` (the process's
    peak so far) and ``fit_mb`` (the fit's peak minus the resident size at ``start``)."""

    def __init__(self) -> None:
        self.before_mb = float("nan")
        self.peak_before_mb = float("nan")
        self.peak_mb = float("nan")
        self.fit_mb = float("nan")
        self.reset = False

    def start(self) -> None:
        rss = _status_mb("VmRSS")
        hwm = _status_mb("VmHWM")
        self.before_mb = rss if rss is not None else _maxrss_mb()
        self.peak_before_mb = hwm if hwm is not None else _maxrss_mb()
        try:  # reset the high-water mark to the current resident size (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
                handle.write("5")
            self.reset = True
        except OSError:
            self.reset = False

    def stop(self) -> None:
        hwm = _status_mb("VmHWM")
        during = hwm if hwm is not None else _maxrss_mb()
        self.peak_mb = max(self.peak_before_mb, during)
        # without a reset, the mark may be an earlier peak: fit MB is then an upper bound
        self.fit_mb = max(during - self.before_mb, 0.0)


def run_isolated(function, *args):
    """``function(*args)`` in a fresh spawned process; its return value (plain data), or its
    exception re-raised here (a process that dies raises BrokenProcessPool)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def failure_note(exc: BaseException) -> str:
    """A fit's note: a peer that is not installed is skipped (``skipped: No module named
    'gensim'``), anything else failed."""
    if isinstance(exc, ModuleNotFoundError):
        return f"skipped: {exc}"
    return f"failed: {type(exc).__name__}"


def target_verdict(speed: float, relative_perplexity: float, tie: float,
                   target: float = 2.0) -> str:
    """``met``, or ``missed`` with by how much: the speed ratio's shortfall from ``target``
    in percent, and/or how much worse the perplexity is than the tie allows."""
    reasons = []
    if not speed >= target:  # nan misses too
        short = 100.0 * (1.0 - speed / target) if speed == speed else float("nan")
        reasons.append(f"speed missed by {short:.0f}% ({speed:.2f}x of the {target:g}x needed)")
    if not relative_perplexity <= tie:
        reasons.append(f"perplexity missed by {100 * relative_perplexity:.1f}% "
                       f"(worse than the peer; within {100 * tie:g}% counts as equal)")
    return "met" if not reasons else "MISSED: " + "; ".join(reasons)
