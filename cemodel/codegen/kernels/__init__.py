"""The kernel emitters: plain functions over an EmitContext, one kernel each.

``emit_kernels`` prints every kernel of a plan in the module's order: the local updates, the
product-form sums, the item ELBO and the local step, the collapsed E-steps, the global
updates, the ELBO of the globals and the KLC kernels.
"""

from __future__ import annotations

from types import MappingProxyType

from ..context import EmitContext
from ..lazy import eager_beside_lazy
from ..pycode import Function
from . import globals as global_kernels
from .assignments import emit_assignment_step, emit_evidence
from .extrapolation import emit_extrapolate
from .klc import emit_klc_gradient, emit_klc_stats
from .local import emit_item_elbo, emit_update_local
from .local_step import emit_hoist_messages, emit_local_step
from .product import emit_collapsed, emit_gather, emit_sums


def emit_kernels(ctx: EmitContext) -> list[Function]:
    """Every kernel of the module, in order; a kernel that calls others comes after them
    (it reads their parameters)."""
    plan, kplan = ctx.plan, ctx.kplan
    kernels = [emit_update_local(ctx, name) for name in plan.locals]
    for name in kplan.implicit:
        if name in kplan.gathered:
            kernels.append(emit_gather(ctx, name))
        kernels.append(emit_sums(ctx, name))
    if ctx.model.data_plate is not None:
        hoist = emit_hoist_messages(ctx)
        if hoist is not None:
            kernels.append(hoist)
        if plan.local_iterations and plan.kept_locals:
            if kplan.fast_guard is not None:
                kernels.append(emit_collapsed(ctx, kplan.fast_guard))
                kernels.append(emit_item_elbo(ctx, (kplan.fast_guard,)))
            else:
                kernels.append(emit_item_elbo(ctx))
        if kplan.extrapolated:
            kernels.append(emit_extrapolate(ctx))
        kernels.append(emit_local_step(ctx, _params(kernels)))
        if plan.assignment_locals:
            kernels += [emit_evidence(ctx, name) for name in plan.assignment_locals]
            kernels.append(emit_assignment_step(ctx, "gibbs", _params(kernels)))
            kernels.append(emit_assignment_step(ctx, "cvb0", _params(kernels)))
    kernels += [global_kernels.emit_update_global(ctx, name) for name in plan.globals]
    if plan.globals:
        kernels.append(global_kernels.emit_refresh(ctx))
        eager = eager_beside_lazy(ctx)
        if eager:
            kernels.append(global_kernels.emit_refresh(ctx, eager))
    kernels.append(global_kernels.emit_elbo_global(ctx))
    entries = global_kernels.emit_elbo_entries(ctx)
    if entries is not None:
        kernels.append(entries)
    if plan.collapse is not None:
        kernels.append(emit_klc_stats(ctx, _params(kernels)))
        kernels.append(emit_klc_gradient(ctx, _params(kernels)))
    return kernels


def _params(kernels: list[Function]) -> MappingProxyType:
    return MappingProxyType({fn.name: fn.args for fn in kernels})
