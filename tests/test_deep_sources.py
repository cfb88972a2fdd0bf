"""Deep and long sources (issue 19, item 2): a long flat sum compiles; a source nested past
cemodel.limits is refused where it first goes too deep, with the limit; no RecursionError,
SyntaxError or IndentationError escapes the compiler.

Before: 1,000 unary minuses, a sum of 1,001 terms or an index nested 500 deep ended in a
RecursionError in lark's transformer, a hyperparameter summing 201 terms in a SyntaxError
("too many nested parentheses") of the generated module, and 100 nested plates in an
IndentationError."""

from __future__ import annotations

import os
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cemodel.compiler import run_stages
from cemodel.errors import CemSourceError, CemSyntaxError
from cemodel.limits import EXPR_DEEPEST, PLATES_DEEPEST
from cemodel.syntax import CHAIN_LONGEST, BinOp, Number, parse

from .test_fuzz_sources import assert_located

HEAD = "model m\ndim N\nhyper t0 = 0.01\n"


def normal_mean(hyper: str = "0.0", mean: str = "mu") -> str:
    """A Normal mean with known precision; ``hyper`` is m0 (line 4), ``mean`` x's (line 8)."""
    return (HEAD + f"hyper m0 = {hyper}\nmu ~ Normal(m0, t0)\nplate o n in N:\n"
            f"    data f[n] : real\n    observe x[n] ~ Normal({mean}, 1.0)\n")


def nested_plates(depth: int) -> str:
    lines = ["model m", "hyper t0 = 0.01", "mu ~ Normal(0.0, t0)"]
    lines += [f"dim N{i}" for i in range(depth)]
    lines += ["    " * i + f"plate p{i} i{i} in N{i}:" for i in range(depth)]
    indices = ", ".join(f"i{i}" for i in range(depth))
    return "\n".join(lines + ["    " * depth + f"observe x[{indices}] ~ Normal(mu, 1.0)"]) + "\n"


def refused(text: str) -> CemSourceError:
    with pytest.raises(CemSourceError) as info:
        run_stages(text, "fuzz.cem", {})
    assert_located(info.value, text)
    return info.value


def depth(expr) -> int:
    children = (expr.left, expr.right) if isinstance(expr, BinOp) else ()
    return 1 + max(map(depth, children), default=0)


def value(expr) -> float:
    if isinstance(expr, Number):
        return expr.value
    left, right = value(expr.left), value(expr.right)
    return {"+": left + right, "-": left - right, "*": left * right, "/": left / right}[expr.op]


# -- long flat chains ---------------------------------------------------------------------------


