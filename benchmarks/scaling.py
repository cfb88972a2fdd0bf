"""How cemodel's compiled mean-field fits scale: with threads, and with the size of the data.

(a) threads: the seconds of the E-step (the module's ``run_local_step``: the generated
``local_step`` kernel on one contiguous share of the items per thread, the shares run by
``cemodel.runtime.run_shares``, in threads when a call holds enough work) with 1 and 2
threads, for LDA on the NYT corpus (K = 20 and 100) and the Gaussian mixture of
``benchmarks/gmm_mf.py`` (N = 200,000, D = 10, K = 20); speedup = t(1 thread) / t(N threads),
against the target "2 threads >= 1.8x 1 thread on the local step".

(c) a busy machine (``--busy``): ``stdlib_models/gmm.cem`` (K = 5, D = 2) at N = 200, 2,000,
20,000 and 200,000 with the default thread count (every core) and with one thread, while a
busy-loop process holds one core (as on a laptop or a shared server): the default must never
be slower than one thread (issue 22, item 4).

(b) data size: LDA on NYT replicated x1, x2, x4 (the document-term matrix stacked on itself):
seconds per iteration, seconds per million tokens per iteration (flat if the cost is linear in
the tokens) and peak memory.

Every configuration runs in a fresh child process ("spawn"): numba fixes its thread count
when it loads, so ``NUMBA_NUM_THREADS`` is set for each child before it starts (BLAS and OpenMP
always at 1 thread); the child checks ``cemodel.runtime.thread_count()``. Each child compiles
(or loads from the kernel cache) its kernels in a small warm-up fit first, so no numba
compilation is timed; then ``fit(..., max_iter=--iters, tol=0.0)``.

    python benchmarks/scaling.py                     # both parts, full size (~3 minutes)
    python benchmarks/scaling.py --only threads      # (a) only
    python benchmarks/scaling.py --only data         # (b) only
    python benchmarks/scaling.py --quick             # a smoke run: Reuters, N = 20k
    python benchmarks/scaling.py --threads 1 2 --markdown
    python benchmarks/scaling.py --only busy --markdown  # (c): beside a busy-loop process
"""

from __future__ import annotations

import os

# BLAS and OpenMP single-threaded; numba's threads are set per child (NUMBA_NUM_THREADS).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (str(REPO), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
from gmm_mf import Memory, fmt, make_data, table  # noqa: E402

LDA_MODEL = REPO / "stdlib_models" / "lda.cem"
GMM_MODEL = REPO / "stdlib_models" / "gmm.cem"
LDA_HYPERS = {"alpha": 0.1, "eta": 0.01}
TARGET = 1.8  # 2 threads >= 1.8x 1 thread on the local step (issue 22)
BUSY_N = (200, 2_000, 20_000, 200_000)
# rt.run_shares's way-choosing calls on the whole data: the first serially, the second in
# threads (the warm-up fit compiled the kernel, so the first is timed); then the faster way
CHOOSING = 2
# each (c) configuration fits until its fit loops add up to this: a 200-point fit converges
# in 30 ms, where one fit's timing varied by ±30% between identical configurations
BUSY_SECONDS = 2.0
BUSY_LOOP = "while True:\n    pass\n"
LOAD_NOTE = (f"other load: cores used by other processes on this {os.cpu_count()}-CPU machine "
             "during the fit (/proc/stat busy time minus the fit's own CPU time, per second): "
             "2 threads can only be faster than 1 if a second core is free (other load near 0)")


@dataclass(frozen=True)
class Workload:
    model: str  # "lda" or "gmm"
    k: int
    corpus: str = "nyt"  # lda
    replicas: int = 1  # lda: the document-term matrix stacked this many times
    n: int = 0  # gmm: points
    d: int = 10  # gmm
    seed: int = 0  # gmm data
    sweeps: int = 0  # lda: exactly this many E-step sweeps per document (0: to convergence)

    @property
    def name(self) -> str:
        if self.model == "lda":
            times = f" x{self.replicas}" if self.replicas != 1 else ""
            fixed = f", {self.sweeps} sweeps/doc" if self.sweeps else ""
            return f"LDA {self.corpus}{times}, K={self.k}{fixed}"
        return f"GMM N={self.n}, D={self.d}, K={self.k}"


