"""Saved fits: ``Fit.save(path)`` and ``cemodel.load_result(path, model)``, ``.npz`` or ``.nc``.

An ``.npz`` holds what ``cemodel fit -o`` always wrote (``elbo`` and every ``fit.posterior``
array, "E[log beta]" stored as "E(log beta)") and the rest of the fit: ``state:NAME`` (the
natural parameters), ``hyper:NAME`` and ``cemodel:meta`` (a JSON record, as bytes: method,
local step, seed, dims, cemodel version, format version and the model's source hash). An
``.nc`` is the ArviZ export (``cemodel.arviz_export``), its attributes the same record.

Loading refuses a file of another model source (its hash) or another format version, with
what differs, rather than a fit that no longer means what it says.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CemError, did_you_mean
from .version import __version__

FORMAT_VERSION = 1
SUFFIXES = (".npz", ".nc")
META = "cemodel:meta"
# Fit.save's options past the path: to_arviz's, for an .nc (an .npz has the fit, no draws)
NC_OPTIONS = ("draws", "seed", "data", "coords", "discrete_locals")


def source_hash(text: str) -> str:
    """The model source's identity: sha256 of its text (first 16 hex digits)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fit_meta(stages: Any, result: Any, method: str, local: str, seed: Any) -> dict[str, Any]:
    """The record a saved fit carries (attributes of an .nc, ``cemodel:meta`` of an .npz)."""
    return {
        "cemodel_version": __version__, "cemodel_format_version": FORMAT_VERSION,
        "model_name": stages.model.name, "model_source_hash": source_hash(
            stages.model.source.text),
        "method": method, "local_step": local,
        "fit_seed": "none" if seed is None else int(seed),
        "iterations": int(result.iterations), "converged": int(bool(result.converged)),
        "seconds": float(result.seconds),
        "dims": json.dumps({k: int(v) for k, v in result.dims.items()}),
        # a joint block and its members, for a reader without the model (cemodel summarize)
        "blocks": json.dumps({b.name: [b.mean.name, b.precision.name]
                              for b in stages.plan.model.blocks}),
    }


def check_suffix(path: str | Path) -> str:
    """``.npz`` or ``.nc``; anything else refused before a fit runs."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        found = f"'{suffix}'" if suffix else "no extension"
        raise CemError(f"cannot write {path}: a fit is saved as .npz or .nc, found {found}")
    return suffix


def check_save_options(path: Path, suffix: str, options: Mapping[str, Any]) -> None:
    """Refuse an option Fit.save does not take, and one its format does not use (an .npz
    takes none), rather than ignore it."""
    for name in options:
        if name not in NC_OPTIONS:
            raise CemError(f"Fit.save: unknown option {name!r}; it takes the path and, for an "
                           f".nc, {', '.join(NC_OPTIONS)}",
                           hint=did_you_mean(name, NC_OPTIONS))
    if suffix == ".npz" and options:
        raise CemError(f"Fit.save({path}): {', '.join(options)} "
                       f"{'applies' if len(options) == 1 else 'apply'} to an .nc (the ArviZ "
                       f"export), not to an .npz, which holds the fit's arrays only",
                       hint="save to a path ending in .nc, or leave them out")


def npz_bytes(result: Any, meta: Mapping[str, Any]) -> bytes:
    """The .npz of a fit (see the module docstring)."""
    from .arviz_export import stored_name

    arrays = {stored_name(k): np.asarray(v) for k, v in result.posterior.items()}
    arrays.update({f"state:{k}": np.asarray(v) for k, v in result.state.items()})
    arrays.update({f"hyper:{k}": np.asarray(v, float) for k, v in result.hypers.items()})
    arrays.update({f"missing:{name}.{k}": np.asarray(v)  # missing observed entries' q
                   for name, table in getattr(result, "missing", {}).items()
                   for k, v in table.items() if not isinstance(v, str)})
    arrays[META] = np.frombuffer(json.dumps(dict(meta)).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, elbo=np.asarray(result.elbo), **arrays)
    return buffer.getvalue()


def save(path: str | Path, stages: Any, spec: Mapping[str, Any], result: Any,
         meta: Mapping[str, Any], **arviz: Any) -> Path:
    """Write ``result`` to ``path`` (.npz, or .nc with ``arviz`` options of ``to_arviz``)."""
    from .files import write_bytes

    path = Path(path)
    suffix = check_suffix(path)
    check_save_options(path, suffix, arviz)
    if suffix == ".npz":
        write_bytes(path, npz_bytes(result, meta))
        return path
    from .arviz_export import to_inference_data

    idata = to_inference_data(stages.plan, spec, result, meta, **arviz)
    write_bytes(path, netcdf_bytes(idata))
    return path


def netcdf_bytes(idata: Any) -> bytes:
    """The netCDF file of an InferenceData (written to a temporary file, then read)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "fit.nc"
        idata.to_netcdf(str(target))
        return target.read_bytes()


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def _read_npz(path: Path) -> tuple[dict, dict, dict, dict, np.ndarray, dict]:
    from .results import read_npz

    arrays = read_npz(path, "saved fit", "save it with fit.save(PATH) or cemodel fit -o")
    if META not in arrays:
        raise CemError(f"{path} is not a saved fit: it has no '{META}' record",
                       hint="a posterior written before cemodel saved fits whole cannot be "
                       "loaded; fit again and save it")
    meta = _decode_meta(path, arrays.pop(META))
    state = {k.removeprefix("state:"): v for k, v in arrays.items() if k.startswith("state:")}
    hypers = {k.removeprefix("hyper:"): v for k, v in arrays.items() if k.startswith("hyper:")}
    posterior = {_key(k): v for k, v in arrays.items()
                 if ":" not in k and k != "elbo"}
    missing = _missing({k.removeprefix("missing:"): v for k, v in arrays.items()
                        if k.startswith("missing:")})
    return meta, posterior, state, hypers, arrays.get("elbo", np.zeros(0)), missing


