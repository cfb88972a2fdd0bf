"""LDA in a scikit-learn Pipeline, the number of topics chosen by GridSearchCV.

    python examples/lda_sklearn_pipeline.py [--corpus reuters|nyt] [--quick]

A notebook-style script (cells start at `# %%`; VS Code, Spyder and jupytext run them one by
one) that uses only cemodel's Python API: `cemodel.api.CemEstimator` wraps the compiled
`stdlib_models/lda.cem` as a scikit-learn estimator, so `Pipeline`, `GridSearchCV` and
`clone` work on it as on any other. `--quick` (what the tests run) fits fewer iterations.
"""

# %% [markdown]
# ## Setup
#
# The corpus is Reuters (395 news stories, 4,258 words; it ships inside the `lda` package) or,
# with `--corpus nyt`, the New York Times corpus (8,447 articles, downloaded once and cached
# by `cemodel.datasets.load_nyt`). Both come as a SciPy matrix of word counts, documents ×
# words, and the list of words.

# %%
import argparse
import time

import numpy as np
from scipy import sparse
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from cemodel.api import CemEstimator
from cemodel.datasets import load_corpus
from cemodel.evaluation import split_documents, topics_from_dirichlet

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--corpus", choices=["reuters", "nyt"], default="reuters")
parser.add_argument("--quick", action="store_true", help="fewer iterations (the tests)")
args, _ = parser.parse_known_args()  # parse_known_args: also runs inside a notebook kernel

X, vocab = load_corpus(args.corpus)
print(f"{args.corpus}: {X.shape[0]} documents, {X.shape[1]} words, {int(X.sum())} tokens")

# %% [markdown]
# Hold out 20% of the documents for the final check; the grid search sees only the rest.

# %%
X_train, X_test = split_documents(X, test_fraction=0.2, seed=0)
print(f"train {X_train.shape[0]} documents, test {X_test.shape[0]}")

# %% [markdown]
# ## The pipeline
#
# The corpora are already word counts, so the first step only hands the count matrix on (as
# CSR); with raw text, `sklearn.feature_extraction.text.CountVectorizer` goes here instead.
# The second step is LDA by batch mean-field VB (`method="mf"`; `"svi"` and the others work
# the same way). `K` is the number of topics: the estimator passes it to the fit as a
# dimension, so every K shares one compiled module.
#
# `CemEstimator.score` is the held-out log likelihood per word by *document completion*
# (`cemodel.evaluation`: each held-out document's proportions are fitted on half its words
# with the topics fixed, the other half is scored), i.e. −log perplexity: greater is better,
# which is what GridSearchCV maximises.

# %%
max_iter = 15 if args.quick else 100
pipeline = Pipeline([
    ("counts", FunctionTransformer(sparse.csr_matrix, accept_sparse=True)),
    ("lda", CemEstimator(model="stdlib_models/lda.cem", method="mf", max_iter=max_iter,
                         hypers={"alpha": 0.1, "eta": 0.01}, seed=0,
                         fit_options={"tol": 1e-4})),
])

# %% [markdown]
# ## Grid search over the number of topics
#
# Three folds of the training documents for each K; each fit is a `clone` of the pipeline.

# %%
search = GridSearchCV(pipeline, {"lda__K": [5, 10, 20]}, cv=3)
clock = time.perf_counter()
search.fit(X_train)
print(f"grid search: {time.perf_counter() - clock:.1f} s")
cv = search.cv_results_
print(f"{'K':>4} {'mean score':>11} {'std':>7} {'perplexity':>11} {'fit s':>7}")
for K, mean, std, seconds in zip(cv["param_lda__K"], cv["mean_test_score"],
                                 cv["std_test_score"], cv["mean_fit_time"], strict=True):
    print(f"{K:>4} {mean:11.4f} {std:7.4f} {np.exp(-mean):11.1f} {seconds:7.2f}")
best_K = search.best_params_["lda__K"]
print(f"best K = {best_K}")

# %% [markdown]
# ## The best model
#
# GridSearchCV refits the best pipeline on all the training documents (`refit=True`); its
# score on the held-out documents is the test perplexity.

# %%
best = search.best_estimator_
print(f"held-out perplexity at K = {best_K}: {np.exp(-best.score(X_test)):.1f}")
lda = best.named_steps["lda"]
fit = lda.result_  # a cemodel Fit: posterior, ELBO trace, timing, hyperparameters
print(f"ELBO {fit.elbo[-1]:.6g} after {fit.iterations} iterations, {fit.seconds:.2f} s")

# %% [markdown]
# Top words per topic: the posterior-mean topics are the Dirichlet parameters of q(β)
# normalised row by row (`fit.mean("beta")` is the same).

# %%
topics = topics_from_dirichlet(fit["beta.alpha"])
for k, row in enumerate(topics):
    top = np.argsort(row)[::-1][:8]
    print(f"topic {k:2d}: {' '.join(vocab[j] for j in top)}")

# %% [markdown]
# `transform` gives each document's topic proportions (the E-step with the topics fixed).

# %%
theta = best.transform(X_test[:5])
for d, row in enumerate(theta):
    k = int(row.argmax())
    print(f"test document {d}: topic {k} ({row[k]:.0%})")
