"""The code base stays ruff-clean (pyproject's [tool.ruff] settings)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extra)")
    result = subprocess.run([ruff, "check", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_modules_are_valid_python():
    for path in (REPO / "tests" / "golden").glob("*.py"):
        compile(path.read_text(), str(path), "exec")
    assert sys.version_info >= (3, 11)
