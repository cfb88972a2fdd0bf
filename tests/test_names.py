"""A model means the same whatever it calls things (issue 18, finding 6).

The language keeps plates, indices, and the dimensions, hyperparameters, data and variables
in namespaces of their own, so ``plate k n in N:`` beside ``plate components k in K:`` is a
valid model, and the code generator must keep them apart too. It did not: the index entries
of a statistic hold plate names and einsum letters alike, and the plate ``k`` was read as the
categorical's letter ``k`` (``E_z_onehot[t_k, t_k]`` for ``E_z_onehot[i_k, t_k]``), a wrong
posterior without an error. Letters are now spelled ``$k`` inside the compiler.

What is checked, and how:

- Fitted by numba (MF, 50 iterations, seed 0), the ELBO trace and every posterior array equal
  to the original model's to 1e-10:
  ``test_gmm_means_with_a_plate_named_like_an_index_fits_as_the_original``: gmm_means written
  out here as the issue renamed it (80 two-cluster 2-D points, K = 3), and with a plate named
  like a variable and an index like a dimension besides; ``test_renamed_models_fit_as_the_
  originals``: poisson_mixture, mixture_of_multinomials (ragged) and pmf, each with three
  names moved into other namespaces at once.
- Generated only, no numba: ``test_every_renaming_of_every_stdlib_model_generates_the_same_
  module``, every stdlib model and every ordered pair (a, b) of its names, a renamed b (and
  ``test_a_plate_named_like_a_letter_of_the_compiler_...``: five models' plates renamed to
  each of the compiler's letters that is no name of the model). The
  language refuses the model; or ``check`` refuses it at the declaration because the
  generated code uses that name itself (``compiler.check_generated_names``, e.g. a
  hyperparameter named ``dims``, a parameter of ``_prepare``); or its module is the
  original's with a spelled b (``differences``: statement by statement, identifiers mapped
  one to one). A module that is not may still be the module of the model with a fresh name
  in a's place that sorts where b does (``stand_in``): ties between variables are broken by
  name (the order of the global updates), so such a renaming changes the fit as any name in
  that place would. Pairs in one namespace ("declared twice") are tried on the first pair of
  each model only.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np
import pytest

from cemodel.codegen import generate as generate_module
from cemodel.compiler import compile_stages, fitted_model, run_stages
from cemodel.conjugacy import analyse
from cemodel.errors import CemError
from cemodel.plan import make_plan
from cemodel.render import _LETTER_POOL
from cemodel.resolve import build_model
from cemodel.syntax import parse, user_name_tokens

from .conftest import STDLIB

MODELS = sorted(p.stem for p in STDLIB.glob("*.cem"))


# -- renaming a model ----------------------------------------------------------------------
def renamed(text: str, mapping: dict[str, str], tokens: list | None = None) -> str:
    """``text`` with each name of the model (never a keyword, family or function) in
    ``mapping`` spelled as mapped; ``tokens``: ``user_name_tokens(text)`` if known."""
    for name, _, start, end in sorted(tokens or user_name_tokens(text), key=lambda t: -t[2]):
        if name in mapping:
            text = text[:start] + mapping[name] + text[end:]
    return text


def namespaces(text: str) -> dict[str, str]:
    """Each name of the model -> its namespace: 'name' (dimensions, hyperparameters, data and
    variables share one), 'plate', or 'index' (plate and sum indices, scoped)."""
    model = build_model(parse(text))
    space = {name: "index" for name, *_ in user_name_tokens(text)}
    for items in (model.dims, model.hypers, model.data, model.variables):
        space.update({item.name: "name" for item in items})
    space.update({plate.name: "plate" for plate in model.plates})
    return space


def module_of(text: str, filename: str) -> str:
    """The generated module (the stages of ``run_stages``, without its check of names)."""
    return generate_module(make_plan(analyse(fitted_model(text, filename))))


# -- comparing generated modules -----------------------------------------------------------
_STATEMENT = re.compile(r"^(?=[A-Za-z_@])", re.M)  # a top-level statement starts a line
_PROSE = re.compile(r'"""[\s\S]*?"""|#[^\n]*')  # docstrings and comments
_STRING = re.compile(r"[rbf]?'(?:\\.|[^'\\\n])*'" r'|[rbf]?"(?:\\.|[^"\\\n])*"')
_WRAPPED = re.compile(r",(\s*[)\]}])")  # a line wrapped by its length ends its list with ","
_CODE = re.compile(r"\.?[A-Za-z_]\w*|\S")  # identifiers, attributes (".name"), the rest
_WORD = re.compile(r"\w+")
_HASH = re.compile(r"\b[0-9a-f]{16}(?:[0-9a-f]{48})?\b")  # the source's sha256


def _statements(source: str) -> list[str]:
    end = source.index('"""', 3) + 3  # the module docstring, whose lines start at column 0
    return [source[:end]] + [s for s in _STATEMENT.split(source[end:]) if s]


