"""The driver: composes the stages in order (STYLE.md habit 1).

    source --parse--> AST --build_model--> Model --augment--> Model --form_blocks--> Model
           --analyse--> Analysis
           --make_plan--> InferencePlan --codegen.generate--> Python source

``compile_model`` writes the generated source to a real file in a cache
directory keyed by its hash and imports it, so numba's ``cache=True`` keeps
compiled kernels between runs.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import keyword
import linecache
import math
import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from .augment import augment
from .blocks import form_blocks
from .codegen import GeneratedModule, generated_module
from .conjugacy import analyse
from .errors import (
    CemError,
    CemInternalError,
    CemModelError,
    CemOptionError,
    CemSourceError,
    Source,
    Span,
)
from .files import CemCacheWarning, CemWriteError, probe_directory, write_text
from .limits import deepest_span, too_deep
from .model import Model, RConst
from .nodes import Program
from .options import check_setting, setting_number, setting_text
from .plan import InferencePlan, make_plan
from .resolve import build_model
from .syntax import declaration_spans, parse, user_name_tokens
from .terms import Analysis


@dataclass(frozen=True)
class Stages:
    """Every stage's output for one compilation (``cemodel check`` prints from it)."""

    model: Model
    analysis: Analysis
    plan: InferencePlan
    generated: GeneratedModule | None = None  # the generated module, once run_stages made it


def read_source(path: str | Path) -> tuple[str, str]:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CemError(f"no such model file: {path}") from None
    except OSError as exc:
        raise CemError(f"cannot read model file {path}: {exc}") from None
    try:
        text = data.decode("utf-8-sig")  # an editor's byte-order mark is not part of the text
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise CemError(f"{path.name}:{line}:{column}: the model file is not UTF-8 (byte "
                       f"0x{data[exc.start]:02x})",
                       hint="save it as UTF-8 (names are ASCII; comments may be any text)"
                       ) from None
    return text, path.name


def parse_settings(items: list[str] | tuple[str, ...] | None) -> dict[str, float]:
    """``["K=50", "alpha=0.5"]`` -> {"K": 50, "alpha": 0.5}."""
    settings: dict[str, float] = {}
    given: dict[str, str] = {}  # each name's NAME=VALUE, for a name given twice
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CemError(f"--set takes NAME=VALUE, found {item!r}")
        try:
            number = float(value)
        except ValueError:
            raise CemError(f"--set {name}: expected a number, found {value!r}") from None
        if math.isinf(number) and value.strip().lstrip("+-").lower() not in ("inf", "infinity"):
            raise CemError(f"--set {name}: {value.strip()} is beyond the largest number a "
                           "double holds (about 1.8e308)")
        key = name.strip()
        if key in given:  # the last would win, the other dropped unseen
            raise CemError(f"--set {key} is given twice: --set {given[key]} and --set "
                           f"{item.strip()}", hint="give each dimension or hyperparameter once")
        settings[key], given[key] = number, item.strip()
    return settings


def apply_settings(model: Model, settings: dict[str, float]) -> Model:
    """New defaults for dimensions and scalar hyperparameters (``--set K=50``)."""
    if not settings:
        return model
    dims = {d.name: d for d in model.dims}
    hypers = {h.name: h for h in model.hypers}
    applied: dict[str, float | int] = {}
    for name, value in settings.items():
        if name in dims:
            if dims[name].ragged_over is not None:
                raise CemError(f"--set {name}: ragged dimension '{name}' comes from the data")
            applied[name] = check_setting(name, value, dimension=True)
            dims[name] = replace(dims[name], default=applied[name])
        elif name in hypers:
            if hypers[name].shape != ():
                raise CemError(f"--set {name}: only scalar hyperparameters can be set here; "
                               "pass vectors through the Python API (hypers=...)")
            applied[name] = check_setting(name, value, dimension=False)
            hypers[name] = replace(hypers[name], value=RConst(applied[name], Span(0, 0, 0, 0)))
        elif name in {d.name for d in model.unused_dims}:
            raise CemError(f"--set {name}: dimension '{name}' is declared and used nowhere in "
                           "the model, so its size would change nothing",
                           hint=f"leave out --set {name}, or use {name} in the model")
        else:
            from .errors import did_you_mean

            raise CemError(f"--set {name}: the model has no dimension or hyperparameter "
                           f"'{name}'", hint=did_you_mean(name, list(dims) + list(hypers)))
    return replace(model, dims=tuple(dims.values()), hypers=tuple(hypers.values()),
                   settings=tuple(applied.items()))


