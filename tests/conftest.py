"""Shared test setup: one kernel cache for the whole run, and small helpers."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "tests"))
STDLIB = REPO / "stdlib_models"


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
