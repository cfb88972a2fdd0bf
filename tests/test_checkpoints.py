"""Checkpoints: a fit interrupted and resumed ends identical to an uninterrupted one, and a
SIGKILL while a checkpoint is written leaves the previous one loadable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cemodel.errors import CemDataError

REPO = Path(__file__).resolve().parents[1]


def _corpus(seed=0, K=3, V=25, D=60, n=40):
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(V, 0.2), K)
    X = np.zeros((D, V), dtype=np.int64)
    for d in range(D):
        z = rng.choice(K, n, p=rng.dirichlet(np.full(K, 0.3)))
        for k in z:
            X[d, rng.choice(V, p=beta[k])] += 1
    return X


def _same(a, b):
    np.testing.assert_array_equal(a.elbo, b.elbo)
    for key in a.posterior:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert a.hypers == b.hypers


def test_mf_resumed_fit_is_identical(compiled, tmp_path):
    lda = compiled("lda", K=3)
    data = {"w": _corpus()}
    whole = lda.fit(data, max_iter=12, tol=0.0, learn=("alpha",))
    path = tmp_path / "fit.ckpt"
    lda.fit(data, max_iter=5, tol=0.0, learn=("alpha",), checkpoint=path)  # stops at k = 5
    resumed = lda.fit(data, max_iter=12, tol=0.0, learn=("alpha",), resume=path)
    _same(whole, resumed)


@pytest.mark.parametrize("method, options", [
    ("fit_svi", {}),
    ("fit_svi", {"effective_batch_size": 14}),
    ("fit_ssvi", {"local": "gibbs"}),
    ("fit_ssvi_a", {"local": "cvb0"}),
])
def test_stochastic_resumed_fit_is_identical(compiled, tmp_path, method, options):
    lda = compiled("lda", K=3)
    data = {"w": _corpus(1)}
    run = getattr(lda, method)
    common = {"batch_size": 16, "seed": 3, **options}
    whole = run(data, epochs=5, **common)
    path = tmp_path / "svi.ckpt"
    run(data, epochs=2, checkpoint=path, **common)
    resumed = run(data, epochs=5, resume=path, **common)
    _same(whole, resumed)


def test_a_checkpoint_of_other_data_or_another_method_is_refused(compiled, tmp_path):
    lda = compiled("lda", K=3)
    path = tmp_path / "fit.ckpt"
    lda.fit({"w": _corpus()}, max_iter=2, checkpoint=path)
    with pytest.raises(CemDataError, match="data differ"):
        lda.fit({"w": _corpus(5)}, max_iter=3, resume=path)
    with pytest.raises(CemDataError, match="checkpoint of fit, not fit_svi"):
        lda.fit_svi({"w": _corpus()}, epochs=3, resume=path)
    with pytest.raises(CemDataError, match="other sizes"):
        compiled("lda", K=4).fit({"w": _corpus()}, max_iter=3, resume=path)
    with pytest.raises(CemDataError, match="another model"):
        compiled("mixture_of_multinomials", K=3).fit({"w": _corpus()}, max_iter=3,
                                                     resume=path)
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    # numpy read it as a pickle and advised loading it "unsafely using allow_pickle="
    with pytest.raises(CemDataError, match="cannot read .*junk.ckpt: it is not a NumPy "
                                           "archive") as error:
        lda.fit({"w": _corpus()}, max_iter=3, resume=tmp_path / "junk.ckpt")
    assert "pickle" not in str(error.value)


def test_a_checkpoint_of_other_options_is_refused(compiled, tmp_path):
    """A checkpoint continues one trajectory: SSVI's resumed as SVI, SVI+, or with another
    minibatch ran without a word and mixed two methods in one trace; now each is refused,
    naming the option, its value there and here. Only the epochs or iterations grow."""
    lda = compiled("lda", K=3)
    data = {"w": _corpus(1)}
    path = tmp_path / "ssvi.ckpt"
    lda.fit_ssvi(data, epochs=2, batch_size=16, checkpoint=path)
    for run, options, named in (
            (lda.fit_svi, {"batch_size": 16}, "apply_v True there, False here"),
            (lda.fit_svi, {"batch_size": 16, "effective_batch_size": 8}, "effective_batch_size"),
            (lda.fit_ssvi, {"batch_size": 20}, "batch_size 16 there, 20 here"),
            (lda.fit_ssvi, {"batch_size": 16, "kappa": 0.9}, "kappa 0.7 there, 0.9 here"),
            (lda.fit_ssvi, {"batch_size": 16, "local": "cvb0"}, "local 'mf' there, 'cvb0'")):
        with pytest.raises(CemDataError, match="written with other options") as error:
            run(data, epochs=4, resume=path, **options)
        assert named in str(error.value)
    assert len(lda.fit_ssvi(data, epochs=4, batch_size=16, resume=path).elbo) == 4
    plain = tmp_path / "svi.ckpt"
    lda.fit_svi(data, epochs=2, batch_size=16, checkpoint=plain)
    with pytest.raises(CemDataError, match="a fit without averaged iterates, and this one "
                                           "averages"):
        lda.fit_svi(data, epochs=4, batch_size=16, average=True, resume=plain)
    mf = tmp_path / "mf.ckpt"
    lda.fit(data, max_iter=2, tol=0.0, checkpoint=mf)
    with pytest.raises(CemDataError, match="local_tol 0.001 there, 0.01 here"):
        lda.fit(data, max_iter=4, tol=0.0, local_tol=1e-2, resume=mf)
    gibbs = tmp_path / "gibbs.ckpt"  # the Gibbs E-step's sweeps and burn-in
    lda.fit(data, max_iter=2, tol=0.0, local="gibbs", gibbs_sweeps=6, checkpoint=gibbs)
    for options, named in (({"gibbs_sweeps": 8}, "gibbs_sweeps 6 there, 8 here"),
                           ({"gibbs_sweeps": 6, "gibbs_burn_in": 2},
                            "gibbs_burn_in 3 there, 2 here")):
        with pytest.raises(CemDataError, match=named):
            lda.fit(data, max_iter=4, tol=0.0, local="gibbs", resume=gibbs, **options)
    assert len(lda.fit(data, max_iter=4, tol=0.0, local="gibbs", gibbs_sweeps=6,
                       resume=gibbs).elbo) == 4
    with pytest.raises(CemDataError, match="warm_start False there, True here"):
        lda.fit(data, max_iter=4, tol=0.0, warm_start=True, resume=mf)
    # a hyperparameter given anew was dropped for the checkpoint's, without a word
    with pytest.raises(CemDataError, match=r"hypers \{'alpha': 0.1, 'eta': 0.01\} there, "
                                           r"\{'alpha': 3.0, 'eta': 0.01\} here"):
        lda.fit(data, max_iter=4, tol=0.0, hypers={"alpha": 3.0}, resume=mf)
    with pytest.raises(CemDataError, match="hypers"):
        lda.fit_ssvi(data, epochs=4, batch_size=16, hypers={"eta": 0.5}, resume=path)


WRITER = """
import sys, numpy as np
from cemodel import runtime as rt
bound = rt.BoundData(arrays={"x": np.arange(3.0)}, dims={}, n_items={})
s = rt.State(bound=bound, big=np.zeros(2_000_000))
i = 0
while True:
    s.big[...] = i
    rt.save_checkpoint(sys.argv[1], s, "sha", "fit", iteration=i)
    i += 1
    print(i, flush=True)
