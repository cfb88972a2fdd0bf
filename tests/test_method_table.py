"""The method table is honest by construction (issue 18): `cemodel check`, the module's
METHODS / LOCAL_STEPS and the drivers' refusals are one table. For every stdlib model, every
global step and every local step that the table lists runs on small data the model's SPEC
describes, and every one it does not list is refused with the table's reason, word for word.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from cemodel.check import check_report
from cemodel.compiler import read_source, run_stages
from cemodel.errors import CemError
from cemodel.runtime.drivers import DRIVERS

from .tools.traces import make_data

REPO = Path(__file__).resolve().parents[1]
MODELS = sorted(p.stem for p in (REPO / "stdlib_models").glob("*.cem"))
LOCALS = ("mf", "exact", "gibbs", "cvb0")


def _options(method: str, n_items: int | None) -> dict:
    """The shortest run of each method."""
    if not DRIVERS[method].stochastic:
        return {"max_iter": 2}
    options: dict = {"epochs": 1, "batch_size": n_items}
    if method == "svi+":
        options["effective_batch_size"] = max(1, (n_items or 2) // 2)
    return options


def _fit(module, dataset, method: str, **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a two-step fit may warn (ELBO dips, no convergence)
        return DRIVERS[method].run(module, dataset.data, dims=dataset.dims or None,
                                   **_options(method, dataset.n_items), **extra)


@pytest.mark.parametrize("name", MODELS)
def test_check_lists_the_module_table(name):
    text, filename = read_source(REPO / "stdlib_models" / f"{name}.cem")
    plan = run_stages(text, filename).plan
    lines = check_report(plan).splitlines()
    for method, why in plan.methods:
        assert f"  {method:<8s} {why}" in lines, (method, why)


def _runs_or_refuses(table: dict[str, str], run) -> None:
    """Every 'yes' entry of ``table`` runs (``run(choice)``, a fit with an ELBO trace);
    every other is refused with the table's reason, word for word."""
    for choice, why in table.items():
        if why.startswith("yes"):
            assert len(run(choice).elbo) > 0, choice
        else:
            with pytest.raises(CemError) as refused:
                run(choice)
            assert why.removeprefix("no: ") in str(refused.value), choice


@pytest.mark.parametrize("name", MODELS)
def test_every_listed_method_runs_and_every_other_is_refused_with_its_reason(compiled, name):
    module = compiled(name)
    dataset = make_data(module.SPEC, 0)
    assert set(module.METHODS) == set(DRIVERS)
    _runs_or_refuses(module.METHODS, lambda method: _fit(module, dataset, method))


@pytest.mark.parametrize("name", MODELS)
def test_every_listed_local_step_runs_and_every_other_is_refused(compiled, name):
    module = compiled(name)
    dataset = make_data(module.SPEC, 0)
    assert set(module.LOCAL_STEPS) == set(LOCALS)
    _runs_or_refuses(module.LOCAL_STEPS, lambda local: _fit(module, dataset, "mf", local=local))
