"""Stage 1: .cem source -> AST.

The grammar lives in ``grammar/cem.lark`` (installed as ``cemodel.grammar``).
Parsing yields a tree of frozen dataclasses (``cemodel.nodes``, re-exported here), each
carrying its source span; how deep it may nest is checked here (``cemodel.limits``).
Syntax errors become ``CemSyntaxError`` with a location, the line and a caret.
"""

from __future__ import annotations

import math
from functools import cache
from importlib import resources

import lark
from lark.indenter import DedentError, Indenter

from .errors import CemSyntaxError, Source, Span
from .limits import check_nesting
from .nodes import (
    BinOp,
    Call,
    CollapseDecl,
    DataDecl,
    DimDecl,
    Expr,
    HyperDecl,
    Index,
    ModelDecl,
    Name,
    Neg,
    Number,
    Plate,
    PlateSize,
    Program,
    Reduce,
    Sample,
    Stmt,
    Target,
    TypeSpec,
    VectorLit,
)

__all__ = ["NAME_LONGEST", "BinOp", "Call", "CollapseDecl", "DataDecl", "DimDecl", "Expr",
           "HyperDecl", "Index", "ModelDecl", "Name", "Neg", "Number", "Plate", "PlateSize",
           "Program", "Reduce", "Sample", "Stmt", "Target", "TypeSpec", "VectorLit",
           "declaration_spans", "parse", "user_name_tokens"]
# ---------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------


