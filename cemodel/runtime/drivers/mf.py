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

import numpy as np

from ...errors import CemDataError, CemOptionError
from ...files import remove_stale_temporaries
from ...options import check_options
from .. import driver as rt
from ..scales import rebalance
from . import svi
from .interface import (
    ModelInterface,
    check_finite,
    check_possible,
    given_hypers,
    zero_statistics,
)

# iterations of each start of a fit with several (``starts``): on NYT LDA (K = 20) the highest
# ELBO of ten draws after 4 to 10 iterations was always a draw among the best four after 20
# (benchmarks/NOTES.md, "Several starts"); the first iterations are the costly ones
TRIAL_ITER = 5


def fit(model: ModelInterface, data: Any, *, hypers=None, dims=None, max_iter: int = 200,
        tol: float = 1e-6, max_local_iter: int = 100, local_tol: float = 1e-3, seed: int = 0,
        callback=None, warn_decrease: bool = True, init=None, start=None,
        warm_start: bool = False, checkpoint=None, checkpoint_every: int = 1, resume=None,
        learn=(), local: str = "mf", gibbs_sweeps: int = 10, gibbs_burn_in: int | None = None,
        on_iteration=None, starts: int = 1, trial_iter: int | None = None) -> rt.FitResult:
    """Fit ``model`` by coordinate ascent; the options are the generated ``fit``'s (see its
    docstring): stops when the relative change of the ELBO falls below ``tol``.
    ``on_iteration(iteration, result)`` is called after each iteration with the fit so far
    (e.g. to score held-out data as it goes); its time is not the fit's.

    ``starts`` > 1: that many random starts of ``trial_iter`` iterations each, the highest
    ELBO continued (``_best_start``; README "Several starts")."""
    check_options(max_iter=max_iter, tol=tol, max_local_iter=max_local_iter,
                  local_tol=local_tol, seed=seed, checkpoint_every=checkpoint_every,
                  gibbs_sweeps=gibbs_sweeps, gibbs_burn_in=gibbs_burn_in, starts=starts,
                  trial_iter=trial_iter)
    if trial_iter is not None and starts == 1:
        raise CemOptionError("trial_iter sets the iterations of each of several starts",
                             hint="starts=N (N > 1), or drop trial_iter")
    trial_iter = TRIAL_ITER if trial_iter is None else trial_iter
    if starts > 1:
        check_starts(model, init, start, local, trial_iter, max_iter)
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
    learn = rt.check_learn(learn, model.LEARNABLE)
    trace: list[float] = []
    converged = False
    first = 0
    sweeps: list[float] = []  # the mean inner sweeps per item, per iteration of this call
    clock = time.perf_counter()
    trials: list[dict] = []
    if starts > 1 and resume is None:  # a resumed fit continues the start it chose
        s, trace, sweeps, trials = _best_start(
            model, data, hypers, dims, seed, start, starts, trial_iter, max_local_iter,
            local_tol, warm_start, learn, tol, warn_decrease, callback, clock)
        first = len(trace)
        converged = rt.converged(trace, tol)
    else:
        s = model._prepare(data, hypers, dims, seed, init, start, max_local_iter, local_tol)
    # what a resumed fit must share with its checkpoint (JSON values)
    trajectory = {"max_local_iter": int(max_local_iter), "local_tol": float(local_tol),
                  "warm_start": bool(warm_start), "learn": sorted(learn),
                  "hypers": given_hypers(model, s)}
    if starts > 1:  # only then: checkpoints written before these options still resume
        trajectory.update(starts=int(starts), trial_iter=int(trial_iter))
    if resume is not None:  # continue the same trajectory
        progress = rt.load_checkpoint(resume, s, model.SOURCE_SHA256, "fit",
                                      needs={"trace": list, "iteration": int},
                                      scratch=model.ROLES.get("thread", ()))
        rt.check_same_trajectory(resume, progress.get("options"), trajectory)
        if (progress.get("options") or {}).get("starts", 1) != starts:  # several there
            rt.check_same_trajectory(resume, progress["options"], {"starts": int(starts)})
        trace, first = progress["trace"], progress["iteration"]
        # a fit that had stopped is over: resuming it returns it as it was (an old
        # checkpoint has no "converged": it had not)
        converged = progress.get("converged") is True
        if len(trace) != first or (converged and not trace):
            raise rt.damaged_checkpoint(resume, f"{len(trace)} ELBO values for "
                                                f"{first} iterations")
    if checkpoint is not None:  # what a writer killed before its rename left
        remove_stale_temporaries(checkpoint)
    if converged and checkpoint is not None and trials:  # a trial converged: its last state
        rt.save_checkpoint(checkpoint, s, model.SOURCE_SHA256, "fit", iteration=len(trace),
                           trace=trace, converged=True, options=trajectory)
    for iteration in range(first, first if converged else max_iter):
        converged = _step(model, s, trace, sweeps, iteration, warm_start, learn,
                          max_local_iter, local_tol, tol, warn_decrease,
                          resume if iteration == first else None, callback, clock)
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
    if trials:
        result.notes["starts"] = trials
    return result