def _decode_meta(path: Path, record: np.ndarray) -> dict[str, Any]:
    """An .npz's ``cemodel:meta`` record (JSON, as bytes)."""
    try:
        meta = json.loads(record.tobytes().decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise CemError(f"{path}: its '{META}' record is damaged ({exc})") from None
    if not isinstance(meta, dict):
        raise CemError(f"{path}: its '{META}' record is damaged (not a JSON object)")
    return meta


def _missing(flat: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """``{"y.mean": ...}`` (as saved) -> ``{"y": {"mean": ...}}`` (``Fit.missing``)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, value in flat.items():
        name, _, field = key.partition(".")
        out.setdefault(name, {})[field] = value
    return out


def _read_nc(path: Path) -> tuple[dict, dict, dict, dict, np.ndarray, dict]:
    from .arviz_export import import_arviz

    _, xr = import_arviz()
    try:  # a damaged file fails as it opens, or as a group's arrays are read
        with xr.open_datatree(path) as tree:
            groups = {name: {k: np.asarray(v.values) for k, v in tree[name].data_vars.items()}
                      for name in ("variational", "variational_state", "hyperparameters",
                                   "sample_stats") if name in tree.children}
            meta = dict(tree.attrs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise CemError(f"cannot read saved fit {path}: {exc}",
                       hint="save it with fit.save(PATH.nc) or cemodel fit -o PATH.nc"
                       ) from None
    if "variational" not in groups:
        raise CemError(f"{path} is not a saved fit: it has no 'variational' group")
    variational = groups["variational"]
    missing = _missing({k.removeprefix("missing(").replace(")", "", 1): v
                        for k, v in variational.items() if k.startswith("missing(")})
    return (meta, {_key(k): v for k, v in variational.items() if not k.startswith("missing(")},
            groups.get("variational_state", {}), groups.get("hyperparameters", {}),
            groups.get("sample_stats", {}).get("elbo", np.zeros(0)), missing)


def posterior_arrays(path: str | Path, hint: str, source: Any = None
                     ) -> dict[str, np.ndarray]:
    """``elbo`` and the posterior's arrays as an .npz names them, of an .npz or an .nc
    (``cemodel summarize``, ``plot`` and ``predict`` read either). Given the model
    ``source`` it is read with, a fit of another source is refused as ``load_result``
    refuses it (a posterior written before fits carried their source's hash is read as
    before)."""
    from .arviz_export import stored_name
    from .results import read_npz

    path = Path(path)
    if path.suffix.lower() != ".nc":
        arrays = read_npz(path, "posterior", hint)
        if source is not None and META in arrays:
            check_source(path, _decode_meta(path, arrays[META]), source)
        return arrays
    if not path.is_file():
        raise CemError(f"no such posterior file: {path}")
    meta, posterior, _, _, elbo, _ = _read_nc(path)
    if source is not None:
        check_source(path, meta, source)
    record = json.dumps(meta, default=lambda v: v.item() if hasattr(v, "item") else str(v))
    return {"elbo": elbo, **{stored_name(k): v for k, v in posterior.items()},
            META: np.frombuffer(record.encode(), dtype=np.uint8)}


def file_blocks(path: str | Path, arrays: Mapping[str, np.ndarray]
                ) -> tuple[tuple[str, str, str], ...]:
    """The joint blocks (block, mean member, precision member) the record of a posterior
    file's ``arrays`` names; none in a file written before cemodel recorded them."""
    meta = _decode_meta(Path(path), arrays[META]) if META in arrays else {}
    try:
        blocks = json.loads(meta.get("blocks", "{}"))
        return tuple((str(b), str(mean), str(precision))
                     for b, (mean, precision) in blocks.items())
    except (ValueError, TypeError, AttributeError) as exc:
        raise CemError(f"{path}: its '{META}' record is damaged ({exc})") from None


def _key(stored: str) -> str:
    return stored.replace("(", "[").replace(")", "]")


def _check(path: Path, meta: Mapping[str, Any], source: Any) -> None:
    try:
        version = int(meta.get("cemodel_format_version"))
    except (TypeError, ValueError, AttributeError):
        version = None
    if version != FORMAT_VERSION:
        shown = meta.get("cemodel_format_version") if isinstance(meta, Mapping) else None
        raise CemError(f"{path} is a saved fit of format version {shown}; this cemodel "
                       f"({__version__}) reads version {FORMAT_VERSION}",
                       hint="load it with the cemodel that wrote it, or fit again")
    check_source(path, meta, source)


def check_source(path: Path, meta: Mapping[str, Any], source: Any) -> None:
    """Refuse a fit (its record ``meta``) of another model source than ``source``: its
    arrays would be read as another model's."""
    expected = source_hash(source.text)
    found = meta.get("model_source_hash")
    if found != expected:
        raise CemError(f"{path} is a fit of another model source: model "
                       f"'{meta.get('model_name')}' with source hash {found}, not "
                       f"{source.filename} (hash {expected})",
                       hint="load it with the model file it was fitted with")


def read_saved(path: str | Path, source: Any) -> dict[str, Any]:
    """The fields of the ``Fit`` saved in ``path`` (``api.load_result`` makes it), checked
    against the model ``source`` it is loaded with."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise CemError(f"cannot load {path}: a saved fit is an .npz or .nc file")
    if not path.is_file():
        raise CemError(f"no such saved fit: {path}")
    meta, posterior, state, hypers, elbo, missing = (
        _read_npz if suffix == ".npz" else _read_nc)(path)
    _check(path, meta, source)
    try:
        seed = meta.get("fit_seed", 0)
        return dict(posterior=posterior, elbo=np.asarray(elbo, float),
                    iterations=int(meta.get("iterations", len(elbo))),
                    converged=bool(int(meta.get("converged", 0))),
                    seconds=float(meta.get("seconds", 0.0)),
                    dims={k: int(v) for k, v in json.loads(meta.get("dims", "{}")).items()},
                    hypers={k: float(v) if np.ndim(v) == 0 else v for k, v in hypers.items()},
                    state=state, method=str(meta.get("method", "mf")),
                    local=str(meta.get("local_step", "mf")),
                    seed=None if seed == "none" else int(seed), missing=missing)
    except (TypeError, ValueError, AttributeError) as exc:
        raise CemError(f"{path}: its record of the fit is damaged ({exc})") from None
