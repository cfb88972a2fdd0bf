"""Nanoseconds per row of ``rt.dirichlet_exp_expected`` (exp(E[log θ]) of a Dirichlet, once per
inner sweep of every Dirichlet local) against the same row as one plain loop, its form before
the vector tail (issue 22 item 2): the plain loop leaves n % 8 entries to scalar code.

    python benchmarks/dirichlet_row.py                  # K = 3, 10, 20, 24, 50, 100
    python benchmarks/dirichlet_row.py --k 20 --rows 50000
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from cemodel.runtime import families  # noqa: E402
from cemodel.runtime.special import exp_digamma  # noqa: E402

FASTMATH = {"reassoc", "contract", "arcp"}  # the generated kernels' flags


@njit(error_model="numpy", fastmath=FASTMATH)
def plain_row(lam_log, out_exp):
    """The row as one loop (before 184bbc1)."""
    n = lam_log.shape[0]
    total = 0.0
    for k in range(n):
        total += lam_log[k] + 1.0
    scale = 1.0 / exp_digamma(total)
    for k in range(n):
        out_exp[k] = exp_digamma(lam_log[k] + 1.0) * scale


@njit(error_model="numpy", fastmath=FASTMATH)
def _rows(row, lam, out, count):
    for r in range(count):
        row(lam[r % lam.shape[0]], out)
    return out[0]


def time_row(row, lam: np.ndarray, count: int, repeats: int) -> float:
    out = np.empty(lam.shape[1])
    _rows(row, lam, out, 10)  # compiles
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        _rows(row, lam, out, count)
        best = min(best, (time.perf_counter() - start) / count)
    return best * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[3, 10, 20, 24, 50, 100])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| K | one loop (ns per row) | rt.dirichlet_exp_expected | ratio |")
    print("|---:|---:|---:|---:|")
    for k in args.k:
        lam = rng.gamma(1.0, 5.0, (64, k)) - 0.9  # α from 0.1 up, as documents' q(θ)
        before = time_row(plain_row, lam, args.rows, args.repeat)
        after = time_row(families.dirichlet_exp_expected, lam, args.rows, args.repeat)
        print(f"| {k} | {before:.0f} | {after:.0f} | {before / after:.2f} |")
    print(f"\nbest of {args.repeat} runs of {args.rows} rows; load average "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
