"""The generated module's side of the seam with the fitting drivers (cemodel.runtime.drivers).

A generated module is the model: its kernels, and here the short glue the drivers call
(``run_local_step``, one ``_update_<global>`` each, ``refresh``,
``elbo_of_globals``), the tables they read (``GLOBALS``, ``ROLES``) and one entry point per
method that applies, whose docstring shows its iteration. Each glue function is a kernel
call with its arguments read from the fit state ``s``.
"""

from __future__ import annotations

from ..plan import SAMPLED_FAMILIES, SSVI_AUX_DRAWS
from .calls import KernelCalls
from .context import EmitContext
from .lazy import eager_beside_lazy, lazy_columns
from .lowering import ROLES, role_of
from .prepare import state_names
from .pycode import Comment, Function, Line, Node


def interface_nodes(ctx: EmitContext, calls: KernelCalls) -> list[Node]:
    """The glue functions and GLOBALS, in the order a reader meets them."""
    plan = ctx.plan
    functions: list[Function] = []
    if ctx.model.data_plate is not None:
        functions += _local_step_glue(ctx, calls)
    for name in plan.globals:
        functions.append(Function(f"_update_{name}", ("s", "data_scale", "expect=True"), (
            calls.call(f"update_{name}", {"data_scale": "data_scale", "expect": "expect"}),)))
        if ctx.kplan.exp_needed.get(name):
            functions.append(_after_sample(ctx, name))
    if plan.globals:
        functions.append(Function("refresh", ("s",), (calls.call("refresh_globals", {}),)))
        if eager_beside_lazy(ctx):
            functions.append(Function("refresh_eager", ("s",),
                                      (calls.call("refresh_eager_globals", {}),)))
    elbo = "return " + calls.call("elbo_global", {}).text
    if any(a.per_entry for a in plan.accumulators):
        functions.append(Function("elbo_of_entries", ("s",), (
            Line("return " + calls.call("elbo_entries", {}).text),),
            "The ELBO terms through the statistics kept per entry (ROLES 'entry_statistic')."))
        elbo += " + elbo_of_entries(s)"
    functions.append(Function("elbo_of_globals", ("s",), (Line(elbo),)))
    return [Comment("-- the model's side of the fitting drivers (cemodel.runtime.drivers) "
                    + "-" * 30), *functions, *_globals_table(ctx, calls)]


def _local_step_glue(ctx: EmitContext, calls: KernelCalls) -> list[Function]:
    """run_local_step (and the collapsed E-steps where they apply)."""
    functions = [Function(
        "run_local_step", ("s", "items", "max_local_iter", "local_tol", "seeding=False",
                           "warm=False", "guard=False", "evaluate=True", "accelerate=False"),
        tuple(_returning(calls.run("local_step", {}))),
        "local_step over `items`: adds their statistics to acc_*, returns their ELBO terms.")]
    if ctx.plan.assignment_locals:
        functions.append(Function("run_local_step_gibbs", ("s", "items", "sweeps", "burn_in"), (
            Line("return " + calls.call("local_step_gibbs", {}).text),)))
        functions.append(Function(
            "run_local_step_cvb0", ("s", "items", "max_local_iter", "local_tol"),
            (Line("return " + calls.call("local_step_cvb0", {}).text),)))
    return functions


def _returning(lines: list[Line]) -> list[Line]:
    """``lines``, the last one returned."""
    return [*lines[:-1], Line("return " + lines[-1].text)]


def _after_sample(ctx: EmitContext, name: str) -> Function:
    """The copies of E[log name] the kernels read, refreshed after a draw (SSVI-A)."""
    E = f"s.{ctx.layout.E(name, 'log')}"
    lines: list[Node] = []
    for transposed in sorted(ctx.kplan.exp_needed[name]):
        if transposed:
            lines.append(Line(f"s.ET_{name}_log[...] = {E}.T"))
            lines.append(Line(f"s.XT_{name}_log[...] = np.exp({E}.T)"))
        else:
            lines.append(Line(f"s.X_{name}_log[...] = np.exp({E})"))
    return Function(f"_after_sample_{name}", ("s",), tuple(lines))


# the kernels a stochastic step's local step runs (their parameters include their callees')
_LOCAL_KERNELS = ("local_step", "local_step_gibbs", "local_step_cvb0", "hoist_messages")


