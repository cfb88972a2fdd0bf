"""Iterations and seconds to the same bound: cemodel's KLC-CG next to bayespy's collapsed
Riemannian conjugate gradients, on a mixture of Gaussians.

The data of Hensman, Rattray & Lawrence (2012, §5.1; Honkela et al. 2010): ``--n`` points
from five 2-D unit-covariance Gaussians with equal weights, centred at (0, 0) and (±R, ±R),
one data set per R. The model is ``stdlib_models/gmm_means.cem`` with K = ``--k`` components:
pi ~ Dirichlet(1), mu[k] ~ N(0, precision 0.01 I), z[n] ~ Cat(pi), x[n] ~ N(mu[z[n]], I). Both
libraries integrate out (collapse) pi and mu and optimise the softmax logits of q(z):

* ``cemodel KLC-CG (fr)``: ``fit_klc(cg="fr")`` (also ``pr``, ``hs`` with ``--cg``), unit
  steps, restart at the natural gradient when the bound drops;
* ``bayespy RCG (fr)``: ``VB.optimize("z", collapsed=["mu", "pi"], riemannian=True,
  method="fletcher-reeves")``, whose step length starts at 1, grows by √2 after every accepted
  step and halves when the bound drops (bayespy 0.6 has Fletcher–Reeves and plain gradients
  only);
* references, plain VBEM: ``fit_klc(cg="none")`` and bayespy's ``VB.update("z", "mu", "pi")``.

Every method starts from the same q(z) = softmax(logits), logits ~ N(0, 1) drawn per start
(``--starts`` of them per R, shared by all methods), and runs to a change of the bound below
``--tol`` nats (bayespy: the relative tolerance ``tol / |starting bound|``, never looser) or
``--max-iter`` iterations. The script first checks that the two libraries compute the same
bound: at every start (pi and mu at their optimum given q(z)) and at bayespy's final q(z), it
evaluates cemodel's ``_klc_bound`` and bayespy's ``compute_lowerbound``; the offset measured at
the start is added to bayespy's trace (it is ~1e-11 nats: both include every normalising
constant).

Per run: iterations and seconds to come within max(1e-3 nats, 1e-6 |bound|) of the run's own
final bound ("to converge"), and to come within 10 nats of the best bound any method found from
that start ("to best - 10"; runs stuck in a worse local optimum never do). Seconds: cemodel's
from the ``fit_klc`` callback (its clock starts after the first bound and gradient, data
binding and numba compilation excluded by a warm-up fit); bayespy's the sum of its per-iteration
``VB.cputime`` (each iteration from its gradient to its bound, model construction excluded).
The table gives medians over starts; the ratios cemodel / bayespy are medians of per-start
ratios (< 1: cemodel is faster). Single thread everywhere.

    python benchmarks/klc_mog.py                             # R = 1..5, N = 500, 10 starts
    python benchmarks/klc_mog.py --r 3 --starts 2            # a quick smoke run
    python benchmarks/klc_mog.py --cg fr pr --markdown       # a markdown table for RESULTS.md
"""

from __future__ import annotations

import os

# Single-threaded everywhere, set before numpy, scipy or numba load their thread pools.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

import cemodel  # noqa: E402

GMM_MODEL = REPO / "stdlib_models" / "gmm_means.cem"
D = 2  # data dimension
PRIOR_PRECISION = 0.01  # of the means (the model file's P0 = 0.01 I)
CONVERGED_NATS = 1e-3  # "converged": within max(1e-3 nats, 1e-6 |bound|) of the final bound
CONVERGED_RELATIVE = 1e-6
BEST_NATS = 10.0  # "best - 10": within 10 nats of the best bound found from the start
DROP_NATS = 1e-6  # a bound decrease larger than this counts as a drop (bayespy's warning)
BAYESPY_FR = "bayespy RCG (fr)"
BAYESPY_VB = "bayespy VB"
CEMODEL_VBEM = "cemodel VBEM (cg=none)"


def cemodel_name(cg: str) -> str:
    return f"cemodel KLC-CG ({cg})"


@dataclass
class Run:
    """One method from one start: the bound after each iteration (index 0: the start) and the
    seconds since the optimiser started at each of them."""

    method: str
    r: float
    start: int
    bounds: np.ndarray
    seconds: np.ndarray
    converged: bool

    @property
    def iterations(self) -> int:
        return len(self.bounds) - 1

    @property
    def final(self) -> float:
        return float(self.bounds[-1])

    @property
    def drops(self) -> int:
        return int(np.sum(np.diff(self.bounds) < -DROP_NATS))

    def first_reaching(self, target: float) -> int | None:
        """The first iteration at which the bound is at least ``target``."""
        hits = np.flatnonzero(self.bounds >= target)
        return int(hits[0]) if hits.size else None

    def to_converge(self) -> int:
        """The first iteration within max(1e-3 nats, 1e-6 |bound|) of the final bound."""
        slack = max(CONVERGED_NATS, CONVERGED_RELATIVE * abs(self.final))
        hit = self.first_reaching(self.final - slack)
        return self.iterations if hit is None else hit


