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
@pytest.mark.long
def test_reuters_lda_example(monkeypatch, capsys):
    run("reuters_lda.py", "--topics", "5", "--iters", "3", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "topic  4:" in out and "held-out perplexity" in out


@pytest.mark.long
def test_hensman_table1_small(monkeypatch, capsys):
    run("hensman_table1.py", "--restarts", "2", "--radii", "5", "--points", "60",
        "--max-iter", "200", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "| Fletcher-Reeves |" in out and "Share of restarts that reach it" in out


@pytest.mark.long
def test_lda_klc_small(monkeypatch, capsys):
    run("lda_klc.py", "--docs", "20", "--k", "3", "--inits", "1", "--max-iter", "15",
        "--no-plot", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "VBEM" in out and "FR" in out and "HS" in out


@pytest.mark.long
def test_gap_nmf_quick(monkeypatch, capsys):
    run("gap_nmf.py", "--quick", "--no-plot", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "MF " in out and "SSVI-A " in out and "sorted correlations" in out