@cache
def _lex(statement: str) -> tuple[list[str], list[str], list[str]]:
    """(code tokens, words of its strings, words of its docstrings and comments)."""
    prose = _WORD.findall(_HASH.sub("", " ".join(_PROSE.findall(statement))))
    code = _PROSE.sub(" ", statement)
    strings = _WORD.findall(_HASH.sub("", " ".join(_STRING.findall(code))))
    return _CODE.findall(_WRAPPED.sub(r"\1", _STRING.sub("''", code))), strings, prose


@cache
def _spelled(before: str, after: str, old: str, new: str) -> bool:
    """``after`` is ``before`` with some of the words ``old`` in it (between underscores or
    other non-alphanumeric characters) spelled ``new``; a known quantity may take a suffix
    ``_2`` too, where its name would be one the module makes of another name."""
    if before == after:
        return True
    numbered = re.fullmatch(r"(\.?\w+)_[2-9]", after)
    if numbered and _spelled(before, numbered[1], old, new):
        return True
    spots = [m.start() for m in re.finditer(rf"(?<![A-Za-z0-9]){re.escape(old)}(?![A-Za-z0-9])",
                                            before)]
    for chosen in range(1, 1 << len(spots)):
        out, last = "", 0
        for i, spot in enumerate(spots):
            if chosen >> i & 1:
                out, last = out + before[last:spot] + new, spot + len(old)
        if out + before[last:] == after:
            return True
    return False


def _kind(token: str) -> str:
    if token[:1] == "." and len(token) > 1:
        return "attribute"
    return "name" if token[:1].isidentifier() else "other"


def _map(pairs: set[tuple[str, str]], one_to_one: bool) -> tuple[str, str] | None:
    """A pair that makes ``pairs`` no map (or, ``one_to_one``, no one-to-one map)."""
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    for a, b in sorted(pairs):
        if forward.setdefault(a, b) != b or (one_to_one and backward.setdefault(b, a) != a):
            return a, b
    return None


def differences(original: str, module: str, old: str, new: str, prose: bool = True) -> str | None:
    """Where ``module`` is not ``original`` with the name ``old`` spelled ``new``, or None.

    Top-level statement by statement (each a Python scope): the code tokens match one to one,
    identifiers (and, apart, attributes) by a one-to-one map (two names of the original
    becoming one is a collision) in which each is itself or spelled ``new`` for ``old``; the
    words of strings by a map of the same kind, but not one to one (a plate and a variable may
    be spelled alike there); with ``prose``, the words of docstrings and comments by a map
    (the same display letter for the same letter), unless a subscript changed its form."""
    before, after = _statements(original), _statements(module)
    if len(before) != len(after):
        return f"{len(before)} top-level statements, then {len(after)}"
    for x, y in zip(before, after, strict=True):
        if x == y:
            continue
        where = x.split("(")[0].split("=")[0].split("\n")[-1 if x.startswith("@") else 0]
        (cx, sx, px), (cy, sy, py) = _lex(x), _lex(y)
        if len(cx) != len(cy):
            return f"{where}: {len(cx)} tokens, then {len(cy)}"
        code = set(zip(cx, cy, strict=True))
        for a, b in code:
            if a != b and (_kind(a) != _kind(b) or _kind(a) == "other"
                           or not _spelled(a, b, old, new)):
                return f"{where}: {a!r} became {b!r}"
        if (clash := _map(code, one_to_one=True)) is not None:
            return f"{where}: two names became {clash[1]!r} (one of them {clash[0]!r})"
        if len(sx) != len(sy):
            return f"{where}: {len(sx)} words of strings, then {len(sy)}"
        words = set(zip(sx, sy, strict=True))
        if (bad := next((p for p in words if not _spelled(*p, old, new)), None)) is not None:
            return f"{where}: string word {bad[0]!r} became {bad[1]!r}"
        if (clash := _map(words, one_to_one=False)) is not None:
            return f"{where}: string word {clash[0]!r} became two words (one {clash[1]!r})"
        if prose and len(px) == len(py):  # (a subscript may now read _{v,points} for _vl)
            if (clash := _map(set(zip(px, py, strict=True)), one_to_one=False)) is not None:
                return f"{where}: in prose {clash[0]!r} became two words (one {clash[1]!r})"
    return None


