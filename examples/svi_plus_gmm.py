"""SVI+ on a Gaussian mixture: batch MF vs SVI vs SVI+ (Paisley et al., §IV-D and §IV-E).

    python examples/svi_plus_gmm.py [--seeds 10] [--quick] [--no-plot] [--no-sweep]
                                    [--kappa 0.7] [--tau 10] [--epochs 300]

Data, one set per seed and the same for every method: N = 250 points in 2-D (the size of the
synthetic set of §IV-D) from 4 Gaussian clusters (the 4 true clusters of §IV-E; the paper does
not give their layout): fixed centres, weights 0.35, 0.3, 0.2, 0.15, and per seed a random
rotation and standard deviations in [0.3, 1] for each cluster's covariance.

Model: stdlib_models/gmm.cem with K = 50 and the hyperparameters of §IV-D: Wishart(a = D, B = I)
on the precisions, μ_k ~ N(0, cI) with c = 10 (so P0 = I/10), m0 = 0. The truncated Dirichlet
process of §IV-E is approximated, as in the paper (its ref. [22]) and
examples/dp_bernoulli_mixture.py, by the finite symmetric Dirichlet(α/K, ..., α/K) on π, with
α = 1 (the paper does not state α for §IV-E; its α = (0.5, 0.5) is the finite GMM of §IV-D).

Methods, all started from the same k-means++ seed items (`seed=`, the default start of gmm.cem;
the paper uses random initialisations): batch mean-field VB (`fit`, up to 300 iterations); SVI
(`fit_svi`, |S| = 40); SVI+ (`fit_svi(..., effective_batch_size=16)`, |S| = 40, M = 16: the
setting of the paper's Fig. 5). The paper gives neither the step sizes nor the number of
iterations for the GMM: we use ρ_t = (t + 10)^-0.7 (κ = 0.7, τ = 10, Hoffman et al.) and 300
epochs (passes over the data: at |S| = 40, six minibatches of 40 and one of 10). The full run
then repeats the grid of §IV-E: |S| ∈ {10, 20, 30, 40, 50} for SVI and, for each, SVI+ with
M ∈ {0.2, 0.4, 0.6}·|S| (|S| = 50, M = 10 is also the setting of §IV-D).

Printed: per method, over the seeds, the final objective (the full-data ELBO, result.elbo[-1])
mean ± sd and best; how often it is within 0.5 nats of the best objective any method reached on
that seed; the clusters found (components whose expected number of points Σ_n q(z_n = k) is at
least 1% of N, and at least 1 point) mean and range. Because a stochastic fit stopped after a
fixed number of epochs need not sit at an optimum, the same numbers are also printed after
"polishing" each fit by batch MF to convergence from its final globals (`fit(init=state)`): that
tells which local optimum a method's run leads to. Plots in examples/out/: the objective per seed
per method, the clusters each method fits on seed 0 (means and 2-sd ellipses of E[Λ_k]^-1), and
the size-sorted distribution of the data over the clusters (the paper's Fig. 4).

Results (full run: 10 seeds, κ = 0.7, τ = 10, 300 epochs; about 2.5 minutes on 2 cores).
Final objective, mean ± sd over seeds (at the best of its seed / clusters): batch MF
−847.6 ± 53.5 (8/10, 4.6 clusters, 4 to 6; the paper: batch "consistently learned 5"); SVI
|S| = 40: −871.4 ± 48.6 (0/10, 5.0); SVI+ |S| = 40, M = 16: −872.0 ± 52.5 (2/10, 4.5; the best
single run of all, −751.8 on seed 1). After 300 epochs neither stochastic method has converged
(one or two small clusters still alive). Polished by batch MF from their final globals, SVI and
SVI+ land in the same optima (−855.6 ± 49.2, at the best of the seed on 8/10, 4.0 clusters)
against 7/10 for MF: the stochastic runs find slightly better optima than batch, but SVI+ is
not better than SVI here. On the §IV-E grid SVI+ beats SVI at the same |S| for small batches
(|S| = 10, M = 2: −850.5 against −859.0; |S| = 20, M = 4: −854.7 against −871.1) and is level
or slightly worse for |S| ≥ 30. So the paper's finding (SVI+ reaches better optima than SVI
and batch) shows only weakly, at small M, on this data. (An earlier version of fit_svi computed
E[Λ] under the annealed target λ̂, whose Wishart scale is often not positive definite, and
stopped every SVI+ run; it now mixes λ first.)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from cemodel.compiler import compile_model
from cemodel.errors import CemError

MODEL = Path(__file__).resolve().parents[1] / "stdlib_models" / "gmm.cem"
OUT = Path(__file__).resolve().parent / "out"

CENTRES = np.array([[-2.5, -2.0], [2.5, -2.0], [-1.0, 2.5], [2.5, 2.5]])
WEIGHTS = np.array([0.35, 0.3, 0.2, 0.15])
AT_BEST = 0.5  # nats: a run "reaches the best objective" when it is this close to it


def generate(rng, n):
    """n points from the 4 clusters; each cluster's covariance is rotated at random."""
    z = rng.choice(len(WEIGHTS), n, p=WEIGHTS)
    chol = np.empty((len(WEIGHTS), 2, 2))
    for k in range(len(WEIGHTS)):
        angle = rng.uniform(0.0, np.pi)
        rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        chol[k] = rot @ np.diag(rng.uniform(0.3, 1.0, 2))
    x = CENTRES[z] + np.einsum("nij,nj->ni", chol[z], rng.standard_normal((n, 2)))
    return x, z


