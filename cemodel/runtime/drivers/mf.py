"""Batch mean-field VB: coordinate ascent (VBEM), the same loop for every model.

One iteration (DESIGN.md, "MF"):

    statistics ← 0; elbo = run_local_step(s, all items)          # E-step: locals, then Σ E[t_n]
    for each global β: λ_β = η_β + Σ_n E[t_n]                      # M-step (update, scale 1)
    elbo += elbo_of_globals(s)                                     # never decreases

A collapsed E-step (``local='gibbs'`` or ``'cvb0'``) runs the stochastic driver with ρ = 1 on
every item, which is this batch M-step with that E-step (Hoffman & Blei 2015, §2.5).
"""

from __future__ import annotations

import math
import time
from typing import Any

from ...errors import CemDataError
from ...files import remove_stale_temporaries
from ...options import check_options
from .. import driver as rt
from . import svi
from .interface import (
    ModelInterface,
    check_finite,
    check_possible,
    given_hypers,
    zero_statistics,
)


def fit(model: ModelInterface, data: Any, *, hypers=None, dims=None, max_iter: int = 200,
        tol: float = 1e-6, max_local_iter: int = 100, local_tol: float = 1e-3, seed: int = 0,
        callback=None, warn_decrease: bool = True, init=None, start=None,
        warm_start: bool = False, checkpoint=None, checkpoint_every: int = 1, resume=None,
        learn=(), local: str = "mf", gibbs_sweeps: int = 10, gibbs_burn_in: int | None = None,
        on_iteration=None) -> rt.FitResult:
    """Fit ``model`` by coordinate ascent; the options are the generated ``fit``'s (see its
    docstring): stops when the relative change of the ELBO falls below ``tol``.
    ``on_iteration(iteration, result)`` is called after each iteration with the fit so far
    (e.g. to score held-out data as it goes); its time is not the fit's."""
    check_options(max_iter=max_iter, tol=tol, max_local_iter=max_local_iter,
                  local_tol=local_tol, seed=seed, checkpoint_every=checkpoint_every,
                  gibbs_sweeps=gibbs_sweeps, gibbs_burn_in=gibbs_burn_in)
    if model.DATA_PLATE is None and local != "mf":
        raise CemDataError(f"local step {local!r} does not apply to this model: it has no "
                           "data plate, so no local variables")
    if model.DATA_PLATE is not None and rt.check_local_step(local, model.LOCAL_STEPS) in (
            "gibbs", "cvb0"):
        # the batch M-step (ρ = 1 on all items) with a collapsed E-step
        return svi.fit(model, data, hypers=hypers, dims=dims, epochs=max_iter,
                       batch_size=None, kappa=0.0, tau=0.0, step_scale=1.0,
                       max_local_iter=max_local_iter, local_tol=local_tol, seed=seed,
                       callback=callback, init=init, start=start, tol=tol, local=local,
                       gibbs_sweeps=gibbs_sweeps, gibbs_burn_in=gibbs_burn_in, learn=learn,
                       checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume,
                       on_epoch=on_iteration)
    s = model._prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol)
    learn = rt.check_learn(learn, model.LEARNABLE)
    trace: list[float] = []
    converged = False
    first = 0
    # what a resumed fit must share with its checkpoint (JSON values)
    trajectory = {"max_local_iter": int(max_local_iter), "local_tol": float(local_tol),
                  "warm_start": bool(warm_start), "learn": sorted(learn),
                  "hypers": given_hypers(model, s)}
    if resume is not None:  # continue the same trajectory
        progress = rt.load_checkpoint(resume, s, model.SOURCE_SHA256, "fit",
                                      needs={"trace": list, "iteration": int},
                                      scratch=model.ROLES.get("thread", ()))
        rt.check_same_trajectory(resume, progress.get("options"), trajectory)
        trace, first = progress["trace"], progress["iteration"]
        # a fit that had stopped is over: resuming it returns it as it was (an old
        # checkpoint has no "converged": it had not)
        converged = progress.get("converged") is True
        if len(trace) != first or (converged and not trace):
            raise rt.damaged_checkpoint(resume, f"{len(trace)} ELBO values for "
                                                f"{first} iterations")
    if checkpoint is not None:  # what a writer killed before its rename left
        remove_stale_temporaries(checkpoint)
    sweeps: list[float] = []  # the mean inner sweeps per item, per iteration of this call
    clock = time.perf_counter()
    for iteration in range(first, first if converged else max_iter):
        if learn and iteration > 0:  # empirical Bayes, before the local step
            model._learn(s, learn)
        elbo = _iteration(model, s, warm_start, iteration, max_local_iter, local_tol)
        trace.append(elbo)
        if hasattr(s, "local_sweeps"):
            sweeps.append(float(s.local_sweeps.mean()))
        rt.check_elbo_increase(trace, warn_decrease,
                               resumed=resume if iteration == first else None)
        check_possible(model, elbo, s)
        check_finite(model, s, elbo, f"iteration {iteration + 1}")
        if callback is not None:
            callback(iteration, elbo, time.perf_counter() - clock)
        converged = rt.converged(trace, tol)
        if on_iteration is not None:
            paused = time.perf_counter()
            on_iteration(iteration, model._result(s, list(trace), converged, paused - clock))
            clock += time.perf_counter() - paused  # not part of the fit's time
        # atomic: a crash keeps the previous one; the last one records that the fit stopped
        if checkpoint is not None and ((iteration + 1) % checkpoint_every == 0 or converged):
            rt.save_checkpoint(checkpoint, s, model.SOURCE_SHA256, "fit",
                               iteration=iteration + 1, trace=trace, converged=converged,
                               options=trajectory)
        if converged:
            break
    if checkpoint is not None:
        remove_stale_temporaries(checkpoint)
    result = model._result(s, trace, converged, time.perf_counter() - clock)
    if hasattr(s, "local_sweeps"):
        result.notes["local_sweeps"] = sweeps
    return result


def _iteration(model: ModelInterface, s: rt.State, warm_start: bool, iteration: int,
               max_local_iter: int, local_tol: float) -> float:
    """One coordinate-ascent sweep: the E-step over every item, then every global's update
    from the statistics; returns the ELBO. Each item restarts from its prior (guarded: the
    restart is kept only when it is no worse) unless ``warm_start``."""
    zero_statistics(model, s)
    elbo_local = 0.0
    if model.DATA_PLATE is not None:
        elbo_local = model.run_local_step(
            s, s.all_items, max_local_iter, local_tol, seeding=False,
            warm=warm_start and iteration > 0, guard=not warm_start and iteration > 0,
            accelerate=True)
        if not math.isfinite(elbo_local):  # the locals went first: name them, not the globals
            check_finite(model, s, elbo_local, f"iteration {iteration + 1}")
    for g in model.GLOBALS:
        g.update(s, 1.0)
    elbo = model.elbo_of_globals(s)
    elbo += elbo_local
    return elbo
