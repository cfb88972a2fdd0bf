"""Seconds per mean-field iteration of cemodel's compiled LDA next to scikit-learn's batch LDA
(and, for reference, tomotopy's collapsed Gibbs sampler per sweep).

All run single-threaded (BLAS, OpenMP and numba limited to one thread) on the same 80% of
the documents (``cemodel.evaluation.split_documents(seed=0)``), with alpha = 0.1 and
eta = 0.01: cemodel and scikit-learn for ``--iters`` full-batch iterations (no early stopping),
tomotopy's ``LDAModel`` for ``--tomotopy-iters`` Gibbs sweeps (one worker, alpha not
optimised). ``cemodel-passes`` is cemodel with BigARTM's fixed number of inner sweeps per
document (``--bigartm-doc-passes``, ``max_local_iter`` with ``local_tol = 0``), so that the
two are compared at equal work per iteration. Per-iteration time is the wall-clock time of
the whole ``fit`` call divided by its iterations (tomotopy: of its ``train`` call, per sweep);
cemodel's numba compilation is excluded by a small warm-up fit first. Held-out perplexity is
``cemodel.evaluation.completion_perplexity`` on the other 20%, from each model's posterior-mean
topics. Every (method, K) fit runs in a fresh process, which reports its peak memory and what
the fit adds (``benchmarks/_common.py``).

    python benchmarks/lda_mf.py                       # NYT corpus, K = 20 and 100, 30 iterations
    python benchmarks/lda_mf.py --corpus reuters --k 10 --iters 5   # a quick smoke run
    python benchmarks/lda_mf.py --corpus gcide --max-docs 2000 --k 10 --iters 3  # GCIDE, cut
    python benchmarks/lda_mf.py --k 20 --markdown     # a markdown table for RESULTS.md
"""

from __future__ import annotations

import os

# Single-threaded everywhere, set before numpy, scipy or numba load their thread pools (a fit's
# process inherits them, and sets them again when it imports this file).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import _bigartm  # noqa: E402
import _common  # noqa: E402
import numpy as np  # noqa: E402

from cemodel import evaluation  # noqa: E402
from cemodel.datasets import CORPORA  # noqa: E402
from cemodel.errors import CemError  # noqa: E402

LDA_MODEL = REPO / "stdlib_models" / "lda.cem"
ALPHA = 0.1
ETA = 0.01
# perplexities within 1% count as equal: different random starts move a fit by about that much
PERPLEXITY_TIE = 0.01
METHODS = ("cemodel", "cemodel-passes", "cemodel-starts", "sklearn", "tomotopy", "bigartm",
           "bigartm-map")
NAMES = {"cemodel": "cemodel (compiled MF)",
         "cemodel-passes": "cemodel (compiled MF), BigARTM's fixed inner passes per document",
         "cemodel-starts": "cemodel (compiled MF), the best of several starts",
         "sklearn": "scikit-learn batch",
         "tomotopy": "tomotopy LDAModel (Gibbs, s/sweep, not per VB iteration)",
         "bigartm": "BigARTM offline, tau = prior",
         "bigartm-map": "BigARTM offline, tau = prior - 1 (MAP)"}
# BigARTM's regulariser coefficients per method: (tau_phi, tau_theta); see _bigartm.py
BIGARTM_TAUS = {"bigartm": (ETA, ALPHA), "bigartm-map": (ETA - 1.0, ALPHA - 1.0)}
BIGARTM_SPEED_TARGET = 1.2  # issue 22: >= 1.2x BigARTM's per-iteration speed


@dataclass
class Row:
    method: str  # a key of METHODS
    k: int
    iterations: int  # tomotopy: Gibbs sweeps
    seconds: float
    perplexity: float
    note: str = ""
    seed: int = 0
    # every --eval-every iterations: (iteration, the fit's seconds so far, perplexity)
    curve: list = field(default_factory=list)
    peak_mb: float = float("nan")  # the fit's process: peak resident size over its life
    fit_mb: float = float("nan")  # the fit's peak minus the resident size just before it

    @property
    def per_iter(self) -> float:
        return self.seconds / self.iterations if self.iterations else float("nan")

    def time_to(self, target: float) -> float:
        """The fit's seconds (evaluations excluded) at the first evaluation at or below
        ``target``; nan if none was."""
        return next((s for _, s, p in self.curve if p <= target), float("nan"))

    @property
    def best(self) -> float:
        return min((p for _, _, p in self.curve), default=self.perplexity)


