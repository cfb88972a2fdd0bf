"""KLC-CG (Hensman, Rattray & Lawrence 2012): the KL-corrected bound over q(Z) alone, with
the collapse set X at q*(X), maximised by Riemannian conjugate gradients.

The module supplies the bound and its gradients over the softmax parameters θ of q(Z)
(``_klc_bound(s, θ)``, eq. 4 with eq. 9; ``_klc_gradient(s, θ, natgrad, grad)``, eq. 15–16),
``KLC_LOCALS`` (the names of Z) and ``_klc_shapes(s)``; ``riemannian_cg`` is the algorithm.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ... import errors
from ...options import check_options
from .. import driver as rt
from ..klc import klc_start, riemannian_cg
from .interface import check_finite


def fit(model: Any, data: Any, *, hypers=None, dims=None, cg: str = "fr", max_iter: int = 1000,
        tol: float = 1e-6, gtol: float | None = None, line_search: bool = False,
        seed: int = 0, init=None, start: str | None = None, callback=None) -> rt.FitResult:
    """Fit ``model`` by KLC-CG; the options are the generated ``fit_klc``'s. ``gtol`` (the
    test on ⟨g̃, g⟩) is ``tol`` unless given, as on the command line: ``tol`` below 0 never
    stops early."""
    rt.check_applies("method", "klc", model.METHODS)
    gtol = tol if gtol is None else gtol
    check_options(max_iter=max_iter, tol=tol, gtol=gtol, seed=seed)
    start = _klc_start(model, start, init)
    # (the globals' start is overwritten by q*(X))
    s = model._prepare(data, hypers, dims, seed, None, start, 1, 0.0)
    rng = np.random.default_rng(seed)
    if start == "seeds":  # θ from q(Z) given the seeded globals, as MF's first E-step sees it
        model.run_local_step(s, s.all_items, 100, 1e-3, seeding=False, warm=False,
                             guard=False)
        init = dict(zip(model.KLC_LOCALS, model._klc_logits(s), strict=True))
    # softmax parameters of q(Z): given, seeded, or N(0, 1) draws
    theta = klc_start(init, model.KLC_LOCALS, model._klc_shapes(s), rng)
    clock = time.perf_counter()
    run = riemannian_cg(lambda t: model._klc_bound(s, t),
                        lambda t, n, g: model._klc_gradient(s, t, n, g), theta, cg=cg,
                        max_iter=max_iter, tol=tol, gtol=gtol, line_search=line_search,
                        callback=callback)
    # the state at the final θ (the optimiser's last evaluation may be a rejected step)
    bound = model._klc_bound(s, run.theta)
    check_finite(model, s, bound, f"iteration {run.notes['iterations']}")
    result = model._result(s, run.trace, run.converged, time.perf_counter() - clock)
    result.notes.update(run.notes)
    result.iterations = run.notes["iterations"]  # the trace starts with the initial bound
    for name, logits in zip(model.KLC_LOCALS, run.theta, strict=True):
        result.posterior[f"{name}.logits"] = logits
    return result


def _klc_start(model: Any, start: str | None, init) -> str:
    """'seeds' (θ from q(Z) after the k-means++ seeded start) or 'random' (N(0, 1) logits);
    the module's KLC_START unless asked; ``init`` given, the logits are the caller's."""
    if start is None:
        start = model.KLC_START
    if start not in ("seeds", "random"):
        raise errors.CemDataError(f"start: expected 'seeds' or 'random', found {start!r}")
    if start == "seeds" and model.KLC_START != "seeds":
        raise errors.CemDataError(
            "start: 'seeds' does not apply to KLC-CG on this model: its q(Z) is not kept per "
            "item", hint="start='random', or init= logits")
    return "random" if init is not None else start
