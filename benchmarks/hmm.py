"""Hidden Markov models, batch mean-field VB: cemodel's compiled HMMs next to hmmlearn's
variational HMMs (``hmmlearn.vhmm``), seconds per iteration, ELBO and held-out log-likelihood.

Two data sets, the same model and priors for both libraries, one thread each (BLAS, OpenMP and
numba), the fits interleaved in one process (cemodel, hmmlearn, cemodel, ... ``--repeats``
times; the median seconds are kept, the fits are seeded so every repeat gives the same
numbers):

* **Categorical HMM on text**: GCIDE dictionary entries (``cemodel.datasets.gcide_texts``) as
  character sequences: lowercased, whitespace made a space, every character other than a-z and
  space dropped, runs of spaces collapsed, entries shorter than 20 characters dropped, the rest
  cut to ``--max-chars``; V = 27 symbols. The entries are shuffled (seed 0); the first
  ``--seqs`` train, the next ``--test-seqs`` are held out. cemodel: ``stdlib_models/hmm.cem``
  (pi0, A[k] ~ Dirichlet(alpha), phi[k] ~ Dirichlet(eta)) with K = ``--k``. hmmlearn:
  ``VariationalCategoricalHMM(n_components=K, startprob_prior=alpha, transmat_prior=alpha,
  emissionprob_prior=eta)``: its priors are the Dirichlet concentrations of the same three
  factors (vhmm.py: ``startprob_posterior_ = startprob_prior_ + stats['start']`` etc.), so the
  model is the same.
* **Gaussian HMM**: synthetic sticky sequences from ``--gauss-k`` well-separated Gaussians with
  random full covariances in D = ``--d`` dimensions (seed ``--seed``). cemodel:
  ``benchmarks/hmm_gaussian.cem`` (Lambda[k] ~ Wishart(nu0, W0), mu[k] ~ MVN(m0, kappa0
  Lambda[k]), x ~ MVN(mu[z], Lambda[z])), which cemodel fits with one Normal-Wishart factor
  q(mu[k], Lambda[k]) per state. hmmlearn: ``VariationalGaussianHMM(covariance_type="full",
  means_prior=m0, beta_prior=kappa0, dof_prior=nu0, scale_prior=inv(W0))``: the same joint
  Normal-Wishart prior and q. Its ``scale_prior`` is the *inverse* Wishart scale W0^-1 (vhmm.py:
  ``scale_posterior_ = scale_prior_ + S + ...`` and ``W_k = inv(scale_posterior_)``).

Where each starts (the libraries' own starts; they differ). hmmlearn's ``_init`` (vhmm.py,
base.py ``VariationalBaseHMM._init``) sets q's parameters, not the priors, at random:
``startprob_posterior_ ~ Dirichlet(1/K) * S``, each row of ``transmat_posterior_ ~
Dirichlet(1/K) * N/K`` and of ``emissionprob_posterior_ ~ Dirichlet(eta) * N/K`` (N tokens, S
sequences); the Gaussian one takes ``KMeans(n_init=10)`` centres as ``means_posterior_``, the
cluster counts as ``beta_posterior_`` and ``dof_posterior_``, and np.cov(X) * counts as
``scale_posterior_``. cemodel's default start: one k-means++ seed step per state for both
chains (until commit d64a0f8 the categorical one started from random Dirichlet pseudo-counts).

What each number is:

* **s/iter**, initialisation excluded. cemodel: ``FitResult.seconds / iterations`` (the fit
  loop, after ``_prepare``: data binding and the start), numba compilation excluded by a
  1-iteration warm-up fit on the same data. hmmlearn: the ``fit`` call minus its ``_init``
  (timed by wrapping it; the categorical start is random Dirichlet draws, the Gaussian one runs
  ``KMeans(n_init=10)``), divided by ``n_iter``. Both run every iteration: hmmlearn
  ``tol=-inf``, cemodel ``tol=-1`` (at ``tol=0`` its fit stops at an unchanged ELBO).
* **ELBO/token as each reports it**: cemodel ``elbo[-1]``, hmmlearn ``monitor_.history[-1]``,
  divided by the training tokens. Both are the mean-field bound with forward-backward for q(z),
  but hmmlearn computes iteration i's bound *before* that iteration's M-step (q(z) optimal for
  the previous q(theta)), cemodel after it; and hmmlearn's Gaussian bound leaves out the
  constant -D/2 log(2 pi) per token. ``--check`` (on by default) evaluates hmmlearn's own bound
  at cemodel's converged q(theta) on a small case and prints the difference.
* **Held-out log-likelihood per token**, the same numpy forward algorithm for both, under the
  posterior-mean parameters: pi0 = E[pi0], A = E[A], phi = E[phi]; mu = E[mu], Lambda = E[Lambda]
  = nu W.

    python benchmarks/hmm.py                  # both data sets, the default size
    python benchmarks/hmm.py --quick          # smoke size, under a minute
    python benchmarks/hmm.py --markdown       # the table of benchmarks/RESULTS.md
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

if __name__ == "__main__":
    _common.set_single_thread()  # before numpy, scipy or numba load

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CATEGORICAL_MODEL = REPO / "stdlib_models" / "hmm.cem"
GAUSSIAN_MODEL = REPO / "benchmarks" / "hmm_gaussian.cem"
ALPHABET = "abcdefghijklmnopqrstuvwxyz "
MIN_CHARS = 20
log = _common.log


@dataclass(frozen=True)
class DataSet:
    name: str
    kind: str  # "categorical" or "gaussian"
    train: list  # S arrays: (T,) symbols or (T, D) points
    test: list
    k: int
    hypers: dict
    description: str

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.train)


@dataclass
class Row:
    data: str
    method: str
    settings: str
    per_iter: list = field(default_factory=list)  # seconds per iteration, one per repeat
    init_s: float = float("nan")
    iterations: int = 0
    elbo_token: float = float("nan")
    heldout_token: float = float("nan")
    note: str = ""


# ---------------------------------------------------------------- data


def encode_text(text: str, max_chars: int) -> np.ndarray | None:
    """Symbols 0..26 (a-z, space) of a text: lowercased, whitespace a space, other characters
    dropped, runs of spaces collapsed; None when fewer than MIN_CHARS are left."""
    kept = re.sub(r"[^a-z ]", "", re.sub(r"\s+", " ", text.lower()))
    kept = re.sub(r" +", " ", kept).strip()[:max_chars]
    if len(kept) < MIN_CHARS:
        return None
    codes = np.frombuffer(kept.encode("ascii"), dtype=np.uint8).astype(np.int64)
    return np.where(codes == ord(" "), 26, codes - ord("a"))  # a..z -> 0..25, space -> 26


def text_data(n_train: int, n_test: int, max_chars: int, k: int, alpha: float,
              eta: float) -> DataSet:
    from cemodel.datasets import gcide_texts

    texts = gcide_texts()
    order = np.random.default_rng(0).permutation(len(texts))
    sequences = []
    for i in order:
        encoded = encode_text(texts[i], max_chars)
        if encoded is not None:
            sequences.append(encoded)
            if len(sequences) == n_train + n_test:
                break
    train, test = sequences[:n_train], sequences[n_train:]
    description = (f"GCIDE entries as characters (27 symbols, >= {MIN_CHARS} characters, cut "
                   f"to {max_chars}): {len(train)} train sequences, "
                   f"{sum(map(len, train))} tokens; {len(test)} held out, "
                   f"{sum(map(len, test))} tokens")
    return DataSet("text", "categorical", train, test, k, {"alpha": alpha, "eta": eta},
                   description)


def gaussian_data(n_train: int, n_test: int, length: int, k: int, d: int, seed: int
                  ) -> DataSet:
    """Sticky sequences (stay 0.9, else a uniform other state) of ``length`` steps from ``k``
    Gaussians: means uniform in [-6, 6]^d at least 4 apart, covariances Q diag(l) Q^T with l
    uniform in [0.3, 1.5]."""
    rng = np.random.default_rng([seed, d, k])
    while True:
        means = rng.uniform(-6.0, 6.0, (k, d))
        gaps = np.linalg.norm(means[:, None] - means[None], axis=-1) + 1e9 * np.eye(k)
        if gaps.min() >= 4.0:
            break
    chol = np.empty((k, d, d))
    for c in range(k):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        q *= np.sign(np.diag(r))  # a uniformly random rotation
        chol[c] = np.linalg.cholesky((q * rng.uniform(0.3, 1.5, d)) @ q.T)
    A = np.full((k, k), 0.1 / (k - 1)) + (0.9 - 0.1 / (k - 1)) * np.eye(k)
    sequences = []
    for _ in range(n_train + n_test):
        z = np.empty(length, dtype=np.int64)
        z[0] = rng.integers(k)
        for t in range(1, length):
            z[t] = rng.choice(k, p=A[z[t - 1]])
        sequences.append(means[z] + np.einsum("tij,tj->ti", chol[z],
                                              rng.standard_normal((length, d))))
    hypers = {"alpha": 1.0, "m0": np.zeros(d), "kappa0": 0.01, "nu0": d + 2.0, "W0": np.eye(d)}
    description = (f"synthetic sticky Gaussian HMM, {k} states, D={d}, seed {seed}: "
                   f"{n_train} train sequences of {length} steps, {n_test} held out")
    return DataSet("gaussian", "gaussian", sequences[:n_train], sequences[n_train:], k, hypers,
                   description)


# ---------------------------------------------------------------- the shared scorer


def forward_loglik(sequences: list, pi0: np.ndarray, A: np.ndarray, log_emission) -> float:
    """Sum over sequences of log p(x) by the scaled forward algorithm (all sequences at once,
    padded): alpha_t = (alpha_{t-1} A) * p(x_t | z_t), log p(x) = sum_t log c_t."""
    lengths = np.array([len(x) for x in sequences])
    log_b = np.zeros((len(sequences), lengths.max(), len(pi0)))
    for s, x in enumerate(sequences):
        log_b[s, :len(x)] = log_emission(x)
    top = log_b.max(axis=2, keepdims=True)
    b = np.exp(log_b - top)
    total = float(top[:, :, 0][np.arange(lengths.max()) < lengths[:, None]].sum())
    alpha = pi0 * b[:, 0]
    for t in range(lengths.max()):
        if t > 0:
            alpha = np.where((t < lengths)[:, None], (alpha @ A) * b[:, t], alpha)
        scale = alpha.sum(axis=1)
        total += float(np.log(scale[t < lengths]).sum())
        alpha /= scale[:, None]
    return total


def categorical_scorer(phi: np.ndarray):
    log_phi = np.log(phi)
    return lambda x: log_phi[:, x].T


def gaussian_scorer(means: np.ndarray, precisions: np.ndarray):
    d = means.shape[1]
    logdets = np.linalg.slogdet(precisions)[1]

    def log_emission(x: np.ndarray) -> np.ndarray:
        diff = x[:, None, :] - means[None]
        quad = np.einsum("tki,kij,tkj->tk", diff, precisions, diff)
        return 0.5 * (logdets - d * np.log(2 * np.pi) - quad)

    return log_emission


def held_out(data: DataSet, pi0, A, emission) -> float:
    scorer = categorical_scorer(emission) if data.kind == "categorical" else \
        gaussian_scorer(*emission)
    return forward_loglik(data.test, pi0, A, scorer) / sum(len(x) for x in data.test)


def normalised(alpha: np.ndarray) -> np.ndarray:
    return alpha / alpha.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------- the fits


def cemodel_module(data: DataSet):
    import cemodel

    return cemodel.compile(CATEGORICAL_MODEL if data.kind == "categorical" else GAUSSIAN_MODEL)


def cemodel_fit(module, data: DataSet, iters: int, tol: float = -1.0):
    dims = {"K": data.k} | ({"V": len(ALPHABET)} if data.kind == "categorical" else {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an ELBO that decreases by round-off at tol < 0
        return module.fit({"x": data.train}, dims=dims, hypers=data.hypers, max_iter=iters,
                          tol=tol, seed=0)


def cemodel_parameters(result, data: DataSet):
    """Posterior means: pi0, A and phi, or (mu, E[Lambda] = nu W)."""
    pi0, A = normalised(result["pi0.alpha"]), normalised(result["A.alpha"])
    if data.kind == "categorical":
        return pi0, A, normalised(result["phi.alpha"])
    precisions = result["mu_Lambda.dof"][:, None, None] * result["mu_Lambda.scale"]
    return pi0, A, (result["mu_Lambda.mean"], precisions)


def hmmlearn_model(data: DataSet, iters: int, implementation: str):
    from hmmlearn import vhmm

    h = data.hypers
    common = dict(n_components=data.k, startprob_prior=h["alpha"], transmat_prior=h["alpha"],
                  n_iter=iters, tol=-np.inf, random_state=0, implementation=implementation)
    if data.kind == "categorical":
        return vhmm.VariationalCategoricalHMM(emissionprob_prior=h["eta"],
                                              n_features=len(ALPHABET), **common)
    k, d = data.k, len(h["m0"])
    return vhmm.VariationalGaussianHMM(
        covariance_type="full", means_prior=np.tile(h["m0"], (k, 1)),
        beta_prior=np.full(k, h["kappa0"]), dof_prior=np.full(k, h["nu0"]),
        scale_prior=np.broadcast_to(np.linalg.inv(h["W0"]), (k, d, d)).copy(), **common)


def stacked(sequences: list) -> tuple[np.ndarray, np.ndarray]:
    X = np.concatenate(sequences)
    return (X[:, None] if X.ndim == 1 else X), np.array([len(x) for x in sequences])


def hmmlearn_fit(data: DataSet, iters: int, implementation: str):
    """(fitted model, seconds of its _init, seconds of the whole fit)."""
    model = hmmlearn_model(data, iters, implementation)
    X, lengths = stacked(data.train)
    init = model._init
    seconds = {}

    def timed_init(*args):
        start = time.perf_counter()
        init(*args)
        seconds["init"] = time.perf_counter() - start

    model._init = timed_init
    start = time.perf_counter()
    model.fit(X, lengths)
    return model, seconds["init"], time.perf_counter() - start


def hmmlearn_parameters(model, data: DataSet):
    pi0 = normalised(model.startprob_posterior_)
    A = normalised(model.transmat_posterior_)
    if data.kind == "categorical":
        return pi0, A, normalised(model.emissionprob_posterior_)
    precisions = model.dof_posterior_[:, None, None] * np.linalg.inv(model.scale_posterior_)
    return pi0, A, (model.means_posterior_, precisions)


def hmmlearn_bound_at(result, data: DataSet) -> float:
    """hmmlearn's own lower bound (its E-step, then _compute_lower_bound) with its q(theta)
    set to cemodel's fit."""
    model = hmmlearn_model(data, 1, "log")
    X, lengths = stacked(data.train)
    model._check_and_set_n_features(X)
    k, h = data.k, data.hypers
    model.startprob_prior_ = np.full(k, h["alpha"])
    model.transmat_prior_ = np.full((k, k), h["alpha"])
    model.startprob_posterior_, model.transmat_posterior_ = result["pi0.alpha"], result["A.alpha"]
    if data.kind == "categorical":
        model.emissionprob_prior_ = np.full((k, len(ALPHABET)), h["eta"])
        model.emissionprob_posterior_ = result["phi.alpha"]
    else:
        model.means_prior_, model.beta_prior_ = model.means_prior, model.beta_prior
        model.dof_prior_, model.scale_prior_ = model.dof_prior, model.scale_prior
        model.means_posterior_ = result["mu_Lambda.mean"]
        model.beta_posterior_ = result["mu_Lambda.beta"]
        model.dof_posterior_ = result["mu_Lambda.dof"]
        model.scale_posterior_ = np.linalg.inv(result["mu_Lambda.scale"])
    model._check()
    _, logprob = model._do_estep(X, lengths)
    return float(model._compute_lower_bound(logprob))


