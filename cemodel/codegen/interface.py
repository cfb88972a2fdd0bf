"""The generated module's side of the seam with the fitting drivers (cemodel.runtime.drivers).

A generated module is the model: its kernels, and here the short glue the drivers call
(``run_local_step``, ``zero_statistics``, one ``_update_<global>`` each, ``refresh``,
``elbo_of_globals``), the tables they read (``GLOBALS``, ``KEPT_LOCALS``, ``LOG_DATA``,
``ROLES``) and one entry point per method that applies, whose docstring shows its iteration.
Each glue function is a kernel call with its arguments read from the fit state ``s``.
"""

from __future__ import annotations

from typing import Any

from ..plan import SAMPLED_FAMILIES, SSVI_AUX_DRAWS
from .pycode import Comment, Function, Line, Node


def interface_nodes(e: Any) -> list[Node]:
    """The glue functions and the tables, in the order a reader meets them."""
    plan = e.plan
    nodes: list[Node] = [Comment("-- the model's side of the fitting drivers "
                                 "(cemodel.runtime.drivers) " + "-" * 30)]
    functions: list[Function] = []
    if e.model.data_plate is not None:
        functions += _local_step_glue(e)
    functions.append(Function("zero_statistics", ("s",), tuple(
        Line(f"s.{acc.name}[...] = 0.0") for acc in plan.stored_accumulators) or (
        Line("pass"),)))
    for name in plan.globals:
        functions.append(Function(f"_update_{name}", ("s", "data_scale", "expect=True"), (
            e._driver_call(f"update_{name}", {"data_scale": "data_scale",
                                              "expect": "expect"}),)))
        if e.exp_needed.get(name):
            functions.append(_after_sample(e, name))
    if plan.globals:
        functions.append(Function("refresh", ("s",), (e._driver_call("refresh_globals", {}),)))
    functions.append(Function("elbo_of_globals", ("s",), (
        Line("return " + e._driver_call("elbo_global", {}).text),)))
    nodes += functions
    nodes += _globals_table(e)
    return nodes


def _local_step_glue(e: Any) -> list[Function]:
    """run_local_step (and the collapsed E-steps where they apply)."""
    functions = [Function(
        "run_local_step", ("s", "items", "max_local_iter", "local_tol", "seeding=False",
                           "warm=False", "guard=False"),
        (Line("return " + e._driver_call("local_step", {}).text),),
        "local_step over `items`: adds their statistics to acc_*, returns their ELBO terms.")]
    if e.plan.assignment_locals:
        functions.append(Function("run_local_step_gibbs", ("s", "items", "sweeps", "burn_in"), (
            Line("return " + e._driver_call("local_step_gibbs", {}).text),)))
        functions.append(Function(
            "run_local_step_cvb0", ("s", "items", "max_local_iter", "local_tol"),
            (Line("return " + e._driver_call("local_step_cvb0", {}).text),)))
    return functions


def _after_sample(e: Any, name: str) -> Function:
    """The copies of E[log name] the kernels read, refreshed after a draw (SSVI-A)."""
    E = f"s.{e.layout.E(name, 'log')}"
    lines: list[Node] = []
    for transposed in sorted(e.exp_needed[name]):
        if transposed:
            lines.append(Line(f"s.ET_{name}_log[...] = {E}.T"))
            lines.append(Line(f"s.XT_{name}_log[...] = np.exp({E}.T)"))
        else:
            lines.append(Line(f"s.X_{name}_log[...] = np.exp({E})"))
    return Function(f"_after_sample_{name}", ("s",), tuple(lines))


def _globals_table(e: Any) -> list[Node]:
    nodes: list[Node] = [Line("GLOBALS = (", "the globals as the stochastic drivers move them")]
    for name in e.plan.globals:
        family = e.family(name)
        stats = [st for st, _ in e.stats(name)]
        lam = tuple(e.layout.lam(name, st) for st in stats)
        E = tuple(e.layout.E(name, st) for st in stats)
        after = f"_after_sample_{name}" if e.exp_needed.get(name) else "None"
        nodes.append(Line(f"    rt.Global({name!r}, {family!r}, lam={lam!r}, E={E!r},"))
        nodes.append(Line(f"              update=_update_{name}, "
                          f"aux_draws={SSVI_AUX_DRAWS.get(family, 0)}, after_sample={after}),"))
    nodes.append(Line(")"))
    return nodes


