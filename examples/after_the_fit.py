"""After the fit: closed-form intervals, ArviZ plots and a saved fit, on a hierarchical normal
model (stdlib_models/hierarchical_normal.cem) of eight groups' measurements.

    python examples/after_the_fit.py                       # writes docs/after_the_fit.png
    python examples/after_the_fit.py --out fit.png --save fit.nc

Needs the arviz extra (pip install 'cemodel[arviz]') and matplotlib for the figure.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

import cemodel

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "after_the_fit.png"))
    parser.add_argument("--save", default=None, help="also save the fit (.npz or .nc)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    means = rng.normal(0.0, 2.0, 8)  # eight groups, ten noisy measurements each
    group = np.repeat(np.arange(8), 10)
    y = rng.normal(means[group], 1.5)
    model = cemodel.Model("hierarchical_normal")
    fit = model.fit({"y": y, "group": group})
    print(fit.summary(hdi_prob=0.94).round(3))  # closed form, no draws

    idata = fit.to_arviz(draws=2000, seed=0, data={"y": y, "group": group})
    if args.save:
        print(f"wrote {fit.save(args.save)}; cemodel.load_result reads it back")
    if args.no_plot:
        return
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), width_ratios=(1.4, 1, 1))
    with warnings.catch_warnings():  # arviz 0.23's forest plot uses a deprecated mpl call
        warnings.simplefilter("ignore", matplotlib.MatplotlibDeprecationWarning)
        az.plot_forest(idata, var_names=["theta"], combined=True, hdi_prob=0.94, ax=axes[0])
        az.plot_posterior(idata, var_names=["mu", "tau_w"], hdi_prob=0.94, ax=axes[1:],
                          textsize=9)
    axes[0].set_title("theta (groups): 94% HDI of 2000 draws")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
