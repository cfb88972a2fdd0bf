"""Numerics unchanged: record the fits of every stdlib model and compare them bit for bit.

What it proves (BACKEND.md §8 item 2). For each of the 18 stdlib models and every fitting
method that applies (``METHODS``: mf, svi, svi+, ssvi-a, ssvi, klc), every local step that
applies (``LOCAL_STEPS``: mf, exact, gibbs, cvb0), ``warm_start`` off and on (where the entry
point takes it), plus per model with a data plate a ramped SVI, empirical Bayes (``learn=``)
under MF and SVI, and a checkpoint/resume pair under MF and SVI, the ELBO trace, every array
of ``result.state``, every ``result.posterior`` entry, the hyperparameters (``result.hypers``,
which ``learn=`` moves), ``iterations``, ``converged`` and the numeric ``result.notes`` are
stored. A case that raises stores its exception type and message instead. Two recordings
that ``compare`` calls identical ran the same arithmetic, to the last bit (NaNs equal, signed
zeros told apart), on the same small data generated from each module's ``SPEC``.

How to run (from the repository root, with its cemodel on the path; the thread count is
recorded, and both sides of a comparison must use the same one; a recording of all 384 cases
takes about 7-10 minutes on 2 cores, nearly all of it numba compiling):

    export PYTHONPATH=. NUMBA_NUM_THREADS=2
    python tests/tools/traces.py record --rev d63ddda --out /tmp/ref.npz
    python tests/tools/traces.py record --current --out /tmp/new.npz --cases-from /tmp/ref.npz
    python tests/tools/traces.py compare /tmp/ref.npz /tmp/new.npz

``--rev REV`` fits the golden modules as they were at REV (``tests/golden/<name>_mf.py``, what
``cemodel compile`` generated there with the default settings) against the runtime of the
working tree; record a reference before the runtime changes and keep its file. ``--current``
compiles the working tree's models. ``--cases-from FILE`` replays FILE's cases (functions and
arguments) instead of choosing them from the modules' tables and signatures, so a refactored
entry point (``**options`` in place of named arguments) runs exactly the reference's calls.

Every recording compiles every kernel afresh: generated modules and numba's cache go to a new
temporary directory, deleted at the end (never the repository). A warm cache would make the
numbers depend on what else was loaded before: numba links a called ``@njit`` function into
its caller's object code and the JIT resolves the call to whichever copy of that function was
loaded into the process first; the copies differ in the last bit under fastmath
(reassociation), and a cache load, unlike a compile, does not load the callee's own copy first
(GMM's local step: 3 of the 290 natural parameters of q(z) apart in the last bits after one
call). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "stdlib_models"
CHECKPOINT = "<checkpoint>"  # stands for the case's checkpoint file in stored arguments
SEP = "|"  # between a case's name and a field in the npz keys
META = "__meta__"
ENTRY = {"mf": "fit", "svi": "fit_svi", "svi+": "fit_svi", "ssvi-a": "fit_ssvi_a",
         "ssvi": "fit_ssvi", "klc": "fit_klc"}
N_CLUSTERS = 3  # items are drawn around this many centres, so the data have structure


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------


def isolate_caches(root: Path) -> None:
    """Send numba's cache and cemodel's generated modules under ``root``, an empty directory
    (before numba loads: see the module docstring for why the cache must start empty)."""
    if "numba" in sys.modules:
        raise RuntimeError("isolate_caches must run before numba is imported")
    os.environ["NUMBA_CACHE_DIR"] = str(root / "numba")
    os.environ["CEMODEL_CACHE"] = str(root / "cemodel")


def model_names() -> list[str]:
    """The stdlib models of the working tree, sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.cem"))


def git(*args: str) -> str:
    """The output of a git command run in the repository."""
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout


