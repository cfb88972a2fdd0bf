"""A fit and an inference as the Python API returns them: a ``FitResult`` with its posterior's
lookups (``fit["beta.alpha"]``, ``fit.mean("beta")``, ``fit.expectation("E[log beta]")``) and
what comes after the fit (``to_arviz``, ``summary``, ``factors``, ``save``). Built by
``cemodel.api.Model``; the model they need is anything with its ``stages`` and ``module``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from .compiler import Stages
from .errors import CemError
from .runtime.driver import FitResult

__all__ = ["Fit", "FittedModel", "Inference"]


class FittedModel(Protocol):
    """What a fit reads of its model (``cemodel.api.Model``)."""

    stages: Stages
    module: ModuleType


class _Posterior:
    """Lookups over ``self.posterior`` ({"beta.alpha": ..., "E[log beta]": ...})."""

    posterior: dict[str, np.ndarray]

    def __getitem__(self, key: str) -> np.ndarray:
        return self.posterior[key]

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables with a posterior here, in order."""
        return tuple(dict.fromkeys(k.split(".")[0] for k in self.posterior if "." in k))

    def expectation(self, name: str) -> np.ndarray:
        """``expectation("E[log beta]")`` (or ``"log beta"``): an expected sufficient statistic."""
        key = name if name.startswith("E[") else f"E[{name}]"
        if key not in self.posterior:
            known = ", ".join(k for k in self.posterior if k.startswith("E[")) or "none"
            raise KeyError(f"no expectation {key!r}; available: {known}")
        return self.posterior[key]

    def mean(self, var: str) -> np.ndarray:
        """The posterior mean of ``var`` (Dirichlet topics: each row normalised)."""
        p = {k.split(".", 1)[1]: v for k, v in self.posterior.items()
             if k.startswith(var + ".")}
        if "alpha" in p:  # Dirichlet
            return p["alpha"] / p["alpha"].sum(axis=-1, keepdims=True)
        if "probs" in p:  # Categorical
            return p["probs"]
        if "mean" in p:  # Normal, MultivariateNormal
            return p["mean"]
        if "a" in p and "b" in p:  # Beta
            return p["a"] / (p["a"] + p["b"])
        if "shape" in p and "rate" in p:  # Gamma
            return p["shape"] / p["rate"]
        if "dof" in p and "scale" in p:  # Wishart
            return np.asarray(p["dof"])[..., None, None] * p["scale"]
        if "p" in p:  # Bernoulli
            return p["p"]
        if p:  # a family without a mean here (a Pólya-Gamma ω of the logistic augmentation)
            raise KeyError(f"no posterior mean of {var!r} (its posterior holds "
                           f"{', '.join(sorted(p))})")
        raise KeyError(f"no posterior for {var!r}; variables: {', '.join(self.variables)}")


@dataclass(repr=False, eq=False)
class Fit(FitResult, _Posterior):
    """A fit's ``FitResult`` (posterior, ``elbo`` trace, ``seconds``, ``hypers``, ``state``,
    ``notes``) and how it was made. Pass it as ``init=`` to continue from its globals."""

    method: str = "mf"
    local: str = "mf"
    seed: int | None = 0
    model: FittedModel | None = None  # the fitted model (to_arviz, summary, save need it)

    @classmethod
    def of(cls, result: FitResult, method: str, local: str, model: FittedModel | None = None,
           seed: int | None = 0) -> Fit:
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)},
                   method=method, local=local, model=model, seed=seed)

    # -- after the fit (cemodel.arviz_export, cemodel.intervals, cemodel.saved) ---------------

    def _model(self, what: str) -> FittedModel:
        if self.model is None:
            raise CemError(f"{what}: this fit does not know its model",
                           hint="fit with Model.fit, or load it with cemodel.load_result")
        return self.model

    def _meta(self) -> dict[str, Any]:
        from .saved import fit_meta

        return fit_meta(self._model("save").stages, self, self.method, self.local, self.seed)

    def to_arviz(self, draws: int = 1000, seed: int | None = None, *,
                 data: Mapping[str, Any] | None = None, coords: Mapping[str, Any] | None = None,
                 discrete_locals: bool | None = None) -> Any:
        """ArviZ's InferenceData: ``draws`` exact draws from q, axes named after the plates,
        ``coords`` by dimension or plate name (``{"V": words}``), ``data`` as observed_data;
        discrete locals drawn while draws × items ≤ 10⁶ (or as ``discrete_locals`` says).
        The arviz extra; ``cemodel.arviz_export``."""
        from .arviz_export import to_inference_data

        model = self._model("to_arviz")
        return to_inference_data(model.stages.plan, model.module.SPEC, self, self._meta(),
                                 draws=draws, seed=seed, data=data, coords=coords,
                                 discrete_locals=discrete_locals)

    def summary(self, hdi_prob: float = 0.94, *, coords: Mapping[str, Any] | None = None,
                discrete_locals: bool | None = None) -> Any:
        """Mean, sd and central ``hdi_prob`` interval of every scalar marginal of q in closed
        form, as ``az.summary``'s table (``eti_3%``, ``eti_97%``); ``cemodel.intervals``."""
        from .intervals import summary

        return summary(self._model("summary").stages.plan.model, self.factors(), hdi_prob,
                       coords, discrete_locals)

    def factors(self) -> tuple:
        """Each factor of q with its family, parameters and named axes (``cemodel.latents``)."""
        from .latents import dim_sizes, latents

        plan = self._model("factors").stages.plan
        return latents(plan.model, plan.globals + plan.kept_locals, self.posterior,
                       dim_sizes(plan.model, self.dims))

    def save(self, path: str | Path, **arviz: Any) -> Path:
        """Write the fit to ``path``, ``.npz`` or ``.nc`` (``to_arviz(**arviz)``: draws, seed,
        data, coords, discrete_locals; an .npz takes none of them); read it back with
        ``cemodel.load_result(path, model)`` (``cemodel.saved``)."""
        from .saved import save

        model = self._model("save")
        if Path(path).suffix.lower() == ".nc":
            arviz = {"draws": 1000, "seed": None, **arviz}
        return save(path, model.stages, model.module.SPEC, self, self._meta(), **arviz)

    def __repr__(self) -> str:
        last = f"{self.elbo[-1]:.6g}" if len(self.elbo) else "not evaluated"
        return (f"Fit(method={self.method!r}, local={self.local!r}, "
                f"iterations={self.iterations}, converged={self.converged}, elbo={last}, "
                f"seconds={self.seconds:.3g}, variables={list(self.variables)})")


@dataclass(repr=False, eq=False)
class Inference(_Posterior):
    """The locals of new data under a fit's globals, held fixed (``Model.infer``).

    ``elbo``: the data's part of the ELBO, Σ_items E_q[log p(x_n, locals_n | globals)] +
    H[q(locals_n)] with q(globals) the fit's (the ELBO of the fit's data plus these items
    minus that of the fit's data alone, at fixed globals)."""

    posterior: dict[str, np.ndarray]
    elbo: float
    items: int
    seconds: float
    notes: dict[str, object] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"Inference(items={self.items}, elbo={self.elbo:.6g}, "
                f"variables={list(self.variables)})")