log = _common.log


def run_cemodel(k: int, X_train, X_test, iters: int, memory: _common.FitMemory,
                seed: int = 0, every: int = 0, passes: int = 0,
                starts: tuple[int, int] | None = None) -> Row:
    """``every``: score the held-out documents every that many iterations (``on_iteration``;
    the scoring's time is not the fit's). ``passes``: exactly that many inner sweeps per
    document and iteration (``max_local_iter=passes, local_tol=0``: BigARTM's
    ``num_document_passes``, a fixed count), instead of the default test. ``starts``:
    (starts, trial_iter), the fit's several starts; its iterations then count every trial's
    (s/iter is the seconds over all the iterations run), and it is scored from the choice on."""
    from cemodel.compiler import compile_model

    module = compile_model(LDA_MODEL, {"K": k})
    hypers = {"alpha": ALPHA, "eta": ETA}
    start = time.perf_counter()
    module.fit({"w": X_train[:20]}, hypers=hypers, max_iter=2, tol=0.0, seed=0)
    log(f"  cemodel K={k}: warm-up (numba compilation) {time.perf_counter() - start:.1f} s")
    curve: list[tuple[int, float, float]] = []

    def progress(iteration: int, elbo: float, seconds: float) -> None:
        if iteration == 0 or (iteration + 1) % 10 == 0:
            log(f"    iteration {iteration + 1}: ELBO {elbo:.6g}, {seconds:.1f} s")

    def score(iteration: int, result) -> None:
        if every and (iteration + 1) % every == 0:
            topics = evaluation.topics_from_dirichlet(result["beta.alpha"])
            curve.append((iteration + 1, result.seconds,
                          evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)))
            log(f"    iteration {iteration + 1}: perplexity {curve[-1][2]:.1f}")

    memory.start()
    start = time.perf_counter()
    inner = {"max_local_iter": passes, "local_tol": 0.0} if passes else {}
    if starts is not None:
        inner.update(starts=starts[0], trial_iter=starts[1])
    result = module.fit({"w": X_train}, hypers=hypers, max_iter=iters, tol=0.0, seed=seed,
                        callback=progress, on_iteration=score, **inner)
    seconds = result.seconds
    memory.stop()
    topics = evaluation.topics_from_dirichlet(result["beta.alpha"])
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    iterations, method, note = int(result.iterations), "cemodel", ""
    if passes:
        method, note = "cemodel-passes", f"{passes} inner sweeps per document"
    if starts is not None:  # every trial's iterations were run; the kept one's are in the trace
        trials = result.notes["starts"]
        kept = next(trial for trial in trials if trial["kept"])
        iterations += sum(trial["iterations"] for trial in trials) - kept["iterations"]
        method = "cemodel-starts"
        note = (f"starts={starts[0]}, trial_iter={starts[1]}; kept seed {kept['seed']}; "
                f"iterations: all run, trials included")
    return Row(method, k, iterations, seconds, perplexity, seed=seed, curve=curve, note=note)


