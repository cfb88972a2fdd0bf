"""The cost of the kernel/driver seam: LDA fitted by the generated module of a revision that
printed its own drivers (``--before``, default d63ddda: ``fit``/``fit_svi`` in the module) and
by today's module (kernels plus glue; the drivers in ``cemodel.runtime.drivers``).

Both modules run the same kernels (bit-identical ELBO traces, see tests/tools/traces.py), so
the only difference is the Python around them: per minibatch, today's driver calls the
module's glue (``run_local_step``, ``_update_beta``, ``refresh``) where the old module called
the kernels directly. Single-threaded, interleaved (before, after, before, after, ...), the
best of ``--repeats`` per setting, both compiled afresh in one process, on the NYT training
documents (80%, seed 0):

    python benchmarks/driver_overhead.py                       # SVI batch 16 and 256, MF
    python benchmarks/driver_overhead.py --corpus reuters --repeats 2   # smoke run
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cemodel import evaluation  # noqa: E402
from cemodel.compiler import compile_model  # noqa: E402
from cemodel.datasets import load_corpus  # noqa: E402


def module_at(revision: str, directory: Path):
    """The generated LDA module as the revision's golden file has it, imported from a file."""
    text = subprocess.run(["git", "show", f"{revision}:tests/golden/lda_mf.py"], cwd=REPO,
                          check=True, capture_output=True, text=True).stdout
    path = directory / f"lda_before_{revision}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def timed(fit, data, **options) -> float:
    clock = time.perf_counter()
    fit(data, **options)
    return time.perf_counter() - clock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="d63ddda")
    parser.add_argument("--corpus", default="nyt")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--mf-iters", type=int, default=5)
    args = parser.parse_args(argv)
    X, _ = load_corpus(args.corpus)
    train, _ = evaluation.split_documents(X, seed=0)
    data, dims = {"w": train}, {"K": args.k}
    with tempfile.TemporaryDirectory() as tmp:
        # both modules compiled afresh here (a kernel loaded from numba's disk cache can be
        # machine code of another compile than one compiled in this process)
        os.environ["CEMODEL_CACHE"] = tmp
        modules = {"before": module_at(args.before, Path(tmp)),
                   "after": compile_model(REPO / "stdlib_models" / "lda.cem", {"K": args.k})}
        settings = [(f"svi, batch {b}", "fit_svi", dict(epochs=1, batch_size=b, evaluate=False))
                    for b in args.batch_sizes]
        settings.append((f"mf, {args.mf_iters} iterations", "fit",
                         dict(max_iter=args.mf_iters, tol=0.0)))
        for module in modules.values():  # compile (and warm) every kernel first
            for _, fn, options in settings:
                short = {"max_iter": 1} if fn == "fit" else {"epochs": 1}
                getattr(module, fn)(data, dims=dims, **{**options, **short})
        print(f"{args.corpus}, K = {args.k}, {train.shape[0]} training documents, one thread, "
              f"best of {args.repeats}; before = {args.before}")
        print("| setting | before (s) | after (s) | after / before |")
        print("| --- | --- | --- | --- |")
        for label, fn, options in settings:
            best = {name: float("inf") for name in modules}
            for repeat in range(args.repeats):  # interleaved, the order alternating
                for name, module in sorted(modules.items(), reverse=repeat % 2 == 1):
                    seconds = timed(getattr(module, fn), data, dims=dims, seed=repeat,
                                    **options)
                    best[name] = min(best[name], seconds)
            print(f"| {label} | {best['before']:.3f} | {best['after']:.3f} | "
                  f"{best['after'] / best['before']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
