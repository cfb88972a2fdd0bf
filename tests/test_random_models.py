"""Random conditionally conjugate models: every listed method works on each (issue 18).

``tests/tools/randmodels.py`` draws a model (plates nested and ragged, parents from the
supported conjugate pairs, categorical gating, Markov chains, known scales and offsets, ``dot``
means) and data from it. For each model:

- ``check`` accepts it; every method and local step the module lists runs;
- MF's ELBO never decreases (``ElboDecreaseWarning`` is an error) and its end point is a fixed
  point: one more sweep from ``init=result.state`` moves no posterior parameter by more than
  1e-8 (relative to the parameter where it exceeds 1);
- on models without a mixture, SVI, SVI+ and SSVI-A with default settings end with every
  global's posterior mean within 3 of MF's posterior sds of MF's mean;
- on mixtures and chains with well-separated components, every listed method reaches
  ARI >= 0.9 against the true assignments.

CI runs the explicit examples below (five models, distinct sources); ``CEMODEL_RANDOM_MODELS=N``
adds N generated ones (the long run; its figures are in tests/README.md, "Random models").
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from sklearn.metrics import adjusted_rand_score

from cemodel.chains import smoothed_states
from cemodel.check import check_report
from cemodel.compiler import compile_model, run_stages
from cemodel.runtime.driver import ElboDecreaseWarning
from cemodel.runtime.drivers import DRIVERS

from .tools.randmodels import RandomModel, assemble, random_models

LONG = int(os.environ.get("CEMODEL_RANDOM_MODELS", "0"))
# CEMODEL_RANDOM_SHARD=i/n: this process checks the i-th of every n generated models (one
# process per core; the models generated are the same in every shard)
SHARD, SHARDS = (int(x) for x in os.environ.get("CEMODEL_RANDOM_SHARD", "0/1").split("/"))
GENERATED = Counter()
SOURCES = Path(os.environ["CEMODEL_CACHE"]) / "random_models"
MODULES: dict[str, object] = {}
TALLY: Counter = Counter()
FAILURES: list[str] = []
UNIMODAL = ("svi", "svi+", "ssvi-a")


def _module(model: RandomModel):
    if model.source not in MODULES:
        run_stages(model.source, "rm.cem")  # raises on anything check would refuse
        SOURCES.mkdir(parents=True, exist_ok=True)
        path = SOURCES / f"rm_{hashlib.sha256(model.source.encode()).hexdigest()[:12]}.cem"
        path.write_text(model.source)
        MODULES[model.source] = compile_model(path)
        TALLY["sources"] += 1
    return MODULES[model.source]


def _run(module, model: RandomModel, data, method: str, **options):
    if DRIVERS[method].stochastic and method == "svi+":
        options.setdefault("effective_batch_size", 64)  # below the default batch of 256
    TALLY["runs"] += 1
    return DRIVERS[method].run(module, data, dims=model.dims, hypers=model.hypers, **options)


def _mean_sd(post: dict, var: str) -> tuple[np.ndarray, np.ndarray]:
    """The posterior mean and sd of every entry of ``var``, from its parameters."""
    p = {k.split(".", 1)[1]: np.asarray(v) for k, v in post.items() if k.startswith(var + ".")}
    if "alpha" in p:
        a0 = p["alpha"].sum(-1, keepdims=True)
        m = p["alpha"] / a0
        return m, np.sqrt(m * (1 - m) / (a0 + 1))
    if "a" in p:
        s = p["a"] + p["b"]
        m = p["a"] / s
        return m, np.sqrt(m * (1 - m) / (s + 1))
    if "shape" in p:
        return p["shape"] / p["rate"], np.sqrt(p["shape"]) / p["rate"]
    if "dof" in p:  # Var(W_ij) = dof (S_ij² + S_ii S_jj)
        s, d = p["scale"], p["dof"][..., None, None]
        diag = np.diagonal(s, axis1=-2, axis2=-1)
        return d * s, np.sqrt(d * (s**2 + diag[..., :, None] * diag[..., None, :]))
    if "precision" not in p:  # the mean of a Normal-Gamma / Normal-Wishart block (a Student-t)
        return _block_mean_sd(post, var)
    if p["precision"].ndim == p["mean"].ndim + 1:  # MVN
        cov = np.linalg.inv(p["precision"])
        return p["mean"], np.sqrt(np.diagonal(cov, axis1=-2, axis2=-1))
    return p["mean"], 1 / np.sqrt(p["precision"])


def _block_mean_sd(post: dict, var: str) -> tuple[np.ndarray, np.ndarray]:
    """m of a joint block q(m, Λ) = N(m | mean, (βΛ)⁻¹) Gamma/Wishart(Λ): Var(m) = E[(βΛ)⁻¹],
    rate / (β(shape − 1)) for a Gamma, scale⁻¹ / (β(dof − D − 1)) for a Wishart."""
    block = next(k.split(".")[0] for k in post if k.endswith(".beta")
                 and var in k.split(".")[0].split("_"))
    p = {k.split(".", 1)[1]: np.asarray(v) for k, v in post.items() if k.startswith(block + ".")}
    if "shape" in p:
        return p["mean"], np.sqrt(p["rate"] / (p["beta"] * (p["shape"] - 1)))
    dim = p["mean"].shape[-1]
    cov = np.linalg.inv(p["scale"]) / (p["beta"] * (p["dof"] - dim - 1))[..., None, None]
    return p["mean"], np.sqrt(np.diagonal(cov, axis1=-2, axis2=-1))


def _parameters(result) -> dict:
    return {k: np.asarray(v) for k, v in result.posterior.items() if not k.startswith("E[")}


def _check_mf(module, model, data):
    """MF's ELBO never decreases, and MF goes to a fixed point: sweeps from its end move the
    parameters less and less, until one moves none by more than 1e-8 (relative above 1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElboDecreaseWarning)
        # tol=0: on until the ELBO stops changing at all; where MF converges linearly
        # (mixtures, chains) the ELBO is flat to rounding while the parameters still move by
        # ~1e-8 a sweep, so the sweeps go on from there, 200 at a time, up to 3,200 more
        mf = _run(module, model, data, "mf", max_iter=3000, tol=0.0)
        end, moved = mf, np.inf
        for _ in range(16):
            again = _run(module, model, data, "mf", init=end.state, max_iter=1)
            before, after = _parameters(end), _parameters(again)
            moved = max(float((np.abs(after[key] - value) / np.maximum(1.0, np.abs(value)))
                              .max()) for key, value in before.items())
            if moved <= 1e-8:
                break
            end = _run(module, model, data, "mf", init=again.state, max_iter=200, tol=0.0)
    trace = np.asarray(mf.elbo)
    assert np.all(np.diff(trace) >= -np.maximum(1e-9 * np.abs(trace[:-1]), 1e-5)), trace
    assert moved <= 1e-8, (moved, mf.iterations)
    return mf