def roles_table(e: Any) -> list[Node]:
    """ROLES: the state's arrays by what they hold, entries packed to the line width."""
    grouped: dict[str, list[str]] = {}
    for name, role in roles(e).items():
        grouped.setdefault(role, []).append(name)
    entries = [f"{role!r}: {tuple(names)!r}," for role, names in grouped.items()]
    lines, current = [], "   "
    for entry in entries:
        if len(current) + 1 + len(entry) > 99 and current.strip():
            lines.append(current)
            current = "   "
        current += " " + entry
    lines.append(current)
    return [Line("ROLES = {", "the state's arrays by what they hold (executors, checkpoints)"),
            *[Line(text) for text in lines if text.strip()], Line("}")]


def roles(e: Any) -> dict[str, str]:
    """Each array of the fit state and its role: data, hyper, known, global, global_exp,
    local, kept_local, item, statistic, thread or scratch."""
    m = e.model
    found: dict[str, str] = {}
    data = {v.name for v in (*m.observed, *m.data)}
    data |= {f"{p.name}_{k}" for p in m.plates if p.ragged for k in ("ptr", "weight")}
    knowns = {name for name, _ in e.known_exprs.values()}
    for name in e._state_names():
        found[name] = _role(e, name, data, knowns)
    return found


def _role(e: Any, name: str, data: set[str], knowns: set[str]) -> str:
    plan, m = e.plan, e.model
    if name.endswith("_threads"):
        return "thread"
    if name.startswith("acc_"):
        return "statistic"
    if name in ("item_weight", "seed_category"):
        return "item"
    if name in data or name.startswith("n_"):
        return "data"
    if name in {h.name for h in m.hypers}:
        return "hyper"
    owner = _owner(e, name)
    if owner in plan.globals:
        return "global" if name.startswith("lam_") else "global_exp"
    if owner in plan.kept_locals:
        return "kept_local"
    if owner in plan.locals and name.startswith(("lam_", "E_")):
        return "local"
    if name in knowns:
        return "known"
    return "scratch"


def _owner(e: Any, name: str) -> str | None:
    """The variable an array of the layout belongs to (lam_theta_log -> theta)."""
    for var in (*e.plan.globals, *e.plan.locals):
        stats = [st for st, _ in e.stats(var)]
        arrays = {e.layout.lam(var, st) for st in stats} | {e.layout.E(var, st) for st in stats}
        arrays |= {f"X_{var}_log", f"XT_{var}_log", f"ET_{var}_log"}
        if name in arrays:
            return var
    return None


def entry_points(e: Any) -> list[Function]:
    """fit, fit_svi, fit_ssvi_a, fit_ssvi: one short function per method that applies."""
    m, plan = e.model, e.plan
    out = [_entry("fit", "mf", f"Fit {m.name} by batch mean-field VB (coordinate ascent, "
                  "options: cemodel.runtime.drivers.mf.fit).\nOne iteration:\n"
                  + _mf_iteration(e))]
    if m.data_plate is None:
        return out
    out.append(_entry("fit_svi", "svi", f"Fit {m.name} by SVI, SVI+ with effective_batch_size "
                      "(options: cemodel.runtime.drivers.svi.fit).\nOne step on a minibatch "
                      "S:\n" + _svi_step(e)))
    if all(e.family(n) in SAMPLED_FAMILIES for n in plan.globals):
        out.append(_entry("fit_ssvi_a", "svi", "SSVI-A (Hoffman & Blei 2015, eq. 10): fit_svi "
                          "with the local step given a draw β ~ q(β).", "sample_globals=True, "))
    if e._ssvi_applies():
        out.append(_entry("fit_ssvi", "svi", "SSVI (Hoffman & Blei 2015, eq. 7): fit_ssvi_a "
                          "with λ̂ = η + V(β, λ)·N/|S| Σ η̂_n(β).",
                          "sample_globals=True, apply_v=True, "))
    return out


def _entry(name: str, driver: str, doc: str, presets: str = "") -> Function:
    return Function(name, ("data", "**options"), (
        Line(f"return rt.drivers.{driver}.fit(_THIS, data, {presets}**options)"),), doc)


def _mf_iteration(e: Any) -> str:
    local = ("zero_statistics(s); elbo = run_local_step(s, s.all_items, ...)  # E-step\n"
             if e.model.data_plate is not None else "elbo = 0.0\n")
    updates = "".join(f"    _update_{n}(s, 1.0)  # q({n})\n" for n in e.plan.globals)
    return "    " + local + updates + "    elbo += elbo_of_globals(s)"


def _svi_step(e: Any) -> str:
    updates = "".join(f"    _update_{n}(s, N / len(S), expect=False)  # λ̂ of q({n})\n"
                      for n in e.plan.globals)
    return ("    zero_statistics(s); run_local_step(s, S, ...)\n" + updates
            + "    λ ← (1 − ρ)λ + ρλ̂ (rt.blend); refresh(s)")