def import_file(path: Path, name: str) -> ModuleType:
    """Import ``path`` as module ``name`` (a real file: numba's ``cache=True`` needs one)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_golden(rev: str, model: str, cache: Path) -> ModuleType:
    """The golden module of ``model`` at git revision ``rev``, written under ``cache`` with a
    name unique to its text."""
    text = git("show", f"{rev}:tests/golden/{model}_mf.py")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = cache / "modules" / f"traces_{model}_{digest}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return import_file(path, f"cemodel_traces_{model}_{digest}")


def load_current(model: str) -> ModuleType:
    """The module the working tree compiles from ``stdlib_models/<model>.cem`` (defaults)."""
    from cemodel.compiler import compile_model

    return compile_model(MODELS_DIR / f"{model}.cem", {})


# ---------------------------------------------------------------------------------------------
# Data from a SPEC
# ---------------------------------------------------------------------------------------------


@dataclass
class Dataset:
    """Small valid data for one model: the mapping ``fit`` takes, the sizes passed as
    ``dims`` (category counts no array shape fixes) and the size of the data plate."""

    data: dict[str, Any]
    dims: dict[str, int]
    n_items: int | None


def data_plate(spec: Mapping[str, Any]) -> str | None:
    """The top-level plate that holds the observations (None: no data plate)."""
    for info in spec["observed"].values():
        plates = info["plates"]
        if plates and spec["plates"][plates[0]]["parent"] is None:
            return plates[0]
    return None


def category_dims(spec: Mapping[str, Any]) -> set[str]:
    """The dimensions that count the categories of some observed variable or covariate."""
    tables = list(spec["observed"].values()) + list(spec["covariates"].values())
    return {info["categories"] for info in tables if isinstance(info.get("categories"), str)}


def draw_sizes(spec: Mapping[str, Any], rng: np.random.Generator
               ) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """A size for every dimension (the default where the model has one; 40-80 items in the
    data plate, 6-12 categories, 3-6 otherwise) and lengths 5-15 for every ragged one."""
    plate = data_plate(spec)
    items = spec["plates"][plate]["dim"] if plate else None
    categories = category_dims(spec)
    sizes: dict[str, int] = {}
    for name, info in spec["dims"].items():
        if info.get("ragged_over") is not None:
            continue
        if info.get("default") is not None:
            sizes[name] = int(info["default"])
        elif name == items:
            sizes[name] = int(rng.integers(40, 81))
        elif name in categories:
            sizes[name] = int(rng.integers(6, 13))
        else:
            sizes[name] = int(rng.integers(3, 7))
    lengths = {name: rng.integers(5, 16, sizes[info["ragged_over"]])
               for name, info in spec["dims"].items() if info.get("ragged_over") is not None}
    return sizes, lengths


def draw_values(support: str, clusters: np.ndarray, trailing: tuple[int, ...],
                n_categories: int | None, rng: np.random.Generator) -> np.ndarray:
    """One value per entry of ``clusters`` (each of shape ``trailing``) with the given support,
    drawn around its cluster's centre, rate, probability or category profile."""
    rows = (len(clusters), *trailing)
    shape = (N_CLUSTERS, *trailing)
    if support in ("real", "vector"):
        return rng.normal(0.0, 3.0, shape)[clusters] + rng.normal(0.0, 1.0, rows)
    if support in ("count", "trials"):
        counts = rng.poisson(rng.gamma(2.0, 3.0, shape)[clusters])
        return counts + 1 if support == "trials" else counts
    if support in ("positive", "nonnegative"):
        return rng.gamma(2.0, 1.0, rows) * rng.uniform(0.5, 3.0, shape)[clusters]
    if support == "unit":
        return np.clip(rng.beta(2.0, 2.0, rows), 1e-3, 1 - 1e-3)
    if support == "binary":
        return (rng.random(rows) < rng.beta(0.5, 0.5, shape)[clusters]).astype(np.int64)
    if support == "category":
        assert n_categories is not None
        profiles = rng.dirichlet(np.full(n_categories, 0.3), shape)[clusters]
        u = rng.random((*rows, 1))
        return np.minimum((u > np.cumsum(profiles, axis=-1)).sum(axis=-1), n_categories - 1)
    if support == "simplex":
        return rng.dirichlet(np.ones(trailing[-1]), rows[:-1])
    if support == "spd":
        a = rng.normal(size=rows)
        return a @ np.swapaxes(a, -1, -2) + trailing[-1] * np.eye(trailing[-1])
    raise ValueError(f"no generator for support {support!r}")