@dataclass
class Row:
    """One method at one R, summarised over the starts."""

    r: float
    method: str
    starts: int
    capped: int  # runs that stopped at --max-iter
    iters_conv: float
    secs_conv: float
    reached_best: int
    iters_best: float
    secs_best: float
    final_median: float
    final_max: float
    per_iter: float
    drops: int


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_data(r: float, n: int, seed: int) -> np.ndarray:
    """``n`` points from five unit-covariance 2-D Gaussians, equal weights, centred at (0, 0)
    and (±r, ±r)."""
    rng = np.random.default_rng([seed, int(round(1000 * r))])
    centres = np.array([[0.0, 0.0], [r, r], [r, -r], [-r, r], [-r, -r]])
    return centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, D))


def start_logits(r: float, start: int, n: int, k: int, seed: int) -> np.ndarray:
    """The softmax logits of q(z) for one start: N(0, 1) draws, shared by every method."""
    rng = np.random.default_rng([seed, int(round(1000 * r)), start, 1])
    return rng.standard_normal((n, k))


def run_cemodel(module: ModuleType, X: np.ndarray, logits: np.ndarray, cg: str, method: str,
                r: float, start: int, max_iter: int, tol: float) -> Run:
    stamps = [0.0]

    def record(iteration: int, bound: float, norm: float, seconds: float) -> None:
        stamps.append(seconds)

    result = module.fit_klc({"x": X}, cg=cg, max_iter=max_iter, tol=tol, gtol=1e-6,
                            init={"z": logits}, callback=record)
    bounds = np.asarray(result.elbo, dtype=np.float64)
    if len(bounds) != len(stamps):
        raise RuntimeError(f"{method}: {len(bounds)} bounds but {len(stamps) - 1} callbacks")
    return Run(method, r, start, bounds, np.array(stamps), bool(result.converged))


class BayespyMixture:
    """bayespy's version of gmm_means.cem on one data set: Dirichlet(1) weights, Gaussian
    means with prior mean 0 and precision 0.01 I, known identity precision, ``Mixture``."""

    def __init__(self, X: np.ndarray, k: int) -> None:
        self.X = X
        self.k = k

    def at(self, logits: np.ndarray):
        """A fresh model with q(z) = softmax(logits) and pi, mu at their optimum given q(z)."""
        from bayespy.inference import VB
        from bayespy.nodes import Categorical, Dirichlet, Gaussian, Mixture

        n, d = self.X.shape
        pi = Dirichlet(np.ones(self.k), name="pi")
        z = Categorical(pi, plates=(n,), name="z")
        mu = Gaussian(np.zeros(d), PRIOR_PRECISION * np.eye(d), plates=(self.k,), name="mu")
        x = Mixture(z, Gaussian, mu, np.eye(d), name="x")
        x.observe(self.X)
        Q = VB(x, mu, z, pi)
        z.set_parameters([np.array(logits, dtype=np.float64)])
        mu.update()
        pi.update()
        return Q

    def run(self, logits: np.ndarray, method: str, r: float, start: int, max_iter: int,
            tol: float, offset: float) -> tuple[Run, np.ndarray]:
        """One fit from softmax(logits); returns the run (bounds shifted by ``offset``) and
        the final logits of q(z)."""
        Q = self.at(logits)
        first = Q.compute_lowerbound()
        relative_tol = tol / abs(first)
        with warnings.catch_warnings():
            # "Lower bound decreased": counted from the trace (Run.drops) instead
            warnings.simplefilter("ignore", category=UserWarning)
            if method == BAYESPY_FR:
                Q.optimize("z", collapsed=["mu", "pi"], maxiter=max_iter, riemannian=True,
                           method="fletcher-reeves", tol=relative_tol, verbose=False)
            else:
                Q.update("z", "mu", "pi", repeat=max_iter, tol=relative_tol, verbose=False)
        bounds = np.concatenate([[first], Q.L[:Q.iter]]) + offset
        seconds = np.concatenate([[0.0], np.cumsum(Q.cputime[:Q.iter])])
        return Run(method, r, start, bounds, seconds, bool(Q.converged)), Q["z"].phi[0].copy()