def bound_check(module, data: DataSet) -> str:
    """On the first 20 training sequences: cemodel fitted to convergence, then hmmlearn's bound
    at cemodel's q(theta) (at a fixed point both evaluate the same q(z), q(theta))."""
    small = DataSet(data.name, data.kind, data.train[:20], data.test, min(data.k, 3),
                    data.hypers, "")
    result = cemodel_fit(module, small, 3000, tol=1e-13)
    theirs = hmmlearn_bound_at(result, small)
    constant = 0.0 if data.kind == "categorical" else \
        -0.5 * len(data.hypers["m0"]) * np.log(2 * np.pi) * small.tokens
    ours = float(result.elbo[-1])
    return (f"{data.name}: on {len(small.train)} sequences, K={small.k}, cemodel to convergence "
            f"({result.iterations} iterations, last change "
            f"{abs(result.elbo[-1] - result.elbo[-2]):.1e}): cemodel ELBO {ours:.6f}, "
            f"hmmlearn's bound at cemodel's q {theirs:.6f}"
            + (f" + the constant it omits ({constant:.6f}) = {theirs + constant:.6f}"
               if constant else "")
            + f"; difference {ours - theirs - constant:.2e}")


# ---------------------------------------------------------------- one data set


def run(data: DataSet, iters: int, repeats: int, implementations: list[str], check: bool,
        have_hmmlearn: bool) -> tuple[list[Row], list[str]]:
    """cemodel and hmmlearn (one row per forward-backward implementation), interleaved."""
    module = cemodel_module(data)
    name = "hmm.cem" if data.kind == "categorical" else "benchmarks/hmm_gaussian.cem"
    ours = Row(data.name, "cemodel", f"{name}, K={data.k}, MF, default start, tol=-1")
    peer = "VariationalCategoricalHMM" if data.kind == "categorical" else \
        "VariationalGaussianHMM(full)"
    theirs = {how: Row(data.name, f"hmmlearn ({how})", f"{peer}, n_components={data.k}, "
                       f"implementation='{how}', tol=-inf, random_state=0")
              for how in implementations}
    start = time.perf_counter()
    cemodel_fit(module, data, 1)  # compile (or load) every kernel: not timed
    log(f"{data.name}: cemodel warm-up {time.perf_counter() - start:.1f} s")
    models = {}
    for repeat in range(repeats):
        result = cemodel_fit(module, data, iters)
        ours.per_iter.append(result.seconds / result.iterations)
        log(f"  repeat {repeat + 1}: cemodel {ours.per_iter[-1]:.4f} s/iter")
        for how, row in theirs.items() if have_hmmlearn else ():
            model, init_s, total = hmmlearn_fit(data, iters, how)
            row.per_iter.append((total - init_s) / model.monitor_.iter)
            row.init_s, row.iterations, models[how] = init_s, model.monitor_.iter, model
            log(f"  repeat {repeat + 1}: hmmlearn ({how}) {row.per_iter[-1]:.4f} s/iter "
                f"(init {init_s:.2f} s)")
    ours.iterations = int(result.iterations)
    ours.elbo_token = float(result.elbo[-1]) / data.tokens
    ours.heldout_token = held_out(data, *cemodel_parameters(result, data))
    for how, row in theirs.items():
        if how not in models:
            row.note = "skipped: hmmlearn is not installed"
            continue
        row.elbo_token = float(models[how].monitor_.history[-1]) / data.tokens
        row.heldout_token = held_out(data, *hmmlearn_parameters(models[how], data))
    checks = ["same bound? " + bound_check(module, data)] if check and have_hmmlearn else []
    checks.append(chain_share(data, statistics.median(ours.per_iter)))
    return [ours, *theirs.values()], checks


