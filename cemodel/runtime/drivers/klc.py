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

from ...options import check_options
from .. import driver as rt
from ..klc import klc_start, riemannian_cg
from .interface import check_finite


def fit(model: Any, data: Any, *, hypers=None, dims=None, cg: str = "fr", max_iter: int = 1000,
        tol: float = 1e-6, gtol: float = 1e-6, line_search: bool = False, seed: int = 0,
        init=None, callback=None) -> rt.FitResult:
    """Fit ``model`` by KLC-CG; the options are the generated ``fit_klc``'s."""
    rt.check_applies("method", "klc", model.METHODS)
    check_options(max_iter=max_iter, tol=tol, gtol=gtol, seed=seed)
    # (the globals' start is overwritten by q*(X))
    s = model._prepare(data, hypers, dims, seed, None, "random", 1, 0.0)
    rng = np.random.default_rng(seed)
    # softmax parameters of q(Z): given, or N(0, 1) draws
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
