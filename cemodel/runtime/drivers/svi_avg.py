"""Averaged-iterate SVI: SVI whose answer is the Polyak–Ruppert average of the global
iterates λ_t over the steps of the last half of the epochs (Polyak & Juditsky 1992; for SVI,
e.g. Mandt, Hoffman & Blei 2017, §4). The iterates are SVI's exactly; only the reported q
changes:

    λ̄ = (1/T) Σ_{t in the last half} λ_t,   then E[t] of λ̄ and the ELBO at λ̄

The average of natural parameters is a valid natural parameter (each domain is convex), and
it damps the noise a constant or slowly decaying step leaves in the last iterate.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...errors import CemDataError
from .. import driver as rt
from . import svi
from .interface import ModelInterface


def fit(model: ModelInterface, data: Any, *, hypers=None, dims=None, init=None, start=None,
        **options: Any) -> rt.FitResult:
    """SVI over ``epochs`` (the options of ``fit_svi``), then λ ← the average of the iterates
    of the last half of the epochs (at least the last). The trace is SVI's per-epoch ELBO
    followed by the ELBO at the average; ``notes['averaged_steps']`` counts the iterates."""
    for name in ("checkpoint", "resume", "tol"):
        if options.get(name) is not None:
            raise CemDataError(f"{name}: not available for averaged-iterate SVI (the running "
                               "average is not part of a checkpoint, and it stops after "
                               "its epochs)")
    run = svi.begin(model, data, hypers=hypers, dims=dims, init=init, start=start, **options)
    names = [name for g in model.GLOBALS for name in g.lam]
    total = {name: np.zeros_like(getattr(run.s, name)) for name in names}
    averaged, first = 0, run.o.epochs // 2
    clock = time.perf_counter()
    for epoch in range(run.o.epochs):
        for batch, offset in svi.minibatches(run, epoch):
            svi.step(run, batch, offset, epoch)
            if epoch >= first:
                for name in names:
                    total[name] += getattr(run.s, name)
                averaged += 1
        if run.o.evaluate:
            svi.record_epoch(run, epoch, time.perf_counter() - clock)
    for name in names:  # λ̄, then its expectations
        getattr(run.s, name)[...] = total[name] / max(averaged, 1)
    if model.GLOBALS:
        model.refresh(run.s)
    svi.record_epoch(run, run.o.epochs, time.perf_counter() - clock,
                     "the average of the iterates")
    result = model._result(run.s, run.trace, False, time.perf_counter() - clock)
    result.notes["averaged_steps"] = averaged
    return result

