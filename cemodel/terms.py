"""Stage 3's IR: a factor's log density expanded into monomials (``conjugacy``).

A monomial is a coefficient times a product of slots, each slot either a sufficient statistic
of one latent variable (``Stat``) or a known quantity computed from hyperparameters and data
(``Known``); tensor indices are einsum letters, summed. ``Factor`` holds one statement's
monomials, ``Conditional`` a latent variable's messages, ``Analysis`` the whole model's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Span
from .families import CHAIN_FAMILIES, FAMILIES, WRITABLE
from .model import (
    Model,
    PlateIndex,
    RBin,
    RCall,
    RConst,
    RData,
    RDimSize,
    RExpr,
    RHyper,
    RNeg,
    RRepeat,
    RSum,
    RVar,
    RVector,
    ShapeDim,
    SumIndex,
)

# Einsum letters are the generator's own names, made here: a family's ``k``, ``i``, ``j``,
# a fresh ``i0``, a gate's ``g0``. They are spelled with a leading ``$``, which no name of
# the language has (a .cem name is an identifier), because the index entries of a ``Stat``
# hold both letters and plate names, and environments map both: a plate ``k`` must never
# be taken for the letter ``k`` (it read E[z][k, k] for E[z][n, k]). Generated code and
# messages show a letter without it (``letter_text``: ``t_k``, ``q(z[n]=k)``).
LETTER = "$"


def as_letter(text: str) -> str:
    """The letter spelled ``text`` in a family's log density or by the expander."""
    return LETTER + text


def letter_text(entry: str) -> str:
    """An index entry as code and messages show it: a letter without its ``$``; a plate
    name, ``@plate`` or an expression unchanged."""
    return entry.removeprefix(LETTER)


@dataclass(frozen=True)
class Stat:
    """E[stat(var[index])]_tensor for a latent variable; index entries are plate names or
    letters (a gate's ``$g0``, a sum's ...), tensor entries letters."""

    var: str
    index: tuple[str, ...]
    stat: str
    tensor: tuple[str, ...]


@dataclass(frozen=True)
class Known:
    """fn(operands)_tensor computed from hyperparameters and data before fitting."""

    fn: str
    operands: tuple[RExpr, ...]
    tensor: tuple[str, ...]
    plates: tuple[str, ...]  # the plates its value varies over (from data operands)

    @property
    def key(self) -> str:
        return self.fn + "(" + ", ".join(render_expr(o) for o in self.operands) + ")"


Slot = Stat | Known


@dataclass(frozen=True)
class Monomial:
    coef: float
    slots: tuple[Slot, ...]

    def stats_of(self, var: str) -> tuple[Stat, ...]:
        return tuple(s for s in self.slots if isinstance(s, Stat) and s.var == var)

    def without(self, slot: Slot) -> tuple[Slot, ...]:
        slots = list(self.slots)
        slots.remove(slot)
        return tuple(slots)


@dataclass(frozen=True)
class Use:
    """A latent variable read in a term: the statistic the term needs of it, and the domain
    of the parameter it is read in (None where the read sets no domain)."""

    var: str
    stat: str
    domain: str | None


@dataclass(frozen=True)
class Factor:
    """One ``child ~ F(args)`` statement, expanded."""

    child: str
    family: str
    plates: tuple[str, ...]
    monomials: tuple[Monomial, ...]
    index_dims: tuple[tuple[str, ShapeDim], ...]  # tensor / gate letter -> its size
    gates: tuple[tuple[str, str], ...]  # gate letter -> gating variable
    span: Span

    def dim_of(self, letter: str) -> ShapeDim:
        return dict(self.index_dims)[letter]


@dataclass(frozen=True)
class Message:
    """The part of one factor's monomial that is a message to ``target`` for ``stat``."""

    factor: int
    monomial: int
    target: Stat


@dataclass(frozen=True)
class Conditional:
    var: str
    family: str  # the variational (runtime) family name
    stats: tuple[tuple[str, int], ...]
    messages: tuple[Message, ...]  # from the prior factor and every child factor


@dataclass(frozen=True)
class Analysis:
    model: Model
    factors: tuple[Factor, ...]
    conditionals: tuple[Conditional, ...]

    def conditional(self, var: str) -> Conditional:
        for cond in self.conditionals:
            if cond.var == var:
                return cond
        raise KeyError(var)


def render_expr(expr: RExpr) -> str:
    """A compact, deterministic text form of a resolved expression."""
    if isinstance(expr, RConst):
        value = expr.value
        return str(int(value)) if value == int(value) else repr(value)
    if isinstance(expr, (RHyper, RDimSize)):
        return expr.name
    if isinstance(expr, (RVar, RData)):
        if not expr.indices:
            return expr.name
        parts = []
        for index in expr.indices:
            if isinstance(index, PlateIndex):
                parts.append(index.plate)
            elif isinstance(index, SumIndex):
                parts.append(index.name)
            else:
                parts.append(render_expr(index.var))
        return f"{expr.name}[{', '.join(parts)}]"
    if isinstance(expr, RRepeat):
        return f"repeat({render_expr(expr.value)}, {expr.dim})"
    if isinstance(expr, RBin):
        return f"({render_expr(expr.left)} {expr.op} {render_expr(expr.right)})"
    if isinstance(expr, RNeg):
        return f"-{render_expr(expr.operand)}"
    if isinstance(expr, RCall):
        if expr.func == "reciprocal":  # a divisor (x / c), see Expander.expand_expr
            return f"1/{render_expr(expr.args[0])}"
        return f"{expr.func}({', '.join(render_expr(a) for a in expr.args)})"
    if isinstance(expr, RVector):
        return "[" + ", ".join(render_expr(i) for i in expr.items) + "]"
    if isinstance(expr, RSum):
        return f"sum({render_expr(expr.body)} for {expr.index} in {expr.dim})"
    raise AssertionError(expr)


def conjugate_priors(event_rank: int, uses: list[Use]) -> tuple[str, ...]:
    """The families a model file may give a latent variable with events of ``event_rank``
    read by ``uses`` that make it conjugate: each read's statistic is one the family's
    posterior provides (the rule ``expansion.Expander.leaf`` accepts a read by), and its
    support lies in each read's domain. A chain is not one: it is a sequence along a plate of
    steps."""
    return tuple(sorted({
        family.name for family in FAMILIES.values()
        if family.name in WRITABLE and family.variational and family.event_rank == event_rank
        and family.name not in CHAIN_FAMILIES
        and all(family.provides(use.stat) and (use.domain is None or family.fits(use.domain))
                for use in uses)
    }))
