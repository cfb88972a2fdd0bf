"""lower(plan) -> KernelPlan: every decision of the kernel emitters, made before printing.

One test per field on the stdlib model that exercises it (no numba compile: lowering and
code generation are plain Python)."""

import dataclasses
from functools import cache

import pytest

from cemodel.codegen.calls import KernelCalls
from cemodel.codegen.context import emit_context
from cemodel.codegen.kernels import emit_kernels
from cemodel.codegen.lowering import KernelPlan, lower
from cemodel.codegen.prepare import STATE_KERNELS
from cemodel.compiler import read_source, run_stages
from cemodel.terms import Stat

from .conftest import STDLIB

MODELS = sorted(p.stem for p in STDLIB.glob("*.cem"))


@cache
def plan_of(name: str):
    text, filename = read_source(STDLIB / f"{name}.cem")
    return run_stages(text, filename).plan


@cache
def kplan(name: str) -> KernelPlan:
    return lower(plan_of(name))


@cache
def calls(name: str) -> KernelCalls:
    """The kernels as printed, by name with their parameters."""
    return KernelCalls.of(emit_kernels(emit_context(plan_of(name), kplan(name))))


# -- knowns -------------------------------------------------------------------------------
def test_knowns_name_each_known_once_with_its_numpy_expression():
    k = kplan("lda")
    assert k.knowns["onehot(w[docs, tokens])"] == ("w", "w")
    assert k.knowns["lgamma_sum(repeat(eta, V))"] == ("lgamma_sum_eta", "rt.gammaln(n_V * eta)")
    assert k.knowns["value(repeat(alpha, K))"] == ("alpha", "alpha")
    assert list(k.known_slots) == list(k.knowns)
    assert k.known_slots["onehot(w[docs, tokens])"].fn == "onehot"
    names = [name for name, _ in k.knowns.values()]
    assert len(names) == len(set(names))


def test_log_data_names_are_the_covariates_under_a_log():
    k = kplan("hierarchical_poisson")
    assert k.log_data_names == ("e",)
    assert k.knowns["log(e[counts])"] == ("log_e", "rt.log_data(e, \"data 'e'\")")
    assert kplan("lda").log_data_names == ()


# -- the product form ------------------------------------------------------------------------
def test_scratch_locals_are_those_not_kept():
    assert kplan("lda").scratch == frozenset({"z"})
    assert kplan("gmm").scratch == frozenset()


def test_product_form_locals_and_their_log_messages():
    k = kplan("lda")
    assert k.product_form == ("z",)
    assert [m.stat.var for m in k.product["z"]] == ["theta", "beta"]
    assert all(m.stat.stat == "log" for m in k.product["z"])
    assert kplan("gap_nmf").product_form == ("Y_split",)
    assert len(kplan("gap_nmf").product["Y_split"]) == 3
    assert kplan("gmm").product_form == () and not kplan("gmm").product


def test_implicit_sums_of_lda_z():
    k = kplan("lda")
    assert k.implicit == ("z",)
    plan = k.implicit_plans["z"]
    assert [m.stat.var for m in plan.constant] == ["theta"]
    assert [m.stat.var for m in plan.rows] == ["beta"]
    assert [c[0] for c in plan.consumers] == ["theta"]
    consumer, _, _, monomial = plan.consumers[0]
    assert k.implicit_source(consumer, monomial) == "z"
    assert kplan("gap_nmf").implicit == ()


def test_gathered_rows_of_lda_z():
    gathered = kplan("lda").gathered["z"]
    assert gathered.plate == "tokens"
    assert gathered.stat.var == "beta" and gathered.known.fn == "onehot"
    assert not kplan("gap_nmf").gathered


def test_exp_and_log_arrays_and_their_layouts():
    k = kplan("lda")
    assert sorted(k.exp_arrays.values()) == [("XT_beta_log", True), ("X_theta_log", False)]
    assert list(k.log_arrays.values()) == [("ET_beta_log", True)]
    assert k.exp_needed == {"theta": {False}, "beta": {True}}
    assert all(isinstance(s, Stat) for s in k.exp_arrays)
    assert kplan("gap_nmf").exp_needed == {"theta": {False}, "W": {False}, "H": {False}}