@contextmanager
def nesting_guard(text: str, filename: str) -> Iterator[None]:
    """A RecursionError in the stages within (a source nested past what the compiler's
    recursion holds, which cemodel.limits should have refused) as a located error: where
    the source nests deepest."""
    try:
        yield
    except RecursionError:
        program = parse(text, filename)  # the parser does not recurse
        raise too_deep(program.source, deepest_span(program)) from None


def built_model(text: str, filename: str, settings: dict[str, float] | None = None) -> Model:
    """The model as the source declares it, ``--set`` applied (what ``cemodel graph`` draws)."""
    with nesting_guard(text, filename):
        program = parse(text, filename)
        model = apply_settings(build_model(program), settings or {})
        check_set_values(program, dict(model.settings))
        return model


def check_set_values(program: Program, settings: dict[str, float | int]) -> None:
    """Refuse ``--set`` values the file's own checks refuse in the file (``--set b=-1`` for
    a Gamma rate, ``--set nu0=1`` for a Wishart dof of 2 × 2): the model is built again
    with them in place of the file's. The error names the settings it is about (those
    without which the model builds) and where the file uses them."""
    if not settings:
        return
    try:
        build_model(program, settings)
    except CemSourceError as exc:
        blamed = [name for name in settings
                  if _builds(program, {k: v for k, v in settings.items() if k != name})]
        shown = " ".join(f"--set {setting_text(k, settings[k])}" for k in blamed or settings)
        where = program.source.line_text(exc.span.line).strip()
        raise CemOptionError(f"{shown}: {exc.message} (in "
                             f"{exc.span.describe(program.source.filename)}: {where})",
                             hint=exc.hint) from None


def _builds(program: Program, settings: dict[str, float | int]) -> bool:
    try:
        build_model(program, settings)
    except CemSourceError:
        return False
    return True


def fitted_model(text: str, filename: str, settings: dict[str, float] | None = None) -> Model:
    """The model as a fit sees it: parsed, built, ``--set`` applied, with the variables cemodel
    introduces and its joint blocks (the names a posterior holds)."""
    model = built_model(text, filename, settings)
    with nesting_guard(text, filename):
        return form_blocks(augment(model))


def run_stages(text: str, filename: str, settings: dict[str, float] | None = None,
               collapse: tuple[str, ...] | None = None) -> Stages:
    """Parse, build, analyse and plan; raises a ``CemError`` for any user mistake.
    ``collapse`` names the KLC set X (overrides the model file's ``collapse``)."""
    with nesting_guard(text, filename):
        stages = _stages(text, filename, settings, collapse)
        try:
            generated = generated_module(stages.plan)
        except CemError:
            return stages  # reported when the module is generated
        check_generated_names(generated.text, text, filename, settings, collapse)
    return replace(stages, generated=generated)


def _stages(text: str, filename: str, settings: dict[str, float] | None,
            collapse: tuple[str, ...] | None) -> Stages:
    model = fitted_model(text, filename, settings)
    analysis = analyse(model)
    plan = make_plan(analysis, collapse)
    return Stages(model, analysis, plan)


