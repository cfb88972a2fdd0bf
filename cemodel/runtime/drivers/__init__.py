"""The fitting algorithms: one registry of methods, each a driver over the model interface.

    DRIVERS[method].run(module, data, **options)

``module`` is a generated module (or anything that provides ``ModelInterface``); the CLI, the
Python API and the Dask layer all dispatch through ``DRIVERS``. Whether a method applies to a
model is the model's ``METHODS`` table (computed by ``cemodel.plan``), never decided here.

Adding a method: a driver in this package, its entry in ``DRIVERS``, and its applicability
rule in ``cemodel.plan`` (README, "Adding an inference method").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from ...errors import CemDataError
from ..driver import FitResult, check_applies
from . import klc, mf, svi, svi_avg
from .interface import Global, ModelInterface, ModelView

__all__ = ["DRIVERS", "Global", "Method", "ModelInterface", "ModelView", "run"]


@dataclass(frozen=True)
class Method:
    """A global step: its driver and what its length option counts."""

    name: str
    driver: Callable[..., FitResult]
    length: str  # the option that bounds it: 'max_iter' (iterations) or 'epochs'
    summary: str
    stochastic: bool = False

    def run(self, model: ModelInterface, data: Any, **options: Any) -> FitResult:
        """Fit ``model`` to ``data`` by this method; refused with the reason where the
        model's METHODS table says it does not apply."""
        check_applies("method", self.name, model.METHODS)
        chosen = sorted({"sample_globals", "apply_v"} & set(options))
        if chosen:
            raise CemDataError(f"{', '.join(chosen)}: the method decides this (ssvi-a samples "
                               "the globals, ssvi also applies V)", hint="choose the method")
        annealed = options.get("effective_batch_size") is not None
        if self.name == "svi+" and not annealed:
            raise CemDataError("method 'svi+' needs effective_batch_size=M (1 ≤ M ≤ batch_size; "
                               "M = batch_size is SVI), a number or a function of the step")
        if self.name == "svi" and annealed:
            raise CemDataError("effective_batch_size turns SVI into SVI+", hint="method='svi+'")
        _check_keywords(self.name, self.driver, options)
        return self.driver(model, data, **options)


def _check_keywords(name: str, driver: Callable[..., FitResult], options: Mapping) -> None:
    """A keyword the driver does not take, refused with the method's options (a driver that
    takes ``**options`` checks its own: the stochastic ones)."""
    parameters = inspect.signature(driver).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    taken = [n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(taken))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)} for method "
                        f"'{name}'; its options: {', '.join(taken)}")


DRIVERS: Mapping[str, Method] = MappingProxyType({
    "mf": Method("mf", mf.fit, "max_iter",
                 "batch mean-field VB (coordinate ascent)"),
    "svi": Method("svi", svi.fit, "epochs",
                  "stochastic VI (Hoffman et al. 2013)", stochastic=True),
    "svi+": Method("svi+", svi.fit, "epochs",
                   "SVI with tuneable annealing (Paisley)", stochastic=True),
    "ssvi-a": Method("ssvi-a", partial(svi.fit, sample_globals=True), "epochs",
                     "structured SVI, the approximate step (Hoffman & Blei 2015, eq. 10)",
                     stochastic=True),
    "ssvi": Method("ssvi", partial(svi.fit, sample_globals=True, apply_v=True), "epochs",
                   "structured SVI with V(β, λ) (Hoffman & Blei 2015, eq. 7)", stochastic=True),
    "svi-avg": Method("svi-avg", svi_avg.fit, "epochs",
                      "SVI with the Polyak–Ruppert average of the last half's iterates",
                      stochastic=True),
    "klc": Method("klc", klc.fit, "max_iter",
                  "KL-corrected collapsed bound by Riemannian CG (Hensman et al. 2012)"),
})


def run(method: str, model: ModelInterface, data: Any, **options: Any) -> FitResult:
    """``DRIVERS[method].run(model, data, **options)``, an unknown method refused."""
    check_applies("method", method, {name: "yes" for name in DRIVERS})
    return DRIVERS[method].run(model, data, **options)