def clusters(result, n):
    """The components with an expected number of points ≥ 1% of N (and ≥ 1)."""
    counts = result["z.probs"].sum(axis=0)
    return int(np.sum(counts >= max(1.0, 0.01 * n)))


def run_method(model, data, hypers, method, settings, seed, iters):
    """One fit and its MF polish; None and the error's first line when the fit stops."""
    try:
        if method == "mf":
            result = model.fit(data, hypers=hypers, max_iter=iters, tol=1e-8, seed=seed)
        else:
            result = model.fit_svi(data, hypers=hypers, seed=seed, **settings)
    except CemError as error:  # SVI+ noise can leave a posterior's domain: a clear error
        return {"result": None, "error": error.message}
    polished = model.fit(data, hypers=hypers, init=result.state, max_iter=1000, tol=1e-9,
                         seed=seed)
    n = len(data["x"])
    return {"result": result, "elbo": float(result.elbo[-1]), "clusters": clusters(result, n),
            "polished": float(polished.elbo[-1]), "polished_clusters": clusters(polished, n)}


def failure_steps(runs):
    steps = [int(m.group(1)) for r in runs if r["result"] is None
             for m in [re.search(r"step (\d+)", r["error"])] if m]
    return f"at steps {min(steps)}-{max(steps)}" if steps else "no step"


def summary_rows(names, runs_by_method, key):
    """Per method: runs, objective mean ± sd and best, share at the per-seed best, clusters."""
    n_seeds = len(runs_by_method[names[0]])
    best = [max((runs_by_method[m][s][key] for m in names
                 if runs_by_method[m][s]["result"] is not None), default=np.nan)
            for s in range(n_seeds)]
    clusters_key = "clusters" if key == "elbo" else "polished_clusters"
    lines = []
    for name in names:
        runs = runs_by_method[name]
        ok = [(s, r) for s, r in enumerate(runs) if r["result"] is not None]
        head = f"{name:22s} {f'{len(ok)}/{len(runs)}':>7s}"
        if not ok:
            reason = re.sub(r"^SVI\+? step \d+: ", "", runs[0]["error"])
            lines.append(f"{head}  all stopped with an error {failure_steps(runs)}: {reason}")
            continue
        values = np.array([r[key] for _, r in ok])
        at_best = sum(r[key] >= best[s] - AT_BEST for s, r in ok)
        counts = [r[clusters_key] for _, r in ok]
        sd = values.std(ddof=1) if len(values) > 1 else 0.0
        lines.append(f"{head} {values.mean():10.1f} ± {sd:6.1f} {values.max():10.1f} "
                     f"{f'{at_best}/{len(runs)}':>9s} "
                     f"{f'{np.mean(counts):.1f} [{min(counts)}, {max(counts)}]':>16s}")
    return lines


