"""Documents per second of cemodel's compiled LDA SVI next to scikit-learn online LDA and gensim.

All three run stochastic variational inference for LDA (Hoffman et al. 2010/2013) single-threaded
(BLAS, OpenMP and numba limited to one thread) on the same 80% of the documents
(``cemodel.evaluation.split_documents(seed=0)``), with alpha = 0.1, eta = 0.01, the same number
of topics, minibatch size, kappa (scikit-learn ``learning_decay``, gensim ``decay``), tau
(``learning_offset``, ``offset``), number of passes over the training documents and per-document
E-step (at most 100 updates, stopping at a mean absolute change of the document's Dirichlet
parameters below 1e-3). Documents per second = training documents x epochs / seconds of the
whole fit call. cemodel's ``fit_svi`` also evaluates the full-data ELBO after every epoch (one
extra local step over all training documents, not part of SVI's updates): its time is measured
separately, and cemodel's speed is given both without it (the training work, compared with the
peers, which evaluate nothing) and with it. Held-out perplexity is
``cemodel.evaluation.completion_perplexity`` on the other 20%, from each model's posterior-mean
topics. Every (method, K) fit runs in a fresh process, which reports its peak memory and what the
fit adds (``benchmarks/_common.py``).

    python benchmarks/lda_svi.py                        # NYT, K = 20 and 100, batch 256, 5 epochs
    python benchmarks/lda_svi.py --corpus reuters --k 10 --epochs 2 --batch-size 64   # smoke run
    python benchmarks/lda_svi.py --corpus gcide --max-docs 2000 --k 10 --epochs 1     # GCIDE, cut
    python benchmarks/lda_svi.py --k 20 100 --markdown  # a markdown table for RESULTS.md
    python benchmarks/lda_svi.py --only gensim          # one library (also: cemodel, sklearn)
"""

from __future__ import annotations

import os