class _CemIndenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR", "LSQB"]
    CLOSE_PAREN_types = ["RPAR", "RSQB"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


@cache
def _parser() -> lark.Lark:
    grammar = resources.files("cemodel.grammar").joinpath("cem.lark").read_text()
    return lark.Lark(
        grammar,
        parser="lalr",
        postlex=_CemIndenter(),
        propagate_positions=True,
        maybe_placeholders=False,
    )


def _span(meta: lark.tree.Meta | lark.Token) -> Span:
    if isinstance(meta, lark.Token):
        return Span(meta.line or 0, meta.column or 0, meta.end_line or 0, meta.end_column or 0)
    if getattr(meta, "empty", False):
        return Span(0, 0, 0, 0)
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def _name(tok: lark.Token) -> Name:
    return Name(str(tok), _span(tok))


# A chain of more terms than this (a + b - c ..., or a * b / c ...) is built as a balanced tree,
# so that a long sum is not deep (cemodel.limits); a shorter one as the grammar reads it,
# ((a + b) - c) + ... The two differ only in the rounding of the sum.
CHAIN_LONGEST = 32
_CHAIN_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_INVERSE = {"+": "-", "-": "+", "*": "/", "/": "*"}


class _Chain:
    """``a + b - c ...`` (or ``a * b / c ...``) while the parser reads it: its first term and
    each further operator, term and the span of the chain up to that term."""

    def __init__(self, first: Expr, ops: str) -> None:
        self.first = first
        self.ops = ops  # "+-" or "*/"
        self.steps: list[tuple[str, Expr, Span]] = []

    def finish(self) -> Expr:
        if len(self.steps) < CHAIN_LONGEST:  # left to right, as the grammar associates
            expr = self.first
            for op, term, span in self.steps:
                expr = BinOp(op, expr, term, span)
            return expr
        terms = [self.first] + [term for _, term, _ in self.steps]
        ops = [""] + [op for op, _, _ in self.steps]
        ends = [self.first.span] + [span for _, _, span in self.steps]

        def build(lo: int, hi: int, flip: bool) -> Expr:
            # terms lo..hi, the first added (multiplied); flip: every later operator inverted,
            # as a group after a '-' reads (a - b - c = a - (b + c))
            if lo == hi:
                return terms[lo]
            mid = (lo + hi) // 2
            op = _INVERSE[ops[mid + 1]] if flip else ops[mid + 1]
            right = build(mid + 1, hi, flip != (op in "-/"))
            start, end = terms[lo].span, ends[hi]
            return BinOp(op, build(lo, mid, flip), right,
                         Span(start.line, start.column, end.end_line, end.end_column))

        return build(0, len(terms) - 1, False)


def _finished(child):
    return child.finish() if isinstance(child, _Chain) else child


@lark.v_args(meta=True)
class _ToAst(lark.visitors.Transformer_NonRecursive):
    """The parse tree to the AST, without recursion (a source may nest deeply: its depth is
    checked on the AST, cemodel.limits)."""

    def _call_userfunc(self, tree, new_children=None):
        children = tree.children if new_children is None else new_children
        op = _CHAIN_OPS.get(str(tree.data))
        if op is None:
            return super()._call_userfunc(tree, [_finished(c) for c in children])
        left, right = children
        if not (isinstance(left, _Chain) and op in left.ops):
            left = _Chain(_finished(left), "+-" if op in "+-" else "*/")
        left.steps.append((op, _finished(right), _span(tree.meta)))
        return left

    def start(self, meta, children):
        return tuple(children)

    def model_decl(self, meta, children):
        return ModelDecl(str(children[0]), _span(meta))

    def dim_decl(self, meta, children):
        name = str(children[0])
        ragged = None
        default = None
        for child in children[1:]:
            if child.type == "NAME":
                ragged = _name(child)
            else:
                default = int(child)
        return DimDecl(name, default, ragged, _span(meta))

    def hyper_decl(self, meta, children):
        return HyperDecl(str(children[0]), children[1], _span(meta))

    def data_decl(self, meta, children):
        name = str(children[0])
        indices = tuple(_name(t) for t in children[1:-1])
        return DataDecl(name, indices, children[-1], _span(meta))

    def collapse_decl(self, meta, children):
        return CollapseDecl(tuple(_name(t) for t in children), _span(meta))

    def type_spec(self, meta, children):
        arg = children[1] if len(children) > 1 else None
        return TypeSpec(str(children[0]), arg, _span(meta))

    def target(self, meta, children):
        return Target(str(children[0]), tuple(_name(t) for t in children[1:]), _span(meta))

    def sample(self, meta, children):
        observed = False
        if isinstance(children[0], lark.Token) and children[0].type == "OBSERVE":
            observed = True
            children = children[1:]
        target, dist, *args = children
        return Sample(target, _name(dist), tuple(args), observed, _span(meta))

    def plate_size(self, meta, children):
        ragged = _name(children[1]) if len(children) > 1 else None
        return PlateSize(_name(children[0]), ragged, _span(meta))

    def plate(self, meta, children):
        name, index, *rest = children
        size = None
        if rest and isinstance(rest[0], PlateSize):
            size, rest = rest[0], rest[1:]
        return Plate(str(name), str(index), size, tuple(rest), _span(meta))

    # expressions
    def number(self, meta, children):
        text = str(children[0])
        is_int = text.isdigit()
        value = float(text)
        if not math.isfinite(value):
            raise CemSyntaxError(
                f"the number {text} is too large", _span(meta),
                hint="numbers must be below about 1.8e308 (the largest float)",
            )
        return Number(value, is_int, _span(meta))

    def name(self, meta, children):
        return _name(children[0])

    def index(self, meta, children):
        return Index(_name(children[0]), tuple(children[1:]), _span(meta))

    def call(self, meta, children):
        return Call(_name(children[0]), tuple(children[1:]), _span(meta))

    def reduce(self, meta, children):
        func, body, index, dim = children
        return Reduce(_name(func), body, _name(index), _name(dim), _span(meta))

    def vector(self, meta, children):
        return VectorLit(tuple(children), _span(meta))

    def neg(self, meta, children):
        return Neg(children[0], _span(meta))


_TOKEN_WORDS = {
    "_NL": "end of line",
    "_INDENT": "an indented block",
    "_DEDENT": "end of block",
    "NAME": "a name",
    "INT": "a whole number",
    "NUMBER": "a number",
    "TILDE": "'~'",
    "COLON": "':'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "EQUAL": "'='",
    "$END": "end of file",
}


def _describe_expected(expected: set[str]) -> str:
    words = sorted({_TOKEN_WORDS.get(e, e.lower().strip('"')) for e in expected})
    if len(words) > 6:
        words = words[:6] + ["..."]
    return ", ".join(words)


def user_name_tokens(text: str) -> list[tuple[str, Span, int, int]]:
    """Every name in valid source that the user chose (variables, data, hyperparameters,
    dimensions, plates, indices): (name, span, start, end offsets). Not the model's name, a
    distribution or function, or a data type."""
    tree = _parser().parse(text if text.endswith("\n") else text + "\n")
    found = []
    for node in tree.iter_subtrees():
        names = [c for c in node.children if isinstance(c, lark.Token) and c.type == "NAME"]
        if node.data == "model_decl":
            continue
        if node.data in ("type_spec", "call", "reduce", "sample") and names:
            names = names[1:] if node.data != "sample" else []  # the type, function, family
        found += [(str(tok), _span(tok), tok.start_pos, tok.end_pos) for tok in names]
    return sorted(found, key=lambda tok: tok[2])


# the rules that declare names, and how many of their first names they declare
_DECLARING = {"dim_decl": 1, "hyper_decl": 1, "data_decl": 1, "target": 1, "plate": 2}


def declaration_spans(text: str) -> dict[str, Span]:
    """Where valid source declares each of its names (dimensions, hyperparameters, data,
    variables, plates and their indices): name -> the span of the name in its declaration."""
    tree = _parser().parse(text if text.endswith("\n") else text + "\n")
    spans: dict[str, Span] = {}
    for node in tree.iter_subtrees_topdown():
        count = _DECLARING.get(str(node.data), 0)
        names = [c for c in node.children if isinstance(c, lark.Token) and c.type == "NAME"]
        for tok in names[:count]:
            spans.setdefault(str(tok), _span(tok))
    return spans


def parse(text: str, filename: str = "<model>") -> Program:
    """Parse .cem source text into a ``Program``; raises ``CemSyntaxError``."""
    source = Source(filename, text if text.endswith("\n") else text + "\n")
    try:
        tree = _parser().parse(source.text)
    except lark.exceptions.UnexpectedCharacters as exc:
        span = Span(exc.line, exc.column, exc.line, exc.column + 1)
        char = source.text[exc.pos_in_stream] if exc.pos_in_stream < len(source.text) else ""
        raise CemSyntaxError(
            f"unexpected character {char!r}", span, source,
            hint=_hint_for_character(char),
        ) from None
    except lark.exceptions.UnexpectedToken as exc:
        tok = exc.token
        _raise_if_unclosed(source, tok)
        if tok.type == "$END":
            span = _end_span(source)
            found = "end of file"
        else:
            line = tok.line or 1
            span = Span(line, tok.column or 1, tok.end_line or line, tok.end_column or 1)
            if tok.type == "_INDENT":
                # the token is placed at the newline before the indented line
                line = _next_code_line(source, line)
                col = len(str(tok)) + 1
                span = Span(line, col, line, col + 1)
                found = "indentation"
            elif tok.type in ("_NL", "_DEDENT"):
                found = "end of line"
            else:
                found = repr(str(tok))
        hint = _hint_for_token(tok, set(exc.expected))
        expected = _describe_expected(set(exc.expected))
        if tok.type == "_INDENT":
            hint = _mixed_indentation(source.text) or hint
        elif tok.type != "$END" and tok.column == 1 and _follows_header(source, tok.line):
            expected = "an indented block"  # the body of a plate written flush left
            hint = "indent the plate's statements under its header (by 4 spaces, say)"
        raise CemSyntaxError(
            f"unexpected {found}; expected {expected}", span, source, hint=hint,
        ) from None
    except lark.exceptions.UnexpectedEOF as exc:
        _raise_if_unclosed(source, None)
        raise CemSyntaxError(
            f"unexpected end of file; expected {_describe_expected(set(exc.expected))}",
            _end_span(source), source,
        ) from None
    except DedentError:
        line = _find_bad_dedent(source.text)
        raise CemSyntaxError(
            "this line's indentation matches no enclosing block", Span(line, 1, line, 2), source,
            hint=_mixed_indentation(source.text)
            or "indent it exactly as far as the statements of the block it belongs to",
        ) from None
    _check_name_lengths(tree, source)
    try:
        statements = _ToAst().transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, CemSyntaxError):
            raise exc.orig_exc.with_source(source) from None
        raise
    program = Program(source, statements)
    check_nesting(program)
    return program


