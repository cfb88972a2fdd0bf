"""Golden files pin the generated source of every stdlib model.

A change to the emitter shows up here as a reviewable diff. To accept one on purpose:
    CEMODEL_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

import ast
import builtins
import os
import re
from pathlib import Path

import pytest

from cemodel.compiler import generate, read_source, run_stages

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
MODELS = sorted(p.stem for p in (REPO / "stdlib_models").glob("*.cem"))


def generated(name: str) -> str:
    text, filename = read_source(REPO / "stdlib_models" / f"{name}.cem")
    return generate(run_stages(text, filename))


@pytest.mark.parametrize("name", MODELS)
def test_generated_code_matches_golden(name):
    source = generated(name)
    path = GOLDEN / f"{name}.py"
    if os.environ.get("CEMODEL_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"no golden file for {name}; run with CEMODEL_UPDATE_GOLDEN=1"
    assert source == path.read_text(), f"generated code of {name} changed (see module doc)"


@pytest.mark.parametrize("name", MODELS)
def test_generation_is_deterministic(name):
    assert generated(name) == generated(name)


def test_generated_module_imports_only_numpy_numba_runtime():
    for name in MODELS:
        imports = [line for line in generated(name).splitlines()
                   if line.startswith(("import ", "from "))]
        assert imports == ["import numpy as np",
                           "from numba import njit",
                           "from cemodel import runtime as rt"], name


def test_generated_lda_reads_like_hand_written():
    source = generated("lda")
    assert source.startswith('"""lda: the model (kernels, data layout, start) for cemodel.')
    assert "sha256" in source.splitlines()[2]
    # one kernel per update, each documented with its equation and source line
    for kernel in ("update_z", "update_theta", "update_beta", "local_step", "elbo_global"):
        assert f"def {kernel}(" in source
    assert "α_v = eta + Σ_{d,n} [w[d, n] = v]·q(z[d, n] = k)" in source
    assert "(lda.cem:19:5)" in source
    assert "@njit(cache=True, nogil=True" in source
    # reassociation only: NaN and inf keep their meaning (the underflow checks rely on it)
    assert "nnan" not in source and "ninf" not in source and "'fast'" not in source
    # no array of documents × topics × vocabulary: every allocation is at most 2-D here
    for shape in re.findall(r"np\.zeros\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)", source):
        assert shape.count(",") <= 1, shape


@pytest.mark.parametrize("name", MODELS)
def test_the_kernels_stand_alone(name):
    """The kernel cache keeps a module's kernels in a file of their own (shared by its
    compilations that differ only in settings): a kernel may read only other kernels and
    the imports, never a name of the module around it (SPEC, ROLES, hyperparameters)."""
    text, filename = read_source(REPO / "stdlib_models" / f"{name}.cem")
    generated_module = run_stages(text, filename).generated
    tree = ast.parse(generated_module.kernels_text())
    defined = {"np", "njit", "rt"} | set(dir(builtins))
    defined |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for kernel in tree.body:
        if not isinstance(kernel, ast.FunctionDef):
            continue
        local = {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Store)} | {a.arg for a in ast.walk(kernel.args)
                                                      if isinstance(a, ast.arg)}
        read = {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)}
        assert read - local - defined == set(), kernel.name
    # the module as the cache keeps it is the module users read, the kernels imported
    inline = generated_module.text
    importing = generated_module.text_importing("kernels")
    assert "from kernels import (" in importing
    for kernel in generated_module.kernels:
        assert f"\ndef {kernel.name}(" in inline and f"\ndef {kernel.name}(" not in importing
