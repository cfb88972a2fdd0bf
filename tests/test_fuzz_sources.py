"""Generated and mutated .cem sources: the compiler succeeds or says where the mistake is.

Hypothesis builds sources four ways: the stdlib models with one to four mutations (lines
deleted, duplicated, swapped or re-indented; tokens deleted, duplicated, swapped or replaced;
identifiers renamed; numbers, distribution names, argument lists, indices and ``observe``
changed), plausible models from a grammar-aware generator (dimensions, hyperparameters,
globals, mixtures, nested and ragged plates, covariates, integer group indices), those
plausible models mutated, and token soup. Each goes through the front end and the analysis
(``run_stages``) and, when that succeeds, the code generator (``generate(stages)``,
whose output must be valid Python; numba is not run, it would be too slow here). It must
either succeed or raise a ``CemSourceError`` rendered as ``fuzz.cem:LINE:COL: error: ...``
with that source line and a caret under column COL; any other exception fails.
``derandomize=True`` makes every run check the same sources; ``CEMODEL_FUZZ_SCALE=10``
checks ten times as many (locally).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cemodel.compiler import generate, run_stages
from cemodel.errors import WIDEST_LINE, CemSourceError

STDLIB = sorted((Path(__file__).resolve().parent.parent / "stdlib_models").glob("*.cem"))
STDLIB_TEXTS = [path.read_text() for path in STDLIB]
SCALE = int(os.environ.get("CEMODEL_FUZZ_SCALE", "1"))
# examples per test: 1,100 sources in all (about 20 s on two busy cores)
EXAMPLES = {"stdlib": 400, "plausible": 250, "mutated": 300, "soup": 150}
OUTCOMES: Counter[str] = Counter()


def fuzz_settings(name: str) -> settings:
    return settings(
        max_examples=EXAMPLES[name] * SCALE,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much],
    )


# -- the check -------------------------------------------------------------------------------

_HEAD = re.compile(r"fuzz\.cem:(\d+):(\d+): error: ")


def check_source(text: str) -> str:
    """'ok' or the error class name; fails on anything else."""
    try:
        stages = run_stages(text, "fuzz.cem", {})
    except CemSourceError as exc:
        assert_located(exc, text)
        return type(exc).__name__
    source = generate(stages)
    compile(source, "generated.py", "exec")  # valid Python (numba would take too long here)
    return "ok"


def assert_located(exc: CemSourceError, text: str) -> None:
    rendered = str(exc)
    head = _HEAD.match(rendered)
    assert head, rendered
    line, col = int(head.group(1)), int(head.group(2))
    assert (line, col) == (exc.span.line, exc.span.column)
    lines = (text if text.endswith("\n") else text + "\n").split("\n")[:-1]
    assert 1 <= line <= max(len(lines), 1), rendered
    assert col >= 1, rendered
    assert "Traceback" not in rendered
    shown = rendered.split("\n")
    source_line = lines[line - 1].removesuffix("\r") if lines else ""
    assert col <= len(source_line) + 1, rendered
    if len(source_line) > WIDEST_LINE:  # a window of the line: the caret under column col
        window, caret = shown[1][4:], len(shown[2]) - len(shown[2].lstrip()) - 4
        assert window.strip(".") in source_line and shown[2].strip("^ ") == "", rendered
        assert window[caret:caret + 1] == source_line[col - 1:col], rendered
        return
    assert shown[1] == "    " + source_line, rendered
    pad = "".join(c if c == "\t" else " " for c in source_line[:col - 1])  # tabs kept
    assert re.fullmatch(re.escape("    " + pad) + r"\^+", shown[2]), rendered


def record(kind: str, outcome: str) -> None:
    OUTCOMES[kind] += 1
    OUTCOMES[f"{kind}:{outcome}"] += 1


# -- mutations -------------------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\S")
DISTRIBUTIONS = ["Dirichlet", "Categorical", "Beta", "Bernoulli", "Binomial", "Gamma",
                 "Poisson", "Exponential", "Normal", "MultivariateNormal", "MVN", "Wishart"]
KEYWORDS = ["model", "dim", "hyper", "data", "plate", "in", "observe", "collapse"]
NAMES = ["K", "N", "D", "V", "P", "n", "k", "d", "z", "pi", "x", "w", "mu", "eye", "zeros",
         "ones", "full", "dot", "exp", "log", "real", "int", "vector", "count", "_", "Q"]
NUMBERS = ["0", "1", "-1", "2.5", ".5", "1e-8", "1e8", "1e308", "1e400", "1e-400",
           "99999999999999999999", "00", "3", "1.", "2e"]
PUNCTUATION = ["~", "=", ":", "[", "]", "(", ")", ",", "+", "-", "*", "/", "#", "\\", ";",
               "{", "}", ".", "@", "!"]
ODD = ["\t", "\r", "\r\n", "\x0c", "\x00", "α", "\u2028", "\ufeff", "\n    ", "\n"]
VOCABULARY = KEYWORDS + NAMES + NUMBERS + PUNCTUATION + DISTRIBUTIONS + ODD
INDENTS = ["", " ", "  ", "    ", "     ", "        ", "\t", "    \t", "\t    "]
INDICES = ["", "n", "k", "d", "j", "n, n", "z[n]", "k, n", "0", "n + 1", "z[n], n",
           "z[d, n]", "d, n", "q", "n,", "[n]", "K"]
EXTRA_ARGS = ["1", "K", "n", "z[n]", "eye(D)", "[1, 2]", "-1", "x", "zeros(D)"]


def _tokens(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _pick(draw, items):
    return items[draw(st.integers(0, len(items) - 1))]


def _mutate_lines(text: str, draw, op: str) -> str:
    lines = text.split("\n")
    i = draw(st.integers(0, len(lines) - 1))
    if op == "delete-line":
        del lines[i]
    elif op == "duplicate-line":
        lines.insert(draw(st.integers(0, len(lines))), lines[i])
    elif op == "swap-lines":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    else:  # reindent
        lines[i] = draw(st.sampled_from(INDENTS)) + lines[i].lstrip(" \t")
    return "\n".join(lines)


def _mutate_tokens(text: str, draw, op: str) -> str:
    spans = _tokens(text)
    if not spans:
        return text + draw(st.sampled_from(VOCABULARY))
    start, end = _pick(draw, spans)
    if op == "delete-token":
        return text[:start] + text[end:]
    if op == "duplicate-token":
        return text[:start] + text[start:end] + " " + text[start:end] + text[end:]
    if op == "replace-token":
        return text[:start] + draw(st.sampled_from(VOCABULARY)) + text[end:]
    if op == "insert-token":
        return text[:start] + draw(st.sampled_from(VOCABULARY)) + " " + text[start:]
    other_start, other_end = _pick(draw, spans)  # swap two tokens
    if other_start < start:
        start, end, other_start, other_end = other_start, other_end, start, end
    if other_start < end:
        return text
    return (text[:start] + text[other_start:other_end] + text[end:other_start]
            + text[start:end] + text[other_end:])


def _replace_match(text: str, draw, pattern: str, new) -> str:
    matches = list(re.finditer(pattern, text))
    if not matches:
        return text
    m = _pick(draw, matches)
    return text[:m.start()] + new(m) + text[m.end():]


def _mutate_semantics(text: str, draw, op: str) -> str:
    if op == "rename":
        names = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", text)))
        if not names:
            return text
        old, new = _pick(draw, names), draw(st.sampled_from(NAMES + KEYWORDS + DISTRIBUTIONS))
        if draw(st.booleans()):  # every occurrence: a consistent rename, or a clash
            return re.sub(rf"\b{re.escape(old)}\b", new, text)
        return _replace_match(text, draw, rf"\b{re.escape(old)}\b", lambda m: new)
    if op == "number":
        return _replace_match(text, draw, r"(?<![\w.])(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?",
                              lambda m: draw(st.sampled_from(NUMBERS)))
    if op == "distribution":
        return _replace_match(
            text, draw, "|".join(sorted(DISTRIBUTIONS, key=len, reverse=True)),
            lambda m: draw(st.sampled_from(DISTRIBUTIONS + ["Dirichlett", "normal", "Gama",
                                                            "Beta2"])))
    if op == "arguments":
        def change(m: re.Match) -> str:
            args = m.group(1).split(",") if m.group(1).strip() else []
            if args and draw(st.booleans()):
                del args[draw(st.integers(0, len(args) - 1))]
            else:
                args.insert(draw(st.integers(0, len(args))), " " + draw(
                    st.sampled_from(EXTRA_ARGS)))
            return "(" + ",".join(args).strip() + ")"
        return _replace_match(text, draw, r"\(([^()\n]*)\)", change)
    if op == "index":
        return _replace_match(text, draw, r"\[([^\[\]\n]*)\]",
                              lambda m: "[" + draw(st.sampled_from(INDICES)) + "]")
    # toggle observe
    lines = text.split("\n")
    i = draw(st.integers(0, len(lines) - 1))
    if "observe " in lines[i]:
        lines[i] = lines[i].replace("observe ", "", 1)
    elif "~" in lines[i]:
        lines[i] = re.sub(r"^(\s*)", r"\1observe ", lines[i], count=1)
    return "\n".join(lines)


LINE_OPS = ["delete-line", "duplicate-line", "swap-lines", "reindent"]
TOKEN_OPS = ["delete-token", "duplicate-token", "replace-token", "insert-token", "swap-tokens"]
SEMANTIC_OPS = ["rename", "number", "distribution", "arguments", "index", "observe"]


@st.composite
def mutated(draw, base: st.SearchStrategy[str], max_mutations: int = 4) -> str:
    text = draw(base)
    for _ in range(draw(st.integers(1, max_mutations))):
        op = draw(st.sampled_from(LINE_OPS + TOKEN_OPS + SEMANTIC_OPS * 2))
        if op in LINE_OPS:
            text = _mutate_lines(text, draw, op)
        elif op in TOKEN_OPS:
            text = _mutate_tokens(text, draw, op)
        else:
            text = _mutate_semantics(text, draw, op)
    return text


def _without_comments(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))


stdlib_sources = st.sampled_from(STDLIB_TEXTS).flatmap(
    lambda text: st.sampled_from([text, _without_comments(text)]))

# -- a grammar-aware generator of plausible models -------------------------------------------

# the prior of a global for each role, and children that are conjugate to it
PRIORS = {
    "prob": ["Beta({a}, {b})"],
    "rate": ["Gamma({a}, {b})", "Gamma({a}, {b} * 2)"],
    "mean": ["Normal({m}, {a})", "Normal(-{m}, {a} / 2)"],
    "simplex": ["Dirichlet({a}, C)", "Dirichlet(v3)"],
    "vmean": ["MultivariateNormal(m0, P0)", "MVN(zeros(D), eye(D) * {a})"],
    "prec": ["Wishart(nu0, W0)", "Wishart(D + {a}, eye(D))"],
}
CHILDREN = {
    "prob": ["Bernoulli({p})", "Binomial(5, {p})", "Binomial(c[n], {p})"],
    "rate": ["Poisson({p})", "Exponential({p})", "Normal({m}, {p})", "Gamma({a}, {p})",
             "Poisson({p} * {a})"],
    "mean": ["Normal({p}, {a})", "Normal({p} + {m}, {a})", "Normal({a} * {p}, {a})",
             "Normal(-{p}, {a})", "Normal({p} - f[n], {a})"],
    "simplex": ["Categorical({p})"],
    "vmean": ["MultivariateNormal({p}, eye(D))", "Normal(dot(u[n], {p}), {a})",
              "MVN({p} + m0, P0)"],
    "prec": ["MultivariateNormal(zeros(D), {p})", "MVN(m0, {p})"],
}
SCALARS = ["1", "1.0", "0.5", "2", "1e-8", "1e8", "0.01", "3", "h0", "h1"]


@st.composite
def plausible_models(draw) -> str:
    lines = [f"model {draw(st.sampled_from(['gen', 'm', 'a_b', 'Model2']))}"]
    lines.append(f"dim K = {draw(st.sampled_from([1, 2, 3, 20]))}")
    lines.append(draw(st.sampled_from(["dim D = 2", "dim D = 1", "dim D = 3", "dim D"])))
    lines += ["dim N", "dim C = 4", "dim G"]
    ragged = draw(st.booleans()) and draw(st.booleans())
    if ragged:
        lines += ["dim S", "dim M[S]"]
    lines += [f"hyper h0 = {draw(st.sampled_from(['1.0', '0.5', '2', '1e-3']))}",
              f"hyper h1 = {draw(st.sampled_from(['h0 * 2', 'h0 + 1', '3', 'D + 1']))}",
              "hyper m0 = zeros(D)", "hyper P0 = eye(D) * 0.01", "hyper nu0 = D + 2",
              "hyper W0 = eye(D)", "hyper v3 = [1, 2, 3, 4]"]
    scalar = st.sampled_from(SCALARS)
    roles = draw(st.lists(st.sampled_from(sorted(PRIORS)), min_size=1, max_size=4))
    mixture = draw(st.booleans())
    grouped = draw(st.integers(0, 3)) == 0
    top, components, groups, points = [], [], [], ["plate points n in N:"]
    refs = []
    for i, role in enumerate(roles):
        prior = draw(st.sampled_from(PRIORS[role])).format(a=draw(scalar), b=draw(scalar),
                                                            m=draw(scalar))
        where = draw(st.sampled_from(["top", "components", "groups"]))
        if where == "components" and mixture and role != "simplex":
            components.append(f"    g{i}[k] ~ {prior}")
            refs.append((role, f"g{i}[z[n]]"))
        elif where == "groups" and grouped:
            groups.append(f"    g{i}[j] ~ {prior}")
            refs.append((role, f"g{i}[grp[n]]"))
        else:
            top.append(f"g{i} ~ {prior}")
            refs.append((role, f"g{i}"))
    if mixture:
        top.append(f"pi ~ Dirichlet({draw(scalar)}, K)")
        points.append("    z[n] ~ Categorical(pi)")
    if grouped:
        points.append("    data grp[n] : int")
    points += ["    data u[n] : vector(D)", "    data c[n] : count", "    data f[n] : real"]
    for j, (role, ref) in enumerate(refs):
        if draw(st.integers(0, 9)) == 0:  # a child of another role: usually not conjugate
            role = draw(st.sampled_from(sorted(CHILDREN)))
        child = draw(st.sampled_from(CHILDREN[role])).format(p=ref, a=draw(scalar),
                                                             m=draw(scalar))
        points.append(f"    observe y{j}[n] ~ {child}")
    if draw(st.booleans()) and "prob" in roles:  # features of each component (nested plates)
        components += ["    plate features q in P:", "        b[k, q] ~ Beta(1, 1)"]
        points += ["    plate dims q2 in P:", "        observe xb[n, q2] ~ Bernoulli(b[z[n], q2])"]
        lines.append("dim P")
    body = list(top)
    if components:
        body += ["plate components k in K:", *components]
    if groups:
        body += ["plate groups j in G:", *groups]
    if ragged:
        body += ["plate topics t in K:", f"    tw[t] ~ Dirichlet({draw(scalar)}, C)",
                 "plate docs s in S:", f"    th[s] ~ Dirichlet({draw(scalar)}, K)",
                 "    plate toks e in M[s]:", "        zz[s, e] ~ Categorical(th[s])",
                 "        observe o[s, e] ~ Categorical(tw[zz[s, e]])"]
    if draw(st.booleans()):
        body += points
    else:
        body = points + body  # the data plate first: order does not matter
    comment = draw(st.sampled_from(["", "# a generated model", "   # indented comment"]))
    return "\n".join([comment, *lines, *body]) + draw(st.sampled_from(["\n", "", "\n\n"]))


soup = st.lists(st.tuples(st.sampled_from(VOCABULARY),
                          st.sampled_from([" ", " ", "\n", "\n    ", "", "\n\t", "  "])),
                min_size=0, max_size=40).map(lambda parts: "".join(a + b for a, b in parts))


# -- the tests -------------------------------------------------------------------------------


@fuzz_settings("stdlib")
@given(mutated(stdlib_sources))
def test_mutated_stdlib_models(text):
    record("stdlib", check_source(text))


@fuzz_settings("plausible")
@given(plausible_models())
def test_plausible_models(text):
    record("plausible", check_source(text))


@fuzz_settings("mutated")
@given(mutated(plausible_models(), max_mutations=3))
def test_mutated_plausible_models(text):
    record("mutated", check_source(text))


@fuzz_settings("soup")
@given(soup)
def test_token_soup(text):
    record("soup", check_source(text))


def test_enough_sources_were_checked():
    """Run after the fuzz tests (file order): ≥ 1,000 sources, and the generator of plausible
    models mostly produces models that compile, so the code generator is exercised."""
    if not OUTCOMES:
        pytest.skip("the fuzz tests of this file did not run in this session")
    missing = [kind for kind in EXAMPLES if not OUTCOMES[kind]]
    if missing:  # pytest-xdist gave them to another worker, whose counts this one cannot see
        pytest.skip(f"the {', '.join(missing)} fuzz tests ran in another process")
    total = sum(OUTCOMES[kind] for kind in EXAMPLES)
    assert total >= 1000, OUTCOMES
    assert OUTCOMES["plausible:ok"] >= OUTCOMES["plausible"] // 2, OUTCOMES
    assert OUTCOMES["stdlib:ok"] > 0 and OUTCOMES["mutated:ok"] > 0, OUTCOMES
    print(f"sources checked: {dict(sorted(OUTCOMES.items()))}")


# -- minimal reproducers ---------------------------------------------------------------------

BROADCAST_MEAN = """model bc
dim D = 3
dim N
hyper m0 = full(D, 1.5)
hyper P = eye(D) * 4
mu ~ Normal(0.5, 2)
plate points n in N:
    observe y[n] ~ MultivariateNormal(mu + m0, P)