def _step(model: ModelInterface, s: rt.State, trace: list[float], sweeps: list[float],
          iteration: int, warm_start: bool, learn, max_local_iter: int, local_tol: float,
          tol: float, warn_decrease: bool, resumed, callback, clock: float) -> bool:
    """One checked iteration appended to ``trace`` (and ``sweeps``); whether it converged."""
    if learn and iteration > 0:  # empirical Bayes, before the local step
        model._learn(s, learn)
    elbo = _iteration(model, s, warm_start, iteration, max_local_iter, local_tol)
    trace.append(elbo)
    if hasattr(s, "local_sweeps"):
        sweeps.append(float(s.local_sweeps.mean()))
    rt.check_elbo_increase(trace, warn_decrease, resumed=resumed)
    check_possible(model, elbo, s)
    check_finite(model, s, elbo, f"iteration {iteration + 1}")
    if callback is not None:
        callback(iteration, elbo, time.perf_counter() - clock)
    return rt.converged(trace, tol)


def start_seed(seed: int, trial: int) -> int:
    """The seed of trial ``trial`` of a fit with ``starts`` > 1: ``seed`` itself for the first
    (so that its trajectory is the single-start fit's), then independent streams of it."""
    if trial == 0:
        return seed
    return int(np.random.SeedSequence([seed, trial]).generate_state(1)[0])


def check_starts(model: ModelInterface, init, start, local: str, trial_iter: int,
                 max_iter: int) -> None:
    """Several starts need starts that differ: a random kind, no ``init``, the MF step."""
    if trial_iter >= max_iter:
        raise CemOptionError(f"starts: trial_iter ({trial_iter}) must be below max_iter "
                             f"({max_iter}): the best start continues after its trial")
    if init is not None:
        raise CemOptionError("starts: init= gives the one start; several starts are draws of "
                             "the model's start", hint="drop init= or set starts=1")
    kind = model.DEFAULT_START if start is None else start
    if kind == "prior":
        raise CemOptionError("starts: start 'prior' is the same for every seed, so every "
                             "start would be the same fit",
                             hint="start='random' (or 'seeds' where it applies), or starts=1")
    if local in ("gibbs", "cvb0"):
        raise CemOptionError(f"starts: the trials compare mean-field ELBOs; local step "
                             f"{local!r} runs the stochastic driver", hint="starts=1")


def _best_start(model: ModelInterface, data, hypers, dims, seed: int, start, starts: int,
                trial_iter: int, max_local_iter: int, local_tol: float, warm_start: bool,
                learn, tol: float, warn_decrease: bool, callback, clock: float):
    """Run ``starts`` trials of ``trial_iter`` iterations (fewer where one converges) and
    return the state, trace and sweeps of the one with the highest last ELBO, with each
    trial's seed and ELBO. Two states live at a time: the best so far and the current one.
    ``clock``: the fit's, so that the callback's seconds run on across the trials."""
    best = None
    trials: list[dict] = []
    for trial in range(starts):
        trial_seed = start_seed(seed, trial)
        s = model._prepare(data, hypers, dims, trial_seed, None, start, max_local_iter,
                           local_tol)
        trace: list[float] = []
        sweeps: list[float] = []
        for iteration in range(trial_iter):
            if _step(model, s, trace, sweeps, iteration, warm_start, learn, max_local_iter,
                     local_tol, tol, warn_decrease, None, callback, clock):
                break
        trials.append({"seed": trial_seed, "iterations": len(trace), "elbo": trace[-1],
                       "kept": False})
        if best is None or trace[-1] > best[1][-1]:
            best = (s, trace, sweeps, trial)
    s, trace, sweeps, kept = best
    trials[kept]["kept"] = True
    return s, trace, sweeps, trials


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
    rebalance(model, s)  # along the scale symmetries (SCALES), if any
    elbo = model.elbo_of_globals(s)
    elbo += elbo_local
    return elbo