def check_generated_names(source: str, text: str, filename: str,
                          settings: dict[str, float] | None = None,
                          collapse: tuple[str, ...] | None = None) -> None:
    """Refuse a model whose names would collide with the generated code's own in one Python
    scope (a hyperparameter called ``elbo``, data ``item_weight``, a plate ``item``, whose
    ``item_weight`` is the runtime's): the module would fail or, worse, read the wrong
    array. The model is generated once more with every user name replaced by a unique
    marker, so that nothing collides; a function of ``source`` (the module as generated)
    with fewer distinct identifiers than the same function there has two of them merged.
    The culprit is the marked name that reads as one of the generator's own names, or as
    another marked name, once the markers are undone."""
    tokens = user_name_tokens(text)
    marker = {name: f"cemU{i}Z" for i, name in enumerate(dict.fromkeys(n for n, *_ in tokens))}
    first: dict[str, Span] = {}
    for name, span, _, _ in tokens:
        first.setdefault(name, span)
    first.update(declaration_spans(text))
    marked = text
    for name, _, start, end in sorted(tokens, key=lambda tok: -tok[2]):
        marked = marked[:start] + marker[name] + marked[end:]
    try:
        apart = generate(_stages(
            marked, filename, {marker.get(k, k): v for k, v in (settings or {}).items()},
            None if collapse is None else tuple(marker.get(c, c) for c in collapse)))
    except CemError:
        return  # not expected (the model compiled); nothing to compare with
    _refuse_reserved_names(apart, marker, first, Source(filename, text))
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise CemInternalError(f"the generated module is not valid Python: {exc}") from None
    back = {v: k for k, v in marker.items()}
    unmark = re.compile(r"cemU\d+Z")

    def real(name: str) -> str:
        return unmark.sub(lambda m: back[m.group()], name)

    generated = dict(_scopes(tree))
    for scope, names in _scopes(ast.parse(apart)):
        if len(generated.get(real(scope), names)) >= len(names):
            continue
        mine = {n for n in names if "cemU" not in n}
        seen: dict[str, str] = {}
        for name in sorted(n for n in names if "cemU" in n):
            owner, identifier = back[unmark.search(name).group()], real(name)
            if identifier in mine or seen.setdefault(identifier, name) != name:
                what = (f"'{owner}' is" if identifier == owner else
                        f"'{owner}' gives the identifier '{identifier}', which is")
                why = ("a name the generated code uses itself" if identifier in mine else
                       "also made from another of the model's names")
                raise CemModelError(f"{what} {why} (in {real(scope)})", first[owner],
                                    Source(filename, text),
                                    hint=f"rename '{owner}' (e.g. '{owner}_')")


def _refuse_reserved_names(apart: str, marker: dict[str, str], declared: dict[str, Span],
                           source: Source) -> None:
    """Refuse a name Python reserves (a keyword such as ``elif`` or ``lambda``, or
    ``__debug__``) where the generated module would use it as an identifier: ``apart`` (the
    module generated with every name marked) with that one name put back does not compile.
    Where the module uses the name only inside longer identifiers and strings (a latent
    ``lambda`` is ``lam_lambda_value``, ``"lambda.shape"``), it stays allowed."""
    for name in marker:
        if not (keyword.iskeyword(name) or name == "__debug__"):
            continue
        try:
            builtins.compile(apart.replace(marker[name], name), "<generated>", "exec")
        except SyntaxError:
            what = "a Python keyword" if keyword.iskeyword(name) else "a name Python reserves"
            raise CemModelError(f"'{name}' is {what}, and the generated module uses this name "
                                "as a Python identifier", declared[name], source,
                                hint=f"rename '{name}' (e.g. '{name}_')") from None


