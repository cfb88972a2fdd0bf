"""``cemodel compile --dump kernel-plan``: the KernelPlan of a model as text, one field a
block, in the order of the dataclass (what each kernel will compute, decided before any is
printed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..plan import describe_slot
from ..terms import Stat, letter_text
from .lowering import Gathered, ImplicitPlan, KernelPlan, ProductMessage


def dump_kernel_plan(kplan: KernelPlan) -> str:
    lines: list[str] = []
    for field in dataclasses.fields(kplan):
        value = vars(kplan)[field.name]
        if field.name == "known_slots":
            continue  # the knowns' slots: shown through `knowns`
        if field.name == "knowns":
            body = [f"{name} = {expr}  # {key}" for key, (name, expr) in value.items()
                    if name != expr]
        elif field.name == "roles":
            grouped: dict[str, list[str]] = {}
            for name, role in value.items():
                grouped.setdefault(role, []).append(name)
            body = [f"{role}: {', '.join(names)}" for role, names in grouped.items()]
        elif isinstance(value, Mapping):
            body = [f"{_show(k)}: {_show(v)}" for k, v in value.items()]
        else:
            body = [_show(value)]
        lines.append(f"{field.name}:" + ("" if body else " (none)"))
        lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n"


def _show(value: object) -> str:
    """A short readable form of a KernelPlan entry."""
    if isinstance(value, Stat):
        return describe_slot(value)
    if isinstance(value, ProductMessage):
        return f"{describe_slot(value.stat)} (monomial {value.message.monomial})"
    if isinstance(value, ImplicitPlan):
        return (f"constant: {_show(value.constant)}; rows: {_show(value.rows)}; read by "
                f"{', '.join(dict.fromkeys(c[0] for c in value.consumers))}")
    if isinstance(value, Gathered):
        return f"rows of {describe_slot(value.stat)} gathered over plate {value.plate}"
    if isinstance(value, (tuple, frozenset)):
        items = sorted(value, key=str) if isinstance(value, frozenset) else value
        return "(" + ", ".join(_show(v) for v in items) + ")"
    if isinstance(value, str):
        return letter_text(value)  # a letter as code shows it
    return str(value)
