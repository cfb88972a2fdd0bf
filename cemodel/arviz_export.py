"""A fit as ArviZ's InferenceData (``Fit.to_arviz``; ``cemodel fit -o FIT.nc``).

Groups (ArviZ's schema, https://python.arviz.org/en/stable/schema/schema.html):

* ``posterior``: ``draws`` exact draws from q of every latent variable (chain 1; a joint
  block's members drawn jointly), axes named after the model's plates (``latents``);
* ``observed_data`` / ``constant_data``: the observed variables and covariates, when the data
  is given;
* ``sample_stats``: the ELBO trace (axis ``iteration``);
* ``variational``: the variational parameters themselves (``fit.posterior``: ``beta.alpha``,
  ``E(log beta)``; a missing observed entry's q, ``missing(y).mean``, ``fit.missing``), and
  ``variational_state`` / ``hyperparameters``: the natural parameters and
  the hyperparameters, what ``cemodel.load_result`` reads back.

The root attributes hold the method, local step, seeds, cemodel's version, the model's name
and source hash and the saved-fit format version.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import sparse

from .augment_sticks import stick_variables
from .errors import CemDataError, CemError
from .latents import (
    DISCRETE_LIMIT,
    AxisLabels,
    Latent,
    axis_coords,
    axis_labels,
    axis_names,
    dim_sizes,
    event_names,
    kept,
    latents,
    owner,
    plate_axes,
    safe_name,
)
from .model import Model
from .options import check_options
from .plan import InferencePlan
from .posterior import draw
from .runtime.binding import SizesFrom, bind_data
from .runtime.sticks import weights_of_sticks

EXTRA_HINT = "pip install 'cemodel[arviz]' (arviz, xarray and h5netcdf)"


def import_arviz() -> tuple[Any, Any]:
    """(arviz, xarray), or a CemError naming the extra to install."""
    try:
        import xarray
        with warnings.catch_warnings():  # arviz 0.23 announces its 1.0 refactor on import
            warnings.simplefilter("ignore", FutureWarning)
            import arviz
    except ImportError as exc:
        raise CemError(f"the ArviZ export needs arviz and xarray ({exc})",
                       hint=EXTRA_HINT) from None
    return arviz, xarray


def stored_name(key: str) -> str:
    """A posterior key as files store it: "E[log beta]" → "E(log beta)" (as the .npz)."""
    return key.replace("[", "(").replace("]", ")")


def posterior_draws(factors: tuple[Latent, ...], draws: int, rng: np.random.Generator,
                    discrete_locals: bool | None
                    ) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """{variable: (dims, draws)} of every factor kept (see ``latents.kept``)."""
    out = {}
    for factor in factors:
        if not kept(factor, draws, discrete_locals):
            continue
        drawn = draw(factor.family, factor.param(), draws, rng)
        for part in factor.parts:
            out[part.name] = (("chain", "draw", *part.dims), drawn[part.part][None])
    return out


def _dataset(xr: Any, arrays: Mapping[str, tuple[tuple[str, ...], np.ndarray]],
             coords: Mapping[str, AxisLabels], attrs: Mapping[str, Any]) -> Any:
    ds = xr.Dataset({name: (dims, value) for name, (dims, value) in arrays.items()},
                    attrs=dict(attrs))
    used = {d: n for a in ds.data_vars.values() for d, n in zip(a.dims, a.shape, strict=True)}
    return ds.assign_coords({d: _labels(coords, d, n) for d, n in used.items()})


def _unnamed(arrays: Mapping[str, Any]) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Arrays with ArviZ's generic axis names, ``NAME_dim_i``."""
    return {k: (tuple(f"{k}_dim_{i}" for i in range(np.ndim(v))), np.asarray(v, float))
            for k, v in arrays.items()}


def _labels(coords: Mapping[str, AxisLabels], dim: str, size: int) -> np.ndarray:
    """The labels of axis ``dim`` (``latents.axis_labels``), else 0..size-1."""
    labels = axis_labels(coords, dim, size)
    return np.arange(size) if labels is None else labels


def named_arrays(model: Model, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int]
                 ) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """fit.posterior's arrays ("beta.alpha", "E[log beta]") with their axes named."""
    out = {}
    for key, value in arrays.items():
        value = np.asarray(value)
        name = key.split(".")[0] if "." in key else key[2:-1].split(" ")[-1]
        out[stored_name(key)] = (axis_names(model, owner(model, name), key, value.shape,
                                            sizes), value)
    return out


def missing_arrays(missing: Mapping[str, Mapping[str, Any]]
                   ) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """The missing observed entries' q (``fit.missing``): ``missing(y).mean`` and so on, one
    row per missing entry (axis ``y_missing``), ``missing(y).index`` its plate indices."""
    out = {}
    for name, table in missing.items():
        for key, value in table.items():
            if isinstance(value, str):  # why the q of the entries is not reported
                continue
            value = np.asarray(value)
            dims = (f"{name}_missing", *(f"{name}_missing_{key}_{i}"
                                         for i in range(1, value.ndim)))
            out[f"missing({name}).{key}"] = (dims, value)
    return out


def check_data(spec: Mapping[str, Any], data: Mapping[str, Any], dims: Mapping[str, int]
               ) -> None:
    """``data`` read as a fit reads its data (``bind_data``), at the fit's sizes ``dims``: the
    model's names, every observed variable, values in their supports, missing entries only
    where the model takes them; anything else refused rather than exported as the fit's."""
    fixed = {k: v for k, v in dims.items()
             if k in spec["dims"] and spec["dims"][k].get("ragged_over") is None}
    try:
        bind_data(spec, data, SizesFrom(fixed, {k: "the fit" for k in fixed}), missing=True)
    except CemDataError as exc:
        raise CemDataError(f"the export's data (the data the fit was fitted to): "
                           f"{exc.message}", hint=exc.hint) from None


