"""The one primitive every kernel is built from: a loop nest that contracts a
product of slots into a target.

    target[target_index] += coef · Π slots      summed over every free plate and letter

Plates already fixed by the caller (the current data item, the row being
updated) are *bound*; the remaining plates of the factor become loops
(ragged ones run over their CSR offsets), letters become loops over their
dimension, and a letter that indexes a one-hot of observed data is bound
to the data value instead of looped (the doc-term-count trick).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model import Model, RConst, RData, RVar, ShapeDim
from ..terms import Known, Slot, Stat, letter_text
from .pycode import Block, Line, Node


def dim_name(dim: ShapeDim) -> str:
    return str(dim) if isinstance(dim, int) else f"n_{dim}"


def plate_var(plate: str) -> str:
    return f"i_{plate}"


def letter_var(letter: str) -> str:
    return f"t_{letter_text(letter)}"


def fmt_float(value: float) -> str:
    text = repr(float(value))
    return text


def E_name(var: str, stat: str) -> str:
    """The array of E_q[t_stat] of a variable."""
    return f"E_{var}_{stat}"


def lam_name(var: str, stat: str) -> str:
    """The array of a variable's natural parameter of statistic ``stat``."""
    return f"lam_{var}_{stat}"


def plate_loop(model: Model, plate: str, args: ArgRecorder) -> str:
    """The loop header over one plate's elements (a ragged plate's: its parent's CSR range)."""
    pdef = model.plate(plate)
    if pdef.ragged:
        ptr = args.use(f"{plate}_ptr")
        parent = plate_var(pdef.parent)
        return f"for {plate_var(plate)} in range({ptr}[{parent}], {ptr}[{parent} + 1])"
    return f"for {plate_var(plate)} in range({args.use(dim_name(pdef.dim))})"


def entry_plates(model: Model, plates: tuple[str, ...]) -> tuple[str, ...]:
    """The plates whose indices address an array laid out as the data over ``plates`` (a
    ragged plate's flat index replaces its parent's)."""
    kept: list[str] = []
    for plate in plates:
        if model.plate(plate).ragged:
            kept.pop()
        kept.append(plate)
    return tuple(kept)


def onehot_binding(slot: Known) -> bool:
    """A one-hot of observed data or of a variable: its letter binds to the observed value."""
    return slot.fn == "onehot" and isinstance(slot.operands[0], (RVar, RData))


@dataclass
class ArgRecorder:
    """Collects the names a kernel reads, in first-use order (its parameters), and which of
    them its caller supplies itself (``supply``; the others are arrays of the fit state)."""

    names: list[str] = field(default_factory=list)
    supplied: list[str] = field(default_factory=list)

    def use(self, name: str) -> str:
        if not name.isidentifier():  # a literal size (``dim K = 3``) is not a parameter
            return name
        if name not in self.names:
            self.names.append(name)
        return name

    def supply(self, name: str) -> str:
        """A parameter the caller passes (``items``, ``data_scale``, ...), never read from
        the state: a hyperparameter spelled the same is another parameter of another kernel
        (the same name in one kernel is refused by ``compiler.check_generated_names``)."""
        if name not in self.supplied:
            self.supplied.append(name)
        return self.use(name)


