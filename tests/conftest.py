"""Shared test setup: one kernel cache for the whole run, and small helpers."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "tests"))


def pytest_configure(config):
    """One numba thread per test process: the xdist workers (-n auto) already keep every core
    busy, and a parallel kernel's two threads on a busy core only wait for each other (issue
    22: 5-10x slower per iteration on small data). tests/test_threads.py sets the count it
    compares itself."""
    import numba

    numba.set_num_threads(1)
STDLIB = REPO / "stdlib_models"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``long`` (an example's own run, a full-size experiment: minutes of CPU
    between them) run only with CEMODEL_LONG_TESTS=1 (tests/README.md); the README's test
    command stays within CI's 15 minutes on 2 cores."""
    if os.environ.get("CEMODEL_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="long: runs with CEMODEL_LONG_TESTS=1")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def compiled():
    """compiled(name, **settings): the generated module of a stdlib model (cached)."""
    from cemodel.compiler import compile_model

    cache: dict = {}

    def get(name: str, **settings):
        key = (name, tuple(sorted(settings.items())))
        if key not in cache:
            cache[key] = compile_model(STDLIB / f"{name}.cem", settings)
        return cache[key]

    return get
