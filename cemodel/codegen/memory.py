"""The arrays ``_prepare`` allocates, by shape, for the memory check before it allocates them.

``--set K=1e12`` or ``dim K = 99999999999`` made ``_prepare`` ask numpy for terabytes (a raw
MemoryError, or a ValueError past numpy's largest shape). The module now states what it is
about to allocate and ``rt.check_memory`` refuses, naming the dimension, its size and the
memory the arrays need, when that is more than the machine has:

    rt.check_memory(bound, {('K', 'V'): 5, ('D', 'K'): 3, ('threads', 'V', 'K'): 1, ...})

A shape's entries are a dimension's name, a literal size, ``len(P)`` (every element of a
ragged plate P, flattened), ``max(P)`` (its longest row) or ``threads`` (the local step's
threads); the value counts the float64 arrays of that shape. It mirrors ``prepare._allocations``
(the variational parameters, exp arrays, buffers, statistics and per-item arrays) and the
hyperparameters' arrays; the known quantities, a few small arrays and the drivers' copies are
left out, so it is a lower bound.
"""

from __future__ import annotations

from ..model import Model, ShapeDim, VarDef
from .context import EmitContext
from .loops import dim_name, entry_plates
from .pycode import Line

Size = ShapeDim  # also "len(P)", "max(P)", "threads"


def size_code(size: Size) -> str:
    """A size as ``_prepare`` reads it: ``n_K``, ``3``, ``len(tokens_weight)``..."""
    if isinstance(size, str) and size.startswith(("len(", "max(")):
        plate = size[4:-1]
        return f"len({plate}_weight)" if size.startswith("len") else f"rt.max_length({plate}_ptr)"
    return dim_name(size)


def var_rows(ctx: EmitContext, var: VarDef, full: bool = False) -> list[Size]:
    """``prepare.array_shape`` as sizes: the item's rows for a scratch local, else one per
    element of its plates (ragged plates flattened)."""
    if not var.plates:
        return [1]
    if var.name in ctx.layout.scratch and not full:
        return [f"max({plate})" if ctx.model.plate(plate).ragged
                else ctx.model.plate(plate).dim for plate in var.plates[1:]]
    return entry_rows(ctx.model, var.plates)


def entry_rows(model: Model, plates: tuple[str, ...]) -> list[Size]:
    """The rows of an array laid out as the data over ``plates``: one per entry (a ragged
    plate's every element, flattened)."""
    return [f"len({plate})" if model.plate(plate).ragged else model.plate(plate).dim
            for plate in entry_plates(model, plates)]


def stat_sizes(var: VarDef, stat: str, rank: int) -> list[Size]:
    """``prepare.stat_shape`` as sizes: the event axes of a statistic's array."""
    if stat in ("onehot", "first"):
        return [var.categories]
    if stat == "pair":
        return [var.categories] * 2
    if rank == 0:
        return []
    if rank == 2 and len(var.shape) == 1:  # x xᵀ of a vector (a chain's x_t x_{t−1}ᵀ)
        return [var.shape[0]] * 2
    return list(var.shape[:rank])


def memory_line(ctx: EmitContext) -> Line:
    """``rt.check_memory(bound, {shape: count})``, before ``_prepare`` allocates."""
    plan, kplan, model = ctx.plan, ctx.kplan, ctx.model
    counts: dict[tuple[Size, ...], int] = {}

    def add(shape: list[Size], count: int = 1) -> None:
        key = tuple(shape) or (1,)
        counts[key] = counts.get(key, 0) + count

    for hyper in model.hypers:
        if hyper.shape:
            add(list(hyper.shape))
    for name in plan.globals + plan.locals:  # lam and E of each statistic
        var = ctx.var(name)
        for stat, rank in ctx.stats(name):
            shape = var_rows(ctx, var) + stat_sizes(var, stat, rank)
            if stat == ctx.stats(name)[0][0] and name in kplan.product_form:
                add(shape[:1], 2)  # H and logZ: one per row
            add(shape, 2)
            if stat == "log" and name in kplan.exp_needed:  # X, or XT and ET (transposed)
                add(shape, sum(2 if transposed else 1 for transposed in kplan.exp_needed[name]))
    for name in kplan.implicit:
        categories = ctx.var(name).categories
        add([categories], 2)
        if name in kplan.gathered:
            rows = f"max({kplan.gathered[name].plate})"
            add([rows, categories])
            add([rows])
    for acc in plan.stored_accumulators:  # the statistics, and each thread's own
        factor = plan.analysis.factors[acc.factor]
        shape = [model.plate(k[1:]).dim if k.startswith("@") else factor.dim_of(k)
                 for k in acc.key]
        if acc.per_entry:  # one row per entry, no thread copies
            add(entry_rows(model, acc.plates) + shape)
            continue
        add(shape)
        if model.data_plate is not None:
            add(["threads", *shape])
    if model.data_plate is not None:
        # all_items, item_weight, seed_category (and local_sweeps)
        add([model.plate(model.data_plate).dim], 4 if plan.local_iterations else 3)
    shapes = ", ".join(f"{key!r}: {count}" for key, count in counts.items())
    return Line(f"rt.check_memory(bound, {{{shapes}}})",
                "refuse before allocating more than the machine's memory")