@dataclass(frozen=True)
class Layout:
    """Array names and index expressions for every variable and known."""

    model: Model
    known_names: Mapping[str, str]  # Known.key -> array / scalar name
    scratch: frozenset[str]  # locals below the data plate, stored per item

    def E(self, var: str, stat: str) -> str:
        return E_name(var, stat)

    def lam(self, var: str, stat: str) -> str:
        return lam_name(var, stat)

    def row(self, var: str, entries: tuple[str, ...], letters: dict[str, str],
            args: ArgRecorder) -> list[str]:
        """Index parts selecting ``var`` at plate/gate ``entries``; ``letters`` maps gate
        letters to expressions and ``@plate`` to a bound plate index."""
        plates = self.model.var(var).plates
        return self._plate_index(plates, entries, letters, args, scratch=var in self.scratch)

    def data_row(self, plates: tuple[str, ...], args: ArgRecorder) -> list[str]:
        """Index parts of an array laid out as the data over ``plates`` (never scratch), at
        the enclosing loops' plate indices."""
        return self.data_index(plates, {}, args)

    def data_index(self, plates: tuple[str, ...], letters: dict[str, str],
                   args: ArgRecorder) -> list[str]:
        """Index parts of an array laid out as the data over ``plates`` (never scratch), with
        ``letters`` binding gate letters and ``@plate`` entries."""
        return self._plate_index(plates, plates, letters, args, scratch=False)

    def _plate_index(self, plates: tuple[str, ...], entries: tuple[str, ...],
                     letters: dict[str, str], args: ArgRecorder, scratch: bool) -> list[str]:
        if not plates:
            return ["0"]
        parts: list[str] = []
        for plate, entry in zip(plates, entries, strict=True):
            pdef = self.model.plate(plate)
            if entry in letters:
                expr = letters[entry]
            else:
                expr = letters.get(f"@{entry}", plate_var(entry))
            if pdef.ragged:
                parts.pop()  # the parent's index is folded into the flat one
                if scratch:
                    expr = f"{expr} - base_{plate}"
            parts.append(expr)
        if scratch:
            parts = parts[1:] if not self.model.plate(plates[1]).ragged else parts
        return parts

    def known_ref(self, slot: Known, letters: dict[str, str], args: ArgRecorder) -> str:
        """The expression reading one known slot (a literal, a scalar or an array element)."""
        if slot.fn == "value" and len(slot.operands) == 1 and isinstance(slot.operands[0], RConst):
            return fmt_float(slot.operands[0].value)
        name = args.use(self.known_names[slot.key])
        index = self.data_index(slot.plates, letters, args) if slot.plates else []
        index += [letters[t] if t in letters else plate_var(t[1:])
                  for t in slot.tensor if not self.drops_tensor(slot)]
        return f"{name}[{', '.join(index)}]" if index else name

    def drops_tensor(self, slot: Known) -> bool:
        """Elementwise views of a repeated scalar (Dirichlet(a, K)) are that scalar."""
        from ..model import RRepeat

        return (len(slot.operands) == 1 and isinstance(slot.operands[0], RRepeat)
                and slot.fn in ("value", "lgamma", "log"))

    def onehot_binding(self, slot: Known) -> bool:
        return onehot_binding(slot)

    def stat_ref(self, slot: Stat, letters: dict[str, str], args: ArgRecorder,
                 exp_array: dict[Stat, tuple[str, bool]] | None = None) -> str:
        """E[stat] read; or, with ``exp_array``, exp(E[stat]) from a precomputed array
        (``transposed``: stored with the statistic's axis first)."""
        name, transposed = self.E(slot.var, slot.stat), False
        if exp_array is not None and slot in exp_array:
            name, transposed = exp_array[slot]
        args.use(name)
        index = self.row(slot.var, slot.index, letters, args)
        index += [letters[t] for t in slot.tensor]
        if transposed:
            index = index[::-1]
        return f"{name}[{', '.join(index)}]"


@dataclass(frozen=True)
class Contraction:
    """coef · Π slots, summed over the factor's free plates and letters."""

    coef: float
    slots: tuple[Slot, ...]
    plates: tuple[str, ...]  # the factor's plates
    letter_dims: dict[str, ShapeDim]
    extra: tuple[str, ...] = ()  # extra multiplicative expressions (e.g. 'scale')


