"""The command line: `cemodel check | compile | fit`, `--set`, `--help` and the console script."""

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "tests"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpy.testing import assert_allclose  # noqa: E402

from cemodel import __version__  # noqa: E402
from cemodel.cli import main  # noqa: E402
from cemodel.compiler import run_stages  # noqa: E402

from .helpers import never_decreases  # noqa: E402

MODELS = REPO / "stdlib_models"
STDLIB = sorted(MODELS.glob("*.cem"))
BETA_BERNOULLI = MODELS / "beta_bernoulli.cem"
GMM = MODELS / "gmm.cem"


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- check ------------------------------------------------------------------------------------


def test_stdlib_is_not_empty():
    assert len(STDLIB) >= 5


@pytest.mark.parametrize("path", STDLIB, ids=[p.stem for p in STDLIB])
def test_check_prints_a_conditional_per_latent(path, capsys):
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    latents = run_stages(path.read_text(), path.name).model.latents
    assert latents
    lines = out.splitlines()
    for var in latents:
        assert any(f"q({var.name}" in line for line in lines), (var.name, out)


# -- compile ----------------------------------------------------------------------------------


def test_compile_writes_importable_module_with_header(tmp_path, capsys):
    out = tmp_path / "gmm_vi.py"
    assert main(["compile", str(GMM), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gmm_vi.py"]  # no temporary left

    text = out.read_text()
    compile(text, str(out), "exec")
    header = "\n".join(text.splitlines()[:10])
    digest = hashlib.sha256(GMM.read_bytes()).hexdigest()
    assert "gmm.cem" in header
    assert "sha256" in header
    assert digest[:16] in header

    module = _import(out, "cemodel_test_cli_gmm_default")
    assert module.SPEC["model"] == "gmm"
    assert module.SPEC["dims"]["K"]["default"] == 5
    assert callable(module.fit)


def test_compile_set_changes_the_default(tmp_path, capsys):
    out = tmp_path / "gmm_k7.py"
    assert main(["compile", str(GMM), "-o", str(out), "--set", "K=7"]) == 0
    capsys.readouterr()
    module = _import(out, "cemodel_test_cli_gmm_k7")
    assert module.SPEC["dims"]["K"]["default"] == 7


def test_the_header_regenerates_the_module_with_its_settings(tmp_path, monkeypatch, capsys):
    """The header said `cemodel compile gmm.cem` of a module compiled with --set K=3: run as
    written it gave K = 5. The command it gives now writes the very same module."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gmm.cem").write_text(GMM.read_text())
    assert main(["compile", "gmm.cem", "-o", "first.py", "--set", "K=3.0", "--set",
                 "alpha=0.25"]) == 0
    first = (tmp_path / "first.py").read_text()
    line = next(ln for ln in first.splitlines() if ln.startswith("Regenerate with"))
    command = line.split("`")[1]
    assert command == "cemodel compile gmm.cem --set K=3 --set alpha=0.25"
    assert main([*command.split()[1:], "-o", "again.py"]) == 0
    assert (tmp_path / "again.py").read_text() == first
    capsys.readouterr()


def test_compile_default_output_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(BETA_BERNOULLI)]) == 0
    assert "wrote beta_bernoulli_vi.py" in capsys.readouterr().out
    assert (tmp_path / "beta_bernoulli_vi.py").is_file()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("Q=3", "the model has no dimension or hyperparameter 'Q'"),
        ("alpah=0.5", "did you mean 'alpha'?"),
        ("K=abc", "expected a number, found 'abc'"),
        ("K", "--set takes NAME=VALUE, found 'K'"),
        ("=3", "--set takes NAME=VALUE"),
        ("K=2.5", "a dimension takes a whole number >= 1"),
        ("K=0", "a dimension takes a whole number >= 1"),
        ("m0=1", "only scalar hyperparameters can be set"),
    ],
)
def test_invalid_set_exits_2(tmp_path, capsys, setting, expected):
    out = tmp_path / "gmm_vi.py"
    status = main(["compile", str(GMM), "-o", str(out), "--set", setting])
    err = capsys.readouterr().err
    assert status == 2
    assert expected in err
    assert "Traceback" not in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_source_error_through_the_cli(tmp_path, capsys):
    model = tmp_path / "bad.cem"
    model.write_text("model m\ndim N\np ~ Beta(1, 1)\nplate t n in N:\n"
                     "    observe x[n] ~ Bernouli(p)\n")
    out = tmp_path / "out" / "bad_vi.py"
    status = main(["compile", str(model), "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("bad.cem:5:20: error: unknown distribution 'Bernouli'")
    assert "    observe x[n] ~ Bernouli(p)" in err
    assert "did you mean 'Bernoulli'?" in err
    assert "Traceback" not in err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_missing_model_file_exits_2(tmp_path, capsys):
    status = main(["check", str(tmp_path / "nope.cem")])
    err = capsys.readouterr().err
    assert status == 2
    assert "no such model file" in err and "nope.cem" in err


# -- fit --------------------------------------------------------------------------------------


def _coin_data(tmp_path: Path) -> tuple[Path, np.ndarray]:
    x = (np.random.default_rng(7).random(40) < 0.3).astype(np.float64)
    path = tmp_path / "coin.npz"
    np.savez(path, x=x)
    return path, x


def test_fit_beta_bernoulli_matches_closed_form(tmp_path, capsys):
    data, x = _coin_data(tmp_path)
    out = tmp_path / "out" / "posterior.npz"
    status = main(["fit", str(BETA_BERNOULLI), "--data", str(data), "-o", str(out), "--quiet"])
    stdout = capsys.readouterr().out
    assert status == 0
    assert f"wrote {out}" in stdout
    assert "iter " not in stdout  # --quiet
    assert [p.name for p in out.parent.iterdir()] == ["posterior.npz"]
    with np.load(out) as post:
        assert_allclose(post["p.a"], 2.0 + x.sum(), rtol=1e-12)
        assert_allclose(post["p.b"], 3.0 + x.size - x.sum(), rtol=1e-12)
        assert post["elbo"].ndim == 1 and post["elbo"].size >= 1


@pytest.mark.parametrize("options, expected", [
    (["--epochs", "5"], "--epochs does not apply to --method mf: it is an option of svi"),
    (["--batch-size", "10"], "--batch-size does not apply to --method mf"),
    (["--method", "svi", "--max-iter", "5"], "--max-iter does not apply to --method svi"),
    (["--method", "svi", "--tol", "0.1"], "--tol does not apply to --method svi"),
    (["--method", "svi", "--cg", "pr"], "--cg does not apply to --method svi: it is an option "
                                        "of klc"),
    (["--method", "svi", "--effective-batch-size", "3"], "turns SVI into SVI+: use --method "
                                                         "svi+"),
    (["--method", "svi", "--learning-rate", "adaptive", "--effective-batch-size", "3"],
     "turns SVI into SVI+"),
    (["--gibbs-sweeps", "3"], "--gibbs-sweeps is an option of --local gibbs, found --local mf"),
    (["--checkpoint-every", "2"], "--checkpoint-every needs --checkpoint PATH"),
    (["--draws", "10"], "--draws sets the draws of an -o FILE.nc"),
    (["--method", "svi", "--starts", "3"], "--starts does not apply to --method svi: it is an "
                                           "option of mf"),
    (["--trial-iter", "2"], "--trial-iter sets the iterations of each of --starts N"),
    (["--starts", "3"], "start 'prior' is the same for every seed"),
    (["--starts", "3", "--trial-iter", "3", "--max-iter", "3"], "must be below max_iter"),
])
def test_fit_refuses_an_option_of_another_method(tmp_path, capsys, options, expected):
    """An option the chosen method does not take was dropped without a word (the fit ran as
    if it had not been given); now exit 2 naming it and whose option it is, before any
    work and without writing the output."""
    data, _ = _coin_data(tmp_path)
    out = tmp_path / "post.npz"
    status = main(["fit", str(BETA_BERNOULLI), "--data", str(data), "-o", str(out), *options])
    assert status == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_an_annealed_step_is_passed_to_the_structured_and_averaged_methods(tmp_path, capsys):
    """--effective-batch-size with ssvi-a or svi-avg anneals them (as fit_svi does from Python);
    it was dropped on the command line for every method but svi+."""
    data, _ = _coin_data(tmp_path)
    base = ["fit", str(BETA_BERNOULLI), "--data", str(data), "--method", "svi-avg",
            "--batch-size", "10", "--epochs", "3", "--quiet"]
    elbos = []
    for extra in ([], ["--effective-batch-size", "3"]):
        out = tmp_path / f"p{len(extra)}.npz"
        assert main([*base, *extra, "-o", str(out)]) == 0
        with np.load(out) as post:
            elbos.append(float(post["elbo"][-1]))
    assert elbos[0] != elbos[1]


def test_a_second_fit_compiles_nothing(tmp_path):
    """Two `cemodel fit` processes on one fresh kernel cache: the first writes the generated
    module and numba's compiled kernels, the second adds no file to the cache."""
    data, _ = _coin_data(tmp_path)
    cache = tmp_path / "cache"
    env = dict(os.environ, CEMODEL_CACHE=str(cache))
    command = [sys.executable, "-m", "cemodel.cli", "fit", str(BETA_BERNOULLI), "--data",
               str(data), "--quiet", "-o", str(tmp_path / "posterior.npz")]
    subprocess.run(command, env=env, check=True, capture_output=True)
    first = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    assert any(p.suffix == ".nbc" for p in first)  # compiled kernels were cached
    subprocess.run(command, env=env, check=True, capture_output=True)
    second = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    assert second == first


def test_fit_on_a_dask_cluster_from_the_command_line(tmp_path, capsys):
    """--dask local:1 runs the local step on a worker: the same posterior as in-process."""
    data, _ = _coin_data(tmp_path)
    here, there = tmp_path / "here.npz", tmp_path / "there.npz"
    assert main(["fit", str(BETA_BERNOULLI), "--data", str(data), "-o", str(here),
                 "--quiet"]) == 0
    assert main(["fit", str(BETA_BERNOULLI), "--data", str(data), "-o", str(there),
                 "--quiet", "--dask", "local:1"]) == 0
    assert "on Dask (1 partitions)" in capsys.readouterr().out
    with np.load(here) as a, np.load(there) as b:
        assert_allclose(b["p.a"], a["p.a"], rtol=1e-12)
        assert_allclose(b["elbo"], a["elbo"], rtol=1e-12)
    assert main(["fit", str(MODELS / "gmm_means.cem"), "--data", str(data), "--method", "klc",
                 "--dask", "local:1", "-o", str(there)]) == 2
    assert "does not run on Dask" in capsys.readouterr().err


def test_fit_from_several_starts_names_the_one_it_continued(tmp_path, capsys):
    data = tmp_path / "points.npz"
    np.savez(data, x=np.random.default_rng(3).normal(size=(60, 2)) + [[4.0, 0.0]] * 30 * 2)
    out = tmp_path / "post.npz"
    assert main(["fit", str(MODELS / "gmm_means.cem"), "--data", str(data), "-o", str(out),
                 "--quiet", "--starts", "3", "--trial-iter", "2", "--max-iter", "6",
                 "--seed", "5", "--tol", "-1"]) == 0
    summary = re.search(r"stopped at --max-iter after 6 iterations, from the best of 3 starts "
                        r"\(seed (\d+), ELBO (\S+) after 2\)", capsys.readouterr().out)
    assert summary is not None
    with np.load(out) as post:  # its trace: the kept trial's 2 iterations, then 4 more
        assert post["elbo"].size == 6 and float(summary[2]) == pytest.approx(post["elbo"][1])


def test_fit_takes_the_start_by_its_whole_name(tmp_path, capsys):
    """--start KIND is fit(start=KIND); options are taken by whole names only, where argparse
    had read --start 3 as --starts 3 (a prefix) and run three starts."""
    from cemodel.compiler import compile_model

    x = np.random.default_rng(3).normal(size=(60, 2)) + [[4.0, 0.0]] * 30 * 2
    data = tmp_path / "points.npz"
    np.savez(data, x=x)
    base = ["fit", str(MODELS / "gmm_means.cem"), "--data", str(data), "--quiet"]
    traces = {}
    for start in ("seeds", "random"):
        out = tmp_path / f"{start}.npz"
        assert main([*base, "--start", start, "-o", str(out)]) == 0
        with np.load(out) as post:
            traces[start] = post["elbo"]
    module = compile_model(MODELS / "gmm_means.cem")
    assert module.DEFAULT_START == "seeds"
    python = module.fit({"x": x}, start="random", seed=0)
    assert_allclose(traces["random"], python.elbo, rtol=1e-12)
    assert traces["random"].size != traces["seeds"].size or not np.allclose(
        traces["random"], traces["seeds"])
    out = tmp_path / "bad.npz"
    capsys.readouterr()
    assert main([*base, "--start", "3", "-o", str(out)]) == 2
    assert "start: expected 'seeds' or 'random', found '3'" in capsys.readouterr().err
    assert main([*base, "--start", "prior", "-o", str(out)]) == 2
    assert "found 'prior' (from the prior the components start alike" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main([*base, "--star", "3", "-o", str(out)])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --star 3" in capsys.readouterr().err
    assert not out.exists()


def test_fit_set_hyperparameter(tmp_path, capsys):
    data, x = _coin_data(tmp_path)
    out = tmp_path / "posterior.npz"
    status = main(["fit", str(BETA_BERNOULLI), "--data", str(data), "-o", str(out), "--quiet",
                   "--set", "a=5", "--set", "b=0.5"])
    capsys.readouterr()
    assert status == 0
    with np.load(out) as post:
        assert_allclose(post["p.a"], 5.0 + x.sum(), rtol=1e-12)
        assert_allclose(post["p.b"], 0.5 + x.size - x.sum(), rtol=1e-12)


def test_fit_progress_lines(tmp_path, capsys):
    data, _ = _coin_data(tmp_path)
    out = tmp_path / "posterior.npz"
    assert main(["fit", str(BETA_BERNOULLI), "--data", str(data), "-o", str(out)]) == 0
    assert "iter    1" in capsys.readouterr().out


def test_fit_klc_from_the_command_line(tmp_path, capsys):
    """--method klc --cg hs: progress lines with the bound and the gradient norm, the
    posterior written; --collapse that leaves a non-categorical in Z is refused."""
    rng = np.random.default_rng(0)
    data = tmp_path / "points.npz"
    np.savez(data, x=np.concatenate([rng.normal(size=(15, 2)), rng.normal(size=(15, 2)) + 5]))
    out = tmp_path / "posterior.npz"
    model = MODELS / "gmm_means.cem"
    assert main(["fit", str(model), "--data", str(data), "--method", "klc", "--cg", "hs",
                 "-o", str(out), "--max-iter", "50"]) == 0
    printed = capsys.readouterr().out
    assert "iter    1  bound" in printed and "|g|²" in printed
    assert "klc (hs, collapsed pi, mu)" in printed
    with np.load(out) as saved:
        assert saved["z.logits"].shape == (30, 8)
        assert never_decreases(saved["elbo"])
    assert main(["fit", str(model), "--data", str(data), "--method", "klc",
                 "--collapse", "pi", "-o", str(out)]) == 2
    assert "'mu' (a global MultivariateNormal) would be parameterised" in \
        capsys.readouterr().err
    assert main(["fit", str(model), "--data", str(data), "--collapse", "pi,mu",
                 "-o", str(out)]) == 2
    assert "--collapse is for --method klc" in capsys.readouterr().err


# -- help and version -------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["check", "--help"], ["compile", "--help"],
                                  ["fit", "--help"]], ids=["main", "check", "compile", "fit"])