@dataclass
class Run:
    workload: Workload
    threads: int  # as requested (NUMBA_NUM_THREADS)
    iterations: int = 0
    items: int = 0  # documents or points
    tokens: int = 0  # lda: tokens; gmm: points
    thread_count: int = 0  # cemodel.runtime.thread_count() in the child
    layer: str = ""  # what runs the shares
    local_seconds: list[float] = field(default_factory=list)  # local_step, per iteration
    loop_seconds: float = float("nan")  # FitResult.seconds: the fit loop, set-up excluded
    elbo: float = float("nan")
    peak_mb: float = float("nan")
    fit_mb: float = float("nan")
    data_mb: float = float("nan")
    other_cores: float = float("nan")  # CPU used by other processes during the fit, in cores
    own_cores: float = float("nan")  # the child's CPU seconds per second during the fit
    shares: list[float] = field(default_factory=list)  # each thread's share of the tokens
    calls: int = 0  # rt.run_shares calls during the timed fits
    threaded: int = 0  # of those, the ones that ran in threads
    note: str = ""

    @property
    def local(self) -> float:
        return float(np.sum(self.local_seconds)) if self.local_seconds else float("nan")

    @property
    def steady(self) -> float:
        """local_step seconds per iteration after the first CHOOSING (rt.run_shares choosing
        its way: serially, then in threads)."""
        later = self.local_seconds[CHOOSING:]
        return float(np.mean(later)) if later else float("nan")

    @property
    def per_iter(self) -> float:
        return self.loop_seconds / self.iterations if self.iterations else float("nan")

    @property
    def per_mtoken(self) -> float:
        return self.per_iter / (self.tokens / 1e6) if self.tokens else float("nan")


CEILING = r"""
import time, numpy as np, numba
from numba import njit, prange

@njit(parallel=True)
def spin(x, parts):  # arithmetic on registers: no memory traffic, no shared data
    out = np.zeros(parts)
    for t in prange(parts):
        total = 0.0
        for i in range(t * x.size // parts, (t + 1) * x.size // parts):
            v = x[i]
            for _ in range(200):
                v = v * 0.999 + 0.001
            total += v
        out[t] = total
    return out.sum()

@njit(parallel=True)
def triad(a, b, c, parts):  # STREAM triad: memory traffic only (3 arrays far beyond the caches)
    for t in prange(parts):
        for i in range(t * a.size // parts, (t + 1) * a.size // parts):
            a[i] = b[i] + 3.0 * c[i]

def best(f, args, threads):
    numba.set_num_threads(threads)
    f(*args, threads)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        f(*args, threads)
        times.append(time.perf_counter() - start)
    return min(times)

x = np.random.default_rng(0).random(2_000_000)
n = 20_000_000
a, b, c = np.zeros(n), np.ones(n), np.ones(n)
spins = [best(spin, (x,), t) for t in (1, 2)]
triads = [best(triad, (a, b, c), t) for t in (1, 2)]
print(spins[0] / spins[1], triads[0] / triads[1], 24 * n / triads[0] / 1e9,
      24 * n / triads[1] / 1e9)
"""


def machine_ceiling() -> tuple[float, float, float, float]:
    """What 2 threads give on this machine: (pure arithmetic with no memory traffic, the most
    a local step can expect; memory bandwidth, the STREAM triad's speedup, the most a kernel
    that streams its data from memory can expect; the triad's GB/s on 1 and on 2 threads)."""
    import subprocess

    env = {**os.environ, "NUMBA_NUM_THREADS": "2"}
    run = subprocess.run([sys.executable, "-c", CEILING], capture_output=True, text=True,
                         env=env)
    try:
        spin, triad, gb1, gb2 = map(float, run.stdout.strip().splitlines()[-1].split())
        return spin, triad, gb1, gb2
    except (IndexError, ValueError):
        return (float("nan"),) * 4


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- in the child process