"""

# found by this suite and fixed in the front end: (id, source, outcome of check_source)
REPRODUCERS = [
    # 1e400 became inf and crashed the analysis (OverflowError in render_expr)
    ("number-overflows-to-inf", "model m\ndim N\nhyper a = 1e400\np ~ Beta(a, 1)\n"
     "plate t n in N:\n    observe x[n] ~ Bernoulli(p)\n", "CemSyntaxError"),
    # a scalar latent added to a vector crashed the expansion (zip of letters and shape)
    ("scalar-latent-plus-vector", BROADCAST_MEAN, "ok"),
    ("vector-minus-scalar-latent", BROADCAST_MEAN.replace("mu + m0", "m0 - mu"), "ok"),
    # form feed, lone CR and U+2028 are not line ends for the parser: the caret line showed
    # the wrong source line
    ("form-feed-in-comment", "# a\x0c comment\nmodel m\ndim N\np ~ Beta(1)\n"
     "plate t n in N:\n    observe x[n] ~ Bernoulli(p)\n", "CemModelError"),
    ("line-separator-in-comment", "# a\u2028 comment\nmodel m\ndim N\np ~ Beta(1, 1\n",
     "CemSyntaxError"),
    ("carriage-return-line-ends", "model m\r\ndim N\r\np ~ Beta(1, 1)\r\n"
     "plate t n in N:\r\n    observe x[n] ~ Bernoulli(q)\r\n", "CemModelError"),
]


@pytest.mark.parametrize(("text", "outcome"), [pytest.param(*case[1:], id=case[0])
                                               for case in REPRODUCERS])
def test_reproducers(text, outcome):
    assert check_source(text) == outcome


def test_scalar_latent_plus_vector_is_exact(compiled):
    """mu + m0 in an MVN mean: the posterior and ELBO of N·D scalar observations."""
    from cemodel.compiler import compile_stages

    module = compile_stages(run_stages(BROADCAST_MEAN, "bc.cem", {}))
    y = np.random.default_rng(0).normal(size=(7, 3)) + 1.8
    result = module.fit({"y": y}, max_iter=50)
    scalar = compiled("normal_normal").fit({"x": (y - 1.5).ravel()}, max_iter=50,
                                           hypers={"m0": 0.5, "t0": 2.0, "tau": 4.0})
    precision = 2.0 + 4.0 * y.size
    assert result["mu.precision"] == pytest.approx(precision, rel=1e-12)
    assert result["mu.mean"] == pytest.approx((1.0 + 4.0 * (y - 1.5).sum()) / precision,
                                              rel=1e-12)
    assert result.elbo[-1] == pytest.approx(scalar.elbo[-1], rel=1e-12)


# Found by this suite in the code generator (now fixed): fitted, with exact answers.
CATEGORICAL_WITHOUT_GLOBALS = (
    "model m\ndim N\ndim K = 3\nhyper w = [1, 1, 1]\nplate p j in N:\n"
    "    pi[j] ~ Dirichlet(w)\n    z[j] ~ Categorical(pi[j])\n"
    "    observe y[j] ~ Categorical(pi[j])\n")
INDEX_WITHOUT_DATA_PLATE = (
    "model h\ndim G\ndim N\nplate groups g in G:\n    theta[g] ~ Normal(0, 1)\n"
    "plate observations n in N:\n    data group[n] : int\n"
    "    observe y[n] ~ Normal(theta[group[n]], 1)\nobserve q ~ Normal(0, 1)\n")


def test_categorical_local_without_globals():
    """pi[j] ~ Dirichlet(w), z[j] ~ Cat(pi[j]), y[j] ~ Cat(pi[j]): every item is its own
    model, and the MF fixed point matches a per-item iteration written out by hand."""
    from scipy.special import digamma, logsumexp

    from cemodel.compiler import compile_stages

    module = compile_stages(run_stages(CATEGORICAL_WITHOUT_GLOBALS, "cat.cem", {}))
    y = np.array([0, 2, 1, 1, 0, 2, 2])
    for start in ("seeds", "random"):
        result = module.fit({"y": y}, max_iter=200, tol=1e-12, start=start,
                            max_local_iter=500, local_tol=1e-13)
        assert result.converged
        alpha = np.ones((y.size, 3))
        for _ in range(200):  # q(pi) = Dir(w + q(z) + e_y); q(z) ∝ exp E[log pi]
            e_log = digamma(alpha) - digamma(alpha.sum(1, keepdims=True))
            qz = np.exp(e_log - logsumexp(e_log, axis=1, keepdims=True))
            alpha = 1.0 + qz + np.eye(3)[y]
        np.testing.assert_allclose(result["pi.alpha"], alpha, rtol=1e-8)


def test_integer_index_without_data_plate():
    """theta[group[n]] where no plate is the data plate (a top-level observation): the
    exact Normal posterior per group."""
    from cemodel.compiler import compile_stages

    module = compile_stages(run_stages(INDEX_WITHOUT_DATA_PLATE, "idx.cem", {}))
    rng = np.random.default_rng(0)
    group = rng.integers(0, 4, 50)
    y = np.array([-2.0, 0.0, 1.0, 3.0])[group] + rng.normal(size=50)
    result = module.fit({"y": y, "group": group, "q": 0.3}, dims={"G": 4}, max_iter=20)
    counts = np.bincount(group, minlength=4)
    np.testing.assert_allclose(result["theta.precision"], 1.0 + counts, rtol=1e-12)
    np.testing.assert_allclose(result["theta.mean"],
                               np.bincount(group, y, 4) / (1.0 + counts), rtol=1e-12)


def test_literal_sizes_and_size_dependent_defaults():
    """``eye(2)`` with a literal size fits; a default that divides by zero for the sizes given
    (``1 / (D - 2)`` with D = 2) is refused by name, and fits once the value is given; a shape
    that α − 1 cannot hold is refused where the model file sets it."""
    from cemodel.compiler import compile_stages
    from cemodel.errors import CemDataError, CemModelError

    mvn = ("model a\ndim N\nhyper P = eye(2)\nhyper m0 = zeros(2)\n"
           "mu ~ MultivariateNormal(m0, P)\n"
           "plate obs n in N:\n    observe x[n] ~ MultivariateNormal(mu, P)\n")
    x = np.random.default_rng(1).normal(size=(6, 2))
    result = compile_stages(run_stages(mvn, "a.cem", {})).fit({"x": x}, max_iter=5)
    np.testing.assert_allclose(result["mu.mean"], x.sum(0) / 7.0, rtol=1e-12)

    ratio = ("model b\ndim N\ndim D\nhyper s = 1 / (D - 2)\np ~ Gamma(1, s)\n"
             "plate obs n in N:\n    observe x[n] ~ Poisson(p)\n")
    module = compile_stages(run_stages(ratio, "b.cem", {}))
    with pytest.raises(CemDataError, match="hyperparameter 's': its default from the model "
                       "file divides by zero"):
        module.fit({"x": [1, 2, 3]}, dims={"D": 2})
    fitted = module.fit({"x": [1, 2, 3]}, dims={"D": 2}, hypers={"s": 1.0})
    assert fitted["p.shape"] == pytest.approx(7.0)
    assert module.fit({"x": [1, 2, 3]}, dims={"D": 4})["p.rate"] == pytest.approx(3.5)

    tiny = ("model c\ndim N\ndim K = 3\nhyper a = 1e-20\npi ~ Dirichlet(a, K)\n"
            "plate obs n in N:\n    observe x[n] ~ Categorical(pi)\n")
    with pytest.raises(CemModelError, match="at least 2.22e-16") as info:
        run_stages(tiny, "c.cem", {})
    assert info.value.span.line == 5
