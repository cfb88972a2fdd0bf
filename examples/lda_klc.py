"""LDA by the KL-corrected bound: VBEM vs Riemannian conjugate gradients (Hensman, Rattray &
Lawrence 2012, §5.2 and Table 2).

    python examples/lda_klc.py [--docs 1000] [--k 20] [--inits 5] [--max-iter 3000]
                               [--tol 1e-9] [--within 1e-4] [--own-within 1e-6]
                               [--alpha 1] [--eta 1] [--seed 0] [--threads 1] [--no-plot]

The paper fits LDA to 200 NIPS 2011 papers (vocabulary 2,000) by the KL-corrected bound:
the topics and the document proportions are collapsed (at their optimum given q(z)), the token
topic assignments q(z) are parameterised by softmax logits, and VBEM (unit steps along the
natural gradient) is compared with Riemannian conjugate gradients, Fletcher–Reeves (FR) and
Hestenes–Stiefel (HS), step length 1, each from the same 12 random initialisations, stopped when
the change of the bound or the Riemannian gradient falls below 10⁻⁶. Its Table 2: HS 644 ± 214
iterations (56 ± 19 min), FR 448 ± 100 (39 ± 9 min), VBEM 4,459 ± 1,296 (370 ± 105 min),
final bounds −1,998,780 ± 201, −1,998,743 ± 194, −1,998,732 ± 241: CG about ten times as fast
at about the same bound. The paper gives neither K nor its priors ("fixed, uninformative").

Here: the first --docs documents of the NYT corpus (cemodel.datasets.load_nyt),
stdlib_models/lda.cem with K = 20, `fit_klc(cg="hs" | "fr" | "none")` ("none": VBEM), all three
from the same initial logits (N(0, 1) draws from seed + i) for each of --inits initialisations.
Priors: α = η = 1 by default (uniform Dirichlets, our reading of "uninformative"); --alpha 0.1
--eta 0.01 are lda.cem's defaults (results below too). On a bound of 10⁶ nats the paper's 10⁻⁶
nats is very strict, so the tolerance, for both the change of the bound and the squared
Riemannian gradient norm ⟨g̃, g⟩, is --tol × |initial bound| (1e-9: about 1e-3 nats here).
Because the methods can stop in different optima, also printed: the iterations and seconds until
the bound is within --within (1e-4, 0.01 %) × |bound| of the best final bound that any method
reached from the same initialisation ("to best", with how many runs got there), and the
iterations until the run is within --own-within (1e-6) × |bound| of its own final bound ("to
own": the speed of convergence to whatever optimum it finds). Timings exclude numba compilation
(a warm-up fit comes first) and use one numba thread (--threads). examples/out/lda_klc.png: the
bound and the distance to the best final bound against iterations and seconds for the first
initialisation, every method.

Results, `python examples/lda_klc.py` (about 20 minutes on 2 cores shared with other jobs;
cemodel at commit e319b48; 1,000 documents, 142,470 tokens, 112,742 (document, word) pairs;
the tolerance is 1.2e-3 nats):

    init  HS: iterations  bound        FR: iterations  bound        VBEM: iterations  bound
    0           1212  -1,102,476.8            288  -1,102,522.8               752  -1,102,343.6
    1            568  -1,102,405.0            135  -1,102,408.9               648  -1,102,405.3
    2            974  -1,103,091.6            210  -1,103,048.0              1345  -1,103,098.9
    3           1527  -1,102,652.2            365  -1,102,718.8              1870  -1,102,652.2
    4            569  -1,102,531.9            162  -1,102,317.2               728  -1,102,531.9

    to convergence (mean ± sd over 5 initialisations)
    method    iterations       seconds  s/iter    restarts             final bound
    HS         970 ± 416  103.2 ± 40.1   0.108   0.2 ± 0.4    -1,102,631.5 ± 272.6
    FR          232 ± 94    23.6 ± 9.3   0.104  16.8 ± 5.9    -1,102,603.1 ± 290.3
    VBEM     1,069 ± 527  106.2 ± 50.2   0.100   0.0 ± 0.0    -1,102,606.4 ± 299.9

    to the best final bound of the initialisation (any method's; within 1e-04 × |bound|)
    and to the run's own final bound (within 1e-06 × |bound|)
    method  reached    iterations       seconds  to own: iterations
    HS       3 of 5      232 ± 54    25.8 ± 6.0           759 ± 380
    FR       4 of 5      120 ± 52    13.1 ± 5.5            195 ± 92
    VBEM     4 of 5     336 ± 100   33.2 ± 11.9           908 ± 500

    CG / VBEM iterations  seconds  to own  final bound vs VBEM's (level: within 1e-06 × |bound|)
    HS              0.91     0.97    0.84  higher on 1, lower on 1, level on 3
    FR              0.22     0.22    0.21  higher on 2, lower on 3, level on 0

    largest decrease of the bound in one iteration: HS 0, FR 0, VBEM 0 nats

With lda.cem's priors, `python examples/lda_klc.py --alpha 0.1 --eta 0.01 --no-plot` (about
9 minutes; tolerance 1.4e-3 nats), since the VBEM warm-up of `riemannian_cg` (session 26: the
conjugate directions start once a VBEM step changes the bound by less than 1e-3 of it):

    to convergence (mean ± sd over 5 initialisations)
    method    iterations       seconds  s/iter    restarts             final bound
    HS          223 ± 30    24.8 ± 6.6   0.112  15.6 ± 3.4  -1,106,742.0 ± 1,177.5
    FR          179 ± 33    19.3 ± 7.9   0.105  34.6 ± 4.8  -1,106,736.1 ± 1,187.4
    VBEM       474 ± 104   47.9 ± 16.1   0.101   0.0 ± 0.0  -1,106,819.3 ± 1,184.9

    to the best final bound of the initialisation (any method's; within 1e-04 × |bound|)
    and to the run's own final bound (within 1e-06 × |bound|)
    method  reached    iterations       seconds  to own: iterations
    HS       5 of 5      102 ± 18    11.8 ± 4.4            219 ± 29
    FR       5 of 5        93 ± 7     9.7 ± 1.7            174 ± 31
    VBEM     4 of 5      387 ± 70    38.7 ± 7.6           472 ± 103

    CG / VBEM iterations  seconds  to own  final bound vs VBEM's (level: within 1e-06 × |bound|)
    HS              0.47     0.52    0.46  higher on 5, lower on 0, level on 0
    FR              0.38     0.40    0.37  higher on 5, lower on 0, level on 0

    largest decrease of the bound in one iteration: HS 0, FR 0, VBEM 0 nats

What this shows. With flat priors Fletcher–Reeves converges in 4.6 times fewer iterations
than VBEM (per initialisation 2.6 to 6.4 times; 4.5 times less time) at the same bound on
average: −1,102,603 ± 290 against −1,102,606 ± 300, higher on two initialisations (by 51 and
215 nats) and lower on three (by 4 to 179 nats), and it gets within 0.01 % of the best bound
as often as VBEM (4 of 5) in 120 iterations against 336. That is the paper's direction, not its
size (about 10 times), and short of 5 times. Hestenes–Stiefel, the paper's other fast method,
is hardly faster than VBEM here (0.91 of its iterations): it almost never restarts and ends in
VBEM's own optimum on 3 of 5 initialisations (the flat-prior runs above predate the VBEM
warm-up). With lda.cem's sparse priors, before the warm-up, both CG methods stopped 2.6 to 3.6
times sooner than VBEM but always in a worse optimum, 0.7 to 1.0 % below VBEM's: with η = 0.01,
E[log β] of a word that a topic does not use is about ψ(0.01) ≈ −100, so the rows of q(z)
saturate early (the logits of a row span over 100 nats), and CG's extrapolated unit steps,
ahead of VBEM in the first few dozen iterations, committed tokens to topics that VBEM would
still move. With the warm-up (the table above) both end above VBEM on every initialisation,
FR in 0.38 of its iterations, and reach the best bound's neighbourhood in 93 iterations
against 387. The bound never decreased in any run (the optimiser restarts at the natural
gradient when a step would lower it). One iteration costs about 0.1 s (112,742 pairs × 20
topics, one thread) for every method. HS's iteration counts are sensitive to round-off: before
cemodel e319b48 summed the CG inner products in another order, the same runs took 130 to 248
HS iterations with sparse priors (to the same bounds but for init 4) and 1,492 on init 3 with
flat priors. Differences from the paper that may matter: 1,000 short news articles (142 tokens
each) instead of 200 full papers, K = 20 (not stated there), our reading of "uninformative"
priors, 5 initialisations instead of 12, and a relative stopping tolerance.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

import cemodel
from cemodel.datasets import load_nyt

MODEL = Path(__file__).resolve().parents[1] / "stdlib_models" / "lda.cem"
OUT = Path(__file__).resolve().parent / "out"
METHODS = ("hs", "fr", "none")
NAMES = {"hs": "Hestenes-Stiefel", "fr": "Fletcher-Reeves", "none": "VBEM"}
SHORT = {"hs": "HS", "fr": "FR", "none": "VBEM"}


@dataclass
class Run:
    """One fit: the bound after each iteration (index 0: the start), the wall seconds at which
    each was reached, whether it converged before --max-iter, and its restarts."""

    bounds: np.ndarray
    seconds: np.ndarray
    converged: bool
    restarts: int

    @property
    def iterations(self) -> int:
        return len(self.bounds) - 1

    @property
    def final(self) -> float:
        return float(self.bounds[-1])

    def first_reaching(self, target: float) -> int | None:
        """The first iteration whose bound is at least ``target`` (None if none is)."""
        hits = np.flatnonzero(self.bounds >= target)
        return int(hits[0]) if hits.size else None

    def largest_decrease(self) -> float:
        """The largest drop of the bound from one iteration to the next (0 if it never drops)."""
        return float(max(0.0, -np.diff(self.bounds).min(initial=0.0)))


def fit(model, X, cg: str, seed: int, options: dict) -> Run:
    """A KLC fit from the initial q(z) drawn from ``seed`` (the same for every ``cg``)."""
    seconds = [0.0]
    result = model.fit_klc({"w": X}, cg=cg, seed=seed, **options,
                           callback=lambda iteration, bound, norm, clock: seconds.append(clock))
    return Run(np.asarray(result.elbo), np.asarray(seconds), bool(result.converged),
               int(result.notes["restarts"]))


def mean_sd(values: Sequence[float], digits: int = 0) -> str:
    """'mean ± sd' (sd with n − 1 degrees of freedom), '—' for no values."""
    if len(values) == 0:
        return "—"
    values = np.asarray(values, dtype=float)
    sd = values.std(ddof=1) if len(values) > 1 else 0.0
    return f"{values.mean():,.{digits}f} ± {sd:,.{digits}f}"


def report(runs: dict[str, list[Run]], within: float, own_within: float) -> None:
    """Print the comparison: per method mean ± sd over the initialisations, then CG / VBEM."""
    inits = len(runs["none"])
    best = [max(runs[cg][i].final for cg in METHODS) for i in range(inits)]
    print(f"\nto convergence (mean ± sd over {inits} initialisations)")
    print(f"{'method':6s} {'iterations':>13s} {'seconds':>13s} {'s/iter':>7s} {'restarts':>11s} "
          f"{'final bound':>23s}")
    for cg in METHODS:
        stopped = sum(not run.converged for run in runs[cg])
        print(f"{SHORT[cg]:6s} {mean_sd([run.iterations for run in runs[cg]]):>13s} "
              f"{mean_sd([run.seconds[-1] for run in runs[cg]], 1):>13s} "
              f"{np.mean([run.seconds[-1] / run.iterations for run in runs[cg]]):7.3f} "
              f"{mean_sd([run.restarts for run in runs[cg]], 1):>11s} "
              f"{mean_sd([run.final for run in runs[cg]], 1):>23s}"
              + (f"  ({stopped} hit --max-iter)" if stopped else ""))
    print(f"\nto the best final bound of the initialisation (any method's; within {within:.0e} "
          f"× |bound|)\nand to the run's own final bound (within {own_within:.0e} × |bound|)")
    print(f"{'method':6s} {'reached':>8s} {'iterations':>13s} {'seconds':>13s} "
          f"{'to own: iterations':>19s}")
    own = {cg: [run.first_reaching(run.final - own_within * abs(run.final)) for run in runs[cg]]
           for cg in METHODS}
    for cg in METHODS:
        hits = [(run, run.first_reaching(b - within * abs(b)))
                for run, b in zip(runs[cg], best, strict=True)]
        hits = [(run, i) for run, i in hits if i is not None]
        print(f"{SHORT[cg]:6s} {f'{len(hits)} of {inits}':>8s} "
              f"{mean_sd([i for _, i in hits]):>13s} "
              f"{mean_sd([run.seconds[i] for run, i in hits], 1):>13s} "
              f"{mean_sd(own[cg]):>19s}")
    print(f"\n{'CG / VBEM':9s} {'iterations':>10s} {'seconds':>8s} {'to own':>7s}  "
          f"final bound vs VBEM's (level: within {own_within:.0e} × |bound|)")
    vbem = runs["none"]
    for cg in METHODS[:-1]:
        differences = [run.final - base.final for run, base in zip(runs[cg], vbem, strict=True)]
        level = [own_within * abs(base.final) for base in vbem]
        higher = sum(d > tie for d, tie in zip(differences, level, strict=True))
        lower = sum(d < -tie for d, tie in zip(differences, level, strict=True))
        ratios = [np.mean([run.iterations for run in runs[cg]])
                  / np.mean([run.iterations for run in vbem]),
                  np.mean([run.seconds[-1] for run in runs[cg]])
                  / np.mean([run.seconds[-1] for run in vbem]),
                  np.mean(own[cg]) / np.mean(own["none"])]
        print(f"{SHORT[cg]:9s} {ratios[0]:10.2f} {ratios[1]:8.2f} {ratios[2]:7.2f}  "
              f"higher on {higher}, lower on {lower}, level on {inits - higher - lower}")
    drops = {cg: max(run.largest_decrease() for run in runs[cg]) for cg in METHODS}
    print("\nlargest decrease of the bound in one iteration: "
          + ", ".join(f"{SHORT[cg]} {drops[cg]:.2g}" for cg in METHODS) + " nats")


def plot(runs: dict[str, Run], title: str, path: Path) -> None:
    """The bound (top) and its distance to the best final bound (bottom, log scale) against
    iterations and seconds, for one initialisation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = max(run.final for run in runs.values())
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex="col")
    for cg, run in runs.items():
        for column, x in enumerate((np.arange(len(run.bounds)), run.seconds)):
            axes[0, column].plot(x, run.bounds, label=NAMES[cg])
            axes[1, column].semilogy(x, np.maximum(best - run.bounds, 1e-3), label=NAMES[cg])
    low = min(run.bounds[min(len(run.bounds) - 1, 10)] for run in runs.values())
    for column, label in enumerate(("iteration", "seconds")):
        axes[0, column].set_ylim(low, best + 0.05 * (best - low))
        axes[1, column].set_xlabel(label)
        for row in range(2):
            axes[row, column].grid(alpha=0.3)
    axes[0, 0].set_ylabel("KL-corrected bound (nats)")
    axes[1, 0].set_ylabel("best final bound − bound (nats)")
    axes[0, 0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"saved {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000, help="fit the first N NYT documents")
    parser.add_argument("--k", type=int, default=20, help="topics")
    parser.add_argument("--inits", type=int, default=5, help="random initialisations")
    parser.add_argument("--max-iter", type=int, default=3000)
    parser.add_argument("--tol", type=float, default=1e-9,
                        help="converged when the bound changes by less than tol × |initial "
                             "bound| nats in an iteration, or the squared Riemannian gradient "
                             "norm falls below that")
    parser.add_argument("--within", type=float, default=1e-4,
                        help="the fraction of |bound| for the 'to best' columns")
    parser.add_argument("--own-within", type=float, default=1e-6,
                        help="the fraction of |bound| for the 'to own' column")
    parser.add_argument("--alpha", type=float, default=1.0,
                        help="document-topic prior (lda.cem's default: 0.1)")
    parser.add_argument("--eta", type=float, default=1.0,
                        help="topic-word prior (lda.cem's default: 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation i uses seed + i")
    parser.add_argument("--threads", type=int, default=1,
                        help="numba threads (at most NUMBA_NUM_THREADS; 1 for stable timing)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    numba.set_num_threads(args.threads)

    X, _ = load_nyt()
    X = X[:args.docs]
    hypers = {"alpha": args.alpha, "eta": args.eta}
    print(f"NYT, first {X.shape[0]} documents: {X.shape[1]} words, {int(X.sum()):,} tokens, "
          f"{X.nnz:,} (document, word) pairs; K = {args.k}, alpha = {args.alpha}, "
          f"eta = {args.eta}; {numba.get_num_threads()} numba threads", flush=True)
    model = cemodel.compile(MODEL, K=args.k)
    clock = time.perf_counter()
    for cg in METHODS:  # numba compiles (or loads) the kernels outside the timed fits
        model.fit_klc({"w": X[:20]}, cg=cg, hypers=hypers, max_iter=2)
    print(f"warm-up {time.perf_counter() - clock:.1f} s", flush=True)

    runs: dict[str, list[Run]] = {cg: [] for cg in METHODS}
    for init in range(args.inits):
        seed = args.seed + init
        # the bound at the initial q(z) (from a one-iteration fit) scales the tolerance
        start = model.fit_klc({"w": X}, cg="none", hypers=hypers, seed=seed, max_iter=1).elbo[0]
        options = {"hypers": hypers, "max_iter": args.max_iter, "tol": args.tol * abs(start),
                   "gtol": args.tol * abs(start)}
        for cg in METHODS:
            run = fit(model, X, cg, seed, options)
            runs[cg].append(run)
            print(f"  init {init} {NAMES[cg]:17s} {run.iterations:5d} iterations "
                  f"{run.seconds[-1]:7.1f} s  bound {run.final:,.1f}  restarts {run.restarts}"
                  f"{'' if run.converged else '  (hit --max-iter)'}", flush=True)
    report(runs, args.within, args.own_within)
    if not args.no_plot:
        plot({cg: runs[cg][0] for cg in METHODS},
             f"LDA (KL-corrected bound), NYT first {X.shape[0]} documents, K = {args.k}, "
             f"alpha = {args.alpha}, eta = {args.eta}, initialisation seed {args.seed}",
             OUT / "lda_klc.png")


if __name__ == "__main__":
    main()
