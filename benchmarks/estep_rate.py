"""The LDA E-step's arithmetic rate against the same process's dgemm peak (issue 22, item 2).

One thread (BLAS, OpenMP and numba). First the peak: numpy's float64 matrix product of two
``--gemm-n`` square matrices, the best of 5 (2n³ flops each), before and after the fits. Then
cemodel's compiled LDA on the training 80% of the corpus, for each K, twice:
``max_local_iter=S, local_tol=0`` (every document runs exactly S inner sweeps: the test
``change < 0`` never passes) and the fit's own E-step (to convergence, the defaults). The
local step's seconds are timed by wrapping the module's ``run_local_step`` (as ``scaling.py``
does); its flops are counted as the issue counts them, 4·K per non-zero (document, word)
entry per inner sweep (two K-vector products per entry: Σ_k θ_k β_kw and its scatter back),
with each document's sweeps as the generated kernel counted them (``state.local_sweeps``).
The local step also builds q(z), the statistics and the ELBO once per iteration; that work is
in its seconds and not in the flops, so the rate is a lower bound on the sweeps' own.

    python benchmarks/estep_rate.py                 # NYT, K = 20 and 100, 20 sweeps
    python benchmarks/estep_rate.py --corpus reuters --k 10 --iters 2   # a smoke run
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import _common  # noqa: E402
import numpy as np  # noqa: E402

LDA_MODEL = HERE.parent / "stdlib_models" / "lda.cem"
HYPERS = {"alpha": 0.1, "eta": 0.01}
TARGET = 0.20  # the E-step at >= 20% of the dgemm peak


def dgemm_peak(n: int, repeats: int = 5) -> float:
    """GFLOP/s of numpy's float64 n×n matrix product on one thread, the best of ``repeats``."""
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n)), rng.random((n, n))
    a @ b  # BLAS warm-up
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best / 1e9


def estep_rate(k: int, X, iters: int, sweeps: int | None) -> tuple[float, float, float]:
    """(GFLOP/s, local-step seconds per iteration, mean sweeps per document): ``sweeps``
    sweeps per document (``local_tol = 0``), or (None) the fit's own E-step to convergence.
    Each call's flops are 4·K·Σ_d nnz_d·sweeps_d, with sweeps_d the kernel's count for the
    document (``state.local_sweeps``); the iterations after the first (a restart from random
    topics is the E-step's longest) are the ones reported, as medians."""
    import cemodel

    module = cemodel.compile(LDA_MODEL)
    options = {"dims": {"K": k}, "hypers": HYPERS, "tol": 0.0, "seed": 0}
    if sweeps is not None:
        options.update(max_local_iter=sweeps, local_tol=0.0)
    nnz = np.diff(X.indptr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ELBO may dip by round-off at tol = 0
        module.fit({"w": X[:20]}, max_iter=2, **options)  # compile or load from the cache
        glue, calls = module.run_local_step, []

        def timed(s, items, *args, **kwargs):
            start = time.perf_counter()
            value = glue(s, items, *args, **kwargs)
            if not kwargs.get("seeding"):
                done = s.local_sweeps[items]
                calls.append((time.perf_counter() - start, float(nnz[items] @ done),
                              float(done.mean())))
            return value

        module.run_local_step = timed  # the driver looks it up in the module at every call
        try:
            module.fit({"w": X}, max_iter=iters, **options)
        finally:
            module.run_local_step = glue
    later = calls[1:] or calls
    seconds = float(np.median([c[0] for c in later]))
    rate = float(np.median([4.0 * k * c[1] / c[0] / 1e9 for c in later]))
    return rate, seconds, float(np.median([c[2] for c in later]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="nyt")
    parser.add_argument("--k", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--iters", type=int, default=4, help="MF iterations per K")
    parser.add_argument("--sweeps", type=int, default=20, help="inner sweeps per document")
    parser.add_argument("--gemm-n", type=int, default=2000, help="dgemm matrix size")
    parser.add_argument("--markdown", action="store_true",
                        help="accepted for run_all.py: the table is always markdown")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    _, _, X_train, _ = _common.load_split(args.corpus, None)
    X_train = X_train.tocsr()
    with threadpool_limits(limits=1):
        peak = dgemm_peak(args.gemm_n)
        rows = [(k, how, *estep_rate(k, X_train, args.iters, how)) for k in args.k
                for how in (args.sweeps, None)]
        peak_after = dgemm_peak(args.gemm_n)
    import numba

    print(f"python {platform.python_version()}, numpy {np.__version__}, numba "
          f"{numba.__version__}, {platform.machine()}; one thread; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs at the end")
    print(f"dgemm peak (float64, n = {args.gemm_n}, best of 5): {peak:.2f} GFLOP/s before the "
          f"fits, {peak_after:.2f} after; the larger is the reference")
    reference = max(peak, peak_after)
    print(f"\n| corpus | K | E-step | sweeps/document (counted) | non-zeros | local step s/iter "
          f"| E-step GFLOP/s | of dgemm peak | target >= {TARGET:.0%} |\n"
          "|---|---:|---|---:|---:|---:|---:|---:|---|")
    for k, how, rate, per_iter, mean_sweeps in rows:
        share = rate / reference
        verdict = "met" if share >= TARGET else f"missed ({share / TARGET:.2f} of it)"
        what = f"{how} sweeps (local_tol = 0)" if how else "to convergence (defaults)"
        print(f"| {args.corpus} | {k} | {what} | {mean_sweeps:.1f} | {X_train.nnz} | "
              f"{per_iter:.4f} | {rate:.2f} | {share:.1%} | {verdict} |")
    print("\nflops: 4·K per non-zero (document, word) entry per inner sweep, each document's "
          "sweeps counted by the generated kernel (state.local_sweeps, "
          "FitResult.notes['local_sweeps']); medians over the iterations after the first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