def _values(value: Any) -> np.ndarray:
    """A dense array of ``value``; a missing entry (masked) NaN, as the fit took it (latent)."""
    if sparse.issparse(value):
        return value.toarray()
    if isinstance(value, np.ma.MaskedArray):
        return np.ma.filled(value.astype(float), np.nan)
    return np.asarray(value)


def _entries(name: str, value: Any, dims: tuple[str, ...]) -> tuple[tuple, dict]:
    """A sparse matrix too large to export dense as its stored entries (axis NAME_nonzero),
    with the index of each along the dense axes as coordinates ``AXIS_index``."""
    coo = sparse.coo_matrix(value)
    axis = f"{safe_name(name)}_nonzero"
    index = {f"{dim}_index": ((axis,), where)
             for dim, where in zip(dims, (coo.row, coo.col), strict=True)}
    return ((axis,), coo.data), index


def _dense_dims(model: Model, var: Any, name: str, shape: tuple[int, ...],
                sizes: Mapping[str, int]) -> tuple[str, ...]:
    """The axes of an array of data ``name``: its variable's, or a count matrix's (items ×
    categories: a categorical over a ragged plate)."""
    dims = axis_names(model, var, name, shape, sizes)
    counts = plate_axes(model, var.plates)[:-1] + event_names(model, var)
    generic = bool(dims) and dims[0].startswith(safe_name(name) + "_dim_")
    return counts if generic and [sizes.get(d) for d in counts] == list(shape) else dims


def data_arrays(model: Model, spec: Mapping[str, Any], data: Mapping[str, Any],
                sizes: Mapping[str, int]) -> tuple[dict, dict, dict]:
    """(observed_data, constant_data, index coordinates) of ``data`` (checked: ``check_data``):
    a rectangular array gets the axes of its variable (a count matrix of a categorical over a
    ragged plate: the outer plates and the categories), its missing entries NaN; a sparse
    matrix its dense form up to DISCRETE_LIMIT cells, its stored entries past it
    (``_entries``); a list of sequences their concatenation along the inner plate, with the
    outer plate's index of each element as the coordinate ``OUTER_index``."""
    groups: tuple[dict, dict, dict] = ({}, {}, {})
    for name, value in data.items():
        group = groups[0] if name in spec["observed"] else groups[1]
        var = owner(model, name) if name in spec["observed"] else model.datum(name)
        plates = plate_axes(model, var.plates)
        if isinstance(value, (list, tuple)) and value and np.ndim(value[0]) >= 1:
            outer, inner = plates[0], plates[min(1, len(plates) - 1)]
            joined = np.concatenate([np.asarray(v) for v in value])
            # the steps, then the plates inside them (an LDS's outputs y[s, t, j]), then events
            axes = (inner, *plates[2:])[:joined.ndim]
            axes += tuple(f"{safe_name(name)}_dim_{k}" for k in range(len(axes), joined.ndim))
            group[name] = (axes, joined)
            groups[2][f"{outer}_index"] = ((inner,), np.repeat(
                np.arange(len(value)), [len(v) for v in value]))
            continue
        shape = value.shape if sparse.issparse(value) else np.shape(value)
        dims = _dense_dims(model, var, name, tuple(shape), sizes)
        if sparse.issparse(value) and int(np.prod(shape)) > DISCRETE_LIMIT:
            group[name], index = _entries(name, value, dims)
            groups[2].update(index)
            continue
        group[name] = (dims, _values(value))
    return groups


def to_inference_data(plan: InferencePlan, spec: Mapping[str, Any], result: Any,
                      meta: Mapping[str, Any], *, draws: int,
                      seed: int | None, data: Mapping[str, Any] | None = None,
                      coords: Mapping[str, Any] | None = None,
                      discrete_locals: bool | None = None) -> Any:
    """The InferenceData of a fit (see the module docstring); ``meta``: the root attributes."""
    az, xr = import_arviz()
    check_options(draws=draws, **({} if seed is None else {"seed": seed}))
    model = plan.model
    sizes = dim_sizes(model, result.dims)
    factors = latents(model, plan.globals + plan.kept_locals, result.posterior, sizes)
    coords = axis_coords(model, coords or {})
    rng = np.random.default_rng(seed)
    attrs = {"inference_library": "cemodel", **meta,
             "draws_seed": "none" if seed is None else int(seed)}
    posterior = posterior_draws(factors, int(draws), rng, discrete_locals)
    for sticks in stick_variables(model):  # the weights the drawn sticks break into
        if sticks.name in posterior:
            dims, value = posterior[sticks.name]
            posterior[sticks.of] = (dims, weights_of_sticks(value))
    groups = {
        "posterior": _dataset(xr, posterior, coords, attrs),
        "sample_stats": _dataset(xr, {"elbo": (("iteration",), np.asarray(result.elbo))},
                                 coords, {}),
        "variational": _dataset(xr, {**named_arrays(model, result.posterior, sizes),
                                     **missing_arrays(getattr(result, "missing", {}))},
                                coords, {}),
        "variational_state": _dataset(xr, _unnamed(result.state), {}, {}),
        "hyperparameters": _dataset(xr, _unnamed(result.hypers), {}, {}),
    }
    if data is not None:
        check_data(spec, data, result.dims)
        observed, constant, index = data_arrays(model, spec, data, sizes)
        groups["observed_data"] = _dataset(xr, observed, coords, {}).assign_coords(index)
        groups["constant_data"] = _dataset(xr, constant, coords, {})
    idata = az.InferenceData(attrs=attrs, **{k: v for k, v in groups.items()
                                             if v.data_vars})
    return idata