def emit_contraction(
    layout: Layout,
    args: ArgRecorder,
    c: Contraction,
    target: str,
    target_index: tuple[str, ...],  # entries: letters or plate-var expressions
    bound_plates: dict[str, str],  # plate -> bound expression (loop var of an outer loop)
    bound_letters: dict[str, str],  # letter -> bound expression
    weighted: bool = True,
    multiply: dict[Stat, tuple[str, bool]] | None = None,
    reads: dict[Stat, tuple[str, bool]] | None = None,
) -> list[Node]:
    """Emit the loop nest for one contraction, accumulating into ``target``. With
    ``multiply`` the nest multiplies the target by Π exp(E[stat]) instead of adding;
    ``reads`` points statistics at other layouts of E[stat] (a transposed copy)."""
    model = layout.model
    letters: dict[str, str] = dict(bound_letters)
    letters.update({f"@{plate}": expr for plate, expr in bound_plates.items()})
    # plates: loops over those not bound
    loops = [plate_loop(model, plate, args) for plate in c.plates if plate not in bound_plates]
    # one-hot data binds its letter to the observed category
    # (a letter bound already, e.g. the target's row theta[g] read as theta[group[n]], keeps
    # only the items whose category is that row)
    assigns: list[Node] = []
    guards: list[str] = []
    for slot in c.slots:
        if isinstance(slot, Known) and layout.onehot_binding(slot):
            letter = slot.tensor[0]
            ref = slot.operands[0]
            index = layout.data_index(slot.plates, letters, args)
            value = f"{args.use(ref.name)}[{', '.join(index)}]"
            if letter in letters:
                guards.append(f"{value} == {letters[letter]}")
                continue
            letters[letter] = letter_var(letter)
            assigns.append(Line(f"{letter_var(letter)} = {value}"))
    free = [
        letter for letter in sorted(c.letter_dims)
        if letter not in letters and _uses(c, letter, target_index)
    ]
    # target letters innermost, for contiguous writes
    free.sort(key=lambda letter: (letter in target_index, target_index.index(letter)
                                  if letter in target_index else 0))
    headers = {letter: _loop_header(letter, c, args) for letter in free}  # sizes in order
    letters.update({letter: letter_var(letter) for letter in free})
    # the product
    factors: list[str] = list(c.extra)
    for slot in c.slots:
        if isinstance(slot, Known):
            if layout.onehot_binding(slot):
                continue
            factors.append(layout.known_ref(slot, letters, args))
        else:
            factors.append(layout.stat_ref(slot, letters, args,
                                           multiply if multiply is not None else reads))
    if weighted:
        for plate in c.plates:
            if plate not in bound_plates and model.plate(plate).ragged:
                factors.append(f"{args.use(plate + '_weight')}[{plate_var(plate)}]")
    product = " * ".join(factors) if factors else "1.0"
    if c.coef == 1.0:
        rhs = product
    elif c.coef == -1.0:
        rhs = f"-{product}" if factors else "-1.0"
    else:
        rhs = f"{fmt_float(c.coef)} * {product}" if factors else fmt_float(c.coef)
    index = [letters.get(e, plate_var(e[1:]) if e.startswith("@") else e) for e in target_index]
    lhs = f"{target}[{', '.join(index)}]" if index else target
    summed = [letter for letter in free if letter not in target_index]
    if multiply is None and summed and not loops and _reads_target_first(
            factors, [letters[x] for x in free if x in target_index],
            [letters[x] for x in summed]):
        # a reduction over letters that follow the target's in the arrays read (tr(E[Λ_k] x xᵀ)
        # reads E[Λ][k, i, j]): the target's letters outermost, the sum in a scalar, so the
        # reads are contiguous instead of strided by the summed block
        outer = [x for x in free if x in target_index]
        inner: list[Node] = [Line(f"partial_sum += {product}")]
        for letter in reversed(summed):
            inner = [Block(headers[letter], tuple(inner))]
        total = "partial_sum" if c.coef == 1.0 else f"{fmt_float(c.coef)} * partial_sum"
        body: list[Node] = [Line("partial_sum = 0.0"), *inner, Line(f"{lhs} += {total}")]
        for letter in reversed(outer):
            body = [Block(headers[letter], tuple(body))]
    else:
        body = [Line(f"{lhs} *= {product}" if multiply is not None else f"{lhs} += {rhs}")]
        for letter in reversed(free):
            body = [Block(headers[letter], tuple(body))]
    if guards:
        body = [Block("if " + " and ".join(guards), tuple(body))]
    body = assigns + body
    for header in reversed(loops):
        body = [Block(header, tuple(body))]
    return body


def _loop_header(letter: str, c: Contraction, args: ArgRecorder) -> str:
    size = dim_name(c.letter_dims[letter])
    if not size.isdigit():
        args.use(size)
    return f"for {letter_var(letter)} in range({size})"


def _reads_target_first(factors: list[str], targets: list[str], summed: list[str]) -> bool:
    """Whether some array read indexes a target letter before a summed one, and none the
    other way round: then a loop over the target outside the sum reads it contiguously."""
    before = after = False
    for factor in factors:
        if "[" not in factor:
            continue
        entries = [e.strip() for e in factor[factor.index("[") + 1:factor.rindex("]")].split(",")]
        where_target = [entries.index(v) for v in targets if v in entries]
        where_summed = [entries.index(v) for v in summed if v in entries]
        if where_target and where_summed:
            if max(where_target) < min(where_summed):
                before = True
            else:
                after = True
    return before and not after


def _uses(c: Contraction, letter: str, target_index: tuple[str, ...]) -> bool:
    if letter in target_index:
        return True
    for slot in c.slots:
        if letter in slot.tensor:
            return True
        if isinstance(slot, Stat) and letter in slot.index:
            return True
    return False

