"""The AST of .cem source: frozen dataclasses, each carrying its source span.

``cemodel.syntax`` builds it from the parse tree; every later stage reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Source, Span


@dataclass(frozen=True)
class Number:
    value: float
    is_int: bool
    span: Span


@dataclass(frozen=True)
class Name:
    id: str
    span: Span


@dataclass(frozen=True)
class Index:
    """``base[i, j]``: a reference to one element of a plated variable."""

    base: Name
    indices: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class Call:
    """``func(args)``: a built-in function such as ``dot`` or ``eye``."""

    func: Name
    args: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class Reduce:
    """``sum(body for k in K)``: ``body`` summed over a new index ``k`` running over ``K``."""

    func: Name
    body: Expr
    index: Name
    dim: Name
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str  # one of + - * /
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True)
class Neg:
    operand: Expr
    span: Span


@dataclass(frozen=True)
class VectorLit:
    items: tuple[Expr, ...]
    span: Span


Expr = Number | Name | Index | Call | Reduce | BinOp | Neg | VectorLit


@dataclass(frozen=True)
class ModelDecl:
    name: str
    span: Span


@dataclass(frozen=True)
class DimDecl:
    """``dim K = 20`` (overridable default), ``dim V`` (from data) or ``dim N[D]`` (ragged)."""

    name: str
    default: int | None
    ragged_over: Name | None
    span: Span


@dataclass(frozen=True)
class HyperDecl:
    name: str
    value: Expr
    span: Span


@dataclass(frozen=True)
class TypeSpec:
    name: str
    arg: Expr | None
    span: Span


@dataclass(frozen=True)
class DataDecl:
    """``data x[n] : vector(P)``: a covariate given with the data, not modelled."""

    name: str
    indices: tuple[Name, ...]
    type: TypeSpec
    span: Span


@dataclass(frozen=True)
class CollapseDecl:
    """``collapse beta, theta``: the variables KLC-CG integrates out (the set X)."""

    names: tuple[Name, ...]
    span: Span


@dataclass(frozen=True)
class Target:
    name: str
    indices: tuple[Name, ...]
    span: Span


@dataclass(frozen=True)
class Sample:
    """``x[i] ~ Dist(args)``; ``observe`` marks the left side as data."""

    target: Target
    dist: Name
    args: tuple[Expr, ...]
    observed: bool
    span: Span


@dataclass(frozen=True)
class PlateSize:
    dim: Name
    ragged_index: Name | None
    span: Span


@dataclass(frozen=True)
class Plate:
    """``plate docs d in D:`` followed by an indented block."""

    name: str
    index: str
    size: PlateSize | None
    body: tuple[Stmt, ...]
    span: Span


Stmt = ModelDecl | DimDecl | HyperDecl | DataDecl | CollapseDecl | Sample | Plate


@dataclass(frozen=True)
class Program:
    source: Source
    statements: tuple[Stmt, ...]
