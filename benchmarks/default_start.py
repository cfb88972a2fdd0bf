"""Where a fit starts, per method: every method ``cemodel check`` lists, with default settings,
from ``start='random'`` and ``start='seeds'``, against batch MF's ELBO and the true labels.

Two mixtures written here (in no stdlib file), five data sets each (issue 18, finding 2):
- ``count``: 4 sparse multinomial components over a 50-word vocabulary (Dirichlet(0.1)
  draws), 300 count vectors of 20-59 words each;
- ``bernoulli``: 4 components of 40 Bernoulli features (Beta(0.3, 0.3) draws), 300 points,
  fitted with K = 6.

For each (data set, method, start) it prints the final ELBO relative to MF's from the model's
default start and the adjusted Rand index of the MAP assignments; the summary counts the data
sets on which a method ends within 1% of MF's ELBO with ARI >= 0.95. KLC-CG's start is its
own (``KLC_START``: θ from q(Z) after the seeded start's local step; N(0, 1) logits when asked
for ``random``).

    python benchmarks/default_start.py                 # both mixtures, 5 data sets
    python benchmarks/default_start.py --sets 2 --models count
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

import cemodel

COUNT = """model count_mixture
dim K = 4
dim V
dim N
pi ~ Dirichlet(1.0, K)
plate components k in K:
    phi[k] ~ Dirichlet(0.1, V)
plate items n in N:
    data total[n] : int
    z[n] ~ Categorical(pi)
    observe x[n] ~ Multinomial(total[n], phi[z[n]])
"""

BERNOULLI = """model bernoulli_mixture_k6
dim K = 6
dim P
dim N
pi ~ Dirichlet(1.0, K)
plate components k in K:
    plate features j in P:
        p[k, j] ~ Beta(1.0, 1.0)
plate points n in N:
    z[n] ~ Categorical(pi)
    plate dims j2 in P:
        observe x[n, j2] ~ Bernoulli(p[z[n], j2])
"""


def count_data(seed: int) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(np.full(50, 0.1), 4)
    z = rng.integers(0, 4, 300)
    total = rng.integers(20, 60, 300)
    x = np.stack([rng.multinomial(t, phi[k]) for t, k in zip(total, z, strict=True)])
    return z, {"x": x, "total": total}


def bernoulli_data(seed: int) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.3, 0.3, (4, 40))
    z = rng.integers(0, 4, 300)
    return z, {"x": (rng.random((300, 40)) < p[z]).astype(int)}


MODELS = {"count": (COUNT, count_data), "bernoulli": (BERNOULLI, bernoulli_data)}


def fit(model: cemodel.Model, data: dict, method: str, start: str, seed: int):
    options: dict = {"seed": seed, "start": start}
    if method == "svi+":  # SVI+ has no default M: half the default batch of 256
        options["effective_batch_size"] = 128
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(data, method=method, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="count,bernoulli")
    parser.add_argument("--sets", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            source, generate = MODELS[name]
            path = Path(tmp) / f"{name}.cem"
            path.write_text(source)
            model = cemodel.Model(path)
            methods = [m for m, why in model.methods.items() if why.startswith("yes")]
            good = {(m, s): 0 for m in methods for s in ("random", "seeds")}
            print(f"\n{name}: methods {', '.join(methods)}; rows: data set, method, start, "
                  "ELBO relative to MF, ARI")
            for k in range(args.sets):
                truth, data = generate(200 + k)
                reference = fit(model, data, "mf", None, k).elbo[-1]
                for method in methods:
                    for start in ("random", "seeds"):
                        result = fit(model, data, method, start, k)
                        rel = (result.elbo[-1] - reference) / abs(reference)
                        ari = adjusted_rand_score(truth, result.mean("z").argmax(-1))
                        good[method, start] += rel > -0.01 and ari >= 0.95
                        print(f"  {k}  {method:8s} {start:7s} {rel:+.4f}  {ari:.2f}", flush=True)
            print(f"{name}: data sets (of {args.sets}) within 1% of MF with ARI >= 0.95")
            for method in methods:
                print(f"  {method:8s} random {good[method, 'random']}  seeds "
                      f"{good[method, 'seeds']}")


if __name__ == "__main__":
    main()
