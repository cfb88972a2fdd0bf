"""Seconds per mean-field iteration of cemodel's compiled LDA next to scikit-learn's batch LDA.

Both run single-threaded (BLAS, OpenMP and numba limited to one thread) on the same 80% of
the documents (``cemodel.evaluation.split_documents(seed=0)``), with alpha = 0.1 and
eta = 0.01, for ``--iters`` full-batch iterations (no early stopping). Per-iteration time is
the wall-clock time of the whole ``fit`` call divided by its iterations; cemodel's numba
compilation is excluded by a small warm-up fit first. Held-out perplexity is
``cemodel.evaluation.completion_perplexity`` on the other 20%, from each model's posterior-mean
topics.

    python benchmarks/lda_mf.py                       # NYT corpus, K = 20 and 100, 30 iterations
    python benchmarks/lda_mf.py --corpus reuters --k 10 --iters 5   # a quick smoke run
    python benchmarks/lda_mf.py --k 20 --markdown     # a markdown table for RESULTS.md
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
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from cemodel import evaluation  # noqa: E402
from cemodel.datasets import load_corpus  # noqa: E402

LDA_MODEL = REPO / "stdlib_models" / "lda.cem"
ALPHA = 0.1
ETA = 0.01


@dataclass
class Row:
    method: str
    k: int
    iterations: int
    seconds: float
    perplexity: float
    note: str = ""

    @property
    def per_iter(self) -> float:
        return self.seconds / self.iterations if self.iterations else float("nan")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_cemodel(k: int, X_train, X_test, iters: int) -> Row:
    from cemodel.compiler import compile_model

    module = compile_model(LDA_MODEL, {"K": k})
    hypers = {"alpha": ALPHA, "eta": ETA}
    start = time.perf_counter()
    module.fit({"w": X_train[:20]}, hypers=hypers, max_iter=2, tol=0.0, seed=0)
    log(f"  cemodel K={k}: warm-up (numba compilation) {time.perf_counter() - start:.1f} s")

    def progress(iteration: int, elbo: float, seconds: float) -> None:
        if iteration == 0 or (iteration + 1) % 10 == 0:
            log(f"    iteration {iteration + 1}: ELBO {elbo:.6g}, {seconds:.1f} s")

    start = time.perf_counter()
    result = module.fit({"w": X_train}, hypers=hypers, max_iter=iters, tol=0.0, seed=0,
                        callback=progress)
    seconds = time.perf_counter() - start
    topics = evaluation.topics_from_dirichlet(result["beta.alpha"])
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    return Row("cemodel (compiled MF)", k, int(result.iterations), seconds, perplexity)


def run_sklearn(k: int, X_train, X_test, iters: int) -> Row:
    from sklearn.decomposition import LatentDirichletAllocation

    model = LatentDirichletAllocation(
        n_components=k, learning_method="batch", max_iter=iters, evaluate_every=-1,
        doc_topic_prior=ALPHA, topic_word_prior=ETA, random_state=0, n_jobs=1,
        max_doc_update_iter=100, mean_change_tol=1e-3,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        model.fit(X_train)
    seconds = time.perf_counter() - start
    log(f"  scikit-learn K={k}: {model.n_iter_} iterations, {seconds:.1f} s")
    topics = evaluation.topics_from_sklearn(model)
    perplexity = evaluation.completion_perplexity(topics, ALPHA, X_test, seed=0)
    return Row("scikit-learn batch", k, int(model.n_iter_), seconds, perplexity)


def failed(method: str, k: int, exc: BaseException) -> Row:
    log(f"  {method} K={k} FAILED: {type(exc).__name__}: {exc}")
    return Row(method, k, 0, float("nan"), float("nan"), note=f"failed: {type(exc).__name__}")


def fmt(value: float, digits: str) -> str:
    return "n/a" if not np.isfinite(value) else format(value, digits)


def render(rows: list[Row], markdown: bool) -> str:
    header = ["method", "K", "s/iter", "iterations", "total s", "perplexity"]
    body = [[r.method + (f" ({r.note})" if r.note else ""), str(r.k), fmt(r.per_iter, ".4f"),
             str(r.iterations), fmt(r.seconds, ".2f"), fmt(r.perplexity, ".1f")] for r in rows]
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


def ratios(rows: list[Row], markdown: bool) -> str:
    lines = []
    for k in sorted({r.k for r in rows}):
        ours = next((r for r in rows if r.k == k and r.method.startswith("cemodel")), None)
        theirs = next((r for r in rows if r.k == k and r.method.startswith("scikit")), None)
        if ours is None or theirs is None:
            continue
        speed = theirs.per_iter / ours.per_iter if ours.per_iter > 0 else float("nan")
        quality = theirs.perplexity / ours.perplexity if ours.perplexity > 0 else float("nan")
        bullet = "- " if markdown else ""
        lines.append(f"{bullet}K={k}: sklearn/cemodel s/iter = {fmt(speed, '.2f')}x; "
                     f"perplexity sklearn/cemodel = {fmt(quality, '.3f')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[20, 100], help="numbers of topics")
    parser.add_argument("--iters", type=int, default=30, help="MF iterations of each fit")
    parser.add_argument("--corpus", choices=["nyt", "reuters"], default="nyt")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--only", choices=["cemodel", "sklearn"], help="run one method only")
    args = parser.parse_args(argv)

    from threadpoolctl import threadpool_limits

    X, vocab = load_corpus(args.corpus)
    X_train, X_test = evaluation.split_documents(X, test_fraction=0.2, seed=0)
    log(f"{args.corpus}: {X.shape[0]} documents, {len(vocab)} words, {int(X.sum())} tokens; "
        f"train {X_train.shape[0]}, test {X_test.shape[0]}")
    rows: list[Row] = []
    with threadpool_limits(limits=1):
        for k in args.k:
            if args.only != "sklearn":
                try:
                    rows.append(run_cemodel(k, X_train, X_test, args.iters))
                except Exception as exc:  # report the failure, still run the baseline
                    rows.append(failed("cemodel (compiled MF)", k, exc))
            if args.only != "cemodel":
                rows.append(run_sklearn(k, X_train, X_test, args.iters))

    import numba
    import sklearn

    title = (f"LDA mean-field, {args.corpus} ({X.shape[0]} docs, V={X.shape[1]}, "
             f"{int(X.sum())} tokens; train {X_train.shape[0]} / test {X_test.shape[0]} docs), "
             f"alpha={ALPHA}, eta={ETA}, {args.iters} iterations, 1 thread")
    versions = (f"python {platform.python_version()}, numpy {np.__version__}, "
                f"numba {numba.__version__}, scikit-learn {sklearn.__version__}, "
                f"{platform.machine()}")
    perplexity_note = ("perplexity: cemodel.evaluation.completion_perplexity "
                       "(document completion, held-out 20%, lower is better)")
    if args.markdown:
        print(f"**{title}**  \n{versions}\n")
        print(render(rows, markdown=True))
        print()
        print(ratios(rows, markdown=True))
        print(f"\n{perplexity_note}")
    else:
        print(title)
        print(versions)
        print()
        print(render(rows, markdown=False))
        print()
        print(ratios(rows, markdown=False))
        print(perplexity_note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
