"""Averaged-iterate SVI: SVI whose answer is the Polyak–Ruppert average of the global
iterates λ_t over the steps of the last half of the epochs (Polyak & Juditsky 1992; for SVI,
e.g. Mandt, Hoffman & Blei 2017, §4). The iterates are SVI's exactly; only the reported q
changes:

    λ̄ = (1/T) Σ_{t in the last half} λ_t,   then E[t] of λ̄ and the ELBO at λ̄

The average of natural parameters is a valid natural parameter (each domain is convex), and
it damps the noise a constant or slowly decaying step leaves in the last iterate.
"""

from __future__ import annotations

from typing import Any

from ...errors import CemDataError
from .. import driver as rt
from . import svi
from .interface import ModelInterface


def fit(model: ModelInterface, data: Any, *, hypers=None, dims=None, init=None, start=None,
        **options: Any) -> rt.FitResult:
    """SVI over ``epochs`` (the options of ``fit_svi``), then λ ← the average of the iterates
    of the last half of the epochs (at least the last). The trace is SVI's per-epoch ELBO
    followed by the ELBO at the average; ``notes['averaged_steps']`` counts the iterates."""
    if options.get("tol") is not None:
        raise CemDataError("tol: not available for averaged-iterate SVI (it runs all its "
                           "epochs and reports the average of the last half's)")
    if options.pop("average", True) is not True:
        raise CemDataError("average: averaged-iterate SVI always averages",
                           hint="method='svi' with average=True or False")
    return svi.fit(model, data, hypers=hypers, dims=dims, init=init, start=start,
                   average=True, **options)
