"""Seconds per mean-field iteration of cemodel's compiled stdlib models at a reference commit
and in this working tree, side by side: did a change to the runtime or the code generator
speed up (or slow down) every model, or only the one it was made for?

Each configuration (model, data, K) is fitted by both trees in fresh child processes,
alternating reference and current ``--repeats`` times; each child compiles (or loads from
its own kernel cache) in a small warm-up fit, then times ``fit(..., max_iter=--iters,
tol=0.0)`` (``result.seconds``, the fit loop). Single-threaded everywhere. The reference
commit is checked out into a temporary git worktree (``git worktree add --detach``) and
removed at the end; each tree gets its own kernel cache directory.

Models, each with its general kernels (no model is special-cased anywhere in cemodel):
  lda  stdlib_models/lda.cem on the NYT corpus's training 80%, alpha = 0.1, eta = 0.01
  gmm  stdlib_models/gmm.cem, N = 200,000 points in D = 10 from 20 Gaussians, K = 20
  pmf  stdlib_models/pmf.cem, 500,000 ratings of 5,000 users × 3,000 items, K = 10

    python benchmarks/before_after.py --against eccc3b1           # every model
    python benchmarks/before_after.py --against HEAD~3 --only gmm pmf --repeats 5
    python benchmarks/before_after.py --against eccc3b1 --method svi   # SVI epochs instead
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# (model file, dims, the MF iterations timed) per configuration
CONFIGS = {
    "lda-20": ("lda.cem", {"K": 20}, 5),
    "lda-100": ("lda.cem", {"K": 100}, 3),
    "gmm": ("gmm.cem", {"K": 20}, 10),
    "pmf": ("pmf.cem", {"K": 10}, 10),
    "gap_nmf": ("gap_nmf.cem", {"K": 20}, 10),
}


def make_data(config: str) -> tuple[dict, dict]:
    """(data, hypers) of a configuration, the same in every child (fixed seeds)."""
    import numpy as np

    if config.startswith("lda"):
        import _common

        _, _, X_train, _ = _common.load_split("nyt", None)
        return {"w": X_train.tocsr()}, {"alpha": 0.1, "eta": 0.01}
    if config == "gmm":
        from gmm_mf import make_data as gmm_data

        X, _, _ = gmm_data(200_000, 10, 10, 20, seed=0)
        return {"x": X}, {}
    rng = np.random.default_rng(0)
    if config == "gap_nmf":
        frames, bins, atoms = 1_000, 128, 10
        W, H = rng.gamma(0.5, 2.0, (bins, atoms)), rng.gamma(0.5, 2.0, (frames, atoms))
        return {"Y": rng.poisson(H @ W.T)}, {}
    users, items, n, k = 5_000, 3_000, 500_000, 10
    u, v = rng.normal(0, 1, (users, k)), rng.normal(0, 1, (items, k))
    user, item = rng.integers(0, users, n), rng.integers(0, items, n)
    y = np.einsum("nk,nk->n", u[user], v[item]) + rng.normal(0, 0.5, n)
    return {"y": y, "user": user, "item": item}, {}


def child(config: str, method: str) -> None:
    """Runs in a child whose sys.path starts at the tree under test: prints its JSON timing
    (MF: seconds per iteration; SVI: per epoch of minibatches of 256, its ELBO included)."""
    import numpy as np

    import cemodel

    model, dims, iters = CONFIGS[config]
    data, hypers = make_data(config)
    module = cemodel.compile(Path(os.environ["CEMODEL_MODEL_DIR"]) / model)
    small = {name: (value[:50] if hasattr(value, "shape") else value)
             for name, value in data.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "svi":
            module.fit_svi(small, dims=dims, hypers=hypers, epochs=1, batch_size=8, seed=0)
            result = module.fit_svi(data, dims=dims, hypers=hypers, epochs=SVI_EPOCHS,
                                    batch_size=256, seed=0)
        else:
            module.fit(small, dims=dims, hypers=hypers, max_iter=2, tol=0.0, seed=0)
            result = module.fit(data, dims=dims, hypers=hypers, max_iter=iters, tol=0.0,
                                seed=0)
    sweeps = result.notes.get("local_sweeps")  # mean inner sweeps per item, per iteration
    print(json.dumps({"per_iter": result.seconds / result.iterations,
                      "elbo": float(result.elbo[-1]), "iterations": int(result.iterations),
                      "sweeps": float(np.mean(sweeps)) if sweeps else None}))


SVI_EPOCHS = 2  # --method svi: epochs of each fit


def run_child(tree: Path, cache: Path, config: str, method: str) -> dict:
    env = {**os.environ, "CEMODEL_TREE": str(tree), "CEMODEL_CACHE": str(cache),
           "CEMODEL_MODEL_DIR": str(REPO / "stdlib_models"), "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", config,
                          "--method", method],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{config} in {tree}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="the reference commit")
    parser.add_argument("--only", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--method", choices=("mf", "svi"), default="mf",
                        help="time MF iterations (default) or SVI epochs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--markdown", action="store_true",
                        help="accepted for run_all.py: the table is always markdown")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.method)
        return 0
    import numpy as np

    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.against],
                         capture_output=True, text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="cemodel-before-after-"))
    reference = work / f"tree-{sha}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(reference),
                    sha], check=True)
    grammar = reference / "cemodel" / "grammar"
    if not grammar.exists() and (reference / "grammar").is_dir():
        grammar.symlink_to(reference / "grammar")  # as the editable install links it
    trees = {"reference": (reference, work / "cache-reference"),
             "current": (REPO, work / "cache-current")}
    rows = []
    try:
        for config in args.only:
            times: dict[str, list[float]] = {"reference": [], "current": []}
            elbos, sweeps = {}, {}
            for repeat in range(args.repeats):
                for side in ("reference", "current") if repeat % 2 == 0 else ("current",
                                                                               "reference"):
                    got = run_child(*trees[side], config, args.method)
                    times[side].append(got["per_iter"])
                    elbos[side] = got["elbo"]
                    sweeps[side] = got.get("sweeps")
                    print(f"  {config} {side}: {got['per_iter']:.4f} s/iter", flush=True)
            before, after = np.median(times["reference"]), np.median(times["current"])
            rows.append((config, before, after, before / after, elbos, sweeps))
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(reference)],
                       check=False)
        shutil.rmtree(work, ignore_errors=True)
    import numba

    print(f"\npython {platform.python_version()}, numpy {np.__version__}, numba "
          f"{numba.__version__}; one thread; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs at the end; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"reference {sha} vs the working tree; medians of {args.repeats} fresh processes each, "
          "alternating\n")
    unit = "s/epoch (SVI)" if args.method == "svi" else "s/iter"
    print(f"| model | reference {unit} | current {unit} | speedup | ELBO reference | "
          "ELBO current | sweeps/item reference | sweeps/item current |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    for config, before, after, ratio, elbos, sweeps in rows:
        count = {side: "-" if sweeps.get(side) is None else f"{sweeps[side]:.1f}"
                 for side in ("reference", "current")}
        print(f"| {config} | {before:.4f} | {after:.4f} | {ratio:.2f}x | "
              f"{elbos['reference']:.8g} | {elbos['current']:.8g} | {count['reference']} | "
              f"{count['current']} |")
    return 0


if __name__ == "__main__":
    tree = os.environ.get("CEMODEL_TREE")
    for _path in (str(HERE), tree or str(REPO)):
        if _path not in sys.path:
            sys.path.insert(0, _path)
    sys.exit(main())
