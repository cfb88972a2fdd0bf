"""SSVI on small data sets: how far below batch MF's ELBO it ends, by number of steps and
warm-up, next to SVI and SSVI-A with their defaults (``schedule.small_data_defaults``).

Four models, six data sets each (seeds 0-5, each fitted from its own seed's start; MF from
the same seed, 500 iterations):
- ``gmm``: ``stdlib_models/gmm.cem`` with K = 3, 300 2-D points from three unit Gaussians at
  (0, 0), (4, 4), (-4, 4);
- ``linreg``: ``stdlib_models/linear_regression.cem``, 300 points, 3 coefficients, noise sd 0.5;
- ``mixreg2``: a mixture of two regressions with a precision each (written here), 800 points,
  noise sds 0.3 and 0.8;
- ``mixreg3``: the three-line mixture of ``tests/test_stochastic_defaults.py``, 120 points.

Each row is a number of steps (``epochs`` given: batches of 256) or ``default`` (the
method's own), and SSVI's warm-up (``schedule.SAMPLE_WEIGHT``: SVI steps until the start
holds less than this of λ). Numbers: % of MF's ELBO by which the fit ends below it.

    python benchmarks/ssvi_small_data.py                       # every model, the default rows
    python benchmarks/ssvi_small_data.py --models gmm --steps 1000 3000 --warmups 0.1 0.01
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cemodel.compiler import compile_model  # noqa: E402
from cemodel.runtime.drivers import schedule  # noqa: E402
from tests.test_stochastic_defaults import MIXREG, _regressions  # noqa: E402

MIXREG2 = """model mixreg2
dim K = 2
dim P
dim N
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    w[k] ~ MultivariateNormal(zeros(P), eye(P) * 0.01)
    tau[k] ~ Gamma(1.0, 1.0)
plate points n in N:
    data x[n] : vector(P)
    z[n] ~ Categorical(pi)
    observe y[n] ~ Normal(dot(x[n], w[z[n]]), tau[z[n]])
"""
BATCH = 256


def gmm_data(seed: int, n: int = 300) -> dict:
    rng = np.random.default_rng(seed)
    means = np.array([[0.0, 0.0], [4.0, 4.0], [-4.0, 4.0]])
    return {"x": means[rng.integers(3, size=n)] + rng.normal(size=(n, 2))}


def linreg_data(seed: int, n: int = 300) -> dict:
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    return {"x": x, "y": x @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.5, n)}


def mixreg2_data(seed: int, n: int = 800) -> dict:
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    w = np.array([[1.0, 2.0, -1.0], [-2.0, -1.0, 3.0]])
    z = rng.integers(2, size=n)
    noise = rng.normal(size=n) * np.array([0.3, 0.8])[z]
    return {"x": x, "y": np.einsum("np,np->n", x, w[z]) + noise}


def models(tmp: Path) -> dict:
    (tmp / "mixreg2.cem").write_text(MIXREG2)
    (tmp / "mixreg3.cem").write_text(MIXREG)
    lib = HERE.parent / "stdlib_models"
    return {
        "gmm": (lib / "gmm.cem", {"K": 3}, gmm_data),
        "linreg": (lib / "linear_regression.cem", {}, linreg_data),
        "mixreg2": (tmp / "mixreg2.cem", {}, mixreg2_data),
        "mixreg3": (tmp / "mixreg3.cem", {}, lambda seed: _regressions(300 + seed)[1]),
    }


def gaps(module, make, method: str, steps: int | None, seeds: range) -> list[float]:
    """% below MF's ELBO at the end of ``method`` (its default epochs where steps is None)."""
    out = []
    for seed in seeds:
        data = make(seed)
        mf = module.fit(data, seed=seed, max_iter=500)
        n = len(next(iter(data.values())))
        options = {} if steps is None else {"epochs": -(-steps // -(-n // BATCH))}
        fit = getattr(module, method)(data, seed=seed, batch_size=BATCH, **options)
        out.append(100 * (mf.elbo[-1] - fit.elbo[-1]) / abs(mf.elbo[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gmm", "linreg", "mixreg2", "mixreg3"])
    parser.add_argument("--steps", nargs="+", default=["default"],
                        help="numbers of SSVI steps, or 'default'")
    parser.add_argument("--warmups", nargs="+", type=float, default=[schedule.SAMPLE_WEIGHT])
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        table = models(Path(tmp))
        print("| model | method | steps | warm-up | % below MF (per seed) | worst |")
        print("|---|---|---:|---:|---|---:|")
        for name in args.models:
            path, dims, make = table[name]
            module = compile_model(path, dims)
            for method in ("fit_svi", "fit_ssvi_a"):
                row = gaps(module, make, method, None, range(args.seeds))
                print(f"| {name} | {method[4:]} | default | - | "
                      f"{', '.join(f'{g:.2f}' for g in row)} | {max(row):.2f} |", flush=True)
            default_weight = schedule.SAMPLE_WEIGHT
            for weight in args.warmups:
                schedule.SAMPLE_WEIGHT = weight
                for steps in args.steps:
                    count = None if steps == "default" else int(steps)
                    row = gaps(module, make, "fit_ssvi", count, range(args.seeds))
                    print(f"| {name} | ssvi | {steps} | {weight:g} | "
                          f"{', '.join(f'{g:.2f}' for g in row)} | {max(row):.2f} |",
                          flush=True)
            schedule.SAMPLE_WEIGHT = default_weight
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