@pytest.mark.parametrize("terms", [201, 1001, 5000])
def test_a_long_alternating_sum_is_a_shallow_tree_of_the_same_value(terms):
    """1 - 2 + 3 - 4 ... (``terms`` terms) parses to a tree of logarithmic depth whose value
    is the sum's: the groups after a '-' have their operators inverted."""
    text = " ".join(f"{'+' if i % 2 else '-'} {i}" for i in range(2, terms + 1))
    (hyper,) = [s for s in parse(normal_mean(f"1 {text}")).statements if hasattr(s, "value")
                and s.name == "m0"]
    assert value(hyper.value) == ((terms + 1) // 2 if terms % 2 else -terms // 2)
    assert depth(hyper.value) <= terms.bit_length() + 1


def test_a_long_product_and_quotient_keeps_its_value():
    factors = " ".join(f"{'*' if i % 3 else '/'} 2" for i in range(1, 301))  # 200 '*', 100 '/'
    (hyper,) = [s for s in parse(normal_mean(f"1 {factors}")).statements
                if getattr(s, "name", "") == "m0"]
    assert value(hyper.value) == 2.0 ** 100


def test_a_short_chain_associates_left_as_written():
    """Up to CHAIN_LONGEST terms the tree is ((a + b) - c) + ...: generated code and rounding
    of every model that compiled before are unchanged (the goldens pin the stdlib's)."""
    terms = [f"{i}.5" for i in range(CHAIN_LONGEST)]
    (hyper,) = [s for s in parse(normal_mean(" - ".join(terms))).statements
                if getattr(s, "name", "") == "m0"]
    node, seen = hyper.value, []
    while isinstance(node, BinOp):
        assert isinstance(node.right, Number)
        seen.append(node.right.value)
        node = node.left
    assert [node.value] + seen[::-1] == [i + 0.5 for i in range(CHAIN_LONGEST)]


@pytest.mark.parametrize("terms", [201, 1001])
def test_a_long_sum_compiles_in_a_hyperparameter_and_a_mean(terms):
    """The generated module evaluates the hyperparameter's sum to its value (it read 'too many
    nested parentheses' at 201 terms), and a mean of 1,001 terms compiles (RecursionError)."""
    stages = run_stages(normal_mean(" - ".join(["1"] * terms)), "long.cem", {})
    (line,) = [line for line in stages.generated.text.splitlines() if "hypers, 'm0', " in line]
    expression = re.search(r"'m0', (.*), \(\)\) if share", line).group(1)
    assert eval(expression) == 2 - terms  # noqa: S307 - our own generated arithmetic
    assert run_stages(normal_mean(mean=" + ".join(["mu"] + ["f[n]"] * terms)), "long.cem",
                      {}).generated


# -- too deep: refused where it first goes too deep -------------------------------------------


def test_a_thousand_unary_minuses_are_refused_at_the_limit():
    text = normal_mean("-" * 1000 + "1")
    error = refused(text)
    assert isinstance(error, CemSyntaxError)
    assert f"an expression nests at most {EXPR_DEEPEST} deep" in error.message
    assert (error.span.line, error.span.column) == (4, len("hyper m0 = ") + EXPR_DEEPEST + 1)


def test_an_expression_at_the_limit_compiles():
    assert run_stages(normal_mean("-" * (EXPR_DEEPEST - 1) + "1"), "deep.cem", {}).generated
    refused(normal_mean("-" * EXPR_DEEPEST + "1"))


def test_an_index_nested_500_deep_is_refused():
    index = "n"
    for _ in range(500):
        index = f"g[{index}]"
    error = refused(normal_mean(mean=f"mu + f[{index}]"))
    assert f"at most {EXPR_DEEPEST} deep" in error.message
    assert error.span.line == 8


def test_brackets_nested_500_deep_on_the_right_are_refused():
    error = refused(normal_mean("1 - (" * 500 + "1" + ")" * 500))
    assert f"at most {EXPR_DEEPEST} deep" in error.message
    assert normal_mean("(" * 500 + "1" + ")" * 500)  # brackets alone nest nothing
    assert run_stages(normal_mean("(" * 500 + "1" + ")" * 500), "b.cem", {}).generated


@pytest.mark.parametrize("plates", [PLATES_DEEPEST + 1, 100])
def test_plates_nested_too_deep_are_refused_at_the_first_too_deep(plates):
    error = refused(nested_plates(plates))
    assert error.message.startswith(f"plates nest at most {PLATES_DEEPEST} deep")
    line = 4 + plates + PLATES_DEEPEST  # model, hyper, mu, the dims, then the plates
    assert (error.span.line, error.span.column) == (line, 4 * PLATES_DEEPEST + 1)


def test_plates_at_the_limit_compile():
    assert run_stages(nested_plates(PLATES_DEEPEST), "plates.cem", {}).generated


def test_a_recursion_error_left_is_located_where_the_source_nests_deepest():
    """Were a stage to run out of recursion within the limits (here: a recursion limit far
    below Python's), the error is located, not a traceback."""
    text = normal_mean(mean="-" * 60 + "mu")
    limit = sys.getrecursionlimit()
    here = len(__import__("inspect").stack(0))
    sys.setrecursionlimit(here + 50)  # a 60-deep expression needs ~70 frames
    try:
        with pytest.raises(CemSourceError) as info:
            run_stages(text, "fuzz.cem", {})
    finally:
        sys.setrecursionlimit(limit)
    assert_located(info.value, text)
    assert "nests too deeply" in info.value.message
    assert (info.value.span.line, info.value.span.column) == (8, 26 + 60 + 1)


# -- random deep and long expressions -----------------------------------------------------------

SCALE = int(os.environ.get("CEMODEL_FUZZ_SCALE", "1"))


@st.composite
def deep_expressions(draw, leaf: str) -> str:
    """An expression of long chains, unary minuses, brackets and calls around ``leaf``, up to
    a few hundred deep."""
    text = leaf
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["chain", "neg", "brackets", "right", "call"]))
        count = draw(st.sampled_from([1, 2, 31, 32, 33, 60, 150, 400]))
        if kind == "chain":
            ops = draw(st.lists(st.sampled_from("+-*/"), min_size=count, max_size=count))
            text = text + "".join(f" {op} 2" for op in ops)
        elif kind == "neg":
            text = "-" * count + text
        elif kind == "brackets":
            text = "(" * count + text + ")" * count
        elif kind == "right":
            text = "1 - (" * min(count, 60) + text + ")" * min(count, 60)
        else:
            text = "sqrt(" * min(count, 60) + text + ")" * min(count, 60)
    return text


@settings(max_examples=40 * SCALE, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(deep_expressions("1"), st.booleans())
def test_deep_and_long_expressions_compile_or_are_refused_where_they_go_too_deep(text, mean):
    source = normal_mean(mean=text.replace("1", "mu", 1).replace("2", "f[n]")) if mean else \
        normal_mean(text)
    try:
        run_stages(source, "fuzz.cem", {})
    except CemSourceError as exc:
        assert_located(exc, source)


def test_the_command_line_locates_a_recursion_error_outside_the_stages(tmp_path, monkeypatch,
                                                                      capsys):
    """Past the stages (here: `check` printing its report), the command line still locates
    a RecursionError at the deepest place of the model and exits 2."""
    from cemodel import check
    from cemodel.cli import main

    def report(plan):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(check, "check_report", report)
    path = tmp_path / "deep.cem"
    path.write_text(normal_mean(mean="-" * 60 + "mu"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deep.cem:8:87: error: the model nests too deeply"), err
    assert "Traceback" not in err
