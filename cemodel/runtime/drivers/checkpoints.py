"""A stochastic fit's checkpoints: what ``svi.fit`` writes every ``checkpoint_every``
epochs, and how ``resume=`` puts a fit back where one left it (state, trace, step counter,
random streams, the running average) on the same trajectory only: the options that shape
it are recorded and must be those of the fit that resumes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import errors
from .. import driver as rt
from .interface import ModelInterface


def save(run: Any, epoch: int, converged: bool, average: Any) -> None:
    """Write ``run`` (an ``svi.Run``) after ``epoch`` epochs (atomic: a crash keeps the
    previous file; the last one records that the fit stopped)."""
    o, model = run.o, run.model
    shortened = ({"shortened": run.shortened} if _v_applies(model)
                 or o.effective_batch_size is not None else {})
    rt.save_checkpoint(
        o.checkpoint, run.s, model.SOURCE_SHA256, "fit_svi", source=run.source,
        keep=global_state(model), epoch=epoch + 1, step=run.step, trace=run.trace,
        **shortened, streams=[g.bit_generator.state for g in (run.rng, run.noise, run.sampler)],
        converged=converged, options=trajectory(run),
        **({"average": average.progress()} if average is not None else {}))


def resume(run: Any, path: Any, average: Any) -> tuple[int, bool]:
    """Put ``run`` where the checkpoint ``path`` left it; returns its next epoch and whether
    the fit had stopped (an old checkpoint has no "converged": it had not)."""
    progress = rt.load_checkpoint(path, run.s, run.model.SOURCE_SHA256, "fit_svi",
                                  source=run.source, keep=global_state(run.model),
                                  needs={"trace": list, "step": int, "epoch": int,
                                         "streams": list},
                                  scratch=run.model.ROLES.get("thread", ()))
    rt.check_same_trajectory(path, progress.get("options"), trajectory(run))
    run.trace, run.step = progress["trace"], progress["step"]
    run.shortened = progress.get("shortened", 0)
    converged = progress.get("converged") is True
    if converged and not run.trace:
        raise rt.damaged_checkpoint(path, "a fit that stopped with no ELBO value")
    streams = progress["streams"]
    try:
        for g, state in zip((run.rng, run.noise, run.sampler), streams, strict=True):
            rt.restore_generator(g, state)
    except (TypeError, ValueError, KeyError) as exc:
        raise rt.damaged_checkpoint(path, f"its random streams cannot be restored ({exc})"
                                    ) from None
    if (average is None) != ("average" not in progress):
        saved, here = ("with", "does not average") if average is None else (
            "without", "averages")
        raise errors.CemDataError(
            f"resume: {path} is a checkpoint of a fit {saved} averaged iterates, and this one "
            f"{here}", hint="the same 'average' (and method: svi-avg averages) as the fit "
            "that wrote it (SSVI-A averages by default on a small data set)")
    if average is not None:
        average.restore(progress["average"], progress["epoch"], path)
    return progress["epoch"], converged


def trajectory(run: Any) -> dict:
    """What a resumed fit must share with its checkpoint: the options (``svi.Options``) of
    the step sizes, the minibatch, the kind of step (SSVI-A, SSVI, SVI+) and the local step
    (a Gibbs E-step's sweeps and burn-in too), and the hyperparameters it was given."""
    o = run.o
    annealed = o.effective_batch_size
    options = {"batch_size": o.batch_size, "kappa": o.kappa, "tau": o.tau,
               "step_scale": o.step_scale, "sample_globals": o.sample_globals,
               "apply_v": o.apply_v, "effective_batch_size": "a schedule" if callable(annealed)
               else annealed, "learning_rate": o.learning_rate, "local": o.local,
               "ramp": o.ramp, "control_variate": o.control_variate,
               "max_local_iter": o.max_local_iter, "local_tol": o.local_tol,
               "learn": sorted(o.learn), "hypers": run.hypers,
               "seed": o.seed}  # the minibatches' order and each epoch's kernel draws
    if o.local == "gibbs":  # its sweeps and burn-in shape every E-step
        options.update(gibbs_sweeps=o.gibbs_sweeps, gibbs_burn_in=o.gibbs_burn_in)
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in options.items()}


def global_state(model: ModelInterface) -> tuple[str, ...]:
    """The arrays an out-of-core checkpoint keeps: the globals' (its state holds one
    minibatch's items)."""
    return (*model.ROLES.get("global", ()), *model.ROLES.get("global_exp", ()))


def _v_applies(model: ModelInterface) -> bool:
    return model.METHODS.get("ssvi", "no").startswith("yes")