def run_sklearn(k: int, X_train, X_test, iters: int, memory: _common.FitMemory,
                seed: int = 0, every: int = 0) -> Row:
    """``fit`` (its time includes its closing E-step and training perplexity, as a user's
    does); with ``every``, the same iterations written out (``_init_latent_vars`` then
    ``_em_step(batch_update=True)``, as ``fit`` runs them) and the held-out documents scored
    every that many iterations, the scoring's time not counted."""
    from joblib import Parallel
    from sklearn.decomposition import LatentDirichletAllocation

    model = LatentDirichletAllocation(
        n_components=k, learning_method="batch", max_iter=iters, evaluate_every=-1,
        doc_topic_prior=ALPHA, topic_word_prior=ETA, random_state=seed, n_jobs=1,
        max_doc_update_iter=100, mean_change_tol=1e-3,
    )
    curve: list[tuple[int, float, float]] = []
    memory.start()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        if not every:
            model.fit(X_train)
            done = int(model.n_iter_)
        else:
            model._init_latent_vars(X_train.shape[1], dtype=np.float64)
            with Parallel(n_jobs=1) as parallel:
                for done in range(1, iters + 1):
                    model._em_step(X_train, total_samples=X_train.shape[0], batch_update=True,
                                   parallel=parallel)
                    if done % every == 0 or done == iters:
                        paused = time.perf_counter()
                        topics = evaluation.topics_from_sklearn(model)
                        curve.append((done, paused - start, evaluation.completion_perplexity(
                            topics, ALPHA, X_test, seed=0)))
                        log(f"    scikit-learn iteration {done}: perplexity {curve[-1][2]:.1f}")
                        start += time.perf_counter() - paused
    seconds = time.perf_counter() - start
    memory.stop()
    log(f"  scikit-learn K={k}: {done} iterations, {seconds:.1f} s")
    topics = evaluation.topics_from_sklearn(model)
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    return Row("sklearn", k, done, seconds, perplexity, seed=seed, curve=curve)


def tomotopy_topics(model, vocab: list[str], eta: float) -> np.ndarray:
    """The posterior-mean topics over the whole vocabulary, columns in the count matrix's order.

    ``get_topic_word_dist(k, normalize=False)`` is n_kw + eta over ``model.used_vocabs`` (the
    words of the training documents, in tomotopy's own id order); a word of the vocabulary that
    no training document uses has n_kw = 0. Normalising (n_kw + eta) over all V words is the
    Dirichlet(eta) posterior mean on the same vocabulary as the other methods' topics."""
    column = {word: j for j, word in enumerate(vocab)}
    used = list(model.used_vocabs)
    raw = np.array([model.get_topic_word_dist(t, normalize=False) for t in range(model.k)],
                   dtype=np.float64)
    if raw.shape[1] != len(used):
        raise AssertionError(f"tomotopy: {raw.shape[1]} topic-word values, {len(used)} words")
    topics = np.full((model.k, len(vocab)), eta)
    topics[:, [column[word] for word in used]] = raw
    return topics / topics.sum(axis=1, keepdims=True)


def run_tomotopy(k: int, X_train, X_test, vocab: list[str], sweeps: int,
                 memory: _common.FitMemory) -> Row:
    import tomotopy as tp

    memory.start()  # the model holds its own copy of the corpus: adding it is part of the fit
    start = time.perf_counter()
    model = tp.LDAModel(k=k, alpha=ALPHA, eta=ETA, seed=0)
    model.optim_interval = 0  # keep alpha fixed (tomotopy optimises it every 10 sweeps by default)
    indptr, indices, data = X_train.indptr, X_train.indices, X_train.data
    for row in range(X_train.shape[0]):  # each document as its word strings, one per token
        span = slice(indptr[row], indptr[row + 1])
        words = [vocab[j] for j, count in zip(indices[span], data[span], strict=True)
                 for _ in range(int(count))]
        if words:
            model.add_doc(words)
    model.train(0, workers=1, parallel=tp.ParallelScheme.NONE)  # prepare: initial assignments
    setup = time.perf_counter() - start
    start = time.perf_counter()
    model.train(sweeps, workers=1, parallel=tp.ParallelScheme.NONE)
    seconds = time.perf_counter() - start
    memory.stop()
    log(f"  tomotopy K={k}: {sweeps} sweeps, {seconds:.1f} s (+ {setup:.1f} s to add the "
        f"{len(model.docs)} documents and prepare, not timed); log-likelihood per word "
        f"{model.ll_per_word:.4f}")
    topics = tomotopy_topics(model, vocab, ETA)
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    return Row("tomotopy", k, sweeps, seconds, perplexity)


