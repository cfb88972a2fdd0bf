"""How deep a source may nest: expressions and plates.

Every stage after the parser walks expressions and plates recursively, and the generated
module nests one Python bracket per operation and one loop per plate. Python limits all three
(about 1,000 frames of recursion, 200 nested brackets, 20 nested loops and 100 indentation
levels), so a source nested past them ended in a RecursionError, a SyntaxError or an
IndentationError from deep inside the compiler. The limits here sit well inside Python's and far
beyond what a model needs, and a source past one is refused where it first goes too deep:

    hyper a = ------...1                   # an expression nests at most 100 deep
    plate p1 i1 in N1: ... plate p9 i9 ...  # plates nest at most 8 deep

Long flat chains are not deep: ``a + b + ... + z`` of any length is built as a balanced tree
once it has more than CHAIN_LONGEST terms (``syntax._Chain``), so its depth grows with the
logarithm of its length.
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import CemSyntaxError, Source, Span
from .nodes import (
    BinOp,
    Call,
    DataDecl,
    Expr,
    HyperDecl,
    Index,
    Neg,
    Plate,
    Program,
    Reduce,
    Sample,
    Stmt,
    VectorLit,
)

__all__ = ["EXPR_DEEPEST", "PLATES_DEEPEST", "check_nesting", "deepest_span"]

# An expression's depth: its operations, calls, indices and vectors nested one in another, the
# names and numbers at the bottom counting one. The generated module brackets each level once
# (and adds a few around), within Python's 200; the compiler recurses a few frames a level.
EXPR_DEEPEST = 100
# Each plate is a loop in the generated kernels, which add up to four loops of their own
# (components, event dimensions, the local step's sweeps); Python compiles at most 20 nested
# loops in one function.
PLATES_DEEPEST = 8


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, BinOp):
        return (expr.left, expr.right)
    if isinstance(expr, Neg):
        return (expr.operand,)
    if isinstance(expr, Index):
        return expr.indices
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Reduce):
        return (expr.body,)
    if isinstance(expr, VectorLit):
        return expr.items
    return ()


def _statements(statements: tuple[Stmt, ...]) -> Iterator[tuple[Stmt, int]]:
    """Every statement with the number of plates around it (0 at the top), without
    recursion."""
    stack = [(stmt, 0) for stmt in reversed(statements)]
    while stack:
        stmt, plates = stack.pop()
        yield stmt, plates
        if isinstance(stmt, Plate):
            stack += [(inner, plates + 1) for inner in reversed(stmt.body)]


def _expressions(stmt: Stmt) -> tuple[Expr, ...]:
    if isinstance(stmt, HyperDecl):
        return (stmt.value,)
    if isinstance(stmt, DataDecl):
        return (stmt.type.arg,) if stmt.type.arg is not None else ()
    if isinstance(stmt, Sample):
        return stmt.args
    return ()


def _levels(expr: Expr) -> Iterator[tuple[Expr, int]]:
    """Every node of ``expr`` with its depth (``expr`` itself at 1), without recursion."""
    stack = [(expr, 1)]
    while stack:
        node, level = stack.pop()
        yield node, level
        stack += [(child, level + 1) for child in reversed(_children(node))]


def check_nesting(program: Program) -> None:
    """Refuse the first plate nested more than PLATES_DEEPEST deep and the first expression
    node more than EXPR_DEEPEST deep, where it is."""
    source = program.source
    for stmt, plates in _statements(program.statements):
        if isinstance(stmt, Plate) and plates >= PLATES_DEEPEST:
            raise CemSyntaxError(
                f"plates nest at most {PLATES_DEEPEST} deep; this one is plate "
                f"{plates + 1} from the top", stmt.span, source,
                hint="each plate is a loop of the generated kernels, and Python compiles "
                     "only so many loops one in another")
        for expr in _expressions(stmt):
            for node, level in _levels(expr):
                if level > EXPR_DEEPEST:
                    raise CemSyntaxError(
                        f"an expression nests at most {EXPR_DEEPEST} deep (operations, calls, "
                        "indices and brackets one inside another)", node.span, source,
                        hint="write the inner part as a hyperparameter of its own, or simplify "
                             "it (a long sum a + b + ... is fine: it is not deep)")


def deepest_span(program: Program) -> Span:
    """Where the source nests deepest (an expression or a plate): where a RecursionError that
    the limits did not prevent is reported."""
    best, where = 0, program.statements[0].span if program.statements else Span(1, 1, 1, 2)
    for stmt, plates in _statements(program.statements):
        if plates > best:
            best, where = plates, stmt.span
        for expr in _expressions(stmt):
            for node, level in _levels(expr):
                if level > best:
                    best, where = level, node.span
    return where


def too_deep(source: Source, span: Span) -> CemSyntaxError:
    """The error for a source that exhausted Python's recursion in the compiler."""
    return CemSyntaxError(
        "the model nests too deeply for cemodel to analyse (it ran out of recursion near "
        "here)", span, source,
        hint="simplify the deepest expression or plate, or split it into hyperparameters")