def test_exp_only_kept_dirichlet_locals():
    assert kplan("lda").exp_only == ("theta",)
    assert kplan("gap_nmf").exp_only == ()


# -- item-independent messages -------------------------------------------------------------
def test_hoisted_messages():
    assert kplan("gap_nmf").hoisted == {("H", 4): "pre_H_4"}
    # a message summed over the entries x[n, d] that may be missing (times present(x)[n, d])
    # differs per item: not hoisted; a Gaussian mixture's tr(E[Λ_k] E[μ_k μ_kᵀ]) is partial
    # (below), times present(x)[n]
    assert not kplan("factor_analysis").hoisted
    assert not kplan("gmm").hoisted
    assert not kplan("lda").hoisted


def test_partial_messages():
    partial = kplan("gmm").partial
    assert list(partial) == [("z", 3), ("z", 4)]
    pre, glob, data, key = partial[("z", 3)]
    assert pre == "pre_z_3"
    assert [g.var for g in glob] == ["Lambda", "mu"]  # E[Λ_k] E[μ_k], summed over j
    assert [d.fn for d in data] == ["value", "present"]  # x_i, 1 unless x[n] is missing
    assert key == ("$g0", "$i")  # the target's letter first, then the data's (letters: $)
    pre, glob, data, key = partial[("z", 4)]  # tr(E[Λ_k] E[μ_k μ_kᵀ]) · present(x)[n]
    assert ([g.var for g in glob], [d.fn for d in data], key) == (
        ["Lambda", "mu"], ["present"], ("$g0",))
    assert not kplan("lda").partial


# -- the local step ------------------------------------------------------------------------
def test_needs_start_locals_read_before_their_update():
    assert kplan("lda").needs_start == ("theta",)
    assert kplan("gap_nmf").needs_start == ("H",)
    assert kplan("gmm").needs_start == ()


def test_fast_guard():
    assert kplan("lda").fast_guard == "z"
    assert kplan("gap_nmf").fast_guard is None


def test_kept_and_guard_arrays():
    lda = ("lam_theta_log", "E_theta_log", "X_theta_log")
    assert kplan("lda").kept_arrays == lda and kplan("lda").guard_arrays == lda
    assert kplan("gmm").kept_arrays == ("lam_z_onehot", "E_z_onehot")
    assert kplan("gmm").guard_arrays == ()  # no sweeps, no restart to guard


def test_thread_private_arrays():
    assert kplan("lda").thread_private == ("lam_z_onehot", "E_z_onehot", "H_z", "logZ_z",
                                           "A_z", "S_z", "B_z", "s_z")
    assert kplan("hmm").thread_private[-1] == "H_z"
    assert kplan("gmm").thread_private == ()


# -- the start -----------------------------------------------------------------------------
def test_hyper_domains():
    assert kplan("gmm").hyper_domains == {"alpha": "shape", "P0": "spd", "nu0": "positive",
                                          "W0": "spd"}
    known = ("model known\ndim K = 3\ndim N\nhyper p = full(K, 0.5)\nhyper q = 0.5\n"
             "hyper r = 2.0\nplate comps k in K:\n    mu[k] ~ Normal(0.0, r)\n"
             "plate items n in N:\n    z[n] ~ Categorical(p)\n"
             "    observe x[n] ~ Normal(mu[z[n]], 1.0)\n    observe b[n] ~ Bernoulli(q)\n")
    assert lower(run_stages(known, "known.cem").plan).hyper_domains == {
        "p": "simplex", "q": "unit", "r": "positive"}


def test_seeded_chains():
    assert kplan("hmm").seeded_chains == ("z",)
    assert kplan("lda").seeded_chains == ()


def test_gamma_products():
    assert kplan("gap_nmf").gamma_products == ("W", "theta")
    assert kplan("pmf").gamma_products == ()


@pytest.mark.parametrize("name, start", [
    ("beta_bernoulli", "prior"), ("lda", "random"), ("gmm", "seeds"),
    ("factor_analysis", "random"), ("gap_nmf", "random"), ("hmm", "seeds"),
])
def test_default_start(name, start):
    assert kplan(name).default_start == start
    assert kplan(name).default_start_reason