def run_bigartm(method: str, k: int, X_train, X_test, iters: int, memory: _common.FitMemory,
                seed: int, every: int, opts: _bigartm.Settings) -> Row:
    """BigARTM in its own python (``_bigartm.py``): the ``fit_offline`` calls' seconds, its Phi
    (columns in the matrix's order) scored like the other rows' topics; ``memory`` takes the
    driver process's figures."""
    tau_phi, tau_theta = BIGARTM_TAUS[method]
    opts = _bigartm.Settings(opts.python, opts.doc_passes, tau_phi, tau_theta)
    fit = _bigartm.fit(opts.python, X_train, k, iters, ALPHA, ETA, seed, every, opts, log)
    scores = [evaluation.completion_perplexity(_bigartm.topics(phi), ALPHA, X_test, seed=0)
              for phi in fit.phi]
    curve = [(int(p), float(s), float(v))
             for p, s, v in zip(fit.passes, fit.seconds, scores, strict=True)] if every else []
    for done, _, value in curve:
        log(f"    bigartm pass {done}: perplexity {value:.1f}")
    empty = int(np.sum(fit.phi[-1].sum(axis=0) == 0.0))
    note = ""
    if empty:  # words of zero probability in every topic: their held-out tokens score log 0
        smoothed = evaluation.topics_from_dirichlet(fit.nwt.astype(np.float64) + ETA)
        note = (f"Phi: {empty} words 0 in every topic; n_wt + eta: "
                f"{evaluation.completion_perplexity(smoothed, ALPHA, X_test, seed=0):.1f}")
    memory.peak_mb, memory.fit_mb = fit.peak_mb, fit.fit_mb
    log(f"  {method} K={k}: {iters} passes, {fit.seconds[-1]:.1f} s, perplexity {scores[-1]:.1f}"
        + (f" ({note})" if note else ""))
    return Row(method, k, iters, float(fit.seconds[-1]), scores[-1], note=note, seed=seed,
               curve=curve)


def fit_in_child(method: str, k: int, corpus: str, max_docs: int | None, iters: int,
                 sweeps: int, seed: int = 0, every: int = 0,
                 artm: _bigartm.Settings | None = None,
                 starts: tuple[int, int] = (3, 5)) -> dict:
    """One fit, in its own process (``_common.run_isolated``): loads the corpus, fits, scores."""
    _common.check_single_thread()
    from threadpoolctl import threadpool_limits

    _, vocab, X_train, X_test = _common.load_split(corpus, max_docs)
    memory = _common.FitMemory()
    with threadpool_limits(limits=1):
        if method == "cemodel":
            row = run_cemodel(k, X_train, X_test, iters, memory, seed, every)
        elif method == "cemodel-passes":
            row = run_cemodel(k, X_train, X_test, iters, memory, seed, every,
                              passes=artm.doc_passes)
        elif method == "cemodel-starts":
            row = run_cemodel(k, X_train, X_test, iters, memory, seed, every, starts=starts)
        elif method == "sklearn":
            row = run_sklearn(k, X_train, X_test, iters, memory, seed, every)
        elif method in BIGARTM_TAUS:
            row = run_bigartm(method, k, X_train, X_test, iters, memory, seed, every, artm)
        else:
            row = run_tomotopy(k, X_train, X_test, vocab, sweeps, memory)
    row.peak_mb, row.fit_mb = memory.peak_mb, memory.fit_mb
    log(f"  {method} K={k}: peak {row.peak_mb:.0f} MB, fit {row.fit_mb:.0f} MB")
    return asdict(row)


def failed(method: str, k: int, exc: BaseException) -> Row:
    log(f"  {method} K={k} FAILED: {type(exc).__name__}: {exc}")
    return Row(method, k, 0, float("nan"), float("nan"), note=_common.failure_note(exc))