def variable_support(info: Mapping[str, Any], covariate: bool) -> str:
    """The support of an observed variable, or of a covariate as the binder reads it."""
    if not covariate:
        return info["support"]
    if info.get("categories") is not None:
        return "category"
    if info.get("nonnegative"):
        return "count" if info["kind"] == "int" else "positive"
    return {"real": "real", "int": "count", "count": "count", "vector": "vector"}[info["kind"]]


def cover_categories(values: np.ndarray, n_categories: int, rng: np.random.Generator) -> None:
    """Make every category id appear at least once (in place), where there is room."""
    flat = values.reshape(-1)
    if flat.size >= n_categories:
        flat[rng.permutation(flat.size)[:n_categories]] = np.arange(n_categories)


def draw_variable(spec: Mapping[str, Any], info: Mapping[str, Any], support: str,
                  sizes: Mapping[str, int], lengths: Mapping[str, np.ndarray],
                  clusters: np.ndarray, rng: np.random.Generator) -> Any:
    """The data of one variable: an array over its plates and event shape, or for a ragged
    plate a list with one array per element of the parent plate."""
    plates = spec["plates"]
    names = list(info["plates"])
    event = tuple(e if isinstance(e, int) else sizes[e] for e in info.get("shape", []))
    cats = info.get("categories")
    n_categories = None if cats is None else (cats if isinstance(cats, int) else sizes[cats])
    ragged = next((p for p in names if plates[p]["ragged"]), None)
    if names and names[0] == data_plate(spec):
        outer = clusters
    else:
        outer = np.zeros(sizes[plates[names[0]]["dim"]] if names else 1, dtype=np.int64)
    if ragged is None:
        trailing = tuple(sizes[plates[p]["dim"]] for p in names[1:]) + event
    else:
        trailing = tuple(sizes[plates[p]["dim"]] for p in names[2:]) + event
        outer = np.repeat(outer, lengths[plates[ragged]["dim"]])
    values = draw_values(support, outer, trailing, n_categories, rng)
    if support == "category" and n_categories is not None:
        cover_categories(values, n_categories, rng)
    if not names:
        return values[0]
    if ragged is None:
        return values
    return np.split(values, np.cumsum(lengths[plates[ragged]["dim"]])[:-1])


def is_bag_of_words(spec: Mapping[str, Any], name: str, info: Mapping[str, Any]) -> bool:
    """A categorical alone in an unordered ragged plate: the binder takes a count matrix."""
    plates = spec["plates"]
    ragged = next((p for p in info["plates"] if plates[p]["ragged"]), None)
    if ragged is None or info.get("support") != "category" or info.get("shape"):
        return False
    if plates[ragged].get("ordered") or list(info["plates"]) != [plates[ragged]["parent"], ragged]:
        return False
    tables = {**spec["observed"], **spec["covariates"]}
    return not any(ragged in other["plates"] for key, other in tables.items() if key != name)


def count_matrix(tokens: Sequence[np.ndarray], n_categories: int) -> np.ndarray:
    """Token-id arrays, one per row, as a dense (rows x categories) count matrix."""
    return np.stack([np.bincount(t, minlength=n_categories) for t in tokens]).astype(np.int64)


def make_data(spec: Mapping[str, Any], seed: int) -> Dataset:
    """Small valid data for a module's SPEC (see the module docstring); a bag of categories
    is given as a count matrix (its counts become the ragged plate's weights)."""
    rng = np.random.default_rng(seed)
    sizes, lengths = draw_sizes(spec, rng)
    plate = data_plate(spec)
    n_items = sizes[spec["plates"][plate]["dim"]] if plate else None
    clusters = rng.integers(0, N_CLUSTERS, n_items or 1)
    data: dict[str, Any] = {}
    for covariate, table in ((False, spec["observed"]), (True, spec["covariates"])):
        for name, info in table.items():
            support = variable_support(info, covariate)
            value = draw_variable(spec, info, support, sizes, lengths, clusters, rng)
            if is_bag_of_words(spec, name, info):
                value = count_matrix(value, sizes[info["categories"]])
            data[name] = value
    dims = {d: sizes[d] for d in sorted(category_dims(spec))
            if spec["dims"][d].get("default") is None}
    return Dataset(data, dims, n_items)