def chain_share(data: DataSet, per_iter: float) -> str:
    """The time of cemodel's forward-backward alone (runtime.chain_posterior, scaled) over the
    training sequences with random potentials, one transition matrix for every step as the
    generated local step lays it out: its share of an iteration."""
    from cemodel.runtime.chain import chain_posterior

    k, n = data.k, max(len(x) for x in data.train)
    rng = np.random.default_rng(0)
    emission, first = rng.normal(size=(n, k)), rng.normal(size=(n, k))
    pair = np.tile(np.log(rng.dirichlet(np.ones(k), size=k)), (n, 1, 1))
    out = np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k, k))
    chain_posterior(emission, first, pair, *out, 2)  # compiled (or loaded) first
    start = time.perf_counter()
    for x in data.train:
        chain_posterior(emission, first, pair, *out, len(x))
    seconds = time.perf_counter() - start
    return (f"where cemodel's time goes, {data.name}: its forward-backward alone "
            f"(runtime.chain_posterior, scaled, {k} exp per step and {k * k} once per chain) "
            f"over the training sequences takes {seconds:.4f} s, "
            f"{100 * seconds / per_iter:.0f}% of cemodel's s/iter")


# ---------------------------------------------------------------- output


def fmt(value: float, digits: str) -> str:
    return "n/a" if not np.isfinite(value) else format(value, digits)