def print_table(names, runs_by_method):
    header = (f"{'method':22s} {'runs':>7s} {'ELBO mean ± sd':>19s} {'best':>10s} "
              f"{'at best':>9s} {'clusters [range]':>16s}")
    for key, title in (("elbo", "final objective (result.elbo[-1])"),
                       ("polished", "after polishing each fit by batch MF to convergence")):
        print(f"\n{title}:")
        print(header)
        for line in summary_rows(names, runs_by_method, key):
            print(line)


def print_sweep(sweep, sizes, fractions):
    """The §IV-E grid: SVI at each |S| and SVI+ at M = f·|S|."""
    print("\n§IV-E grid (final objective; clusters: mean and histogram of counts):")
    print(f"{'setting':22s} {'runs':>7s} {'ELBO mean':>10s} {'clusters':>9s}  histogram")
    for size in sizes:
        for fraction in (None, *fractions):
            runs = sweep[(size, fraction)]
            name = (f"SVI |S|={size}" if fraction is None
                    else f"SVI+ |S|={size} M={fraction * size:g}")
            ok = [r for r in runs if r["result"] is not None]
            head = f"{name:22s} {f'{len(ok)}/{len(runs)}':>7s}"
            if not ok:
                print(f"{head}  all stopped with an error {failure_steps(runs)}")
                continue
            counts = [r["clusters"] for r in ok]
            histogram = ", ".join(f"{c}: {counts.count(c)}" for c in sorted(set(counts)))
            print(f"{head} {np.mean([r['elbo'] for r in ok]):10.1f} {np.mean(counts):9.1f}  "
                  f"{histogram}")