# A name becomes part of Python identifiers and of file names: the generated module's kernels
# are named after variables (a joint block's after two: update_mu_Lambda), and numba caches
# each kernel in a file named MODEL_HASH.KERNEL-LINE.py311.N.nbc (and a temporary .tmp.UUID
# beside it while writing), which the file system limits to 255 bytes. With names of at most
# 48 characters the longest such file name of the model library is 225 bytes.
NAME_LONGEST = 48


def _check_name_lengths(tree: lark.Tree, source: Source) -> None:
    """Refuse the first name longer than NAME_LONGEST, where it appears (its declaration, or
    the model's name), before it reaches a file name (an OSError from numba's cache) or the
    code generator."""
    long = [tok for node in tree.iter_subtrees() for tok in node.children
            if isinstance(tok, lark.Token) and tok.type == "NAME" and len(tok) > NAME_LONGEST]
    if long:
        tok = min(long, key=lambda t: t.start_pos)
        raise CemSyntaxError(
            f"the name '{tok[:20]}...' is {len(tok)} characters long; names are at most "
            f"{NAME_LONGEST}", _span(tok), source,
            hint="cemodel names the generated kernels and their cache files after the model's "
                 "names, and a file name is at most 255 bytes: shorten it")


def _mixed_indentation(text: str) -> str | None:
    """Where the lines are indented with tabs and with spaces (a tab counts as 8 columns, so
    a block can look aligned and not be), the first line with a tab."""
    indents = [(n, line[:len(line) - len(line.lstrip(" \t"))])
               for n, line in enumerate(_lines(text), 1) if line.strip()]
    tabbed = [n for n, indent in indents if "\t" in indent]
    if tabbed and any(" " in indent for _, indent in indents):
        return (f"tabs and spaces are mixed in the indentation (line {tabbed[0]} has a tab, "
                "which counts as 8 columns): indent with spaces only")
    return None