def render(rows: list[Row], markdown: bool) -> str:
    header = ["data", "method", "s/iter (median)", "runs", "iterations", "ELBO/token (own)",
              "held-out LL/token", "s/iter cemodel / this"]
    body = []
    for row in rows:
        median = statistics.median(row.per_iter) if row.per_iter else float("nan")
        ratio = ""
        if row.method.startswith("hmmlearn") and row.per_iter:
            ours = next(r for r in rows if r.data == row.data and r.method == "cemodel")
            ratio = fmt(statistics.median(ours.per_iter) / median, ".2f")
        method = row.method + (f" ({row.note})" if row.note else "")
        body.append([row.data, method, fmt(median, ".4f"),
                     " ".join(f"{s:.4f}" for s in row.per_iter), str(row.iterations),
                     fmt(row.elbo_token, ".5f"), fmt(row.heldout_token, ".5f"), ratio])
    return _common_table(header, body, markdown)


def _common_table(header: list[str], body: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
             for row in [header, *body]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def notes(datasets: list[DataSet], rows: list[Row], checks: list[str], load: str) -> list[str]:
    out = [f"{d.name}: {d.description}; priors {_hypers(d.hypers)}" for d in datasets]
    out += [f"{r.data}, {r.method}: {r.settings}"
            + (f"; its _init took {r.init_s:.2f} s (excluded)" if np.isfinite(r.init_s) else "")
            for r in rows]
    out += [
        "s/iter: cemodel FitResult.seconds / iterations (after _prepare; numba compiled by a "
        "1-iteration warm-up fit first); hmmlearn (fit - its _init) / n_iter. 'runs' lists every "
        "repeat; cemodel and hmmlearn fits alternate. The ratio (on each hmmlearn row) is "
        "cemodel's s/iter over that row's: above 1, cemodel is slower",
        "ELBO/token as each reports it: cemodel after the iteration's global updates, hmmlearn "
        "before its M-step (the bound of the previous q(theta)); hmmlearn's Gaussian bound "
        "omits -D/2 log(2 pi) per token. Same start? No: cemodel starts both chains from "
        "k-means++ seed steps; "
        "hmmlearn from random Dirichlet posteriors (x tokens/K) and, for the Gaussian, "
        "KMeans(n_init=10) means and counts",
        "held-out LL/token: log p(x) of the held-out sequences by one numpy forward algorithm "
        "under each fit's posterior-mean pi0, A and phi (mu, E[Lambda] = nu W), per token",
        *checks,
        f"machine load (uptime) at the start: {load}; {os.cpu_count()} cores, 1 thread per fit",
    ]
    return out


def _hypers(hypers: dict) -> str:
    def show(v) -> str:
        v = np.asarray(v)
        return f"{float(v):g}" if v.ndim == 0 else ("0" if not v.any() else "I"
                                                     if v.ndim == 2 else str(v.tolist()))

    return ", ".join(f"{key}={show(value)}" for key, value in hypers.items())


OPTIONS = (  # flag, type, default, help
    ("--seqs", int, 2000, "training text sequences"),
    ("--test-seqs", int, 500, "held-out text sequences"),
    ("--max-chars", int, 400, "text sequences cut to this"),
    ("--k", int, 10, "states of the text HMM"),
    ("--alpha", float, 1.0, "Dirichlet of pi0 and of A's rows (text)"),
    ("--eta", float, 0.5, "Dirichlet of the emissions (text)"),
    ("--gauss-seqs", int, 400, "Gaussian training sequences"),
    ("--gauss-test-seqs", int, 100, "Gaussian held-out sequences"),
    ("--length", int, 200, "Gaussian sequence length"),
    ("--gauss-k", int, 4, "Gaussian states (data and fits)"),
    ("--d", int, 3, "Gaussian dimension"),
    ("--seed", int, 0, "seed of the Gaussian data"),
    ("--iters", int, 50, "iterations of every fit"),
    ("--repeats", int, 3, "interleaved repeats"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=("text", "gaussian"),
                        default=["text", "gaussian"])
    for flag, kind, default, text in OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=text)
    parser.add_argument("--implementation", choices=("scaling", "log"), nargs="+",
                        default=["scaling", "log"],
                        help="hmmlearn's forward-backward, a row each (log is its default)")
    parser.add_argument("--no-check", action="store_true", help="skip the same-bound check")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--quick", action="store_true", help="smoke size, under a minute")
    args = parser.parse_args(argv)
    if args.quick:
        args.seqs, args.test_seqs, args.gauss_seqs, args.gauss_test_seqs = 200, 50, 40, 10
        args.iters, args.repeats = 5, 2
    logging.getLogger("hmmlearn").setLevel(logging.ERROR)  # "not converging" at round-off
    try:
        import hmmlearn
        version = f"hmmlearn {hmmlearn.__version__}"
    except ImportError:
        hmmlearn, version = None, "hmmlearn not installed: its rows are skipped"
    load = os.popen("uptime").read().strip()
    datasets = []
    if "text" in args.only:
        datasets.append(text_data(args.seqs, args.test_seqs, args.max_chars, args.k,
                                  args.alpha, args.eta))
    if "gaussian" in args.only:
        datasets.append(gaussian_data(args.gauss_seqs, args.gauss_test_seqs, args.length,
                                      args.gauss_k, args.d, args.seed))
    rows, checks = [], []
    for data in datasets:
        log(data.description)
        found, checked = run(data, args.iters, args.repeats, args.implementation,
                             not args.no_check, hmmlearn is not None)
        rows += found
        checks += checked
    import numba

    title = (f"HMMs, batch mean-field VB, {args.iters} iterations, median of {args.repeats} "
             f"interleaved runs, 1 thread")
    out = [f"**{title}**  " if args.markdown else title,
           f"numpy {np.__version__}, numba {numba.__version__}, {version}", "",
           render(rows, args.markdown), ""]
    out += [("- " if args.markdown else "") + note
            for note in notes(datasets, rows, checks, load)]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