BIGARTM_NOTE = (
    "BigARTM 0.9.2 (C++): PLSA + SmoothSparsePhi/SmoothSparseTheta regularisers, fit_offline, "
    "num_processors=1, num_document_passes={doc_passes} (ARTM's default; a fixed count, no "
    "tolerance), its own python (benchmarks/_bigartm.py); s/iter = seconds of the fit_offline "
    "calls / collection passes (with --eval-every one call per pass, Phi read between calls, "
    "not timed); perplexity from its Phi (get_phi, rows put in the matrix's "
    "column order). Two tau settings, a row each: tau = prior - 1 (tau_phi = {eta} - 1, "
    "tau_theta = {alpha} - 1) makes ARTM's regularised EM the MAP estimate of the LDA the other "
    "rows fit (the log prior is sum (eta - 1) log phi + sum (alpha - 1) log theta), but with "
    "priors below 1 its M-step (n_wt + tau)_+ zeroes every n_wt < 0.99, so Phi gives words 0 "
    "in every topic and held-out tokens of those words score log 0 (perplexity inf; the row "
    "also gives n_wt + eta normalised); tau = prior (ARTM's own artm.LDA mapping, phi ∝ "
    "n_wt + eta, theta ∝ n_td + alpha, like CVB0's update, Asuncion et al. 2009) is the setting "
    "closest to the other rows' posterior-mean topics that ARTM allows")


def fmt(value: float, digits: str) -> str:
    return ("inf" if value == float("inf") else "n/a" if not np.isfinite(value)
            else format(value, digits))