def load_workload(work: Workload):
    """(data for fit, small data for the warm-up, items, tokens, per-item work)."""
    if work.model == "lda":
        from scipy import sparse

        from cemodel.datasets import load_corpus

        X, _ = load_corpus(work.corpus)
        X = sparse.csr_matrix(X)
        if work.replicas > 1:
            X = sparse.vstack([X] * work.replicas, format="csr")
        sizes = np.asarray(X.sum(axis=1)).ravel()
        return {"w": X}, {"w": X[:20]}, X.shape[0], int(sizes.sum()), sizes
    X, _, _ = make_data(work.n, 0, work.d, work.k, work.seed)
    small, _, _ = make_data(2000, 0, work.d, work.k, work.seed + 1)
    return {"x": X}, {"x": small}, work.n, work.n, np.ones(work.n)


def contiguous_shares(work_per_item: np.ndarray, threads: int) -> list[float]:
    """Each thread's share of the work when the items are split as the generated local step
    splits them: thread t gets positions [t·n/T, (t+1)·n/T)."""
    n = len(work_per_item)
    total = float(work_per_item.sum())
    return [float(work_per_item[t * n // threads:(t + 1) * n // threads].sum()) / total
            for t in range(threads)]


def child(work: Workload, threads: int, iters: int, min_seconds: float = 0.0) -> Run:
    """One configuration; the fit is repeated (from the same start) until the fits' loops
    add up to ``min_seconds``, and the iterations and seconds of all of them counted."""
    from threadpoolctl import threadpool_limits

    import cemodel
    from cemodel import runtime
    from cemodel.runtime.shares import threaded_calls

    run = Run(work, threads)
    run.thread_count = runtime.thread_count()
    if run.thread_count != threads:
        raise RuntimeError(f"asked for {threads} threads, cemodel.runtime.thread_count() = "
                           f"{run.thread_count}")
    module = cemodel.compile(LDA_MODEL if work.model == "lda" else GMM_MODEL)
    options = {"dims": {"K": work.k}, "tol": 0.0, "seed": 0}
    if work.model == "lda":
        options["hypers"] = LDA_HYPERS
        if work.sweeps:  # the same work for every document: no tolerance, a fixed count
            options.update(max_local_iter=work.sweeps, local_tol=0.0)
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an ELBO that decreases by round-off at tol=0
        data, small, run.items, run.tokens, per_item = load_workload(work)
        start = time.perf_counter()
        module.fit(small, max_iter=2, **options)  # numba compilation or cache load
        log(f"    warm-up {time.perf_counter() - start:.1f} s")
        run.layer = "run_shares"
        run.shares = contiguous_shares(per_item, threads)
        glue = module.run_local_step

        def timed(*args, **kwargs):  # run_local_step(s, items, ...; seeding=): set-up calls
            start = time.perf_counter()
            value = glue(*args, **kwargs)
            if not kwargs.get("seeding"):
                run.local_seconds.append(time.perf_counter() - start)
            return value

        calls_before = threaded_calls()
        memory = Memory()
        memory.start()
        module.run_local_step = timed  # the drivers look it up in the module at every call
        try:
            result = module.fit(data, max_iter=iters, **options)
            run.iterations, run.loop_seconds = int(result.iterations), float(result.seconds)
            while run.loop_seconds < min_seconds:
                again = module.fit(data, max_iter=iters, **options)
                run.iterations += int(again.iterations)
                run.loop_seconds += float(again.seconds)
        finally:
            module.run_local_step = glue
        memory.stop(run)  # peak_mb, fit_mb, data_mb, other_cores, own_cores
        run.calls, run.threaded = np.subtract(threaded_calls(), calls_before).tolist()
    run.elbo = float(result.elbo[-1])
    return run


def run_in_child(work: Workload, threads: int, iters: int, min_seconds: float = 0.0) -> Run:
    """One configuration in a fresh process whose numba starts with ``threads`` threads."""
    context = multiprocessing.get_context("spawn")
    saved = os.environ.get("NUMBA_NUM_THREADS")
    os.environ["NUMBA_NUM_THREADS"] = str(threads)  # the child inherits it at start
    start = time.perf_counter()
    log(f"  {work.name}, {threads} thread(s) ...")
    try:
        with context.Pool(1, maxtasksperchild=1) as pool:
            run = pool.apply(child, (work, threads, iters, min_seconds))
    except Exception as exc:  # report the failure, still run the others
        log(f"  {work.name}, {threads} thread(s) FAILED: {type(exc).__name__}: {exc}")
        return Run(work, threads, note=f"failed: {type(exc).__name__}")
    finally:
        if saved is None:
            os.environ.pop("NUMBA_NUM_THREADS", None)
        else:
            os.environ["NUMBA_NUM_THREADS"] = saved
    log(f"    local_step {fmt(run.local, '.3f')} s over {run.iterations} iterations, "
        f"{fmt(run.per_iter, '.3f')} s/iter, peak {fmt(run.peak_mb, '.0f')} MB, other "
        f"processes {fmt(run.other_cores, '.2f')} cores "
        f"({time.perf_counter() - start:.1f} s with start-up)")
    return run


# ---------------------------------------------------------------- output


def verdict(speedup: float) -> str:
    if not np.isfinite(speedup):
        return "n/a"
    return "met" if speedup >= TARGET else f"missed by {100 * (1 - speedup / TARGET):.0f}%"


def render_threads(runs: list[Run], markdown: bool) -> tuple[str, list[str]]:
    header = ["workload", "threads", "layer", "iterations", "local_step s", "local s/iter",
              "fit s/iter", "speedup (local)", "steady local s/iter", "speedup (steady)",
              "speedup (fit)", f"target >= {TARGET}x (steady)",
              "largest share", "own cores", "other load"]
    body, lines = [], []
    for work in dict.fromkeys(r.workload for r in runs):
        group = [r for r in runs if r.workload == work]
        base = group[0]
        for r in group:
            speed = base.local / r.local if r.local > 0 else float("nan")
            speed_fit = base.per_iter / r.per_iter if r.per_iter > 0 else float("nan")
            steady = base.steady / r.steady if r.steady > 0 else float("nan")
            is_base = r is base
            body.append([
                work.name + (f" ({r.note})" if r.note else ""), str(r.threads), r.layer or "-",
                str(r.iterations), fmt(r.local, ".3f"),
                fmt(r.local / r.iterations, ".4f") if r.iterations else "n/a",
                fmt(r.per_iter, ".4f"), "-" if is_base else fmt(speed, ".2f") + "x",
                fmt(r.steady, ".4f"), "-" if is_base else fmt(steady, ".2f") + "x",
                "-" if is_base else fmt(speed_fit, ".2f") + "x",
                "-" if is_base or r.threads != 2 else verdict(steady),
                fmt(100 * max(r.shares), ".1f") + "%" if r.shares else "n/a",
                fmt(r.own_cores, ".2f"), fmt(r.other_cores, ".2f")])
            if not is_base:
                agree = abs(r.elbo - base.elbo) / abs(base.elbo) if base.elbo else float("nan")
                lines.append(
                    f"{work.name}: {r.threads} threads vs {base.threads}: local step "
                    f"{fmt(speed, '.2f')}x over every iteration, {fmt(steady, '.2f')}x after "
                    f"the first {CHOOSING} (target >= {TARGET}x at 2 threads: "
                    f"{verdict(steady) if r.threads == 2 else 'n/a'}), whole fit "
                    f"{fmt(speed_fit, '.2f')}x; final ELBOs agree to {fmt(agree, '.1e')} "
                    "(relative)")
    return table(header, body, markdown), lines


def render_data(runs: list[Run], markdown: bool) -> tuple[str, list[str]]:
    header = ["workload", "documents", "tokens", "iterations", "s/iter", "s per Mtoken/iter",
              "local s/iter", "peak MB", "fit MB", "fit MB per Mtoken", "other load"]
    body = []
    for r in runs:
        mtok = r.tokens / 1e6 if r.tokens else float("nan")
        body.append([r.workload.name + (f" ({r.note})" if r.note else ""), str(r.items),
                     str(r.tokens), str(r.iterations), fmt(r.per_iter, ".4f"),
                     fmt(r.per_mtoken, ".4f"),
                     fmt(r.local / r.iterations, ".4f") if r.iterations else "n/a",
                     fmt(r.peak_mb, ".0f"), fmt(r.fit_mb, ".0f"), fmt(r.fit_mb / mtok, ".1f"),
                     fmt(r.other_cores, ".2f")])
    lines = []
    for sweeps in dict.fromkeys(r.workload.sweeps for r in runs):
        done = [r for r in runs if np.isfinite(r.per_mtoken) and r.workload.sweeps == sweeps]
        if len(done) < 2:
            continue
        base = done[0]
        how = f"{sweeps} sweeps per document" if sweeps else "E-steps to convergence"
        for r in done[1:]:
            lines.append(
                f"{how}: x{r.workload.replicas} vs x{base.workload.replicas}: s per Mtoken per "
                f"iteration {fmt(r.per_mtoken / base.per_mtoken, '.2f')}x (1.00 = flat), "
                f"fit memory {fmt(r.fit_mb / base.fit_mb, '.2f')}x for "
                f"{r.tokens / base.tokens:.0f}x the tokens")
    return table(header, body, markdown), lines


def busy_iterations(n: int) -> int:
    """About a second of fitting whatever the size (0.2 ms an iteration at N = 200)."""
    return max(10, min(2000, 400_000 // n))


def run_busy(sizes: tuple[int, ...], repeats: int, control: bool = False) -> list[Run]:
    """Every size with one thread and with the default (every core), ``repeats`` pairs each,
    the pair's order alternating (1 then the default, the default then 1: a drift of the
    machine during a size's runs falls on both), while a busy-loop process holds one core.
    ``control``: one thread against one thread again (an A/A run: the resolution of the
    measurement, as the same configuration twice)."""
    import subprocess

    second = 1 if control else (os.cpu_count() or 1)

    def fit(n: int, threads: int, again: bool) -> Run:
        run = run_in_child(Workload("gmm", 5, n=n, d=2), threads, busy_iterations(n),
                           BUSY_SECONDS)
        run.note = run.note or ("again" if again else "")
        return run

    loop = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        time.sleep(0.5)  # the loop is spinning before the first fit
        return [fit(n, threads, again)
                for n in sizes for pair in range(repeats)
                for threads, again in ((1, False), (second, control))[::1 - 2 * (pair % 2)]]
    finally:
        loop.kill()
        loop.wait()


def render_busy(runs: list[Run], markdown: bool) -> tuple[str, list[str]]:
    """Per size: the median fit ms/iteration of each thread count, default / 1 thread, the
    spread of that ratio over the pairs, and how many local steps ran in threads."""
    header = ["workload", "threads", "iterations", "fits", "fit ms/iter (median)",
              "local ms/iter (median)", "default vs 1 thread", "pairs (min-max)",
              "calls in threads", "own cores", "other load"]
    body, lines = [], []
    for work in dict.fromkeys(r.workload for r in runs):
        ways = sorted({(r.threads, r.note) for r in runs if r.workload == work})
        groups = {t: [r for r in runs if r.workload == work and (r.threads, r.note) == t]
                  for t in ways}
        medians = {t: float(np.median([1e3 * r.per_iter for r in g]))
                   for t, g in groups.items()}
        one, default = ways[0], ways[-1]
        pairs = [a.per_iter / b.per_iter
                 for a, b in zip(groups[one], groups[default], strict=False)]
        for threads, group in groups.items():
            is_one = threads == one
            local = float(np.median([1e3 * r.local / r.iterations for r in group
                                     if r.iterations]))
            body.append([work.name, " ".join(str(x) for x in threads if x),
                         str(group[0].iterations), str(len(group)),
                         fmt(medians[threads], ".3f"), fmt(local, ".3f"),
                         "-" if is_one else fmt(medians[one] / medians[threads], ".2f") + "x",
                         "-" if is_one else f"{min(pairs):.2f}-{max(pairs):.2f}",
                         f"{sum(r.threaded for r in group)} of {sum(r.calls for r in group)}",
                         fmt(float(np.median([r.own_cores for r in group])), ".2f"),
                         fmt(float(np.median([r.other_cores for r in group])), ".2f")])
        ratio = medians[one] / medians[default]
        lines.append(f"{work.name}: {'one thread again' if default[1] else 'the default'} "
                     f"({default[0]} thread(s)) at {fmt(ratio, '.2f')}x of "
                     f"one thread's speed (target >= 1x; pairs {min(pairs):.2f}-"
                     f"{max(pairs):.2f}x): "
                     + ("met" if ratio >= 1 else f"missed by {100 * (1 - ratio):.0f}%"))
    return table(header, body, markdown), lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["threads", "data", "busy"],
                        help="run one part only")
    parser.add_argument("--busy", action="store_true",
                        help="(c) too: the default threads vs one beside a busy-loop process")
    parser.add_argument("--busy-n", type=int, nargs="+", default=list(BUSY_N),
                        help="(c) GMM points")
    parser.add_argument("--busy-control", action="store_true",
                        help="(c) as one thread against one thread again (an A/A run): the "
                             "measurement's resolution")
    parser.add_argument("--busy-repeats", type=int, default=3,
                        help="(c) fits per size and thread count (medians reported)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="(a) thread counts; the speedups are against the first")
    parser.add_argument("--corpus", choices=["nyt", "reuters"], default="nyt")
    parser.add_argument("--k", type=int, nargs="+", default=[20, 100], help="(a) LDA topics")
    parser.add_argument("--gmm-n", type=int, default=200_000, help="(a) GMM points (0: no GMM)")
    parser.add_argument("--gmm-k", type=int, default=20, help="(a) GMM components")
    parser.add_argument("--iters", type=int, default=8,
                        help=f"(a) iterations per fit (the first {CHOOSING} choose the way)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4],
                        help="(b) copies of the corpus")
    parser.add_argument("--data-k", type=int, default=20, help="(b) LDA topics")
    parser.add_argument("--data-iters", type=int, default=5, help="(b) iterations per fit")
    parser.add_argument("--data-threads", type=int, default=1, help="(b) threads")
    parser.add_argument("--sweeps", type=int, nargs="+", default=[0, 20],
                        help="LDA E-step sweeps per document: 0 runs each to convergence (the "
                             "real fit, whose work per document varies), N > 0 exactly N (the "
                             "same work per token: the kernel's cost)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: Reuters, K=10, GMM N=20000, 3 iterations")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = parser.parse_args(argv)
    if args.quick:
        args.corpus, args.k, args.gmm_n, args.data_k = "reuters", [10], 20_000, 10
        args.iters = args.data_iters = 3

    out = []
    bullet = "- " if args.markdown else ""
    if args.only == "busy" or (args.busy and args.only is None):
        log("(c) a busy machine")
        runs = run_busy(tuple(args.busy_n), args.busy_repeats, args.busy_control)
        text, lines = render_busy(runs, args.markdown)
        out += ["(c) A busy machine: gmm.cem (K=5, D=2), the default thread count vs one, "
                "beside a busy-loop process (one core), each fit in a fresh process", "", text,
                ""]
        out += [bullet + line for line in lines]
        out += [bullet + "fit ms/iter: the fit loop (FitResult.seconds, set-up excluded) / "
                "iterations, the median over the fits; default vs 1 thread: one thread's "
                "ms/iter / the default's (>= 1: the default is no slower); pairs: the same "
                "ratio for each pair of fits run one after the other (their order "
                "alternating), the spread the machine gives two runs of one thing; calls in "
                "threads: the local "
                "steps (rt.run_shares calls) of the timed fits that ran on the threads, the "
                f"rest serially in the calling thread; {LOAD_NOTE}", ""]
    if args.only not in ("data", "busy"):
        log("(a) threads")
        works = [Workload("lda", k, corpus=args.corpus, sweeps=n) for k in args.k
                 for n in args.sweeps]
        if args.gmm_n > 0:
            works.append(Workload("gmm", args.gmm_k, n=args.gmm_n))
        runs = [run_in_child(work, t, args.iters) for work in works for t in args.threads]
        spin, triad, gb1, gb2 = machine_ceiling()
        text, lines = render_threads(runs, args.markdown)
        lines.append(f"machine ceilings, 2 threads vs 1 on this machine: a numba prange loop of "
                     f"pure arithmetic (no memory traffic, nothing shared) {fmt(spin, '.2f')}x, "
                     "the most any local step can reach; the STREAM triad (memory bandwidth) "
                     f"{fmt(triad, '.2f')}x ({fmt(gb1, '.1f')} GB/s on 1 thread, "
                     f"{fmt(gb2, '.1f')} on 2), the most a kernel that streams its data "
                     "from memory can reach")
        out += [f"(a) Threads: local_step seconds over {args.iters} mean-field iterations, "
                "each configuration in a fresh process (BLAS at 1 thread)", "", text, ""]
        out += [bullet + line for line in lines]
        out += [bullet + "speedup (local) = local_step seconds with the first thread count / "
                "with this one; speedup (steady): the same over the iterations after the "
                f"first {CHOOSING}, where rt.run_shares runs serially, then in threads, to "
                "choose its way (a long fit runs at this speed); speedup (fit) the "
                "same for the whole fit loop (global step, "
                "ELBO and Python included); largest share: the largest fraction of the tokens "
                "(LDA) or points (GMM) in one thread's contiguous share of the items; own "
                "cores: the child's CPU seconds per second of the fit (about the thread count "
                "when its threads really ran at once); "
                f"{LOAD_NOTE}", ""]
    if args.only not in ("threads", "busy"):
        log("(b) data size")
        runs = [run_in_child(Workload("lda", args.data_k, corpus=args.corpus, replicas=r,
                                      sweeps=n), args.data_threads, args.data_iters)
                for n in args.sweeps for r in args.replicas]
        text, lines = render_data(runs, args.markdown)
        out += [f"(b) Data size: LDA, {args.corpus} replicated, K={args.data_k}, "
                f"{args.data_iters} iterations, {args.data_threads} thread(s)", "", text, ""]
        out += [bullet + line for line in lines]
        out += [bullet + "s/iter: the fit loop (FitResult.seconds, set-up excluded) / "
                "iterations; peak MB: the child's peak resident size (VmHWM); fit MB: the "
                "resident high-water mark during the fit minus the RSS after loading the "
                "corpus; "
                f"{LOAD_NOTE}", ""]

    import numba

    versions = (f"python {platform.python_version()}, numpy {np.__version__}, "
                f"numba {numba.__version__}, {platform.machine()}, {os.cpu_count()} CPUs")
    print("\n".join([versions, "", *out]).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