def stand_in(old: str, new: str, names: list[str], words: set[str]) -> str:
    """A name found nowhere in the model or its module that sorts among the model's other
    names where ``new`` does: ties are broken by name (the order of the global updates, of
    LEARNABLE ...), so renaming can reorder what a fresh name would not."""
    others = [n for n in names if n not in (old, new)]
    below = max((n for n in others if n < new), default="")
    for candidate in [new + s for s in ("Q", "QQ", "_Q", "0Q")] + [below + "zQ", "AQ" + new]:
        if (candidate not in names and candidate not in words and candidate.isidentifier()
                and all((candidate < n) == (new < n) for n in others)):
            return candidate
    raise AssertionError(f"no stand-in for {old} -> {new}")


# -- generation: every renaming of every stdlib model ----------------------------------------
class Renamings:
    """A stdlib model, its module, and the module of the model with one name respelled."""

    def __init__(self, name: str) -> None:
        self.filename = f"{name}.cem"
        self.text = (STDLIB / self.filename).read_text()
        self.tokens = user_name_tokens(self.text)
        self.names = list(dict.fromkeys(n for n, *_ in self.tokens))
        self.space = namespaces(self.text)
        self.original = module_of(self.text, self.filename)
        self.words = set(re.findall(r"\w+", self.original))

    def module(self, mapping: dict[str, str]) -> str:
        return module_of(renamed(self.text, mapping, self.tokens), self.filename)

    def differences(self, a: str, b: str) -> str | None:
        """Where the module of the model with ``a`` spelled ``b`` differs from the original's
        so spelled, or None: the same module; or the module of a fresh name in a's place that
        sorts as b does; or ``check`` refuses b as a name the generated code uses itself.
        Raises ``CemError`` if the language refuses the renaming."""
        module = self.module({a: b})
        prose = not {a, b} & set(_LETTER_POOL)  # display letters avoid the index names
        why = differences(self.original, module, a, b, prose)
        if why is None:
            return None
        fresh = stand_in(a, b, self.names, self.words)
        if differences(self.module({a: fresh}), module, fresh, b, prose) is None:
            return None
        try:
            run_stages(renamed(self.text, {a: b}, self.tokens), self.filename)
        except CemError as error:  # not two identifiers made from two of the model's names
            if "is a name the generated code uses itself" in str(error):
                return None
        return why


@pytest.mark.parametrize("name", MODELS)
def test_every_renaming_of_every_stdlib_model_generates_the_same_module(name):
    model = Renamings(name)
    names, space = model.names, model.space
    same_space = [(a, b) for a in names for b in names
                  if a != b and space[a] == space[b] != "index"]
    for a, b in same_space[:1]:
        with pytest.raises(CemError, match="declared twice"):
            model.module({a: b})
    compared, failures = 0, []
    for a in names:
        for b in names:
            if a == b or (a, b) in same_space:
                continue
            try:
                why = model.differences(a, b)
            except CemError:
                continue  # the language refuses it (an index shadowing a name it reads ...)
            compared += 1
            if why is not None:
                failures.append(f"{a} -> {b}: {why}")
    assert compared > 0
    assert not failures, f"{name}: " + "; ".join(failures)


# the compiler's own letters: a family's (k, i, j, gj), a gate's (g0), a fresh one (i0)
LETTERS = ("k", "i", "j", "gj", "g0", "g1", "i0", "i1")


@pytest.mark.parametrize("name", ["gmm_means", "pmf", "hmm", "gap_nmf", "lda"])
def test_a_plate_named_like_a_letter_of_the_compiler_generates_the_same_module(name):
    """Not only the index of another plate: a plate ``k`` where no index is ``k`` was read
    as the categorical's letter ``k`` too (the letter is the family's)."""
    model = Renamings(name)
    plates = [n for n in model.names if model.space[n] == "plate"]
    failures = [f"{plate} -> {letter}: {why}" for plate in plates for letter in LETTERS
                if letter not in model.space
                and (why := model.differences(plate, letter)) is not None]
    assert not failures, f"{name}: " + "; ".join(failures)


# -- fits --------------------------------------------------------------------------------------
def compile_renamed(name: str, mapping: dict[str, str], settings: dict | None = None):
    """The stdlib model ``name`` with each name of ``mapping`` moved into another namespace."""
    text = (STDLIB / f"{name}.cem").read_text()
    space = namespaces(text)
    assert set(mapping) | set(mapping.values()) <= set(space), "names of the model"
    assert all(space[a] != space[b] for a, b in mapping.items()), "into other namespaces"
    return compile_stages(run_stages(renamed(text, mapping), f"{name}.cem", settings))


def assert_same_fit(original, fit, mapping: dict[str, str]) -> None:
    """Equal ELBO traces and posterior arrays (1e-10), keys read with ``mapping``'s names."""
    def key(k: str) -> str:
        return re.sub(r"\w+", lambda m: mapping.get(m.group(), m.group()), k)

    assert len(fit.elbo) == len(original.elbo)
    np.testing.assert_allclose(fit.elbo, original.elbo, rtol=1e-10, atol=0)
    assert list(fit.posterior) == [key(k) for k in original.posterior]
    for k, value in original.posterior.items():
        np.testing.assert_allclose(fit[key(k)], value, rtol=1e-10, atol=1e-12, err_msg=k)