def summarise(runs: list[Run], best: dict[tuple[float, int], float],
              max_iter: int) -> Row:
    """The median over starts of one method's runs at one R."""
    conv = [run.to_converge() for run in runs]
    best_hits = [(run, run.first_reaching(best[run.r, run.start] - BEST_NATS)) for run in runs]
    best_hits = [(run, i) for run, i in best_hits if i is not None]
    finals = np.array([run.final for run in runs])
    iterations = sum(run.iterations for run in runs)
    return Row(
        r=runs[0].r, method=runs[0].method, starts=len(runs),
        capped=sum(not run.converged and run.iterations >= max_iter for run in runs),
        iters_conv=float(np.median(conv)),
        secs_conv=float(np.median([run.seconds[i] for run, i in zip(runs, conv, strict=True)])),
        reached_best=len(best_hits),
        iters_best=float(np.median([i for _, i in best_hits])) if best_hits else float("nan"),
        secs_best=(float(np.median([run.seconds[i] for run, i in best_hits])) if best_hits
                   else float("nan")),
        final_median=float(np.median(finals)), final_max=float(finals.max()),
        per_iter=sum(run.seconds[-1] for run in runs) / iterations if iterations else
        float("nan"),
        drops=sum(run.drops for run in runs),
    )


def paired_ratio(runs: list[Run], ours: str, theirs: str, r: float,
                 seconds_of: Callable[[Run], float | None]) -> tuple[float, int]:
    """The median over starts of seconds_of(ours) / seconds_of(theirs), and how many starts
    had both."""
    by_start = {(run.method, run.start): run for run in runs if run.r == r}
    ratios = []
    for (method, start), run in by_start.items():
        if method != ours or (theirs, start) not in by_start:
            continue
        a, b = seconds_of(run), seconds_of(by_start[theirs, start])
        if a is not None and b is not None and b > 0:
            ratios.append(a / b)
    return (float(np.median(ratios)) if ratios else float("nan")), len(ratios)


def fmt(value: float, digits: str) -> str:
    return "n/a" if not np.isfinite(value) else format(value, digits)