def _hint_for_character(char: str) -> str | None:
    if char == "\ufeff":
        return "a byte-order mark (U+FEFF) inside the text: remove it"
    if char.isidentifier() and not char.isascii():
        return "names are ASCII: letters a-z and A-Z, digits and '_'"
    if char in "{}":
        return "blocks are written with ':' and indentation, as in Python"
    if char == ";":
        return "statements end at the end of the line; no ';' is needed"
    if char == "=":
        return "use '~' to give a variable a distribution, '=' only in dim and hyper"
    return None


def _hint_for_token(tok: lark.Token, expected: set[str]) -> str | None:
    if "TILDE" in expected and tok.type == "EQUAL":
        return "use '~' to give a variable a distribution"
    if "COLON" in expected and tok.type == "_NL":
        return "a plate header ends with ':'"
    if tok.type == "_INDENT":
        return "only the body of a plate is indented"
    if "IN" in expected:  # a plate header short of a word: `plate d in D:`
        return "a plate is written 'plate NAME i in K:' (its name, its index, its dimension)"
    return None


def _follows_header(source: Source, line: int) -> bool:
    """Whether the code line before ``line`` (blank and comment lines skipped) ends with ':'."""
    for previous in reversed(_lines(source.text)[:line - 1]):
        code = previous.split("#", 1)[0].strip()
        if code:
            return code.endswith(":")
    return False


def _lines(text: str) -> list[str]:
    """The lines of ``text`` as the parser counts them: ended by "\n" only (not by the form
    feeds, lone carriage returns or U+2028 at which ``str.splitlines`` also splits)."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _find_bad_dedent(text: str) -> int:
    """The first line whose indentation returns to a depth no open block has."""
    stack = [0]
    for number, line in enumerate(_lines(text), start=1):
        stripped = line.lstrip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(stripped)
        if depth > stack[-1]:
            stack.append(depth)
            continue
        while depth < stack[-1]:
            stack.pop()
        if depth != stack[-1]:
            return number
    return 1


_CLOSING = {"(": ")", "[": "]"}


def _raise_if_unclosed(source: Source, tok: lark.Token | None) -> None:
    """Report a bracket left open on an earlier line at the bracket, not at the next line.

    Inside brackets a statement continues onto the next line, so an unclosed '(' shows up
    as an unexpected token on some later line (or at the end of the file).
    """
    at_end = tok is None or tok.type in ("$END", "_DEDENT") or tok.line is None
    stop = len(source.text) if at_end or tok.start_pos is None else tok.start_pos
    open_brackets: list[tuple[str, int, int]] = []
    line, col, in_comment = 1, 1, False
    for char in source.text[:stop]:
        if char == "\n":
            line, col, in_comment = line + 1, 1, False
            continue
        if not in_comment:
            if char == "#":
                in_comment = True
            elif char in _CLOSING:
                open_brackets.append((char, line, col))
            elif char in ")]" and open_brackets:
                open_brackets.pop()
        col += 1
    if not open_brackets:
        return
    char, open_line, open_col = open_brackets[-1]
    if not at_end and open_line >= (tok.line or 0):
        return
    raise CemSyntaxError(
        f"'{char}' is never closed", Span(open_line, open_col, open_line, open_col + 1), source,
        hint=f"add the missing '{_CLOSING[char]}'",
    ) from None


def _end_span(source: Source) -> Span:
    """Just after the last statement: where an unexpected end of file is reported."""
    lines = _lines(source.text)
    line = len(lines) or 1
    for number in range(len(lines), 0, -1):
        stripped = lines[number - 1].strip()
        if stripped and not stripped.startswith("#"):
            line = number
            break
    col = len(source.line_text(line).rstrip()) + 1
    return Span(line, col, line, col + 1)


def _next_code_line(source: Source, after: int) -> int:
    lines = _lines(source.text)
    for number in range(after + 1, len(lines) + 1):
        stripped = lines[number - 1].strip()
        if stripped and not stripped.startswith("#"):
            return number
    return after