# gmm_means (stdlib_models/gmm_means.cem), its declarations, then its plates as renamed
_GMM_MEANS = """\
model gmm_means
dim K = 8
dim D
dim N
hyper alpha = 1.0
hyper m0 = zeros(D)
hyper P0 = eye(D) * 0.01
hyper P = eye(D)

pi ~ Dirichlet(alpha, K)
"""
# as the issue renamed it: the plate of the points named like the index of the components
GMM_MEANS_PLATE_K = _GMM_MEANS + """\
plate components k in K:
    mu[k] ~ MultivariateNormal(m0, P0)
plate k n in N:
    z[n] ~ Categorical(pi)
    observe x[n] ~ MultivariateNormal(mu[z[n]], P)
"""
# and the components' plate named like the weights, the points' index like the dimension
GMM_MEANS_SHARED = _GMM_MEANS + """\
plate pi k in K:
    mu[k] ~ MultivariateNormal(m0, P0)
plate k D in N:
    z[D] ~ Categorical(pi)
    observe x[D] ~ MultivariateNormal(mu[z[D]], P)
"""


def _code(text: str) -> list[str]:
    return [line.split("#")[0].rstrip() for line in text.splitlines() if line.split("#")[0].strip()]


@pytest.fixture(scope="module")
def two_clusters():
    rng = np.random.default_rng(0)
    return {"x": np.concatenate([rng.normal([-3.0, 0.0], 1.0, (40, 2)),
                                 rng.normal([3.0, 0.0], 1.0, (40, 2))])}


@pytest.mark.parametrize("text, mapping", [
    (GMM_MEANS_PLATE_K, {"points": "k"}),
    (GMM_MEANS_SHARED, {"components": "pi", "points": "k", "n": "D"}),
], ids=["plate k", "plates pi and k, index D"])
def test_gmm_means_with_a_plate_named_like_an_index_fits_as_the_original(
        compiled, two_clusters, text, mapping):
    assert _code(text) == _code(renamed((STDLIB / "gmm_means.cem").read_text(), mapping))
    original = compiled("gmm_means").fit(two_clusters, dims={"K": 3}, max_iter=50, seed=0)
    module = compile_stages(run_stages(text, "gmm_means.cem"))
    fit = module.fit(two_clusters, dims={"K": 3}, max_iter=50, seed=0)
    assert_same_fit(original, fit, mapping)


def _counts():
    rng = np.random.default_rng(1)
    return {"x": np.concatenate([rng.poisson(2.0, 40), rng.poisson(20.0, 40)])}


def _corpus():
    rng = np.random.default_rng(2)
    topics = rng.dirichlet(np.full(12, 0.3), 3)
    return {"w": np.stack([rng.multinomial(20, topics[c]) for c in rng.integers(0, 3, 30)])}


def _ratings():
    rng = np.random.default_rng(3)
    user, item = rng.integers(0, 6, 60), rng.integers(0, 5, 60)
    u, v = rng.normal(size=(6, 2)), rng.normal(size=(5, 2))
    return {"y": (u[user] * v[item]).sum(1) + rng.normal(0.0, 0.3, 60), "user": user,
            "item": item}


# (settings as other tests compile these models with, so that numba's cache serves them all)
@pytest.mark.parametrize("name, mapping, data, settings, dims", [
    # the data plate named like the index of the components (the categorical's letter), its
    # index like the number of components, the components' plate like the weights
    ("poisson_mixture", {"points": "k", "n": "K", "components": "pi"}, _counts(), {"K": 3},
     None),
    # the ragged plate named like its parent's index, the parent like the index of the
    # classes (the categorical's letter), the tokens' index like the vocabulary
    ("mixture_of_multinomials", {"docs": "k", "tokens": "d", "n": "V"}, _corpus(), {"K": 3},
     None),
    # the plates of the factors named like each other's index (the letters of the
    # multivariate normal), the ratings' index like the rank
    ("pmf", {"users": "j", "items": "i", "n": "K"}, _ratings(), {"K": 3}, {"U": 6, "I": 5}),
], ids=["poisson_mixture", "mixture_of_multinomials", "pmf"])
def test_renamed_models_fit_as_the_originals(compiled, name, mapping, data, settings, dims):
    original = compiled(name, **settings).fit(data, dims=dims, max_iter=50, seed=0)
    fit = compile_renamed(name, mapping, settings).fit(data, dims=dims, max_iter=50, seed=0)
    assert_same_fit(original, fit, mapping)