"""


def test_sigkill_while_writing_leaves_the_previous_checkpoint_loadable(tmp_path):
    from cemodel import runtime as rt

    path = tmp_path / "loop.ckpt"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    for delay in (0.3, 0.55, 0.8):
        proc = subprocess.Popen([sys.executable, str(script), str(path)],
                                stdout=subprocess.PIPE, env={**os.environ})
        assert proc.stdout is not None
        proc.stdout.readline()  # at least one checkpoint is complete
        time.sleep(delay)  # then kill it mid-write (16 MB files: most of the time is writing)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        s = rt.State(bound=rt.BoundData(arrays={"x": np.arange(3.0)}, dims={}, n_items={}),
                     big=np.empty(2_000_000))
        progress = rt.load_checkpoint(path, s, "sha", "fit")
        assert np.all(s.big == progress["iteration"])  # one whole checkpoint, not a mix


def test_cli_checkpoint_and_resume(tmp_path, capsys):
    import scipy.sparse as sp

    from cemodel.cli import main

    data = tmp_path / "w.npz"
    sp.save_npz(data, sp.csr_matrix(_corpus()))
    ckpt = tmp_path / "lda.ckpt"
    base = ["fit", "stdlib_models/lda.cem", "--data", str(data), "--set", "K=3", "--quiet",
            "--tol", "0"]
    assert main([*base, "--max-iter", "3", "--checkpoint", str(ckpt),
                 "-o", str(tmp_path / "a.npz")]) == 0
    assert main([*base, "--max-iter", "6", "--resume", str(ckpt),
                 "-o", str(tmp_path / "b.npz")]) == 0
    assert main([*base, "--max-iter", "6", "-o", str(tmp_path / "c.npz")]) == 0
    resumed, whole = np.load(tmp_path / "b.npz"), np.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(resumed["elbo"], whole["elbo"])
    np.testing.assert_array_equal(resumed["beta.alpha"], whole["beta.alpha"])
    capsys.readouterr()
    assert main([*base, "--max-iter", "6", "--resume", str(tmp_path / "missing.ckpt"),
                 "-o", str(tmp_path / "d.npz")]) == 2
    assert "cannot read the checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "d.npz").exists()


def test_ctrl_c_stops_cleanly_and_keeps_the_last_checkpoint(tmp_path):
    import scipy.sparse as sp

    data = tmp_path / "w.npz"
    sp.save_npz(data, sp.csr_matrix(_corpus(2, D=200)))
    ckpt, out = tmp_path / "lda.ckpt", tmp_path / "post.npz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cemodel.cli", "fit", "stdlib_models/lda.cem", "--data",
         str(data), "--set", "K=3", "--tol", "-1", "--max-iter", "100000", "--checkpoint",
         str(ckpt), "-o", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NUMBA_NUM_THREADS": "1"},  # the test workers fill the cores
        # Ctrl-C as at a terminal: a test run started in the background of a shell inherits
        # SIGINT ignored, and Python then never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not ckpt.exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # a fit that did not stop is not left running, nor its pipe left open
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == 130, err
    assert "interrupted" in err and f"--resume {ckpt}" in err and "Traceback" not in err
    assert not out.exists()
    with np.load(ckpt) as archive:  # a whole, loadable checkpoint
        assert "meta" in archive.files and "state.lam_beta_log" in archive.files


def test_ctrl_c_before_the_first_checkpoint_says_none_was_written(tmp_path):
    """Interrupted before its first checkpoint, fit pointed at a file that did not exist
    ("continue with --resume lda.ckpt"); now it says none was written yet."""
    import scipy.sparse as sp

    data = tmp_path / "w.npz"
    sp.save_npz(data, sp.csr_matrix(_corpus(2, D=200)))
    ckpt = tmp_path / "lda.ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cemodel.cli", "fit", "stdlib_models/lda.cem", "--data",
         str(data), "--set", "K=3", "--tol", "-1", "--max-iter", "100000", "--checkpoint",
         str(ckpt), "--checkpoint-every", "100000", "-o", str(tmp_path / "post.npz")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NUMBA_NUM_THREADS": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()  # the first iteration's progress line: fitting
        assert line.startswith("iter"), line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 130, err
    assert f"no checkpoint was written yet to {ckpt}" in err and "--resume" not in err
    assert not ckpt.exists()


@pytest.mark.parametrize("method, length", [("fit", "max_iter"), ("fit_svi", "epochs")])
def test_a_checkpoint_of_a_module_before_the_driver_split_still_resumes(compiled, method,
                                                                        length):
    """tests/data/*_d63ddda.ckpt were written by the generated poisson_mixture of d63ddda,
    whose module printed its own fit and fit_svi (3 iterations, 2 epochs of batch 16, data
    below): today's module, with the drivers in cemodel.runtime.drivers, continues them where
    an uninterrupted fit of its own goes."""
    x = np.random.default_rng(7).poisson(np.repeat([2.0, 9.0, 25.0], 20))
    module = compiled("poisson_mixture")
    path = Path(__file__).parent / "data" / f"poisson_mixture_{method}_d63ddda.ckpt"
    # fit_svi: the schedule d63ddda's default was (60 items are now a small data set, whose
    # default is κ = 0.5, τ = 1: svi.small_data_defaults)
    options = {"max_iter": 6, "tol": 0.0} if method == "fit" else {
        "epochs": 4, "batch_size": 16, "kappa": 0.7, "tau": 10.0}
    resumed = getattr(module, method)({"x": x}, resume=path, **options)
    whole = getattr(module, method)({"x": x}, **options)
    assert len(resumed.elbo) == options[length] == len(whole.elbo)
    # the same trajectory (to round-off: the old module's kernels were compiled elsewhere)
    np.testing.assert_allclose(resumed.elbo, whole.elbo, rtol=1e-12)
    for name, value in whole.state.items():
        np.testing.assert_allclose(resumed.state[name], value, rtol=1e-10, err_msg=name)


def _poisson_counts(tmp_path):
    path = tmp_path / "pm.npz"
    np.savez(path, x=np.random.default_rng(7).poisson(np.repeat([2.0, 9.0, 25.0], 20)))
    return path


def test_resuming_a_converged_fit_reproduces_it_bit_for_bit(tmp_path, capsys):
    """Issue 19 item 9: the checkpoint records that the fit stopped; resuming it ran one more
    iteration (one more ELBO value, posteriors 7e-12 apart)."""
    from cemodel.cli import main

    ckpt, a, b = tmp_path / "fin.ckpt", tmp_path / "a.npz", tmp_path / "b.npz"
    base = ["fit", str(REPO / "stdlib_models" / "poisson_mixture.cem"), "--data",
            str(_poisson_counts(tmp_path)), "--max-iter", "80", "--tol", "0", "--learn", "a,b",
            "--quiet"]
    assert main([*base, "--checkpoint", str(ckpt), "-o", str(a)]) == 0
    assert "converged" in capsys.readouterr().out
    assert main([*base, "--resume", str(ckpt), "-o", str(b)]) == 0
    with np.load(a) as first, np.load(b) as again:
        assert len(first["elbo"]) < 80
        assert first.files == again.files
        for key in first.files:
            if key == "cemodel:meta":  # the saved fit's record: equal but for the time taken
                meta = [json.loads(f[key].tobytes()) for f in (first, again)]
                for record in meta:
                    del record["seconds"]
                assert meta[0] == meta[1]
            else:
                np.testing.assert_array_equal(first[key], again[key], err_msg=key)


def test_resuming_a_stochastic_fit_that_stopped_reproduces_it(compiled, tmp_path):
    """The same for SVI's noisy stopping rule, whose window is rebuilt from the trace when a
    fit that had not stopped resumes."""
    module = compiled("poisson_mixture")
    data = {"x": np.random.default_rng(7).poisson(np.repeat([2.0, 9.0, 25.0], 20))}
    common = {"batch_size": 16, "seed": 3, "tol": 1e-3, "epochs": 200}
    whole = module.fit_svi(data, **common)
    assert whole.converged and len(whole.elbo) < 200
    path = tmp_path / "svi.ckpt"
    stopped = module.fit_svi(data, checkpoint=path, **common)
    _same(whole, stopped)
    _same(whole, module.fit_svi(data, resume=path, **common))
    # a checkpoint of a fit still running: the resumed fit stops where the whole one did
    early = len(whole.elbo) - 2
    module.fit_svi(data, checkpoint=path, **{**common, "epochs": early})
    _same(whole, module.fit_svi(data, resume=path, **common))


def test_a_refused_resume_says_kappa_and_tau_follow_the_batch_size():
    """A resume with another batch size lists kappa and tau too when their defaults moved with
    it (the small-data schedule): the hint says so, since the user gave neither."""
    from cemodel.runtime import driver as rt

    saved = {"batch_size": 100, "kappa": 0.5, "tau": 1.0}
    with pytest.raises(CemDataError, match="batch_size 100 there, 50 here; kappa 0.5 there, "
                                           "0.7 here; tau 1.0 there, 10.0 here") as error:
        rt.check_same_trajectory("run.ckpt", saved, {"batch_size": 50, "kappa": 0.7,
                                                     "tau": 10.0})
    assert "kappa and tau, when not given, follow from the batch size" in error.value.hint
    with pytest.raises(CemDataError) as error:  # kappa given: nothing to explain
        rt.check_same_trajectory("run.ckpt", saved, {"batch_size": 100, "kappa": 0.9,
                                                     "tau": 1.0})
    assert "follow from the batch size" not in error.value.hint


def test_a_resume_with_another_seed_is_refused_and_an_older_checkpoint_still_resumes():
    """The seed orders the minibatches and draws each epoch's kernel randomness: a resume
    with another seed mixed two runs without a word. A checkpoint written before the seed
    was recorded has none, and is not refused for it."""
    from cemodel.runtime import driver as rt

    with pytest.raises(CemDataError, match="seed 3 there, 4 here"):
        rt.check_same_trajectory("s.ckpt", {"batch_size": 20, "seed": 3},
                                 {"batch_size": 20, "seed": 4})
    rt.check_same_trajectory("s.ckpt", {"batch_size": 20}, {"batch_size": 20, "seed": 4})
