"""The latent variables of a fit as the model names them: family, parameters, named axes.

One description serves the ArviZ export, the interval table and saved fits. Axes are named
after the model: a variable's plate axes after its plates (``topics``, ``docs``); an event
axis after the one top-level plate over its dimension, else the dimension (LDA's θ[d] over K
topics: ``(docs, topics)``; β[k] over V words: ``(topics, V)``; a Wishart's D × D:
``(D, D_2)``); a literal size or an array that fits none of these, ``NAME_dim_i``. A plate
whose name is also that of a dimension it does not run over, or of a variable or data,
names its axis ``NAME_plate`` (``plate_axis``): xarray takes one size per axis name, and
turns a variable named like an axis into that axis's coordinate. A plate the compiler
introduced (a StickBreaking's sticks) takes the axis the model gives its dimension, so the
weights π[k] share the axis of the components μ[k] (``components``, not ``sticks_pi``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CemError
from .families import FAMILIES
from .model import DataDef, Model, VarDef

# variational families whose draws are labels or 0/1, not real numbers
DISCRETE = ("categorical", "bernoulli")
# discrete locals (GMM's z[n]) are drawn and summarised only up to this many values
DISCRETE_LIMIT = 10**6


@dataclass(frozen=True)
class Part:
    """What one part of a factor is called: a joint block's mean or precision member, or the
    variable itself (part "")."""

    part: str
    name: str
    dims: tuple[str, ...]  # plate axes, then event axes


@dataclass(frozen=True)
class Latent:
    """One factor of q: a latent variable, or a joint block of a mean and its precision."""

    name: str
    family: str  # the variational family ("dirichlet", "normal_gamma", ...)
    params: tuple[tuple[str, np.ndarray], ...]  # usual parameters, fit.posterior's
    parts: tuple[Part, ...]
    local: bool
    introduced: bool  # added by the compiler (split counts): no model variable

    @property
    def discrete(self) -> bool:
        return self.family in DISCRETE

    @property
    def count(self) -> int:
        """Scalar values in one draw of a discrete factor (labels, 0/1s)."""
        main = self.params[0][1]
        return main.size // main.shape[-1] if self.family == "categorical" else main.size

    def param(self) -> dict[str, np.ndarray]:
        return dict(self.params)


def plate_axis(model: Model, name: str) -> str:
    """The axis name of plate ``name``: its own, or ``NAME_plate`` (repeated until free) when a
    dimension it does not run over, a variable, data or another plate has it; that of its
    dimension (``dim_axis``) for a plate the compiler introduced."""
    plate = model.plate(name)
    if plate.introduced:
        return dim_axis(model, plate.dim)
    dim = plate.dim
    taken = ({d.name for d in model.dims if d.name != dim} | {v.name for v in model.variables}
             | {d.name for d in model.data} | {p.name for p in model.plates if p.name != name})
    axis = name
    while axis in taken:
        axis += "_plate"
    return axis


def plate_axes(model: Model, plates: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(plate_axis(model, p) for p in plates)


def dim_sizes(model: Model, dims: Mapping[str, int]) -> dict[str, int]:
    """The size of every dimension and plate axis (``plate_axis``) of ``model`` in a fit with
    ``dims``."""
    sizes = {name: int(size) for name, size in dims.items()}
    sizes.update({plate_axis(model, p.name): sizes[p.dim] for p in model.plates
                  if p.dim in sizes and not p.ragged})
    return sizes


def dim_axis(model: Model, dim: str) -> str:
    """The axis of dimension ``dim``: that of the one top-level plate of the model file over
    it, else the dimension's name."""
    top = [p.name for p in model.plates
           if p.dim == dim and p.parent is None and not p.introduced]
    return plate_axis(model, top[0]) if len(top) == 1 else dim


def _axis_name(model: Model, dim: str | int, var: VarDef, i: int) -> str:
    return f"{var.name}_dim_{i}" if isinstance(dim, int) else dim_axis(model, dim)


def event_names(model: Model, var: VarDef) -> tuple[str, ...]:
    """The names of one draw's axes (a categorical's: its categories)."""
    categories = getattr(var, "categories", None)  # a covariate (DataDef) has none
    shape = var.shape if var.shape else (() if categories is None else (categories,))
    return tuple(_axis_name(model, d, var, i) for i, d in enumerate(shape))


