"""Compile once: the second `cemodel fit` of a model reuses the generated module and numba's
compiled kernels.

    python benchmarks/compile_once.py [--model stdlib_models/lda.cem] [--runs 3] [--markdown]

Each run is a fresh process (`python -m cemodel.cli fit ...`) on the same small data set, all
sharing one empty kernel cache (a temporary `CEMODEL_CACHE`). The first run generates the
module and compiles every kernel it calls; later runs find both in the cache. Printed per
run: wall seconds of the whole command, and how many files the cache gained (the generated
module, numba's index `.nbi` and object `.nbc` files): zero for every run after the first
means nothing was compiled again.

    python benchmarks/compile_once.py --itemise [--model ...] [--method mf]

Where a cold first fit's seconds go, as on a fresh machine: one process with an empty
kernel cache and an empty numba cache (``NUMBA_CACHE_DIR``, so cemodel's runtime functions
compile too) imports cemodel, compiles the model and fits one iteration; numba's compile
events give each function's own compile seconds (its callees' excluded), generated kernels
and runtime functions apart.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def write_data(model: Path, folder: Path) -> Path:
    """A small data set the model takes: a document-term matrix for topic models, points for
    mixtures (the model's single observed variable)."""
    from cemodel.compiler import read_source, run_stages

    text, filename = read_source(model)
    observed = run_stages(text, filename).model.observed
    if len(observed) != 1:
        raise SystemExit(f"{model}: give a model with one observed variable")
    var = observed[0]
    rng = np.random.default_rng(0)
    if var.family == "Categorical":
        values = rng.poisson(1.0, (200, 300))
    elif var.family in ("MultivariateNormal", "MVN"):
        values = np.concatenate([rng.normal(size=(500, 2)), rng.normal(size=(500, 2)) + 4.0])
    else:
        raise SystemExit(f"{model}: no data generator for a {var.family} observation")
    path = folder / "data.npz"
    np.savez(path, **{var.name: values})
    return path


def cache_files(cache: Path) -> set[Path]:
    return {p for p in cache.rglob("*") if p.is_file()}


CHILD = """
import json, sys, time
clock = time.perf_counter()
import numpy as np
import numba.core.event as event
with event.install_recorder("numba:compile") as recorder:
    import cemodel
    imported = time.perf_counter()
    module = cemodel.compile(sys.argv[1])
    generated = time.perf_counter()
    with np.load(sys.argv[2]) as data:
        getattr(module, sys.argv[3])(dict(data), max_iter=1, seed=0)
    fitted = time.perf_counter()
stack, own = [], {}
for stamp, item in recorder.buffer:
    name = item.data["dispatcher"].py_func
    key = f"{name.__module__}.{name.__qualname__}"
    if item.status == event.EventStatus.START:
        stack.append([key, stamp, 0.0, item.data["dispatcher"].targetoptions.get("parallel")])
        continue
    key, start, inner, parallel = stack.pop()
    own.setdefault(key, [0.0, bool(parallel)])[0] += stamp - start - inner
    if stack:
        stack[-1][2] += stamp - start
print(json.dumps({"import": imported - clock, "generate": generated - imported,
                  "fit": fitted - generated, "own": own}))
"""


def itemise(model: str, method: str) -> None:
    """Print a cold first fit's seconds per stage and per compiled function."""
    with tempfile.TemporaryDirectory(prefix="cemodel-cold-") as tmp:
        folder = Path(tmp)
        data = write_data(Path(model), folder)
        env = dict(os.environ, CEMODEL_CACHE=str(folder / "cache"), NUMBA_NUM_THREADS="1",
                   NUMBA_CACHE_DIR=str(folder / "numba"))
        clock = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, model, str(data), method], env=env,
                             check=True, capture_output=True, text=True).stdout
        total = time.perf_counter() - clock
    report = json.loads(out.strip().splitlines()[-1])
    own = sorted(report["own"].items(), key=lambda kv: -kv[1][0])
    generated = sum(s for k, (s, _) in own if k.startswith("cemodel_generated"))
    runtime = sum(s for k, (s, _) in own if not k.startswith("cemodel_generated"))
    print(f"cold first fit ({Path(model).name}, {method}, 1 iteration, 1 thread): {total:.2f} s "
          f"in all; import {report['import']:.2f} s, generate and load "
          f"{report['generate']:.2f} s, fit to iteration 1 {report['fit']:.2f} s")
    print(f"compiling: generated kernels {generated:.2f} s, cemodel.runtime {runtime:.2f} s")
    print("| function | parallel | own compile seconds |")
    print("|---|:-:|---:|")
    for key, (seconds, parallel) in own:
        if seconds >= 0.05:
            print(f"| `{key.replace('cemodel_generated_', '')}` | {'yes' if parallel else ''} "
                  f"| {seconds:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(REPO / "stdlib_models" / "lda.cem"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--itemise", action="store_true",
                        help="where a cold first fit's seconds go, per compiled function")
    parser.add_argument("--method", default="fit", help="with --itemise: the module's entry "
                        "point (fit, fit_svi, fit_klc, ...)")
    args = parser.parse_args()
    if args.itemise:
        itemise(args.model, args.method)
        return
    with tempfile.TemporaryDirectory(prefix="cemodel-compile-once-") as tmp:
        folder = Path(tmp)
        cache = folder / "cache"
        data = write_data(Path(args.model), folder)
        env = dict(os.environ, CEMODEL_CACHE=str(cache), NUMBA_NUM_THREADS="1")
        command = [sys.executable, "-m", "cemodel.cli", "fit", args.model, "--data", str(data),
                   "--max-iter", "5", "--quiet", "-o", str(folder / "posterior.npz")]
        rows = []
        for run in range(1, args.runs + 1):
            before = cache_files(cache) if cache.exists() else set()
            clock = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            seconds = time.perf_counter() - clock
            new = cache_files(cache) - before
            kernels = sum(p.suffix == ".nbc" for p in new)
            rows.append((run, seconds, len(new), kernels))
    if args.markdown:
        print("| run | seconds | new cache files | new compiled kernels (.nbc) |")
        print("|---:|---:|---:|---:|")
        for run, seconds, files, kernels in rows:
            print(f"| {run} | {seconds:.2f} | {files} | {kernels} |")
    else:
        for run, seconds, files, kernels in rows:
            print(f"run {run}: {seconds:6.2f} s, {files} new cache files "
                  f"({kernels} compiled kernels)")
    first, later = rows[0][1], min(r[1] for r in rows[1:]) if len(rows) > 1 else float("nan")
    print(f"first run {first:.2f} s, later runs {later:.2f} s: {first / later:.1f}× faster; "
          f"later runs compiled {sum(r[3] for r in rows[1:])} kernels")


if __name__ == "__main__":
    main()
