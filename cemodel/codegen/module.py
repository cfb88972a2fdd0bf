"""The generated module, section by section: header and constants (METHODS, LOCAL_STEPS,
ROLES, ...), SPEC, the kernels, ``_prepare``, ``_learn``, ``_result``, the drivers' glue and
the entry points. Every decision was made before (``lowering.lower``); this file only says
the order."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from ..families import FAMILIES
from ..missing import missing_rule
from ..model import Model
from ..options import setting_text
from ..plan import InferencePlan
from ..version import __version__
from .calls import KernelCalls
from .context import EmitContext, emit_context
from .interface import entry_points, interface_nodes, roles_table
from .kernels import emit_kernels
from .klc import klc_constants, klc_functions
from .lowering import lower
from .missing import missing_table
from .posterior import learn_function, result_function
from .prepare import array_shape, prepare_function
from .pycode import Blank, Comment, Function, Line, Module, Node, print_module

IMPORTS = ("import numpy as np", "from numba import njit", "",
           "from cemodel import runtime as rt")


def generate(plan: InferencePlan) -> str:
    """The source text of the generated module for ``plan``."""
    return generated_module(plan).text


@dataclass(frozen=True)
class GeneratedModule:
    """The generated module as users read it (``text``, the kernels inline) and as the
    kernel cache keeps it: the kernels in a module of their own (``kernels_text``) that the
    model's module imports (``text_importing``). Compilations that differ only in their
    settings (``--set K=50``: SPEC's dimension defaults, the hyperparameters' defaults) have
    the same kernels, so numba compiles and caches them once for all of them."""

    doc: str
    head: tuple[Node, ...]  # constants, ROLES, SPEC
    kernels: tuple[Function, ...]  # the @njit kernels: they read only each other, np and rt
    tail: tuple[Node, ...]  # _prepare, _result, the drivers' glue, the entry points
    model_name: str

    @cached_property
    def text(self) -> str:
        return print_module(Module(self.doc, IMPORTS, self.head + self.kernels + self.tail))

    def kernels_text(self) -> str:
        doc = (f"{self.model_name}: the numba kernels of the generated module, by cemodel "
               f"{__version__}.\n\nThe kernel cache keeps them apart from the module's "
               "settings, which import them;\n`cemodel compile` prints them inline.")
        return print_module(Module(doc, IMPORTS, self.kernels))

    def text_importing(self, kernels_module: str) -> str:
        names = "".join(f"\n    {kernel.name}," for kernel in self.kernels)
        line = Line(f"from {kernels_module} import ({names}\n)", "the kernels (kernels_text)")
        return print_module(Module(self.doc, IMPORTS, (*self.head, line, Blank(), *self.tail)))


def source_hash(model: Model) -> str:
    return hashlib.sha256(model.source.text.encode()).hexdigest()


def compile_command(model: Model) -> str:
    """The command that generates this module again: the ``--set`` values it was compiled
    with included (without them it would hold the file's K, not the one asked for)."""
    settings = "".join(f" --set {setting_text(k, v)}" for k, v in model.settings)
    return f"cemodel compile {model.source.filename}{settings}"


def generated_module(plan: InferencePlan) -> GeneratedModule:
    ctx = emit_context(plan, lower(plan))
    m = ctx.model
    kernels = emit_kernels(ctx)
    calls = KernelCalls.of(kernels)
    streams = streaming(ctx) == "yes"
    python: list[Node] = [prepare_function(ctx, calls, streams), result_function(ctx, streams)]
    if plan.learnable:
        python.insert(1, learn_function(ctx))
    python += interface_nodes(ctx, calls)
    python += entry_points(ctx)
    if plan.collapse is not None:
        python += klc_functions(ctx, calls, lambda var, full=False: array_shape(
            ctx, var, full))
    doc = (f"{m.name}: the model (kernels, data layout, start) for cemodel.runtime.drivers, by "
           f"cemodel {__version__}.\n\n"
           f"Model file: {m.source.filename} (sha256 {source_hash(m)[:16]})\n"
           f"Regenerate with `{compile_command(m)}`; do not edit by hand.\n\n"
           "Natural parameters are in coefficient form: q(x) ∝ exp(Σ_s lam_s · t_s(x)).\n"
           "E_<var>_<stat> holds E_q[t_s]; acc_* hold sums over the data plate.")
    head: list[Node] = [
        *_constants(ctx),
        *(klc_constants(ctx) if plan.collapse is not None else []),
        *roles_table(ctx, calls),
        Line("_THIS = rt.ModelView(globals())", "the model, as the drivers see it"),
        Blank(),
        *spec_literal(ctx),
        *(missing_table(ctx) if any(missing_rule(m, v) == "yes" for v in m.observed) else []),
    ]
    return GeneratedModule(doc, tuple(head), tuple(kernels), tuple(python), m.name)


def _constants(ctx: EmitContext) -> list[Node]:
    m, plan, kplan = ctx.model, ctx.plan, ctx.kplan
    nodes: list[Node] = [
        Line(f"SOURCE = {m.source.filename!r}"),
        Line(f"SOURCE_SHA256 = {source_hash(m)!r}"),
        Line(f"DEFAULT_START = {kplan.default_start!r}", kplan.default_start_reason),
        Line(f"LEARNABLE = {tuple(i.hyper for i in plan.learnable)!r}",
             "hyperparameters empirical Bayes can set (fit(..., learn=...))"),
        Line(f"DATA_PLATE = {m.data_plate!r}", "the plate the local step runs over"),
        Comment("the global steps (fit, fit_svi, ..., fit_klc) and whether each applies"),
        Line("METHODS = {"),
        *[Line(f"    {k!r}: {v!r},") for k, v in plan.methods],
        Line("}"),
        Comment("the E-steps (fit_svi(..., local=...)) and whether each applies"),
        Line("LOCAL_STEPS = {"),
        *[Line(f"    {k!r}: {v!r},") for k, v in plan.local_steps],
        Line("}"),
    ]
    if m.data_plate is not None:
        nodes += [Line(f"STREAMING = {streaming(ctx)!r}",
                       "fit_svi from an rt.ItemSource (data on disk)"),
                  Line(f"ITEM_DIMS = {item_dims(ctx)!r}", "sizes set by the items bound")]
    return nodes


def spec_literal(ctx: EmitContext) -> list[Node]:
    """SPEC: the data layout the binder checks the data against."""
    m = ctx.model
    lines = ["SPEC = {", f"    \"model\": {m.name!r},", "    \"dims\": {"]
    for d in m.dims:
        lines.append(f"        {d.name!r}: {{\"default\": {d.default!r}, "
                     f"\"ragged_over\": {d.ragged_over!r}}},")
    lines.append("    },")
    if m.unused_dims:  # declared and used nowhere: dims= of one is refused with the reason
        lines.append(f"    \"unused_dims\": {tuple(d.name for d in m.unused_dims)!r},")
    lines.append("    \"plates\": {")
    # the time plates of chains keep their order (no bag of words)
    ordered = {v.plates[-1] for v in m.variables if v.family == "MarkovChain"}
    for p in m.plates:
        mark = ", \"ordered\": True" if p.name in ordered else ""
        lines.append(f"        {p.name!r}: {{\"dim\": {p.dim!r}, \"parent\": {p.parent!r}, "
                     f"\"ragged\": {p.ragged!r}{mark}}},")
    lines.append("    },")
    lines.append("    \"observed\": {")
    for v in m.observed:
        fam = FAMILIES[v.family]
        lines.append(f"        {v.name!r}: {{\"plates\": {list(v.plates)!r}, "
                     f"\"support\": {fam.support!r}, \"shape\": {list(v.shape)!r}, "
                     f"\"categories\": {v.categories!r}, "
                     f"\"missing\": {missing_rule(m, v)!r}}},")
    lines.append("    },")
    lines.append("    \"covariates\": {" + ("" if m.data else "},"))
    logged = ctx.kplan.log_data_names
    for c in m.data:
        index = f", \"categories\": {c.index_range!r}" if c.index_range else ""
        index += ", \"nonnegative\": True" if c.name in logged else ""
        lines.append(f"        {c.name!r}: {{\"plates\": {list(c.plates)!r}, "
                     f"\"kind\": {c.kind!r}, \"shape\": {list(c.shape)!r}{index}}},")
    if m.data:
        lines.append("    },")
    # the model's other names, so that one given as data is told what it is
    others = {h.name: "hyperparameter" for h in m.hypers}
    others.update({v.name: "latent" for v in m.latents if m.introduced_for(v.name) is None})
    lines.append(f"    \"not_data\": {others!r},")
    lines.append("}")
    return [Line(text) for text in lines]


def item_dims(ctx: EmitContext) -> tuple[str, ...]:
    """The sizes that vary with the items bound: the data plate's and those of the ragged
    plates inside it (a minibatch bound on its own has its own); a fixed-size inner plate
    has the same size for every item."""
    m = ctx.model
    if m.data_plate is None:
        return ()
    inside = [m.data_plate]  # the data plate's own size first
    for p in m.plates:  # parents come before their children
        if p.parent in inside:
            inside.append(p.name)
    return tuple(dict.fromkeys(m.plate(p).dim for p in inside
                               if p == m.data_plate or m.plate(p).ragged))


def streaming(ctx: EmitContext) -> str:
    """Whether fit_svi can read its items from an rt.ItemSource, one minibatch at a time
    ('yes', or 'no: <reason>'): no global, hyperparameter or outside data may be sized by
    the items."""
    m = ctx.model
    if m.data_plate is None:
        return "no: the model has no data plate to read in minibatches"
    items = set(item_dims(ctx))
    for name in ctx.plan.globals:
        var = ctx.var(name)
        for plate in var.plates:
            if m.plate(plate).dim in items:
                return (f"no: the global {name} has a row per element of plate {plate}, "
                        f"whose size {m.plate(plate).dim} varies with the items")
        for d in var.shape:
            if d in items:
                return f"no: the size {d} of the global {name} varies with the items"
    for h in m.hypers:
        for d in h.shape:
            if d in items:
                return f"no: the hyperparameter {h.name} is sized by {d}, one per item"
    return "yes"

