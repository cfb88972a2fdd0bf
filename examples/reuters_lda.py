"""LDA on the Reuters corpus (395 news stories), compiled from stdlib_models/lda.cem.

    python examples/reuters_lda.py [--topics 10] [--iters 50]

Compiles the model (numba kernels are cached after the first run), fits it by
batch mean-field VB with progress per iteration, prints the top words of each
topic, and the held-out perplexity by document completion (cemodel.evaluation).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cemodel.compiler import compile_model
from cemodel.datasets import load_reuters
from cemodel.evaluation import completion_perplexity, split_documents, topics_from_dirichlet

MODEL = Path(__file__).resolve().parents[1] / "stdlib_models" / "lda.cem"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    X, vocab = load_reuters()
    train, test = split_documents(X, test_fraction=0.2, seed=0)
    print(f"Reuters: {X.shape[0]} documents, {X.shape[1]} words, {int(X.sum())} tokens; "
          f"fitting on {train.shape[0]}, holding out {test.shape[0]}")
    print(f"compiling {MODEL.name} with K={args.topics} ...", flush=True)
    lda = compile_model(MODEL, {"K": args.topics})

    def progress(iteration: int, elbo: float, seconds: float) -> None:
        print(f"iter {iteration + 1:3d}  ELBO {elbo:14.2f}  {seconds:6.2f} s", flush=True)

    result = lda.fit({"w": train}, max_iter=args.iters, tol=1e-5, seed=args.seed,
                     callback=progress)
    topics = topics_from_dirichlet(result["beta.alpha"])
    print(f"\n{result.iterations} iterations in {result.seconds:.2f} s "
          f"({'converged' if result.converged else 'iteration limit'})\n")
    for k, row in enumerate(topics):
        top = np.argsort(row)[::-1][:8]
        print(f"topic {k:2d}: " + " ".join(vocab[v] for v in top))
    perplexity = completion_perplexity(topics, result.hypers["alpha"], test)
    print(f"\nheld-out perplexity (document completion): {perplexity:.1f}")


if __name__ == "__main__":
    main()