def plot(names, runs_by_method, x, n):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Ellipse

    OUT.mkdir(exist_ok=True)
    n_seeds = len(runs_by_method[names[0]])
    # 1. the objective per seed per method, relative to the seed's best
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    jitter = np.random.default_rng(0).uniform(-0.15, 0.15, n_seeds)
    for ax, key, title in zip(axes, ("elbo", "polished"), ("final objective", "after MF polish"),
                              strict=True):
        best = [max((runs_by_method[m][s][key] for m in names
                     if runs_by_method[m][s]["result"] is not None), default=np.nan)
                for s in range(n_seeds)]
        for i, name in enumerate(names):
            ok = [(s, r[key] - best[s]) for s, r in enumerate(runs_by_method[name])
                  if r["result"] is not None]
            if ok:
                seeds, gaps = zip(*ok, strict=True)
                ax.scatter(i + jitter[list(seeds)], gaps, s=18)
            failed = n_seeds - len(ok)
            if failed:
                ax.annotate(f"{failed} stopped\nwith an error", (i, 0.0), ha="center",
                            va="top", fontsize=8, color="tab:red")
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_title(title)
        ax.axhline(0.0, color="grey", lw=0.5)
    axes[0].set_ylabel("ELBO − best ELBO of the seed (nats)")
    fig.tight_layout()
    fig.savefig(OUT / "svi_plus_gmm_objective.png", dpi=120)
    # 2. the clusters of seed 0 for each method
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 4), sharex=True,
                             sharey=True)
    for ax, name in zip(axes, names, strict=True):
        run = runs_by_method[name][0]
        ax.scatter(x[:, 0], x[:, 1], s=6, c="lightgrey")
        if run["result"] is None:
            ax.set_title(f"{name}: stopped with an error", fontsize=9)
            continue
        result = run["result"]
        counts = result["z.probs"].sum(axis=0)
        shown = np.flatnonzero(counts >= max(1.0, 0.01 * n))
        colour = np.full(len(counts), -1)
        colour[shown] = np.arange(len(shown))  # one colour per cluster found
        labels = colour[result["z.probs"].argmax(axis=1)]
        ax.scatter(x[labels >= 0, 0], x[labels >= 0, 1], s=6, c=labels[labels >= 0] % 10,
                   cmap="tab10", vmin=0, vmax=9)
        for k in shown:
            cov = np.linalg.inv(result["E[value Lambda]"][k])
            values, vectors = np.linalg.eigh(cov)
            angle = np.degrees(np.arctan2(vectors[1, 1], vectors[0, 1]))
            ax.add_patch(Ellipse(result["mu.mean"][k], 4 * np.sqrt(values[1]),
                                 4 * np.sqrt(values[0]), angle=angle, fill=False, lw=1.5))
            ax.plot(*result["mu.mean"][k], "k+")
        ax.set_title(f"{name}: {run['clusters']} clusters, ELBO {run['elbo']:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT / "svi_plus_gmm_clusters.png", dpi=120)
    # 3. the size-sorted share of the data in each cluster, averaged over seeds (Fig. 4)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3), sharey=True)
    for ax, name in zip(axes, names, strict=True):
        shares = [np.sort(r["result"]["z.probs"].sum(axis=0))[::-1][:10] / n
                  for r in runs_by_method[name] if r["result"] is not None]
        if shares:
            ax.bar(np.arange(1, 11), np.mean(shares, axis=0))
        else:
            ax.text(0.5, 0.5, "every run stopped with an error", ha="center",
                    transform=ax.transAxes)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("cluster (size-sorted)")
    axes[0].set_ylabel("share of the data (mean over seeds)")
    fig.tight_layout()
    fig.savefig(OUT / "svi_plus_gmm_sizes.png", dpi=120)
    print(f"\nsaved {OUT / 'svi_plus_gmm_objective.png'}, svi_plus_gmm_clusters.png, "
          "svi_plus_gmm_sizes.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="small sizes (used by the tests)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--no-sweep", action="store_true", help="skip the §IV-E grid")
    parser.add_argument("--kappa", type=float, default=0.7, help="ρ_t = (t + τ)^-κ")
    parser.add_argument("--tau", type=float, default=10.0)
    parser.add_argument("--epochs", type=int, default=300, help="passes of SVI and SVI+")
    args = parser.parse_args()
    K, alpha, n, epochs, iters, size, m = 50, 1.0, 250, args.epochs, 300, 40, 16
    sizes, fractions = (10, 20, 30, 40, 50), (0.2, 0.4, 0.6)
    if args.quick:
        n, epochs, iters = 100, 10, 50
    model = compile_model(MODEL, {"K": K})
    hypers = {"alpha": alpha / K, "m0": np.zeros(2), "P0": np.eye(2) / 10.0, "nu0": 2.0,
              "W0": np.eye(2)}
    step = {"kappa": args.kappa, "tau": args.tau, "epochs": epochs}
    methods = {"MF": ("mf", {}),
               f"SVI |S|={size}": ("svi", dict(step, batch_size=size)),
               f"SVI+ |S|={size} M={m}": ("svi", dict(step, batch_size=size,
                                                      effective_batch_size=m))}
    sweep_settings = {}
    if not (args.quick or args.no_sweep):
        for s in sizes:
            sweep_settings[(s, None)] = dict(step, batch_size=s)
            for f in fractions:
                sweep_settings[(s, f)] = dict(step, batch_size=s, effective_batch_size=f * s)
    print(f"N = {n} points in 2-D from 4 clusters; gmm.cem with K = {K}, π ~ Dirichlet(α/K), "
          f"α = {alpha:g}; κ = {args.kappa:g}, τ = {args.tau:g}, {epochs} epochs; MF up to {iters} "
          "iterations")
    runs = {name: [] for name in methods}
    sweep = {key: [] for key in sweep_settings}
    first_x = None
    for seed in range(args.seeds):
        x, _ = generate(np.random.default_rng(seed), n)
        first_x = x if first_x is None else first_x
        data = {"x": x}
        line = []
        for name, (method, settings) in methods.items():
            run = run_method(model, data, hypers, method, settings, seed, iters)
            runs[name].append(run)
            line.append(f"{name} " + (f"{run['elbo']:.1f} ({run['clusters']} clusters)"
                                      if run["result"] is not None else "stopped"))
        for key, settings in sweep_settings.items():
            same = [runs[name][-1] for name, (_, main_settings) in methods.items()
                    if main_settings == settings]  # the main table's runs are in the grid
            sweep[key].append(same[0] if same else
                              run_method(model, data, hypers, "svi", settings, seed, iters))
        print(f"seed {seed}: " + " | ".join(line), flush=True)
    names = list(methods)
    print_table(names, runs)
    if sweep:
        print_sweep(sweep, sizes, fractions)
    if not args.no_plot:
        plot(names, runs, first_x, n)


if __name__ == "__main__":
    main()