@pytest.mark.parametrize("name", MODELS)
def test_decisions_agree_with_the_kernels(name):
    """Warm start applies exactly where the printed local step can continue from the kept
    locals; every array a kernel reads from the state has a role but the local step's
    scratch, and no local step reads a global's natural parameters (executors send only
    the globals' expectations)."""
    k, c = kplan(name), calls(name)
    assert k.warm_start_applies == ("warm" in c.params.get("local_step", ()))
    read = c.state_names(("local_step",))
    assert not [a for a in read if k.roles.get(a) == "global"], name
    state = c.state_names((*STATE_KERNELS, *[f"update_{n}" for n in plan_of(name).globals]))
    for array in state:
        if k.roles.get(array) is None:
            assert array.startswith(("pre_", "H_", "logZ_", "A_", "S_", "B_", "s_")), array


def test_roles_of_lda():
    roles = kplan("lda").roles
    assert roles["lam_beta_log"] == "global" and roles["XT_beta_log"] == "global_exp"
    assert roles["lam_theta_log"] == "kept_local" and roles["E_z_onehot"] == "local"
    assert roles["acc_w_0"] == "statistic" and roles["acc_w_0_threads"] == "thread"
    assert roles["w"] == roles["tokens_ptr"] == "data" and roles["alpha"] == "hyper"
    assert roles["lgamma_alpha"] == "known" and roles["item_weight"] == "item"


def test_ssvi_and_warm_start():
    assert kplan("lda").ssvi_applies and kplan("lda").warm_start_applies
    assert kplan("gmm").ssvi_applies  # MVN and Wishart globals: V by runtime/ssvi_matrix
    no_global = ("model groups\ndim G\nplate groups g in G:\n    data n[g] : int\n"
                 "    p[g] ~ Beta(1.0, 1.0)\n    observe y[g] ~ Binomial(n[g], p[g])\n")
    assert not lower(run_stages(no_global, "groups.cem").plan).ssvi_applies  # nothing global
    assert not kplan("beta_bernoulli").warm_start_applies


# -- the KernelPlan itself -------------------------------------------------------------------
def test_lower_is_pure_and_its_result_immutable():
    k = kplan("lda")
    assert lower(plan_of("lda")) == k
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.implicit = ()  # type: ignore[misc]
    for field in dataclasses.fields(k):
        value = getattr(k, field.name)
        assert not isinstance(value, (list, dict, set)), field.name
    with pytest.raises(TypeError):
        k.hoisted[("z", 0)] = "pre"  # type: ignore[index]


# -- the kernel emitters keep no hidden state ------------------------------------------------
CODEGEN = STDLIB.parent / "cemodel" / "codegen"
# every file but the printer, whose dispatch on node types is getattr by design
KERNEL_SIDE = sorted(p for p in CODEGEN.glob("**/*.py") if p.name != "pycode.py")


@pytest.mark.parametrize("path", KERNEL_SIDE, ids=lambda p: p.relative_to(CODEGEN).as_posix())
def test_kernel_side_is_small_functions_without_hidden_state(path):
    import ast

    text = path.read_text()
    tree = ast.parse(text)
    assert len(text.splitlines()) <= 600
    assert "TYPE_CHECKING" not in text
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            limit = 300 if isinstance(node, ast.ClassDef) else 100
            assert node.end_lineno - node.lineno < limit, node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in ("hasattr", "getattr", "setattr"), node.lineno
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not (
                node.attr.startswith("__") or isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")):
            raise AssertionError(f"line {node.lineno}: another object's {node.attr}")
        if isinstance(node, ast.FunctionDef) and node.name != "__init__":
            for target in ast.walk(node):
                if isinstance(target, ast.Attribute) and isinstance(target.ctx, ast.Store):
                    raise AssertionError(f"line {target.lineno}: {node.name} assigns an attribute")


def test_a_known_is_never_named_as_an_observed_variable():
    """A constant's known is named 'c', as an observed variable may be: the module read the
    observed c as the number 1.0 (a numba typing error at its first fit)."""
    from cemodel.compiler import generate

    source = generate(run_stages("""
model observed_c
dim K = 2
dim N
pi ~ Dirichlet(1.0, K)
plate points n in N:
    observe c[n] ~ Categorical(pi)
""", "observed_c.cem", {}))
    assert "    c = bound.arrays['c']" in source
    assert "    c_2 = 1.0" in source and "    c = 1.0" not in source