def _globals_table(ctx: EmitContext, calls: KernelCalls) -> list[Node]:
    nodes: list[Node] = [Line("GLOBALS = (", "the globals as the stochastic drivers move them")]
    local_reads = frozenset(name for kernel in _LOCAL_KERNELS
                            for name in calls.params.get(kernel, ()))
    for name in ctx.plan.globals:
        family = ctx.family(name)
        stats = [st for st, _ in ctx.stats(name)]
        lam = tuple(ctx.layout.lam(name, st) for st in stats)
        E = tuple(ctx.layout.E(name, st) for st in stats)
        after = f"_after_sample_{name}" if ctx.kplan.exp_needed.get(name) else "None"
        nodes.append(Line(f"    rt.Global({name!r}, {family!r}, lam={lam!r}, E={E!r},"))
        lazy = lazy_columns(ctx, name, local_reads)
        close = ")," if lazy is None else ","
        nodes.append(Line(f"              update=_update_{name}, "
                          f"aux_draws={SSVI_AUX_DRAWS.get(family, 0)}, after_sample={after}"
                          + close))
        if lazy is not None:
            nodes.append(Line(f"              lazy={lazy.literal()}),"))
    nodes.append(Line(")"))
    return nodes + _scales_table(ctx)


def _scales_table(ctx: EmitContext) -> list[Node]:
    """SCALES: the Gamma globals the data see only through their product, which the
    drivers move to their best relative scale after each global step (rt.rebalance)."""
    symmetries = ctx.kplan.scale_symmetries
    if not symmetries:
        return []
    pairs = ", ".join(f"{s.up}·{s.down}" for s in symmetries)
    return [Comment(f"the data see {pairs} only as a product: after each global step, "
                    "the best scale between them (rt.rebalance)"),
            Line("SCALES = (" + ", ".join(s.literal() for s in symmetries) + ",)")]


def roles_table(ctx: EmitContext, calls: KernelCalls) -> list[Node]:
    """ROLES: the state's arrays by what they hold (KernelPlan.roles), in state order,
    entries packed to the line width."""
    grouped: dict[str, list[str]] = {role: [] for role in ROLES}
    for name in state_names(ctx, calls):
        if name not in ("bound", "all_items"):
            grouped[role_of(ctx.kplan.roles, name)].append(name)
    entries = [f"{role!r}: {tuple(names)!r}," for role, names in grouped.items() if names]
    lines, current = [], "   "
    for entry in entries:
        if len(current) + 1 + len(entry) > 99 and current.strip():
            lines.append(current)
            current = "   "
        current += " " + entry
    lines.append(current)
    return [Line("ROLES = {", "the state's arrays by what they hold (executors, checkpoints)"),
            *[Line(text) for text in lines if text.strip()], Line("}")]


def entry_points(ctx: EmitContext) -> list[Function]:
    """fit, fit_svi, fit_ssvi_a, fit_ssvi: one short function per method that applies."""
    m, plan = ctx.model, ctx.plan
    out = [_entry("fit", "mf", "Batch mean-field VB (options: cemodel.runtime.drivers.mf.fit)."
                  " One iteration:\n" + _mf_iteration(ctx))]
    if m.data_plate is None:
        return out
    out.append(_entry("fit_svi", "svi", "SVI, SVI+ (options: cemodel.runtime.drivers.svi.fit)."
                      " One step on a minibatch S:\n" + _svi_step(ctx)))
    if all(ctx.family(n) in SAMPLED_FAMILIES for n in plan.globals):
        out.append(_entry("fit_ssvi_a", "svi", "SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi "
                          "with the local step given a draw β ~ q(β).", "sample_globals=True, "))
    if ctx.kplan.ssvi_applies:
        out.append(_entry("fit_ssvi", "svi", "SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a "
                          "with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β).",
                          "sample_globals=True, apply_v=True, "))
    return out


def _entry(name: str, driver: str, doc: str, presets: str = "") -> Function:
    return Function(name, ("data", "**options"), (
        Line(f"return rt.drivers.{driver}.fit(_THIS, data, {presets}**options)"),), doc)


def _mf_iteration(ctx: EmitContext) -> str:
    local = ("statistics ← 0; elbo = run_local_step(s, s.all_items, ...)  # E-step\n"
             if ctx.model.data_plate is not None else "elbo = 0.0\n")
    updates = "".join(f"    _update_{n}(s, 1.0)  # q({n})\n" for n in ctx.plan.globals)
    return "    " + local + updates + "    elbo += elbo_of_globals(s)"


def _svi_step(ctx: EmitContext) -> str:
    updates = "".join(f"    _update_{n}(s, N / len(S), expect=False)  # λ̂ of q({n})\n"
                      for n in ctx.plan.globals)
    return ("    statistics ← 0; run_local_step(s, S, ...)\n" + updates
            + "    λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)")