def _assignments(module, stages, model: RandomModel, data, fit) -> np.ndarray:
    """The most probable component of every item (a mixture) or step (a chain: from the
    smoothed state probabilities, which a fit does not keep)."""
    if model.kind == "chain":
        chain = smoothed_states(module, stages.model, data, fit)[model.assignment]
        return np.concatenate([p.argmax(1) for p in chain.probs])
    probs = np.asarray(fit[f"{model.assignment}.probs"])
    return probs.reshape(len(probs), -1).argmax(1)


def check_model(model: RandomModel) -> None:
    module = _module(model)
    stages = run_stages(model.source, "rm.cem")
    check_report(stages.plan)
    data, labels = model.sample()
    mf = _check_mf(module, model, data)
    listed = [m for m, why in module.METHODS.items() if why.startswith("yes") and m != "mf"]
    locals_ = [s for s, why in module.LOCAL_STEPS.items() if why.startswith("yes")]
    fits = {"mf": mf}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stochastic ELBOs dip; short local runs warn
        for method in listed:
            fits[method] = _run(module, model, data, method, seed=model.seed % 1000)
        for local in locals_:
            if local != "mf":
                fits[f"mf/{local}"] = _run(module, model, data, "mf", local=local)
    for name, fit in fits.items():
        assert np.isfinite(fit.elbo[-1]), name
    if labels is None:
        for method in (m for m in UNIMODAL if m in fits):
            for var in model.compare:
                mean, sd = _mean_sd(mf.posterior, var)
                got, _ = _mean_sd(fits[method].posterior, var)
                off = np.abs(got - mean) / sd
                assert off.max() <= 3, (method, var, off.max(), got, mean)
    else:
        for name, fit in fits.items():
            if "/" not in name:
                ari = adjusted_rand_score(labels, _assignments(module, stages, model, data, fit))
                assert ari >= 0.9, (name, ari)
    TALLY["models"] += 1
    TALLY["methods"] += len(fits)


CI_MODELS = [
    assemble("plain", ("scaled", "exposure", "groups"), 1, 300, 11),
    assemble("plain", ("regression", "ragged_normal", "binomial"), 1, 200, 12),
    assemble("mixture", ("normal", "bernoulli"), 3, 300, 13),
    assemble("chain", ("normal",), 2, 300, 14),
    assemble("plain", ("normal_gamma", "normal_wishart", "poisson_sum"), 1, 250, 15),
]
# known failures (each a strict xfail, run by the long profile only): none. Seed 12 (SSVI-A's
# E[q1] of a local u1[n] ~ Normal(h1, q1) with ragged readings) ended 3.1 of MF's sds from
# MF's with 1,000 steps; with the small-data SSVI-A rule (10,000 steps averaged) it is within 3
KNOWN: dict[int, str] = {}


# CI runs the models that pass; the known failures (each a strict xfail) run with the long
# profile only: each costs a minute of compiling, and the CI budget is 15 minutes in all
@pytest.mark.parametrize("model", [
    pytest.param(m, marks=[pytest.mark.xfail(strict=True, reason=KNOWN[m.seed]),
                           pytest.mark.skipif(not LONG, reason="known failure: long run only")])
    if m.seed in KNOWN else m for m in CI_MODELS], ids=lambda m: f"{m.kind}-{m.seed}")
def test_a_generated_model_runs_every_listed_method_to_mf_quality(model):
    check_model(model)


@pytest.mark.skipif(not LONG, reason="the long run: CEMODEL_RANDOM_MODELS=500")
@settings(max_examples=max(LONG, 1), derandomize=True, deadline=None, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(random_models())
@example(CI_MODELS[0])
def test_random_models_long_run(model):
    """Every failure is recorded (and printed) and the run goes on; the tally fails at the end."""
    GENERATED["examples"] += 1
    if GENERATED["examples"] % SHARDS != SHARD:
        return
    try:
        check_model(model)
        print(f"\nok #{GENERATED['examples']} seed={model.seed} kind={model.kind} {dict(TALLY)}")
    except Exception as exc:  # noqa: BLE001 - recorded, reported by the tally
        FAILURES.append(f"seed={model.seed} kind={model.kind}\n{model.source}{exc!r}"[:3000])
        print("\nFAILED " + FAILURES[-1])


def test_report_the_tally():
    """Prints what ran (``-s``): models, distinct sources compiled, method runs, failures."""
    print(f"\nrandom models: {dict(TALLY)}, failures: {len(FAILURES)}")
    assert not FAILURES, "\n\n".join(FAILURES)
