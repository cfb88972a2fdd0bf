"""Which globals a stochastic step may move lazily, column by column (``rt.LazyColumns``).

SVI moves every global by λ ← (1 − ρ_t)λ + ρ_t λ̂. A Dirichlet row over the categories of
observed data (LDA's topics over the words w) receives data only at the categories the
minibatch holds: elsewhere λ̂ is its prior η, so those entries only decay towards η,
λ_t − η = Π_s (1 − ρ_s)·(λ_t₀ − η), and the local step reads E[log β] only at the
minibatch's categories. The driver then touches only those columns per step (as Vowpal
Wabbit's ``--lda`` does). That needs, of the global's update:

- a Dirichlet with one plate of rows, its categories a dimension no other axis of the
  update uses (the update runs on the minibatch's columns alone, ``n_<dim>`` = their count);
- every message from the data through a statistic keyed by the category of an observed
  variable (``onehot(w[d, n])``), kept as an array (not per entry), whose other factors do not
  range over the categories;
- every other message constant: the prior's, from scalar hyperparameters and numbers;
- the observed variable's values one per entry of the data plate, or of one ragged plate
  inside it, so that the minibatch's columns are read off its items.

Two further facts let the step do less (``LazyColumns.alone``, ``.direct``): when no other
variable reads the observed categories and the local step has no loop over them, it can run
on compact arrays, the minibatch's categories renumbered 0..n−1 (they stay in cache); when the
only data message is the statistic itself (coefficient 1, no other factor), λ̂ = P +
data_scale · S needs no update kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import PlateIndex, RConst, RHyper, RRepeat, RVar, VarDef, expr_vars
from ..terms import Known, Stat
from .context import EmitContext
from .loops import dim_name


@dataclass(frozen=True)
class LazyColumns:
    """What the generated ``rt.LazyColumns(...)`` holds (see ``cemodel.runtime.lazy``)."""

    size: str  # the state name of the number of categories (n_V)
    index: str  # the observed data array whose values are the categories (w)
    pointer: str | None  # its ragged plate's pointer (tokens_ptr), None: one row per item
    statistics: tuple[tuple[str, int], ...]  # (accumulator, its axis over the categories)
    exp: str | None  # exp(E[log β]) kept row-major (X_beta_log)
    transposed: tuple[str, str] | None  # (E[log β]ᵀ, exp(E[log β])ᵀ) copies
    expected: bool = True  # E[log β] itself is read by the local step (else only its copies)
    alone: bool = False  # the local step reads the categories only through this global
    direct: bool = False  # λ̂[r, v] = P[r, v] + data_scale · S[v, r], S its one statistic

    def literal(self) -> str:
        return (f"rt.LazyColumns({self.size!r}, {self.index!r}, {self.pointer!r}, "
                f"{self.statistics!r}, {self.exp!r}, {self.transposed!r}, "
                f"expected={self.expected!r}, alone={self.alone!r}, direct={self.direct!r})")


def lazy_columns(ctx: EmitContext, name: str,
                 local_reads: frozenset[str] | None = None) -> LazyColumns | None:
    """The lazy layout of global ``name``, or None when a step must move all of it;
    ``local_reads``: the arrays the local steps' kernels read (None: not known yet, E[log β]
    counts as read)."""
    var = ctx.var(name)
    if ctx.family(name) != "dirichlet" or len(var.plates) != 1 or len(var.shape) != 1:
        return None
    event = var.shape[0]
    if ctx.model.plate(var.plates[0]).dim == event:
        return None
    statistics: dict[str, int] = {}
    observed: set[str] = set()
    direct = []  # per data message: is it data_scale · S[v, row] (see LazyColumns.direct)
    rows = ctx.model.plate(var.plates[0]).dim
    for message, factor, monomial in ctx.messages_to(name):
        acc = ctx.plan.accumulator_for(message.factor, message.monomial)
        letter = message.target.tensor[0] if message.target.tensor else None
        if acc is None:
            if not all(_constant(ctx, slot) for slot in monomial.without(message.target)):
                return None
            continue
        if acc.per_entry or letter is None or letter not in acc.key:
            return None
        others = [k for k in acc.key if k != letter and not k.startswith("@")]
        if any(factor.dim_of(k) == event for k in others):
            return None
        if any(s != message.target and letter in s.tensor for s in acc.glob):
            return None
        source = _observed_source(ctx, acc.local, letter)
        if source is None:
            return None
        observed.add(source)
        statistics[acc.name] = acc.key.index(letter)
        direct.append(monomial.coef == 1.0 and acc.glob == (message.target,)
                      and not acc.entries and not acc.plates and len(acc.key) == 2
                      and acc.key[0] == letter and message.target.index == acc.key[1:]
                      and factor.dim_of(acc.key[1]) == rows)
    if len(observed) != 1 or not statistics:
        return None
    index = observed.pop()
    pointer = _pointer(ctx, index)
    if pointer is False:
        return None
    exps = ctx.kplan.exp_needed.get(name, frozenset())
    transposed = (f"ET_{name}_log", f"XT_{name}_log") if True in exps else None
    E = ctx.layout.E(name, "log")
    size = dim_name(event)
    # alone: no other variable reads the observed categories, and the local step has no loop
    # over them, so it may run on the minibatch's categories renumbered 0..n-1
    alone = (local_reads is not None and size not in local_reads
             and not any(_reads(v, index) for v in ctx.model.variables if v.name != index))
    return LazyColumns(size, index, pointer, tuple(sorted(statistics.items())),
                       f"X_{name}_log" if False in exps else None, transposed,
                       local_reads is None or E in local_reads, alone, direct == [True])


def eager_beside_lazy(ctx: EmitContext) -> tuple[str, ...]:
    """The globals a lazy step moves whole, when there are lazy ones beside them (they get
    their own refresh, ``refresh_eager_globals``: the lazy ones are refreshed by columns)."""
    lazy = [name for name in ctx.plan.globals if lazy_columns(ctx, name) is not None]
    if not lazy:
        return ()
    return tuple(name for name in ctx.plan.globals if name not in lazy)


def _reads(var: VarDef, name: str) -> bool:
    """Does a parameter of ``var`` mention random variable ``name`` (as a value or gate)?"""
    return any(ref == name for arg in var.args for ref, _ in expr_vars(arg))


def _constant(ctx: EmitContext, slot) -> bool:
    """A factor of a prior message that never changes: a number or scalar hyperparameter,
    possibly repeated along a dimension."""
    if isinstance(slot, Stat):
        return False
    return isinstance(slot, Known) and slot.fn == "value" and not slot.plates and all(
        _scalar(ctx, o) for o in slot.operands)


def _scalar(ctx: EmitContext, expr) -> bool:
    if isinstance(expr, RRepeat):
        return _scalar(ctx, expr.value)
    if isinstance(expr, RHyper):
        return all(h.shape == () for h in ctx.model.hypers if h.name == expr.name)
    return isinstance(expr, RConst)


def _observed_source(ctx: EmitContext, local: tuple, letter: str) -> str | None:
    """The observed variable whose one-hot binds ``letter`` in a statistic's local part."""
    for slot in local:
        if (isinstance(slot, Known) and slot.fn == "onehot" and slot.tensor == (letter,)
                and len(slot.operands) == 1 and isinstance(slot.operands[0], RVar)):
            ref = slot.operands[0]
            var = ctx.model.var(ref.name)
            plain = all(isinstance(i, PlateIndex) for i in ref.indices)
            if var.observed and plain and tuple(i.plate for i in ref.indices) == var.plates:
                return ref.name
    return None


def _pointer(ctx: EmitContext, index: str) -> str | None | bool:
    """How an item's values of ``index`` are found: its ragged plate's pointer, None for a
    row per item (dense plates inside the data plate), False when neither."""
    plates = ctx.model.var(index).plates
    if not plates or plates[0] != ctx.model.data_plate:
        return False
    inner = [ctx.model.plate(p) for p in plates[1:]]
    ragged = [p for p in inner if p.ragged]
    if not ragged:
        return None
    if len(inner) == 1 and inner[0].parent == ctx.model.data_plate:
        return f"{inner[0].name}_ptr"
    return False
