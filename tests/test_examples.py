"""The examples run (small sizes) inside the test suite, so they keep working."""

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(script: str, *argv: str, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [script, *argv])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")


def test_dp_bernoulli_mixture_quick(monkeypatch, capsys):
    run("dp_bernoulli_mixture.py", "--quick", "--seeds", "1", "--no-plot",
        monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "MF      mean over 1 seeds" in out and "SSVI-A  mean over 1 seeds" in out


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_reuters_lda_example(monkeypatch, capsys):
    run("reuters_lda.py", "--topics", "5", "--iters", "3", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "topic  4:" in out and "held-out perplexity" in out