# Single-threaded everywhere, set before numpy, scipy or numba load their thread pools (a fit's
# process inherits them, and sets them again when it runs this file as __mp_main__). Not when
# imported as a module (a test imports KernelTimer; numba refuses a changed thread count later).
if __name__ in ("__main__", "__mp_main__"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                 "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
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

import _common  # noqa: E402
import _vw  # noqa: E402
import numpy as np  # noqa: E402

from cemodel import evaluation  # noqa: E402
from cemodel.datasets import CORPORA  # noqa: E402
from cemodel.errors import CemError  # noqa: E402

LDA_MODEL = REPO / "stdlib_models" / "lda.cem"
ALPHA = 0.1
ETA = 0.01
MAX_LOCAL_ITER = 100  # per-document E-step: at most this many updates ...
LOCAL_TOL = 1e-3  # ... stopping when the mean |change| of its Dirichlet parameters is below this
# perplexities within 1% count as equal: different random starts move a fit by about that much
PERPLEXITY_TIE = 0.01
METHODS = ("cemodel", "sklearn", "gensim", "vw", "vw-default")
NAMES = {"cemodel": "cemodel (compiled SVI)", "sklearn": "scikit-learn online",
         "gensim": "gensim LdaModel", "vw": "Vowpal Wabbit --lda",
         "vw-default": "Vowpal Wabbit --lda, VW's own schedule"}
VW_SPEED_TARGET = 1.5  # issue 22: >= 1.5x Vowpal Wabbit's documents per second


@dataclass
class Settings:
    batch_size: int
    epochs: int
    kappa: float
    tau: float


@dataclass
class Row:
    method: str  # a key of METHODS
    k: int
    documents: int  # training documents
    epochs: int
    seconds: float  # the whole fit call
    perplexity: float
    elbo_seconds: float = 0.0  # cemodel: its per-epoch full-data ELBO evaluations, in `seconds`
    note: str = ""
    kernels: dict[str, float] = field(default_factory=dict)
    repeat: int = 0  # which of --repeat runs
    peak_mb: float = float("nan")  # the fit's process: peak resident size over its life
    fit_mb: float = float("nan")  # the fit's peak minus the resident size just before it

    @property
    def train_seconds(self) -> float:
        return self.seconds - self.elbo_seconds

    @property
    def docs_per_second(self) -> float:
        """Training throughput: training documents x epochs / seconds without the ELBO."""
        work = self.documents * self.epochs
        return work / self.train_seconds if self.train_seconds > 0 else float("nan")

    @property
    def docs_per_second_all(self) -> float:
        """Throughput of the whole fit call, per-epoch ELBO evaluations included."""
        work = self.documents * self.epochs
        return work / self.seconds if self.seconds > 0 else float("nan")


log = _common.log


class KernelTimer:
    """Times the generated module's kernels by wrapping them in its namespace (``fit_svi`` looks
    them up there at each call), and restores them on exit. A call of ``local_step`` on every
    training document in order is the per-epoch ELBO evaluation; one on a shuffled minibatch is
    training work. Overhead: two clock reads per kernel call, a few hundred calls per epoch."""

    KERNELS = ("local_step", "update_beta", "refresh_globals", "elbo_global")
    # the lazy SVI step's runtime kernels (cemodel.runtime.drivers.lazy calls them through
    # these modules' namespaces)
    RUNTIME = {"cemodel.runtime.lazy": ("dirichlet_compact", "scatter_columns",
                                        "blend_columns", "catch_up",
                                        "ragged_columns", "dense_columns", "remap_ragged",
                                        "zero_rows"),
               "cemodel.runtime.shares": ("add_rows",)}

    def __init__(self, module, n_items: int) -> None:
        import importlib

        self.module = module
        self.n_items = n_items
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.originals = {(module, name): getattr(module, name) for name in self.KERNELS}
        for where, names in self.RUNTIME.items():
            runtime = importlib.import_module(where)
            self.originals.update({(runtime, name): getattr(runtime, name) for name in names
                                   if hasattr(runtime, name)})

    def _wrap(self, name: str, kernel, generated: bool = True):
        # where the kernel's ``items`` argument is, by name (the kernels' leading arguments
        # changed when they learned to run shares)
        code = getattr(kernel, "py_func", kernel).__code__
        at = code.co_varnames[:code.co_argcount].index("items") if name == "local_step" else 0

        def timed(*args):
            start = time.perf_counter()
            value = kernel(*args)
            elapsed = time.perf_counter() - start
            key = name if generated else f"{name} (lazy step, runtime)"
            if name == "local_step":
                items = args[at]
                full = len(items) == self.n_items and bool(np.all(items[1:] > items[:-1]))
                key = "local_step (ELBO, all documents)" if full else "local_step (minibatches)"
            self.seconds[key] = self.seconds.get(key, 0.0) + elapsed
            self.calls[key] = self.calls.get(key, 0) + 1
            return value

        return timed

    def __enter__(self) -> KernelTimer:
        for (where, name), kernel in self.originals.items():
            setattr(where, name, self._wrap(name, kernel, where is self.module))
        return self

    def __exit__(self, *exc) -> None:
        for (where, name), kernel in self.originals.items():
            setattr(where, name, kernel)

    @property
    def elbo_seconds(self) -> float:
        return (self.seconds.get("local_step (ELBO, all documents)", 0.0)
                + self.seconds.get("elbo_global", 0.0))


def run_cemodel(k: int, X_train, X_test, opts: Settings, memory: _common.FitMemory) -> Row:
    from cemodel.compiler import compile_model

    module = compile_model(LDA_MODEL, {"K": k})
    hypers = {"alpha": ALPHA, "eta": ETA}
    common = dict(kappa=opts.kappa, tau=opts.tau, max_local_iter=MAX_LOCAL_ITER,
                  local_tol=LOCAL_TOL, seed=0, hypers=hypers)
    start = time.perf_counter()
    module.fit_svi({"w": X_train[:20]}, epochs=1, batch_size=8, **common)
    log(f"  cemodel K={k}: warm-up (numba compilation) {time.perf_counter() - start:.1f} s, "
        f"module {Path(module.__file__).name}")

    def progress(epoch: int, elbo: float, seconds: float) -> None:
        log(f"    epoch {epoch + 1}: ELBO {elbo:.6g}, {seconds:.1f} s (ELBO evaluations included)")

    with KernelTimer(module, X_train.shape[0]) as timer:
        memory.start()
        start = time.perf_counter()
        result = module.fit_svi({"w": X_train}, epochs=opts.epochs, batch_size=opts.batch_size,
                                callback=progress, **common)
        seconds = time.perf_counter() - start
        memory.stop()
    kernels = dict(timer.seconds)
    kernels["rest of fit_svi (Python: batches, blend, checks, set-up)"] = (
        seconds - sum(timer.seconds.values()))
    log(f"  cemodel K={k}: {seconds:.2f} s, of which ELBO evaluations {timer.elbo_seconds:.2f} s")
    for name, value in kernels.items():
        calls = timer.calls.get(name)
        log(f"    {name}: {value:.3f} s ({100 * value / seconds:.1f}%)"
            + (f", {calls} calls" if calls else ""))
    topics = evaluation.topics_from_dirichlet(result["beta.alpha"])
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    return Row("cemodel", k, X_train.shape[0], int(result.iterations), seconds, perplexity,
               elbo_seconds=timer.elbo_seconds, kernels=kernels)


def run_sklearn(k: int, X_train, X_test, opts: Settings, memory: _common.FitMemory) -> Row:
    from sklearn.decomposition import LatentDirichletAllocation

    model = LatentDirichletAllocation(
        n_components=k, learning_method="online", batch_size=opts.batch_size,
        learning_decay=opts.kappa, learning_offset=opts.tau, max_iter=opts.epochs,
        evaluate_every=-1, doc_topic_prior=ALPHA, topic_word_prior=ETA, random_state=0,
        n_jobs=1, max_doc_update_iter=MAX_LOCAL_ITER, mean_change_tol=LOCAL_TOL,
    )
    memory.start()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        model.fit(X_train)
    seconds = time.perf_counter() - start
    memory.stop()
    log(f"  scikit-learn K={k}: {model.n_iter_} passes, {model.n_batch_iter_ - 1} minibatch "
        f"steps, {seconds:.1f} s")
    topics = evaluation.topics_from_sklearn(model)
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    return Row("sklearn", k, X_train.shape[0], int(model.n_iter_), seconds, perplexity)


def gensim_corpus(X_train) -> list[list[tuple[int, float]]]:
    """The training documents as gensim bag-of-words lists, word id = column of X_train, so
    ``model.get_topics()`` columns are in the vocabulary order of the count matrix."""
    from gensim.matutils import Sparse2Corpus

    corpus = [[(int(word), float(count)) for word, count in doc]
              for doc in Sparse2Corpus(X_train, documents_columns=False)]
    if len(corpus) != X_train.shape[0]:
        raise AssertionError("gensim corpus: one list per training document expected")
    for row in (0, X_train.shape[0] // 2, X_train.shape[0] - 1):  # spot-check the id mapping
        expected = list(zip(X_train[row].indices.tolist(), X_train[row].data.tolist(),
                            strict=True))
        if sorted(corpus[row]) != sorted(expected):
            raise AssertionError(f"gensim corpus: document {row} does not match row {row}")
    return corpus


def run_gensim(k: int, X_train, X_test, opts: Settings, corpus, dtype,
               memory: _common.FitMemory) -> Row:
    from gensim.models import LdaModel

    n_words = X_train.shape[1]
    memory.start()  # after the corpus is converted to gensim's lists (input, not fit)
    start = time.perf_counter()
    model = LdaModel(
        corpus, num_topics=k, id2word={i: str(i) for i in range(n_words)},
        chunksize=opts.batch_size, passes=opts.epochs, update_every=1, decay=opts.kappa,
        offset=opts.tau, alpha=ALPHA, eta=ETA, eval_every=None, iterations=MAX_LOCAL_ITER,
        gamma_threshold=LOCAL_TOL, random_state=0, dtype=dtype,
    )
    seconds = time.perf_counter() - start
    memory.stop()
    log(f"  gensim K={k}: {opts.epochs} passes, {seconds:.1f} s")
    topics = model.get_topics()  # lambda normalised row by row: the posterior mean
    if topics.shape != (k, n_words):
        raise AssertionError(f"gensim topics: shape {topics.shape}, expected {(k, n_words)}")
    perplexity = evaluation.completion_perplexity(topics.astype(np.float64), ALPHA, X_test,
                                                  seed=0)
    note = "" if dtype == np.float64 else np.dtype(dtype).name
    return Row("gensim", k, X_train.shape[0], opts.epochs, seconds, perplexity, note=note)


def run_vw(method: str, k: int, X_train, X_test, opts: Settings,
           memory: _common.FitMemory) -> Row:
    """``vw``: the other rows' schedule, ρ_t = 1 · (tau + t)^-kappa (``-l 1 --power_t kappa
    --initial_t tau``); ``vw-default``: VW's, 0.5 · t^-0.5. Both: the same minibatch, epochs
    (``--passes``), alpha, eta (``--lda_rho``), ``--lda_D`` = training documents."""
    import tempfile

    schedule = (_vw.Schedule(1.0, opts.kappa, opts.tau) if method == "vw" else _vw.Schedule())
    with tempfile.TemporaryDirectory(prefix="cemodel-vw-") as folder:
        fit = _vw.fit(X_train, k, opts.epochs, opts.batch_size, ALPHA, ETA, schedule, 0,
                      Path(folder), memory)
    perplexity = evaluation.completion_perplexity(_vw.topics(fit.lam), ALPHA, X_test, seed=0)
    log(f"  {method} K={k}: {fit.seconds:.2f} s ({fit.cpu_seconds:.2f} CPU s), readable model "
        f"vs get_weight: max relative difference {fit.api_difference:.1e}")
    if fit.api_difference > 1e-5:  # the file prints 6 significant digits
        raise AssertionError(f"VW's readable model and its weights disagree: "
                             f"{fit.api_difference:.1e}")
    return Row(method, k, X_train.shape[0], opts.epochs, fit.seconds, perplexity,
               note=f"CPU/wall {fit.cpu_seconds / fit.seconds:.2f}")


def fit_in_child(method: str, k: int, corpus: str, max_docs: int | None, opts: Settings,
                 gensim_dtype: str) -> dict:
    """One fit, in its own process (``_common.run_isolated``): loads the corpus, fits, scores."""
    _common.check_single_thread()
    from threadpoolctl import threadpool_limits

    _, _, X_train, X_test = _common.load_split(corpus, max_docs)
    memory = _common.FitMemory()
    with threadpool_limits(limits=1):
        if method == "cemodel":
            row = run_cemodel(k, X_train, X_test, opts, memory)
        elif method == "sklearn":
            row = run_sklearn(k, X_train, X_test, opts, memory)
        elif method in ("vw", "vw-default"):
            row = run_vw(method, k, X_train, X_test, opts, memory)
        else:
            start = time.perf_counter()
            corpus_lists = gensim_corpus(X_train)  # not timed
            log(f"  gensim K={k}: corpus converted in {time.perf_counter() - start:.1f} s "
                "(not timed)")
            row = run_gensim(k, X_train, X_test, opts, corpus_lists,
                             np.dtype(gensim_dtype).type, memory)
    row.peak_mb, row.fit_mb = memory.peak_mb, memory.fit_mb
    log(f"  {method} K={k}: peak {row.peak_mb:.0f} MB, fit {row.fit_mb:.0f} MB")
    return asdict(row)


def failed(method: str, k: int, opts: Settings, exc: BaseException) -> Row:
    log(f"  {method} K={k} FAILED: {type(exc).__name__}: {exc}")
    return Row(method, k, 0, opts.epochs, float("nan"), float("nan"),
               note=_common.failure_note(exc))


def fmt(value: float, digits: str) -> str:
    return "n/a" if not np.isfinite(value) else format(value, digits)


def render(rows: list[Row], markdown: bool) -> str:
    header = ["method", "K", "epochs", "docs/s", "training s", "+ ELBO s", "docs/s with ELBO",
              "perplexity", "peak MB", "fit MB"]
    body = []
    for r in rows:
        has_elbo = r.method == "cemodel"
        body.append([
            NAMES[r.method] + (f" ({r.note})" if r.note else ""), str(r.k), str(r.epochs),
            fmt(r.docs_per_second, ".0f"), fmt(r.train_seconds, ".2f"),
            fmt(r.elbo_seconds, ".2f") if has_elbo else "-",
            fmt(r.docs_per_second_all, ".0f") if has_elbo else "-", fmt(r.perplexity, ".1f"),
            fmt(r.peak_mb, ".0f"), fmt(r.fit_mb, ".0f"),
        ])
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


def speed_ratio(rows: list[Row], k: int) -> float:
    """cemodel's training docs/s over the faster peer's, among rows of one K."""
    ours = next((r for r in rows if r.k == k and r.method == "cemodel"), None)
    peers = [r.docs_per_second for r in rows if r.k == k and r.method != "cemodel"
             and np.isfinite(r.docs_per_second)]
    if ours is None or not peers:
        return float("nan")
    return ours.docs_per_second / max(peers)


def ratios(rows: list[Row], all_rows: list[Row], markdown: bool) -> str:
    lines = []
    bullet = "- " if markdown else ""
    for k in sorted({r.k for r in rows}):
        ours = next((r for r in rows if r.k == k and r.method == "cemodel"), None)
        peers = [r for r in rows if r.k == k and r.method != "cemodel"
                 and np.isfinite(r.docs_per_second)]
        if ours is None or not peers:
            continue
        best = max(peers, key=lambda r: r.docs_per_second)
        speed = ours.docs_per_second / best.docs_per_second
        repeats = sorted({r.repeat for r in all_rows if r.k == k})
        per_run = [speed_ratio([r for r in all_rows if r.repeat == i], k) for i in repeats]
        speed_all = ours.docs_per_second_all / best.docs_per_second
        quality = best.perplexity / ours.perplexity if ours.perplexity > 0 else float("nan")
        best_quality = min(r.perplexity for r in peers)
        relative = ours.perplexity / best_quality - 1.0
        verdict = ("better" if relative < -PERPLEXITY_TIE else
                   "equal" if relative <= PERPLEXITY_TIE else "worse")
        target = _common.target_verdict(speed, relative, PERPLEXITY_TIE)
        lines.append(
            f"{bullet}K={k}: docs/s cemodel / {NAMES[best.method]} (the faster peer) = "
            f"{fmt(speed, '.2f')}x training only, {fmt(speed_all, '.2f')}x with cemodel's "
            f"per-epoch ELBO; perplexity {NAMES[best.method]} / cemodel = {fmt(quality, '.3f')}; "
            f"cemodel {fmt(ours.perplexity, '.1f')} vs best peer {fmt(best_quality, '.1f')}: "
            f"{verdict} ({fmt(100 * relative, '+.1f')}%); target (>= 2x training docs/s at "
            f"equal or better perplexity): {target}")
        if ours.kernels and ours.seconds > 0:  # the profile, whether or not the target is met
            parts = sorted(ours.kernels.items(), key=lambda item: -item[1])
            lines.append(
                f"{bullet}K={k}, where cemodel's time goes (the whole fit_svi call, per-epoch "
                "ELBO included): " + "; ".join(
                    f"{name} {100 * value / ours.seconds:.0f}%" for name, value in parts
                    if value >= 0.01 * ours.seconds))
        for vw in (r for r in peers if r.method.startswith("vw")):
            ratio = ours.docs_per_second / vw.docs_per_second
            met = ("met" if ratio >= VW_SPEED_TARGET else
                   f"MISSED: speed missed by {100 * (1 - ratio / VW_SPEED_TARGET):.0f}%")
            lines.append(
                f"{bullet}K={k}: docs/s cemodel / {NAMES[vw.method]} = {fmt(ratio, '.2f')}x "
                f"(target >= {VW_SPEED_TARGET:g}x: {met}); perplexity VW "
                f"{fmt(vw.perplexity, '.1f')} vs cemodel {fmt(ours.perplexity, '.1f')}")
        if len(per_run) > 1:
            lines.append(
                f"  K={k}, the same training docs/s ratio within each "
                f"run (the methods side by side): "
                + ", ".join(fmt(value, ".2f") + "x" for value in per_run)
                + f" (median {fmt(float(np.median(per_run)), '.2f')}x)")
    return "\n".join(lines)


VW_NOTE = (
    "Vowpal Wabbit 9.11 --lda (C++, float32, its SIMD approximations of digamma/exp; "
    "benchmarks/_vw.py): --lda K --lda_alpha 0.1 --lda_rho 0.01 --lda_D <training documents> "
    "--minibatch <batch>, --passes <epochs> from a cache file built by an untimed first run, "
    "-b = the fewest bits that hold the vocabulary (every word its own weight row, checked), "
    "--holdout_off; its E-step starts at gamma = 1 and runs until the mean relative change "
    "is below --lda_epsilon 0.001, with no cap on the updates. Row 'vw': -l 1 --power_t {kappa} "
    "--initial_t {tau} (rho_t = (tau + t)^-kappa, the other rows' schedule); row 'VW's own "
    "schedule': VW's defaults, rho_t = 0.5 t^-0.5. Timed: the Workspace constructor, which "
    "runs all passes (CPU/wall: the process's CPU seconds over it; VW reads its cache in a "
    "parser thread). Topics: the readable model's lambda (weight + lda_rho, checked against "
    "get_weight), rows j < V, normalised per topic.")


def vw_available() -> str | None:
    """vowpalwabbit's version if a 9.11 release imports, else None (its rows are skipped)."""
    try:
        import vowpalwabbit
    except ImportError:
        log("vowpalwabbit not installed: its rows are skipped")
        return None
    version = getattr(vowpalwabbit, "__version__", "")
    if not version.startswith(_vw.VERSION_PREFIX):
        log(f"vowpalwabbit {version} is not {_vw.VERSION_PREFIX}.x: its rows are skipped")
        return None
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[20, 100], help="numbers of topics")
    parser.add_argument("--batch-size", type=int, default=256, help="documents per minibatch")
    parser.add_argument("--epochs", type=int, default=5, help="passes over the training documents")
    parser.add_argument("--kappa", type=float, default=0.7, help="step-size decay (0.5, 1]")
    parser.add_argument("--tau", type=float, default=10.0, help="step-size delay")
    parser.add_argument("--corpus", choices=CORPORA, default="nyt")
    parser.add_argument("--max-docs", type=int, default=None,
                        help="use only the first N documents of the corpus (smoke runs)")
    parser.add_argument("--gensim-dtype", choices=["float64", "float32"], default="float64",
                        help="gensim's floating-point type (its default is float32; the others "
                             "compute in float64)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="fit each method this many times (interleaved), keep the fastest")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--only", choices=METHODS, nargs="+", help="run these methods only")
    args = parser.parse_args(argv)
    methods = args.only or METHODS
    opts = Settings(args.batch_size, args.epochs, args.kappa, args.tau)
    vw_version = vw_available() if {"vw", "vw-default"} & set(methods) else None

    try:
        X, vocab, X_train, X_test = _common.load_split(args.corpus, args.max_docs)
    except CemError as exc:  # a corpus that cannot be had: say what to run, no traceback
        print(exc, file=sys.stderr)
        return 2
    label = _common.corpus_label(args.corpus, args.max_docs, X.shape[0])
    n_train, n_test = X_train.shape[0], X_test.shape[0]
    log(f"{label}: {X.shape[0]} documents, {len(vocab)} words, {int(X.sum())} tokens; "
        f"train {n_train}, test {n_test}")
    del X_train, X_test  # each fit's process loads its own
    rows: list[Row] = []
    all_rows: list[Row] = []
    for k in args.k:
        runs: dict[str, list[Row]] = {method: [] for method in methods}
        for repeat in range(args.repeat):  # interleaved, so load drifts hit every method
            if args.repeat > 1:
                log(f"K={k}: run {repeat + 1} of {args.repeat}")
            for method in methods:
                if method.startswith("vw") and not vw_version:
                    row = Row(method, k, 0, opts.epochs, float("nan"), float("nan"),
                              note="skipped: vowpalwabbit 9.11 not installed", repeat=repeat)
                    runs[method].append(row)
                    all_rows.append(row)
                    continue
                log(f"{method} K={k} (in a fresh process)")
                try:
                    row = Row(**_common.run_isolated(fit_in_child, method, k, args.corpus,
                                                     args.max_docs, opts, args.gensim_dtype))
                except Exception as exc:  # report the failure, still run the others
                    row = failed(method, k, opts, exc)
                row.repeat = repeat
                runs[method].append(row)
                all_rows.append(row)
        for method in methods:  # the fastest run of each (the fits themselves are seeded)
            timed = [r for r in runs[method] if np.isfinite(r.train_seconds)]
            rows.append(min(timed, key=lambda r: r.train_seconds) if timed
                        else runs[method][0])

    import numba
    import sklearn

    try:
        import gensim

        gensim_version = f", gensim {gensim.__version__}"
    except ImportError:
        gensim_version = ""
    title = (f"LDA SVI, {label} ({X.shape[0]} docs, V={X.shape[1]}, {int(X.sum())} tokens; "
             f"train {n_train} / test {n_test} docs), alpha={ALPHA}, eta={ETA}, "
             f"batch {args.batch_size}, kappa={args.kappa}, tau={args.tau}, {args.epochs} epochs, "
             f"E-step <= {MAX_LOCAL_ITER} updates / tol {LOCAL_TOL}, 1 thread, each fit in a "
             "fresh process" + (f", fastest of {args.repeat} runs" if args.repeat > 1 else ""))
    versions = (f"python {platform.python_version()}, numpy {np.__version__}, "
                f"numba {numba.__version__}, scikit-learn {sklearn.__version__}{gensim_version}"
                + (f", vowpalwabbit {vw_version}" if vw_version else "")
                + f", {platform.machine()}")
    notes = ("docs/s = training documents x epochs / seconds of the fit call without cemodel's "
             "per-epoch full-data ELBO evaluations (the peers evaluate nothing); '+ ELBO s' is "
             "their time, 'docs/s with ELBO' counts the whole fit_svi call. Perplexity: "
             "cemodel.evaluation.completion_perplexity (document completion, held-out 20%, lower "
             "is better). " + VW_NOTE.format(kappa=args.kappa, tau=args.tau) + " "
             "peak MB: the fit's process over its life (VmHWM); fit MB: the fit's "
             "peak minus the resident size just before it (gensim: after its input lists are "
             "built)")
    if args.markdown:
        print(f"**{title}**  \n{versions}\n")
        print(render(rows, markdown=True))
        print()
        print(ratios(rows, all_rows, markdown=True))
        print(f"\n{notes}")
    else:
        print(title)
        print(versions)
        print()
        print(render(rows, markdown=False))
        print()
        print(ratios(rows, all_rows, markdown=False))
        print(notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