def data_digest(dataset: Dataset) -> str:
    """A fingerprint of the data and dims (both sides of a comparison must fit the same)."""
    digest = hashlib.sha256(json.dumps(dataset.dims, sort_keys=True).encode())
    for name in sorted(dataset.data):
        value = dataset.data[name]
        for part in (value if isinstance(value, list) else [value]):
            arr = np.ascontiguousarray(part)
            digest.update(f"{name}:{arr.dtype}:{arr.shape}".encode())
            digest.update(arr.tobytes())
    return digest.hexdigest()


def check_binds(module: ModuleType, dataset: Dataset) -> None:
    """The data bind to the module's SPEC (raises the binder's error otherwise)."""
    from cemodel import runtime as rt

    rt.bind_data(module.SPEC, dataset.data, dataset.dims)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One recorded fit: calls (entry point, keyword arguments) run in order on the same
    data; the last one's result is stored (two legs: a checkpoint, then its resume)."""

    name: str
    model: str
    legs: tuple[tuple[str, dict[str, Any]], ...]

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "legs": [[f, kw] for f, kw in self.legs]}

    @staticmethod
    def from_json(name: str, value: Mapping[str, Any]) -> Case:
        return Case(name, value["model"], tuple((f, dict(kw)) for f, kw in value["legs"]))


def accepts(module: ModuleType, function: str, parameter: str) -> bool:
    """Whether ``module.function`` takes ``parameter``; an entry point that forwards
    ``**options`` (fit_ssvi_a, fit_ssvi) takes what fit_svi takes."""
    fn = getattr(module, function, None)
    if fn is None:
        return False
    params = inspect.signature(fn).parameters
    if parameter in params:
        return True
    forwards = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return forwards and function != "fit_svi" and accepts(module, "fit_svi", parameter)


def applicable(table: Mapping[str, str]) -> list[str]:
    """The keys of a METHODS / LOCAL_STEPS table whose value starts with 'yes'."""
    return [key for key, why in table.items() if why.startswith("yes")]