def axis_names(model: Model, var: VarDef | DataDef, key: str, shape: tuple[int, ...],
               sizes: Mapping[str, int]) -> tuple[str, ...]:
    """Names for the axes of ``key``, an array of variable ``var`` with ``shape``: its plates,
    then its event axes (a matrix parameter of a vector repeats the last, suffixed ``_2``)."""
    plates = plate_axes(model, var.plates[:len(shape)])
    event = event_names(model, var) or (None,)
    names: list[str] = list(plates)
    for i in range(len(shape) - len(plates)):
        base = event[min(i, len(event) - 1)]
        name = base if base is not None else f"{safe_name(key)}_dim_{i}"
        while name in names:
            name += "_2" if not name.endswith("_2") else "2"
        names.append(name)
    fits = [sizes.get(n, -1 if n in plates else size) == size
            for n, size in zip(names, shape, strict=True)]
    if not all(fits):  # a ragged plate, or another layout (a count matrix of tokens)
        return tuple(f"{safe_name(key)}_dim_{i}" for i in range(len(shape)))
    return tuple(names)


@dataclass(frozen=True)
class AxisLabels:
    """Labels of one axis, with the key of ``coords`` they were given under (errors name it)."""

    key: str
    values: np.ndarray


def axis_coords(model: Model, coords: Mapping[str, Any]) -> dict[str, AxisLabels]:
    """``coords`` by axis name; labels given for a dimension also label its plates' axes, a
    plate's label its axis (``plate_axis``; a name both a dimension's and a plate's is the
    dimension's). A name that is no dimension, plate or axis of the model is refused (a typo
    labels nothing)."""
    dims = [d.name for d in model.dims]
    axes = {p.name: plate_axis(model, p.name) for p in model.plates}
    names = list(dict.fromkeys(dims + list(axes) + list(axes.values())))
    for key in coords:
        if key not in names:
            raise CemError(f"coords: {key!r} is no dimension or plate of model {model.name}",
                           hint=f"its dimensions and plates: {', '.join(names)}")
    out = {key if key in dims else axes.get(key, key): AxisLabels(key, np.asarray(labels))
           for key, labels in coords.items()}
    for plate in model.plates:
        if plate.dim in coords and axes[plate.name] not in out:
            out[axes[plate.name]] = out[plate.dim]
    return out


def axis_labels(coords: Mapping[str, AxisLabels], axis: str, size: int) -> np.ndarray | None:
    """The labels of ``axis`` of ``size`` (``D_2``: those of ``D``), None when none are given;
    labels of another length are refused rather than labelling part of the axis."""
    given = coords.get(axis, coords.get(axis.removesuffix("_2")))
    if given is None:
        return None
    if given.values.shape != (size,):
        found = (f"{len(given.values)} labels" if given.values.ndim == 1 else
                 f"an array of shape {given.values.shape}")
        raise CemError(f"coords[{given.key!r}]: expected {size} labels for axis {axis!r}, "
                       f"found {found}")
    return given.values


def safe_name(key: str) -> str:
    """A name for generic axes of ``key`` ("E[log beta]" → "E_log_beta")."""
    return re.sub(r"\W+", "_", key).strip("_")


def owner(model: Model, name: str) -> VarDef:
    """The variable of posterior name ``name``: a variable, a block or a block's member."""
    for block in model.blocks:
        for member in (block.mean, block.precision):
            if member.name == name:
                return member
    return model.var(name)


def latents(model: Model, names: tuple[str, ...], posterior: Mapping[str, np.ndarray],
            sizes: Mapping[str, int]) -> tuple[Latent, ...]:
    """The factors ``names`` (a plan's globals and kept locals) of a fit's ``posterior``."""
    out = []
    for name in names:
        var = model.var(name)
        family = FAMILIES[var.family].variational or ""
        params = tuple((k.split(".", 1)[1], np.asarray(v)) for k, v in posterior.items()
                       if k.startswith(name + ".") and "[" not in k)
        if not params:  # a local left out of an out-of-core fit's posterior
            continue
        block = model.block(name)
        members = ((("mean", block.mean), ("precision", block.precision)) if block is not None
                   else (("", var),))
        parts = []
        for part, member in members:
            shape = tuple(sizes.get(p, 0) for p in plate_axes(model, member.plates)) + tuple(
                sizes.get(d, d) if isinstance(d, str) else d for d in member.shape)
            parts.append(Part(part, member.name, axis_names(model, member, member.name,
                                                            shape, sizes)))
        out.append(Latent(name, family, params, tuple(parts), model.is_local(var),
                          model.introduced_for(name) is not None))
    return tuple(out)


def kept(latent: Latent, draws: int, include: bool | None) -> bool:
    """Whether a factor is drawn / summarised: every continuous one; a discrete local when
    ``include`` says so, or (None) when ``draws`` × its values stay within DISCRETE_LIMIT;
    not a local the compiler introduced (as large as the data: split counts)."""
    if latent.introduced and latent.local:
        return False
    if not (latent.discrete and latent.local):
        return True
    return draws * latent.count <= DISCRETE_LIMIT if include is None else include
