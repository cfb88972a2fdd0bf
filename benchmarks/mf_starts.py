"""Batch MF from one start against the best of several (``fit(starts=N)``) on a Gaussian
mixture with more components than a k-means++ start separates reliably: final ELBOs over
seeds (a quality measurement; nothing is timed).

``gmm.cem`` with K = 12 on 1,500 points from a 4 × 3 grid of overlapping clusters (spacing 3,
sd 0.9, ``np.random.default_rng(0)``); MF to convergence, at most 300 iterations.

    python benchmarks/mf_starts.py                         # seeds 0-9, starts 3, trial_iter 5
    python benchmarks/mf_starts.py --trial-iter 20
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

import cemodel  # noqa: E402


def grid_points(n: int = 1500, spacing: float = 3.0, sd: float = 0.9) -> np.ndarray:
    rng = np.random.default_rng(0)
    centers = np.array([[i, j] for i in range(4) for j in range(3)], float) * spacing
    return centers[rng.integers(0, len(centers), n)] + rng.normal(size=(n, 2)) * sd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1")
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--trial-iter", type=int, default=5)
    args = parser.parse_args(argv)
    x = grid_points()
    model = cemodel.Model(REPO / "stdlib_models" / "gmm.cem", K=12)
    single, several = [], []
    for seed in range(args.seeds):
        single.append(model.fit({"x": x}, seed=seed, max_iter=300).elbo[-1])
        several.append(model.fit({"x": x}, seed=seed, max_iter=300, starts=args.starts,
                                 trial_iter=args.trial_iter).elbo[-1])
    print("| | mean | worst | best |\n|---|---:|---:|---:|")
    for label, values in (("one start", single),
                          (f"starts={args.starts}, trial_iter={args.trial_iter}", several)):
        v = np.array(values)
        print(f"| {label} | {v.mean():.1f} | {v.min():.1f} | {v.max():.1f} |")
    print("per seed, several minus one:", np.round(np.array(several) - np.array(single), 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