def test_help_shows_an_example(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out
    assert "cemodel " in out.split("example", 1)[1]


def test_no_command_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "usage: cemodel" in capsys.readouterr().err


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"cemodel {__version__}"


def test_console_script_is_declared_and_installed():
    with open(REPO / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["cemodel"] == "cemodel.cli:main"
    installed = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert installed.get("cemodel") == "cemodel.cli:main"

    script = Path(sys.executable).parent / "cemodel"
    command = str(script) if script.exists() else shutil.which("cemodel")
    assert command is not None, "the cemodel console script is not on PATH"
    proc = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"cemodel {__version__}"


def test_fit_on_a_terminal_shows_a_progress_bar(tmp_path, monkeypatch, capsys):
    """On a terminal the fit shows a tqdm bar (iterations, ETA, ELBO) instead of log lines."""
    import io
    import sys

    from cemodel.cli import main

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    data = tmp_path / "x.npz"
    np.savez(data, x=np.random.default_rng(0).integers(0, 2, 50))
    assert main(["fit", "stdlib_models/beta_bernoulli.cem", "--data", str(data),
                 "--max-iter", "5", "--tol", "0", "-o", str(tmp_path / "p.npz")]) == 0
    bar = terminal.getvalue()
    assert "1/5" in bar and "elbo" in bar and "iter" in bar  # a binary model converges at 1
    assert "iter    1" not in capsys.readouterr().out


def test_compile_dumps_the_kernel_plan(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(REPO / "stdlib_models" / "lda.cem"), "--dump", "kernel-plan"]) == 0
    out = capsys.readouterr().out
    assert "lgamma_alpha = rt.gammaln(alpha)" in out
    assert "default_start:\n    random" in out and "fast_guard:\n    z" in out
    assert "kept_local: lam_theta_log, E_theta_log, X_theta_log" in out
    assert not list(tmp_path.iterdir())  # nothing written
    # -o was ignored (the dump printed, no file): it is where the dump goes
    assert main(["compile", str(REPO / "stdlib_models" / "lda.cem"), "--dump", "kernel-plan",
                 "-o", "kp.txt"]) == 0
    assert capsys.readouterr().out == "wrote kp.txt\n"
    assert (tmp_path / "kp.txt").read_text() == out


@pytest.mark.parametrize("suffix", [".csv", ".txt", ""])
def test_fit_refuses_an_output_suffix_it_cannot_write(tmp_path, capsys, suffix):
    """`fit -o post.csv` wrote an .npz archive under that name."""
    np.savez(tmp_path / "coins.npz", x=np.array([0, 1, 1, 0, 1]))
    out = tmp_path / f"post{suffix}"
    assert main(["fit", str(BETA_BERNOULLI), "--data", str(tmp_path / "coins.npz"), "--quiet",
                 "-o", str(out)]) == 2
    found = f"'{suffix}'" if suffix else "no extension"
    assert (f"error: cannot write {out}: a fit is saved as .npz or .nc, found {found}"
            in capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coins.npz"]