def render(rows: list[Row], markdown: bool) -> str:
    header = ["R", "method", "iters to converge", "s to converge", "reached best-10",
              "iters to best-10", "s to best-10", "final bound (median)", "final bound (max)",
              "ms/iter", "capped", "drops"]
    body = [[fmt(row.r, "g"), row.method, fmt(row.iters_conv, ".0f"), fmt(row.secs_conv, ".4f"),
             f"{row.reached_best}/{row.starts}", fmt(row.iters_best, ".0f"),
             fmt(row.secs_best, ".4f"), fmt(row.final_median, ".3f"), fmt(row.final_max, ".3f"),
             fmt(1000 * row.per_iter, ".3f"), str(row.capped), str(row.drops)] for row in rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join(["---:", "---"] + ["---:"] * (len(header) - 2)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 1 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ratios(runs: list[Run], rows: list[Row], cgs: list[str],
           best: dict[tuple[float, int], float], markdown: bool) -> str:
    """Per R, cemodel / bayespy: seconds to converge, seconds to best - 10, s/iter."""

    def to_converge(run: Run) -> float:
        return float(run.seconds[run.to_converge()])

    def to_best(run: Run) -> float | None:
        i = run.first_reaching(best[run.r, run.start] - BEST_NATS)
        return None if i is None else float(run.seconds[i])

    per_iter = {(row.r, row.method): row.per_iter for row in rows}
    pairs = [(cemodel_name(cg), BAYESPY_FR) for cg in cgs] + [(CEMODEL_VBEM, BAYESPY_VB)]
    bullet = "- " if markdown else ""
    lines = []
    for r in sorted({run.r for run in runs}):
        for ours, theirs in pairs:
            conv, n_conv = paired_ratio(runs, ours, theirs, r, to_converge)
            reach, n_reach = paired_ratio(runs, ours, theirs, r, to_best)
            speed = per_iter[r, ours] / per_iter[r, theirs]
            lines.append(f"{bullet}R={r:g}, {ours} / {theirs}: s to converge "
                         f"{fmt(conv, '.3f')} ({n_conv} starts), s to best-10 "
                         f"{fmt(reach, '.3f')} ({n_reach} starts with both), "
                         f"s/iter {fmt(speed, '.3f')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--r", type=float, nargs="+", default=[1, 2, 3, 4, 5],
                        help="separations R of the cluster centres")
    parser.add_argument("--n", type=int, default=500, help="points per data set")
    parser.add_argument("--k", type=int, default=8, help="mixture components")
    parser.add_argument("--starts", type=int, default=10, help="random starts per R")
    parser.add_argument("--cg", choices=["fr", "pr", "hs"], nargs="+", default=["fr"],
                        help="cemodel's conjugate directions (bayespy: Fletcher-Reeves)")
    parser.add_argument("--max-iter", type=int, default=2000, help="iterations per fit, at most")
    parser.add_argument("--tol", type=float, default=1e-6,
                        help="stop when the bound changes by less (nats)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the starts")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)

    import bayespy
    import numba
    from threadpoolctl import threadpool_limits

    module = cemodel.compile(GMM_MODEL, K=args.k)
    methods = [cemodel_name(cg) for cg in args.cg] + [BAYESPY_FR, CEMODEL_VBEM, BAYESPY_VB]
    runs: list[Run] = []
    start_gaps: list[float] = []  # cemodel - bayespy at each start
    final_gaps: list[float] = []  # ... and at bayespy's final q(z)
    with threadpool_limits(limits=1):
        for r in args.r:
            X = make_data(r, args.n, args.seed)
            state = module._prepare({"x": X}, None, None, 0, None, "random", 1, 0.0)
            mixture = BayespyMixture(X, args.k)
            warm = start_logits(r, args.starts, args.n, args.k, args.seed)  # not measured
            for cg in [*args.cg, "none"]:  # numba compilation, then the first-call overheads
                run_cemodel(module, X, warm, cg, "warm-up", r, -1, 5, args.tol)
            for method in (BAYESPY_FR, BAYESPY_VB):
                mixture.run(warm, method, r, -1, 5, args.tol, 0.0)
            for start in range(args.starts):
                logits = start_logits(r, start, args.n, args.k, args.seed)
                offset = module._klc_bound(state, [logits]) - \
                    mixture.at(logits).compute_lowerbound()
                start_gaps.append(offset)
                for method in methods:
                    if method.startswith("bayespy"):
                        run, final_logits = mixture.run(logits, method, r, start, args.max_iter,
                                                        args.tol, offset)
                        if method == BAYESPY_FR:
                            final_gaps.append(module._klc_bound(state, [final_logits])
                                              - run.final + offset)
                    else:
                        cg = "none" if method == CEMODEL_VBEM else method.split("(")[1][:-1]
                        run = run_cemodel(module, X, logits, cg, method, r, start, args.max_iter,
                                          args.tol)
                    runs.append(run)
                log(f"R={r:g} start {start}: " + ", ".join(
                    f"{run.method} {run.final:.3f} ({run.iterations} it, {run.seconds[-1]:.3f} s)"
                    for run in runs if run.r == r and run.start == start))

    best = {}
    for run in runs:
        key = (run.r, run.start)
        best[key] = max(best.get(key, -np.inf), float(run.bounds.max()))
    rows = [summarise([run for run in runs if run.r == r and run.method == method], best,
                      args.max_iter)
            for r in args.r for method in methods]

    title = (f"Mixture of 5 unit Gaussians at (0,0), (±R,±R); N={args.n}, K={args.k}, "
             f"{args.starts} starts per R (same q(z) for every method), tol={args.tol:g} nats, "
             f"max {args.max_iter} iterations, 1 thread")
    versions = (f"python {platform.python_version()}, numpy {np.__version__}, "
                f"numba {numba.__version__}, bayespy {bayespy.__version__}, "
                f"{platform.machine()}")
    agreement = (f"bound check, cemodel - bayespy: at the {len(start_gaps)} starts max "
                 f"|diff| {np.max(np.abs(start_gaps)):.2e} nats (median "
                 f"{np.median(start_gaps):.2e}); at bayespy's final q(z) max |diff| "
                 f"{np.max(np.abs(final_gaps)):.2e} nats")
    legend = ("medians over starts; 'converge': within max(1e-3 nats, 1e-6 |bound|) of the "
              "run's final bound; 'best-10': within 10 nats of the best bound any method found "
              "from that start (medians over the runs that reach it); capped: runs stopped at "
              "max-iter; drops: iterations that lowered the bound by > 1e-6 nats; ratios "
              "cemodel / bayespy are medians of per-start ratios (< 1: cemodel faster)")
    table = render(rows, markdown=args.markdown)
    summary = ratios(runs, rows, args.cg, best, markdown=args.markdown)
    if args.markdown:
        print(f"**{title}**  \n{versions}\n\n{table}\n\n{summary}\n\n{agreement}\n\n{legend}")
    else:
        print(f"{title}\n{versions}\n\n{table}\n\n{summary}\n{agreement}\n{legend}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