def base_arguments(n_items: int | None) -> dict[str, dict[str, Any]]:
    """Each method's arguments in every case (small: 4 iterations, 2 epochs)."""
    batch = max(2, (n_items or 0) // 3)
    svi = {"epochs": 2, "batch_size": batch, "seed": 0}
    return {"mf": {"max_iter": 4, "tol": 0.0, "seed": 0}, "svi": svi,
            "svi+": {**svi, "effective_batch_size": batch // 2}, "ssvi-a": svi, "ssvi": svi,
            "klc": {"max_iter": 4, "seed": 0}}


def method_cases(module: ModuleType, model: str, n_items: int | None) -> list[Case]:
    """Every applicable method x local step x warm start (where the entry point takes them)."""
    base = base_arguments(n_items)
    locals_ = applicable(getattr(module, "LOCAL_STEPS", {}))
    cases = []
    for method in applicable(module.METHODS):
        entry = ENTRY.get(method)
        if entry is None:  # a runtime-only method (svi-avg: SVI's steps, averaged)
            continue
        if method == "klc":
            cases.append(Case(f"{model}/klc", model, ((entry, dict(base["klc"])),)))
            continue
        for local in locals_ if accepts(module, entry, "local") else [None]:
            for warm in (False, True) if accepts(module, entry, "warm_start") else [None]:
                name, kwargs = f"{model}/{method}", dict(base[method])
                if local is not None:
                    name, kwargs["local"] = f"{name}/local={local}", local
                if warm is not None:
                    name, kwargs["warm_start"] = f"{name}/warm={int(warm)}", warm
                cases.append(Case(name, model, ((entry, kwargs),)))
        if method == "ssvi":
            kwargs = {**base["ssvi"], "control_variate": True}
            cases.append(Case(f"{model}/ssvi/control_variate", model, ((entry, kwargs),)))
    return cases


def extra_cases(module: ModuleType, model: str, n_items: int | None) -> list[Case]:
    """For a model with a data plate: ramped SVI, empirical Bayes under MF and SVI (when
    LEARNABLE is not empty) and a checkpoint/resume pair under MF and SVI."""
    if n_items is None:
        return []
    base = base_arguments(n_items)
    mf, svi = base["mf"], base["svi"]
    cases = [Case(f"{model}/svi/ramp", model, (("fit_svi", {**svi, "ramp": True}),))]
    learnable = list(getattr(module, "LEARNABLE", ()))
    if learnable:
        cases.append(Case(f"{model}/mf/learn", model, (("fit", {**mf, "learn": learnable}),)))
        cases.append(Case(f"{model}/svi/learn", model,
                          (("fit_svi", {**svi, "learn": learnable}),)))
    cases.append(Case(f"{model}/mf/resume", model, (
        ("fit", {**mf, "max_iter": 2, "checkpoint": CHECKPOINT}),
        ("fit", {**mf, "max_iter": 4, "resume": CHECKPOINT}))))
    cases.append(Case(f"{model}/svi/resume", model, (
        ("fit_svi", {**svi, "epochs": 2, "checkpoint": CHECKPOINT}),
        ("fit_svi", {**svi, "epochs": 4, "resume": CHECKPOINT}))))
    return cases


# ---------------------------------------------------------------------------------------------
# Running a case
# ---------------------------------------------------------------------------------------------


def as_array(value: Any) -> np.ndarray:
    """A stored value: a copy as an ndarray (an object array would need pickle: its repr)."""
    arr = np.array(value)
    return np.array(repr(value)) if arr.dtype == object else arr


def is_number(value: Any) -> bool:
    """A number, or an array of numbers (notes such as KLC's gradient norms)."""
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def outcome(result: Any) -> dict[str, np.ndarray]:
    """What is stored of a fit: its trace, state, posterior, hypers, counters, numeric notes
    (never ``seconds``)."""
    out = {"elbo": as_array(result.elbo), "iterations": as_array(result.iterations),
           "converged": as_array(result.converged)}
    for group in ("state", "posterior", "hypers"):
        for key, value in getattr(result, group).items():
            out[f"{group}:{key}"] = as_array(value)
    for key, value in result.notes.items():
        if is_number(value):
            out[f"notes:{key}"] = as_array(value)
    return out


def run_case(module: ModuleType, case: Case, dataset: Dataset, scratch: Path
             ) -> dict[str, np.ndarray]:
    """Run a case's calls; its outcome, or the exception the calls raised."""
    checkpoint = scratch / (case.name.replace("/", "_") + ".ckpt")
    checkpoint.unlink(missing_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for function, kwargs in case.legs:
                kwargs = {k: str(checkpoint) if v == CHECKPOINT else v for k, v in kwargs.items()}
                if "learn" in kwargs:
                    kwargs["learn"] = tuple(kwargs["learn"])
                result = getattr(module, function)(dataset.data, dims=dict(dataset.dims),
                                                   **kwargs)
    except Exception as exc:  # the outcome of the case: both sides must raise the same
        message = str(exc).replace(str(checkpoint), CHECKPOINT)
        return {"error": np.array(f"{type(exc).__name__}: {message}")}
    finally:
        checkpoint.unlink(missing_ok=True)
    return outcome(result)


# ---------------------------------------------------------------------------------------------
# record
# ---------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    """What the numbers may depend on besides the code: threads and library versions."""
    import numba
    import scipy

    return {"threads": int(numba.get_num_threads()), "numba": numba.__version__,
            "numpy": np.__version__, "scipy": scipy.__version__,
            "python": platform.python_version(), "machine": platform.machine()}


def describe_source(rev: str | None) -> str:
    """The recorded code: a commit, or the working tree (with its HEAD and dirty state)."""
    if rev is not None:
        return f"golden modules at {git('rev-parse', rev + '^{commit}').strip()} ({rev})"
    head = git("rev-parse", "HEAD").strip()
    changed = git("status", "--porcelain", "--untracked-files=no").strip()
    dirty = " + uncommitted changes" if changed else ""
    return f"working tree, compiled (HEAD {head}{dirty})"


def record_model(model: str, module: ModuleType, replay: list[Case] | None, scratch: Path,
                 store: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Generate the model's data, run its cases, and add them to ``store`` and ``meta``."""
    dataset = make_data(module.SPEC, zlib.crc32(model.encode()))
    check_binds(module, dataset)
    cases = replay if replay is not None else (
        method_cases(module, model, dataset.n_items) + extra_cases(module, model, dataset.n_items))
    meta["models"][model] = {"data": data_digest(dataset), "n_items": dataset.n_items,
                             "dims": dataset.dims, "cases": len(cases)}
    for case in cases:
        result = run_case(module, case, dataset, scratch)
        if "error" in result:
            print(f"    {case.name}: raised {result['error']}")
        for field, value in result.items():
            store[f"{case.name}{SEP}{field}"] = value
        meta["cases"][case.name] = case.to_json()


def replayed_cases(path: Path) -> dict[str, list[Case]]:
    """The cases recorded in ``path``, by model, in their order."""
    by_model: dict[str, list[Case]] = {}
    for name, value in read_meta(path)["cases"].items():
        case = Case.from_json(name, value)
        by_model.setdefault(case.model, []).append(case)
    return by_model


def record(rev: str | None, out: Path, models: Sequence[str], cases_from: Path | None) -> int:
    """Record every case of ``models`` into ``out``, compiling every kernel afresh in an
    empty cache; prints the time per model and in all."""
    replay = replayed_cases(cases_from) if cases_from is not None else None
    store: dict[str, np.ndarray] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cemodel-traces-") as root:
        cache = Path(root)
        isolate_caches(cache)
        scratch = cache / "scratch"
        scratch.mkdir()
        meta: dict[str, Any] = {"format": 1, "source": describe_source(rev),
                                "environment": environment(), "models": {}, "cases": {}}
        for model in models:
            clock = time.perf_counter()
            module = load_golden(rev, model, cache) if rev is not None else load_current(model)
            loaded = time.perf_counter()
            record_model(model, module, None if replay is None else replay.get(model, []),
                         scratch, store, meta)
            meta["models"][model]["seconds"] = round(time.perf_counter() - clock, 1)
            print(f"{model}: {meta['models'][model]['cases']} cases in "
                  f"{time.perf_counter() - clock:.1f} s (import {loaded - clock:.1f} s)",
                  flush=True)
    meta["seconds"] = round(time.perf_counter() - start, 1)
    store[META] = np.array(json.dumps(meta))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as handle:
        np.savez_compressed(handle, **store)
    print(f"recorded {len(meta['cases'])} cases of {len(models)} models in {meta['seconds']} s "
          f"with {meta['environment']['threads']} threads -> {out}")
    return 0


# ---------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------


def read_meta(path: Path) -> dict[str, Any]:
    """The JSON header of a recording."""
    with np.load(path, allow_pickle=False) as archive:
        return json.loads(str(archive[META]))


def read_cases(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """A recording's outcomes: case -> field -> array."""
    cases: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as archive:
        for key in archive.files:
            if key != META:
                case, _, field = key.partition(SEP)
                cases.setdefault(case, {})[field] = archive[key]
    return cases


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical for our purposes: same dtype and shape, equal values with NaNs equal,
    and the same sign on every zero."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    if not np.array_equal(a, b, equal_nan=True):
        return False
    signs = [np.signbit(x.real if a.dtype.kind == "c" else x) for x in (a, b)]
    nan = np.isnan(a)
    return bool(np.array_equal(signs[0][~nan], signs[1][~nan]))


def max_difference(a: np.ndarray, b: np.ndarray) -> float | None:
    """The largest absolute difference of two numeric arrays of one shape (inf where one is
    NaN or infinite and the other is not the same); None if they cannot be compared."""
    if a.shape != b.shape or a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return None
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(x - y)
    agree = (np.isnan(x) & np.isnan(y)) | (x == y)
    diff = np.where(agree, 0.0, np.where(np.isnan(diff), np.inf, diff))
    return float(diff.max()) if diff.size else 0.0


def compare_case(a: dict[str, np.ndarray], b: dict[str, np.ndarray]
                 ) -> tuple[str, float | None, str]:
    """(status, max abs diff over the differing numeric fields, details) of one case."""
    differing = [f for f in sorted(set(a) | set(b))
                 if f not in a or f not in b or not same(a[f], b[f])]
    if not differing:
        return ("identical (raised)" if "error" in a else "identical"), None, ""
    diffs = [d for f in differing if f in a and f in b
             if (d := max_difference(a[f], b[f])) is not None]
    details = []
    for f in differing:
        if f not in a or f not in b:
            details.append(f"{f}: only in {'A' if f in a else 'B'}")
        elif f == "error":
            details.append(f"error: {a[f]} | {b[f]}")
        elif a[f].dtype != b[f].dtype or a[f].shape != b[f].shape:
            details.append(f"{f}: {a[f].dtype}{a[f].shape} vs {b[f].dtype}{b[f].shape}")
        elif max_difference(a[f], b[f]) == 0.0:
            details.append(f"{f} (the sign of a zero)")
        else:
            details.append(f)
    return "DIFFERENT", (max(diffs) if diffs else None), "; ".join(details)


def compare_headers(meta_a: Mapping[str, Any], meta_b: Mapping[str, Any]) -> list[str]:
    """Problems that make the comparison meaningless: other data or another thread count."""
    problems = []
    for model in sorted(set(meta_a["models"]) & set(meta_b["models"])):
        if meta_a["models"][model]["data"] != meta_b["models"][model]["data"]:
            problems.append(f"{model}: the two recordings fitted different data")
    env_a, env_b = meta_a["environment"], meta_b["environment"]
    if env_a["threads"] != env_b["threads"]:
        problems.append(f"recorded with {env_a['threads']} and {env_b['threads']} threads "
                        "(the local step's sums depend on the thread count)")
    return problems


def compare(path_a: Path, path_b: Path) -> int:
    """Print one row per case and a summary; 1 if anything differs or is missing."""
    meta_a, meta_b = read_meta(path_a), read_meta(path_b)
    a, b = read_cases(path_a), read_cases(path_b)
    print(f"A: {path_a}: {meta_a['source']}\nB: {path_b}: {meta_b['source']}")
    for key in sorted(set(meta_a["environment"]) | set(meta_b["environment"])):
        if meta_a["environment"].get(key) != meta_b["environment"].get(key):
            print(f"note: {key} {meta_a['environment'].get(key)} (A) vs "
                  f"{meta_b['environment'].get(key)} (B)")
    problems = compare_headers(meta_a, meta_b)
    order = list(dict.fromkeys([*meta_a["cases"], *meta_b["cases"], *a, *b]))
    width = max((len(c) for c in order), default=10)
    print(f"{'case':<{width}}  {'status':<18}  {'max |diff|':>10}  details")
    counts: dict[str, int] = {}
    for case in order:
        if case not in a or case not in b:
            status, diff, details = f"missing in {'B' if case in a else 'A'}", None, ""
        else:
            status, diff, details = compare_case(a[case], b[case])
        counts[status] = counts.get(status, 0) + 1
        shown = "" if diff is None else f"{diff:.3g}"
        print(f"{case:<{width}}  {status:<18}  {shown:>10}  {details}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    good = counts.get("identical", 0) + counts.get("identical (raised)", 0)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    verdict = "ALL IDENTICAL" if good == len(order) and not problems else "DIFFERENCES"
    print(f"{verdict}: {len(order)} cases: {summary}")
    return 0 if verdict == "ALL IDENTICAL" else 1


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv: Iterable[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="fit every case and store the outcomes in an .npz")
    which = rec.add_mutually_exclusive_group(required=True)
    which.add_argument("--rev", help="fit the golden modules at this git revision")
    which.add_argument("--current", action="store_true", help="fit the working tree's modules")
    rec.add_argument("--out", type=Path, required=True, help="the .npz to write")
    rec.add_argument("--models", help="comma-separated model names (default: all stdlib)")
    rec.add_argument("--cases-from", type=Path, help="replay the cases of this recording")
    cmp = sub.add_parser("compare", help="compare two recordings case by case, bit for bit")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    return parser.parse_args(None if argv is None else list(argv))


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "compare":
        return compare(args.a, args.b)
    models = model_names() if not args.models else [m.strip() for m in args.models.split(",")]
    unknown = sorted(set(models) - set(model_names()))
    if unknown:
        raise SystemExit(f"unknown models: {', '.join(unknown)}")
    return record(args.rev, args.out, models, args.cases_from)


if __name__ == "__main__":
    sys.exit(main())
