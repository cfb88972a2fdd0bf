"""Intervals without sampling: mean, sd and the central interval of every scalar marginal of
q, from each family's own quantile function (``cemodel.posterior.marginals``).

``Fit.summary(hdi_prob=0.94)`` returns them as a table shaped like ``az.summary``'s (rows
``beta[0, 3]``, columns ``mean``, ``sd``, ``eti_3%``, ``eti_97%``: an equal-tailed interval,
which ArviZ names ``eti``); ``cemodel summarize`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CemError
from .families import FAMILIES
from .latents import AxisLabels, Latent, Part, axis_coords, axis_labels, kept
from .model import Model
from .posterior import MARGINALS, central_interval, marginals

# summary() shows the factors to_arviz() draws by default (its 1000 draws): discrete locals
# only while 1000 × their values stay within latents.DISCRETE_LIMIT
DEFAULT_DRAWS = 1000


@dataclass(frozen=True)
class Row:
    label: str
    mean: float
    sd: float
    low: float
    high: float


def columns(prob: float) -> tuple[str, str, str, str]:
    """ArviZ's column names: ``eti_3%`` and ``eti_97%`` for prob 0.94."""
    alpha = 1.0 - prob
    return "mean", "sd", f"eti_{100 * alpha / 2:g}%", f"eti_{100 * (1 - alpha / 2):g}%"


def check_prob(prob: Any) -> float:
    if not isinstance(prob, (int, float, np.floating)) or not 0.0 < float(prob) < 1.0:
        raise CemError(f"hdi_prob: expected a probability between 0 and 1, found {prob!r}")
    return float(prob)


def _label(name: str, index: tuple[int, ...], labels: list[np.ndarray | None]) -> str:
    if not index:
        return name
    shown = [str(i) if axis is None else str(axis[i])
             for i, axis in zip(index, labels + [None] * (len(index) - len(labels)),
                                strict=True)]
    return f"{name}[{', '.join(shown)}]"


def rows(factors: tuple[Latent, ...], prob: float, discrete_locals: bool | None = None,
         coords: Mapping[str, AxisLabels] | None = None) -> list[Row]:
    """One row per scalar marginal of each factor kept (``latents.kept``), in order; labels
    of an axis of another length than ``coords`` gives are refused (``latents.axis_labels``)."""
    prob = check_prob(prob)
    out = []
    for factor in factors:
        if factor.family not in MARGINALS or not kept(factor, DEFAULT_DRAWS, discrete_locals):
            continue
        parts = marginals(factor.family, factor.param())
        for part in factor.parts:
            m = parts[part.part]
            low, high = central_interval(m, prob)
            values = np.broadcast_arrays(m.mean, m.sd, low, high)
            labels = [axis_labels(coords or {}, dim, size)
                      for dim, size in zip(part.dims, values[0].shape, strict=False)]
            for index in np.ndindex(values[0].shape):
                out.append(Row(_label(part.name, index, labels),
                               *(float(v[index]) for v in values)))
    return out


def dataframe(table: list[Row], prob: float) -> Any:
    """The rows as a pandas DataFrame (pandas comes with the arviz extra)."""
    try:
        import pandas
    except ImportError:
        raise CemError("summary() returns a pandas DataFrame; pandas is not installed",
                       hint="pip install 'cemodel[arviz]'") from None
    return pandas.DataFrame([[r.mean, r.sd, r.low, r.high] for r in table],
                            index=[r.label for r in table], columns=list(columns(prob)))


def summary(model: Model, factors: tuple[Latent, ...], prob: float,
            coords: Mapping[str, Any] | None, discrete_locals: bool | None) -> Any:
    """``Fit.summary``: the rows of ``factors`` as a DataFrame, axes labelled by ``coords``
    (by dimension or plate name of ``model``)."""
    table = rows(factors, prob, discrete_locals, axis_coords(model, coords or {}))
    return dataframe(table, prob)


def text(table: list[Row], prob: float) -> list[str]:
    """The rows as the lines of a text table."""
    width = max([len(r.label) for r in table] + [4])
    head = "".join(f"{c:>12}" for c in columns(prob))
    lines = [f"  {'name':<{width}}{head}"]
    for r in table:
        lines.append(f"  {r.label:<{width}}" + "".join(
            f"{v:>12.4g}" for v in (r.mean, r.sd, r.low, r.high)))
    return lines


def file_factors(variables: tuple[Any, ...], model: Any | None,
                 recorded: tuple[tuple[str, str, str], ...] = ()) -> tuple[Latent, ...]:
    """The factors of a posterior file (``posterior_files.Posterior.variables``, for ``cemodel
    summarize``): each variable whose family's parameters are all there; a joint block's
    parts named after its members, as the model (else the file, ``recorded``: block, mean,
    precision) names them (else ``BLOCK.mean``), and the members themselves left to it."""
    blocks = ({b.name: (b.mean.name, b.precision.name) for b in model.blocks}
              if model is not None else {b: (mean, prec) for b, mean, prec in recorded})
    present = {v.name for v in variables}
    members = {m for name, names in blocks.items() if name in present for m in names}
    out = []
    for var in variables:
        spec = FAMILIES.get(var.family)
        family = spec.variational if spec is not None else None
        if family not in MARGINALS or var.name in members:
            continue
        try:
            marginals(family, dict(var.params))
        except (KeyError, ValueError, np.linalg.LinAlgError):  # a member's mean only
            continue
        if family.startswith("normal_"):
            names = blocks.get(var.name, (f"{var.name}.mean", f"{var.name}.precision"))
            parts = (Part("mean", names[0], ()), Part("precision", names[1], ()))
        else:
            parts = (Part("", var.name, ()),)
        out.append(Latent(var.name, family, var.params, parts, bool(var.local), False))
    return tuple(out)