def _scopes(tree: ast.Module):
    """(scope name, the identifiers it binds or reads) for the module and each function. A
    comprehension's or lambda's own variables are its own scope (Python 3), not the
    function's."""
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names = {node.name}
            _collect(node, names, frozenset())
            top.add(node.name)
            yield f"function {node.name}", names
        else:
            _collect(node, top, frozenset())
            if isinstance(node, ast.ClassDef):
                top.add(node.name)
    yield "module level", top


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _collect(node: ast.AST, names: set[str], own: frozenset[str]) -> None:
    """Add the identifiers under ``node`` to ``names``, except those in ``own`` (the
    variables of an enclosing comprehension or lambda)."""
    if isinstance(node, _COMPREHENSIONS):
        own = own | {n.id for gen in node.generators for n in ast.walk(gen.target)
                     if isinstance(n, ast.Name)}
    elif isinstance(node, ast.Lambda):
        own = own | {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    elif isinstance(node, ast.Name) and node.id not in own:
        names.add(node.id)
    elif isinstance(node, ast.arg) and node.arg not in own:
        names.add(node.arg)
    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        names.add(node.name)
    for child in ast.iter_child_nodes(node):
        _collect(child, names, own)


def generate(stages: Stages) -> str:
    """The generated module's source (one module serves every inference method)."""
    return _generated(stages).text


def _generated(stages: Stages) -> GeneratedModule:
    return stages.generated if stages.generated is not None else generated_module(stages.plan)


def cache_dir() -> Path:
    root = os.environ.get("CEMODEL_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "cemodel"


def import_generated(path: Path) -> ModuleType:
    name = _module_name(path)
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compile_model(path: str | Path, settings: dict[str, float] | None = None,
                  collapse: tuple[str, ...] | None = None) -> ModuleType:
    """Compile a .cem file and import the generated module (cached by content hash);
    ``collapse`` names the KLC set X (default: the model file's, else cemodel's choice)."""
    text, filename = read_source(path)
    stages = run_stages(text, filename, settings, collapse)
    return compile_stages(stages)


def runtime_fingerprint() -> str:
    """A hash of cemodel's runtime sources and version.

    numba's cache of a function is invalidated only when its own file changes, not when a
    runtime helper it calls does; keying generated modules by this fingerprint makes an
    upgraded runtime recompile every kernel that calls it."""
    from .version import __version__

    digest = hashlib.sha256(__version__.encode())
    for path in sorted((Path(__file__).parent / "runtime").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def compile_stages(stages: Stages) -> ModuleType:
    """The generated module, imported from the kernel cache (numba keeps its kernels beside
    it). The cache holds it as two files: its kernels, and the module importing them, so
    that compilations differing only in their settings share compiled kernels. A cache
    that cannot be written (read-only, full, not a directory) costs a warning and a compile
    in memory that is not kept, never the fit."""
    generated = _generated(stages)
    name = stages.model.name
    kernels_text, runtime = generated.kernels_text(), runtime_fingerprint()
    kernels = _cache_path(f"{name}_kernels", kernels_text, runtime)
    source = generated.text_importing(_module_name(kernels))
    target = _cache_path(name, source, runtime)
    try:
        for path, text in ((kernels, kernels_text), (target, source)):
            if not path.exists():
                write_text(path, text)
        probe_directory(target.parent)  # numba's index and kernels go there too
    except CemWriteError as exc:
        warnings.warn(CemCacheWarning(
            f"the kernel cache {cache_dir()} cannot be used ({exc.reason}): compiling in "
            "memory, nothing is kept for the next run (set CEMODEL_CACHE to a writable "
            "directory)"), stacklevel=2)
        return import_in_memory(_cache_path(name, generated.text, runtime), generated.text)
    import_generated(kernels)  # first: the model's module imports its kernels by name
    return import_generated(target)


def _cache_path(stem: str, source: str, runtime: str) -> Path:
    """A generated file in the kernel cache, named by its content and the runtime's
    (``runtime_fingerprint``)."""
    digest = hashlib.sha256((source + runtime).encode()).hexdigest()[:16]
    return cache_dir() / f"{stem}_{digest}.py"


def _module_name(path: Path) -> str:
    return f"cemodel_generated_{path.stem}"


def import_in_memory(path: Path, source: str) -> ModuleType:
    """The generated module made from ``source`` without a file: its kernels compiled with
    numba's cache off (with it on, numba needs the file to key its cache on). ``__file__``
    is the name it would have had, so the module is the same one, uncached."""
    name = _module_name(path)
    found = sys.modules.get(name)
    if found is not None and getattr(found, "__file__", None) == str(path):
        return found
    text = source.replace("cache=True", "cache=False")
    module = ModuleType(name)
    module.__file__ = str(path)
    # tracebacks and numba's messages quote the lines of the module
    linecache.cache[str(path)] = (len(text), None, text.splitlines(keepends=True), str(path))
    sys.modules[name] = module
    try:
        exec(builtins.compile(text, str(path), "exec"), module.__dict__)  # noqa: S102
    except BaseException:
        del sys.modules[name]
        raise
    return module


def compile(path: str | Path, *, collapse: tuple[str, ...] | list[str] | None = None,  # noqa: A001
            **settings: float) -> ModuleType:
    """``cemodel.compile("lda.cem", K=50)``: the generated module, ready to ``fit``;
    ``collapse=("pi", "mu")`` names the set KLC-CG integrates out (``fit_klc``)."""
    return compile_model(path, {k: setting_number(k, v) for k, v in settings.items()},
                         collapse=None if collapse is None else tuple(collapse))