def render(rows: list[Row], markdown: bool, targets: tuple[float, ...] = ()) -> str:
    header = ["method", "K", "seed", "s/iter", "iterations", "total s", "perplexity", "best",
              *(f"s to {g:g}" for g in targets), "peak MB", "fit MB"]
    body = [[NAMES[r.method] + (f" ({r.note})" if r.note else ""), str(r.k), str(r.seed),
             fmt(r.per_iter, ".4f"), str(r.iterations), fmt(r.seconds, ".2f"),
             fmt(r.perplexity, ".1f"), fmt(r.best, ".1f"),
             *(fmt(r.time_to(g), ".1f") if r.curve else "n/a" for g in targets),
             fmt(r.peak_mb, ".0f"), fmt(r.fit_mb, ".0f")]
            for r in rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ratios(rows: list[Row], markdown: bool, targets: tuple[float, ...] = ()) -> str:
    lines = []
    bullet = "- " if markdown else ""
    for k in sorted({r.k for r in rows}):
        ours = next((r for r in rows if r.k == k and r.method == "cemodel"), None)
        theirs = next((r for r in rows if r.k == k and r.method == "sklearn"), None)
        gibbs = next((r for r in rows if r.k == k and r.method == "tomotopy"), None)
        for seed in sorted({r.seed for r in rows if r.k == k and r.curve}):
            for target in targets:
                found = {r.method: r.time_to(target) for r in rows
                         if r.k == k and r.seed == seed and r.curve}
                lines.append(f"{bullet}K={k}, seed {seed}: seconds to perplexity {target:g}: "
                             + ", ".join(f"{m} {fmt(s, '.1f')}" for m, s in found.items())
                             + " (n/a: not reached)")
        if ours is not None and theirs is not None:
            speed = theirs.per_iter / ours.per_iter if ours.per_iter > 0 else float("nan")
            quality = (theirs.perplexity / ours.perplexity if ours.perplexity > 0
                       else float("nan"))
            relative = ours.perplexity / theirs.perplexity - 1.0
            verdict = ("better" if relative < -PERPLEXITY_TIE else
                       "equal" if relative <= PERPLEXITY_TIE else "worse")
            target = _common.target_verdict(speed, relative, PERPLEXITY_TIE)
            lines.append(
                f"{bullet}K={k}: sklearn/cemodel s/iter = {fmt(speed, '.2f')}x; perplexity "
                f"sklearn/cemodel = {fmt(quality, '.3f')} (cemodel {fmt(ours.perplexity, '.1f')} "
                f"vs scikit-learn {fmt(theirs.perplexity, '.1f')}: {verdict}, "
                f"{fmt(100 * relative, '+.1f')}%); target (>= 2x scikit-learn batch per "
                f"iteration at equal perplexity): {target}")
        if ours is not None and gibbs is not None:
            quality = (gibbs.perplexity / ours.perplexity if ours.perplexity > 0
                       else float("nan"))
            lines.append(
                f"{bullet}K={k}: tomotopy (collapsed Gibbs, for reference, no target: a sweep "
                f"is not a VB iteration) {gibbs.iterations} sweeps in {fmt(gibbs.seconds, '.1f')} "
                f"s = {fmt(gibbs.per_iter, '.4f')} s/sweep, against cemodel's {ours.iterations} "
                f"iterations in {fmt(ours.seconds, '.1f')} s; perplexity tomotopy/cemodel = "
                f"{fmt(quality, '.3f')}")
        for artm in (r for r in rows if r.k == k and r.method in BIGARTM_TAUS
                     and np.isfinite(r.per_iter)):
            for method in ("cemodel", "cemodel-passes", "cemodel-starts"):
                same_seed = next((r for r in rows if r.k == k and r.method == method
                                  and r.seed == artm.seed), None)
                if same_seed is not None:
                    lines.append(bullet + bigartm_ratio(same_seed, artm))
    return "\n".join(lines)


def bigartm_ratio(ours: Row, artm: Row) -> str:
    """cemodel's per-iteration speed over BigARTM's, against issue 22's target."""
    speed = artm.per_iter / ours.per_iter if ours.per_iter > 0 else float("nan")
    verdict = ("met" if speed >= BIGARTM_SPEED_TARGET else
               f"MISSED: speed missed by {100 * (1 - speed / BIGARTM_SPEED_TARGET):.0f}% "
               f"({fmt(speed, '.2f')}x of the {BIGARTM_SPEED_TARGET:g}x needed)")
    ours_name = {"cemodel": "cemodel",
                 "cemodel-passes": "cemodel at BigARTM's inner passes per document",
                 "cemodel-starts": "cemodel from several starts (s/iter over every iteration "
                                   "run)"}[ours.method]
    return (f"K={ours.k}: {NAMES[artm.method]} s/iter / {ours_name} s/iter = {fmt(speed, '.2f')}x "
            f"({fmt(artm.per_iter, '.4f')} vs {fmt(ours.per_iter, '.4f')}); target (>= "
            f"{BIGARTM_SPEED_TARGET:g}x BigARTM per iteration): {verdict}; perplexity BigARTM "
            f"{fmt(artm.perplexity, '.1f')} vs cemodel {fmt(ours.perplexity, '.1f')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[20, 100], help="numbers of topics")
    parser.add_argument("--iters", type=int, default=30, help="MF iterations of each fit")
    parser.add_argument("--tomotopy-iters", type=int, default=1000,
                        help="Gibbs sweeps of tomotopy's fit")
    parser.add_argument("--corpus", choices=CORPORA, default="nyt")
    parser.add_argument("--max-docs", type=int, default=None,
                        help="use only the first N documents of the corpus (smoke runs)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--only", choices=METHODS, nargs="+", help="run these methods only")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="the fits' seeds (cemodel's seed, scikit-learn's random_state)")
    parser.add_argument("--eval-every", type=int, default=0, metavar="N",
                        help="score the held-out documents every N iterations (cemodel, "
                        "scikit-learn), for the time to each --targets perplexity")
    parser.add_argument("--targets", type=float, nargs="+", default=[1393.0, 1380.0],
                        help="held-out perplexities to time (with --eval-every)")
    parser.add_argument("--bigartm-python", default=None,
                        help="a python that imports artm (default: $CEMODEL_BIGARTM_PYTHON, "
                        "this python, then the venvs of benchmarks/_bigartm.py)")
    parser.add_argument("--bigartm-doc-passes", type=int, default=10,
                        help="BigARTM's num_document_passes (inner passes per document)")
    parser.add_argument("--starts", type=int, default=3,
                        help="cemodel-starts: the fit's starts (fit(starts=N))")
    parser.add_argument("--trial-iter", type=int, default=5,
                        help="cemodel-starts: iterations of each start")
    args = parser.parse_args(argv)
    targets = tuple(args.targets) if args.eval_every else ()
    methods = args.only or METHODS
    artm_python, artm_version = None, ""
    if any(method in BIGARTM_TAUS for method in methods):
        artm_python, artm_version = _bigartm.find_python(args.bigartm_python)
        log(f"bigartm: {artm_python} ({artm_version})" if artm_python
            else f"bigartm rows skipped: {artm_version}")
    artm = _bigartm.Settings(artm_python, args.bigartm_doc_passes)

    try:
        X, vocab, X_train, X_test = _common.load_split(args.corpus, args.max_docs)
    except CemError as exc:  # a corpus that cannot be had: say what to run, no traceback
        print(exc, file=sys.stderr)
        return 2
    label = _common.corpus_label(args.corpus, args.max_docs, X.shape[0])
    log(f"{label}: {X.shape[0]} documents, {len(vocab)} words, {int(X.sum())} tokens; "
        f"train {X_train.shape[0]}, test {X_test.shape[0]}")
    n_train, n_test = X_train.shape[0], X_test.shape[0]
    del X_train, X_test  # each fit's process loads its own
    rows: list[Row] = []
    for k in args.k:
        for seed in args.seeds:
            for method in methods:
                if method in BIGARTM_TAUS and artm_python is None:
                    rows.append(Row(method, k, 0, float("nan"), float("nan"), seed=seed,
                                    note="skipped: bigartm not installed"))
                    continue
                log(f"{method} K={k} seed {seed} (in a fresh process)")
                try:
                    row = Row(**_common.run_isolated(
                        fit_in_child, method, k, args.corpus, args.max_docs, args.iters,
                        args.tomotopy_iters, seed, args.eval_every, artm,
                        (args.starts, args.trial_iter)))
                except Exception as exc:  # report the failure, still run the others
                    row = failed(method, k, exc)
                rows.append(row)

    import numba
    import sklearn

    try:
        import tomotopy

        tomotopy_version = f", tomotopy {tomotopy.__version__} ({tomotopy.isa})"
    except ImportError:
        tomotopy_version = ""
    title = (f"LDA mean-field, {label} ({X.shape[0]} docs, V={X.shape[1]}, "
             f"{int(X.sum())} tokens; train {n_train} / test {n_test} docs), "
             f"alpha={ALPHA}, eta={ETA}, {args.iters} iterations"
             + (f" (tomotopy: {args.tomotopy_iters} Gibbs sweeps)" if "tomotopy" in methods
                else "") + ", 1 thread, each fit in a fresh process")
    versions = (f"python {platform.python_version()}, numpy {np.__version__}, "
                f"numba {numba.__version__}, scikit-learn {sklearn.__version__}"
                f"{tomotopy_version}" + (f", bigartm {artm_version}" if artm_python else "")
                + f", {platform.machine()}")
    notes = ("perplexity: cemodel.evaluation.completion_perplexity (document completion, "
             "held-out 20%, lower is better). tomotopy's s/iter is seconds per Gibbs sweep (not "
             "per VB iteration), its iterations are sweeps. peak MB: the fit's process over its "
             "life (VmHWM); fit MB: the fit's peak minus the resident size just before it. "
             "best: the lowest perplexity of the scored iterations; s to P: the fit's seconds "
             "(scoring excluded) at the first scored iteration at or below P. "
             + BIGARTM_NOTE.format(doc_passes=args.bigartm_doc_passes, eta=ETA, alpha=ALPHA))
    if args.markdown:
        print(f"**{title}**  \n{versions}\n")
        print(render(rows, markdown=True, targets=targets))
        print()
        print(ratios(rows, markdown=True, targets=targets))
        print(f"\n{notes}")
    else:
        print(title)
        print(versions)
        print()
        print(render(rows, markdown=False, targets=targets))
        print()
        print(ratios(rows, markdown=False, targets=targets))
        print(notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
