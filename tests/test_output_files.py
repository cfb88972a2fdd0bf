"""Every file the command line writes goes through one writer (cemodel.files): a fault of the
file system (full, read-only, a directory or a file in the way, a name too long) ends with
``error: cannot write PATH: REASON`` and exit status 2, and leaves neither a partial file nor
a temporary one (issue 19 item 6). The kernel cache falls back to a compile in memory; a
stale temporary checkpoint is cleaned up (item 10); an unreachable Dask scheduler fails fast.

The faults are injected (the writer's write or rename raises, ``io_fault``): as root a
read-only directory is writable, and no test may fill a disk.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest

from cemodel import files
from cemodel.compiler import CemCacheWarning, compile_model

from .test_user_values import BETA_BERNOULLI, COINS, refused, run_cli

FAULTS = [  # (the step that fails, its errno, the reason printed)
    ("write", errno.ENOSPC, "no space left on the device"),
    ("replace", errno.EROFS, "the file system is read-only"),
    ("replace", errno.EISDIR, "it is a directory"),
]


@pytest.fixture(params=FAULTS, ids=lambda f: f"{f[0]}-{errno.errorcode[f[1]]}")
def io_fault(request, monkeypatch):
    """Arm a fault of the writer: ``arm()`` makes every later write (or rename) raise the
    errno of the parameter; returns the reason the message must give."""
    step, code, reason = request.param

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    def arm() -> str:
        monkeypatch.setattr(files, f"_{step}", fail)
        return reason

    return arm


@pytest.fixture
def work(tmp_path):
    """A directory holding coin flips and the posterior of a fit to them."""
    np.savez(tmp_path / "coins.npz", **COINS)
    assert run_cli(["fit", BETA_BERNOULLI, "--data", tmp_path / "coins.npz", "--quiet",
                    "-o", tmp_path / "post.npz"]) == 0
    return tmp_path


def _commands(d: Path) -> dict[str, tuple[list, Path]]:
    """Each writing command: its arguments and the file it writes."""
    fit = ["fit", BETA_BERNOULLI, "--data", d / "coins.npz", "--quiet", "--max-iter", "3"]
    return {
        "compile": (["compile", BETA_BERNOULLI, "-o", d / "out" / "m.py"], d / "out" / "m.py"),
        "fit -o": ([*fit, "-o", d / "new.npz"], d / "new.npz"),
        "fit --checkpoint": ([*fit, "--checkpoint", d / "run.ckpt", "-o", d / "new.npz"],
                             d / "run.ckpt"),
        "graph .dot": (["graph", BETA_BERNOULLI, "-o", d / "g.dot"], d / "g.dot"),
        "graph .svg": (["graph", BETA_BERNOULLI, "-o", d / "g.svg"], d / "g.svg"),
        "plot": (["plot", d / "post.npz", "-o", d / "p.png"], d / "p.png"),
        "predict": (["predict", BETA_BERNOULLI, d / "post.npz", d / "coins.npz", "-o",
                     d / "pp.npz"], d / "pp.npz"),
    }


def _tree(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


@pytest.mark.parametrize("command", list(_commands(Path())))
def test_a_file_system_fault_is_a_clean_error_and_leaves_no_file(work, io_fault, capsys,
                                                                 command):
    argv, target = _commands(work)[command]
    before = _tree(work)
    reason = io_fault()
    refused(capsys, argv, f"cannot write {target}: {reason}")
    assert _tree(work) == before  # no partial file, no temporary one


@pytest.mark.parametrize("where, reason", [
    ("a directory", "it is a directory"),
    ("under a file", "a part of the path is a file, not a directory"),
    ("a long name", "the file name is too long"),
])
def test_an_output_path_that_cannot_be_a_file_is_a_clean_error(tmp_path, capsys, where,
                                                               reason):
    (tmp_path / "dir.py").mkdir()
    (tmp_path / "file").write_text("x")
    out = {"a directory": tmp_path / "dir.py", "under a file": tmp_path / "file" / "m.py",
           "a long name": tmp_path / ("m" * 300 + ".py")}[where]
    before = _tree(tmp_path)
    refused(capsys, ["compile", BETA_BERNOULLI, "-o", out], f"cannot write {out}: {reason}")
    assert _tree(tmp_path) == before


def _clashes(d: Path) -> dict[str, tuple[list, str, str]]:
    """Each command with an output that is one of its inputs or outputs: its arguments, the
    output's option and the other's (``-o d.npz --data d.npz`` replaced the data)."""
    fit = ["fit", BETA_BERNOULLI, "--data", d / "coins.npz", "--quiet", "--max-iter", "3"]
    model = d / "m.cem"
    return {
        "fit -o = --data": ([*fit, "-o", d / "coins.npz"], "-o", "--data"),
        "fit -o = --data, spelt apart": ([*fit, "-o", d / "sub" / ".." / "coins.npz"], "-o",
                                         "--data"),
        "fit --checkpoint = --data": ([*fit, "--checkpoint", d / "coins.npz", "-o",
                                       d / "new.npz"], "--checkpoint", "--data"),
        "fit --checkpoint = -o": ([*fit, "--checkpoint", d / "new.npz", "-o", d / "new.npz"],
                                  "--checkpoint", "-o"),
        "fit -o = --resume": ([*fit, "--resume", d / "post.npz", "-o", d / "post.npz"], "-o",
                              "--resume"),
        "fit -o = the model": (["fit", model, *fit[2:], "-o", model], "-o", "the model file"),
        "compile -o = the model": (["compile", model, "-o", model], "-o", "the model file"),
        "graph -o = the model": (["graph", d / "m.dot", "-o", d / "m.dot"], "-o",
                                 "the model file"),
        "predict -o = the fit": (["predict", BETA_BERNOULLI, d / "post.npz", d / "coins.npz",
                                  "-o", d / "post.npz"], "-o", "the fit"),
        "predict -o = the data": (["predict", BETA_BERNOULLI, d / "post.npz", d / "coins.npz",
                                   "-o", d / "coins.npz"], "-o", "the data"),
    }


@pytest.mark.parametrize("command", list(_clashes(Path())))
def test_an_output_that_is_an_input_or_another_output_is_refused(work, capsys, command):
    """Refused before any work, naming both options; every file is left as it was."""
    (work / "sub").mkdir()
    for name in ("m.cem", "m.dot"):
        (work / name).write_text(BETA_BERNOULLI.read_text())
    before = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    argv, output, other = _clashes(work)[command]
    err = refused(capsys, argv, "is the same file as", f"hint: give {output} another path")
    assert err.startswith(f"error: {output} ") and f" as {other} " in err
    assert {p: p.read_bytes() for p in work.rglob("*") if p.is_file()} == before


def test_the_writer_replaces_a_file_whole(tmp_path):
    path = tmp_path / "a.txt"
    files.write_text(path, "old")
    files.write_bytes(path, b"new", sync=True)
    assert path.read_text() == "new" and _tree(tmp_path) == {"a.txt"}
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # open()'s mode, not mkstemp's 0600


# -- the kernel cache ---------------------------------------------------------------------------


def test_a_device_or_fifo_at_the_path_is_written_into_not_replaced(tmp_path):
    """`-o /dev/null` (run as root) renamed a regular file over the device: the machine's
    /dev/null became a zip archive. A path that is not a regular file is written into, as a
    shell's `>` does; a FIFO gets the bytes through."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    files.write_bytes(fifo, b"posterior")
    reader.join(timeout=10)
    assert received == [b"posterior"] and fifo.is_fifo()
    if os.geteuid() == 0:  # a private null device (mknod needs root), not the machine's
        import stat

        null = tmp_path / "null"
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        files.write_bytes(null, b"discarded")
        assert null.is_char_device()


def test_settings_share_the_compiled_kernels(tmp_path, monkeypatch):
    """Two compilations that differ only in a setting (here the prior's a) are two modules
    with their own defaults, importing one kernels file: numba compiles and caches the
    kernels once (``cemodel.compiler.compile_stages``)."""
    monkeypatch.setenv("CEMODEL_CACHE", str(tmp_path))
    first = compile_model(BETA_BERNOULLI)
    fit = first.fit(COINS)
    compiled = sorted(p.name for p in tmp_path.rglob("*.nbi"))
    second = compile_model(BETA_BERNOULLI, {"a": 7.0})
    assert first.__file__ != second.__file__
    assert len(list(tmp_path.glob("beta_bernoulli_kernels_*.py"))) == 1
    moved = second.fit(COINS)
    assert sorted(p.name for p in tmp_path.rglob("*.nbi")) == compiled  # nothing new
    heads = COINS["x"].sum()
    assert moved.posterior["p.a"] - fit.posterior["p.a"] == pytest.approx(5.0)
    assert fit.posterior["p.a"] == pytest.approx(2.0 + heads)


def test_an_unusable_kernel_cache_compiles_in_memory_with_a_warning(tmp_path, monkeypatch,
                                                                    capsys):
    """A CEMODEL_CACHE that is a file, or (injected) a read-only or full one, costs a warning
    naming it and the reason, not the fit; the command line prints it as one line. (One
    path throughout: the module compiled in memory once serves every case.)"""
    cache = tmp_path / "cache"
    cache.write_text("not a directory")
    monkeypatch.setenv("CEMODEL_CACHE", str(cache))
    with pytest.warns(CemCacheWarning, match=f"kernel cache {cache} cannot be used \\(a part "
                      "of the path is a file, not a directory\\): compiling in memory"):
        module = compile_model(BETA_BERNOULLI)
    fit = module.fit(COINS)
    assert fit.converged and cache.read_text() == "not a directory"

    np.savez(tmp_path / "coins.npz", **COINS)
    for code in (errno.EROFS, errno.ENOSPC):
        def fail(path, *args, code=code):
            raise files.CemWriteError(path, files.reason(OSError(code, "")))

        monkeypatch.setattr("cemodel.compiler.write_text", fail)
        monkeypatch.setattr("cemodel.compiler.probe_directory", fail)
        assert run_cli(["fit", BETA_BERNOULLI, "--data", tmp_path / "coins.npz", "--quiet",
                        "-o", tmp_path / "post.npz"]) == 0
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"warning: the kernel cache {cache} ")
        assert files.reason(OSError(code, "")) in err


# -- checkpoints --------------------------------------------------------------------------------


def test_a_fit_cleans_up_the_stale_temporaries_of_its_checkpoint(tmp_path, capsys):
    """Issue 19 item 10: a writer killed before its rename leaves .NAME.XXXXXXXX.tmp; the next
    fit with that checkpoint removes it, and nothing that is not its own."""
    np.savez(tmp_path / "coins.npz", **COINS)
    ckpt = tmp_path / "run.ckpt"
    stale = [tmp_path / ".run.ckpt.k2j_9x0a.tmp", tmp_path / ".run.ckpt.00000000.tmp"]
    others = [tmp_path / ".other.ckpt.k2j_9x0a.tmp", tmp_path / "run.ckpt.tmp",
              tmp_path / ".run.ckpt.toolongname.tmp", tmp_path / ".run.ckpt.k2j_9x0a.tmp.x"]
    for path in stale + others:
        path.write_bytes(b"PK\x03\x04 half a checkpoint")
    argv = ["fit", BETA_BERNOULLI, "--data", tmp_path / "coins.npz", "--quiet", "-o",
            tmp_path / "post.npz", "--checkpoint", ckpt]
    assert run_cli(argv) == 0
    assert not any(p.exists() for p in stale) and all(p.exists() for p in others)
    stale[0].write_bytes(b"PK\x03\x04 half a checkpoint")  # killed again, then resumed
    assert run_cli([*argv, "--resume", ckpt]) == 0
    assert not stale[0].exists() and ckpt.exists()


def test_a_checkpoint_that_cannot_be_written_stops_the_fit_cleanly(tmp_path, capsys):
    np.savez(tmp_path / "coins.npz", **COINS)
    (tmp_path / "run.ckpt").mkdir()
    refused(capsys, ["fit", BETA_BERNOULLI, "--data", tmp_path / "coins.npz", "--quiet",
                     "--checkpoint", tmp_path / "run.ckpt", "-o", tmp_path / "post.npz"],
            f"cannot write {tmp_path / 'run.ckpt'}: it is a directory")
    assert not (tmp_path / "post.npz").exists()


# -- Dask ---------------------------------------------------------------------------------------


def test_an_unreachable_scheduler_fails_fast(tmp_path, capsys):
    """Dask retries a refused connection for 30 s by default: a few seconds at most here."""
    pytest.importorskip("distributed")
    np.savez(tmp_path / "coins.npz", **COINS)
    start = time.perf_counter()
    refused(capsys, ["fit", BETA_BERNOULLI, "--data", tmp_path / "coins.npz", "--quiet",
                     "--scheduler", "tcp://127.0.0.1:1", "-o", tmp_path / "post.npz"],
            "error: cannot reach the Dask scheduler at tcp://127.0.0.1:1: Connection refused")
    assert time.perf_counter() - start < 10
    assert not (tmp_path / "post.npz").exists()


def test_a_stream_cache_that_cannot_be_written_is_a_clean_error(compiled, tmp_path):
    """--stream converts an .npz once under $CEMODEL_CACHE/streams: a cache there that is a
    file (or read-only) is 'cannot write', naming it and the way out."""
    from cemodel.streaming import open_source

    np.savez(tmp_path / "coins.npz", **COINS)
    (tmp_path / "cache").write_text("not a directory")
    module = compiled("beta_bernoulli")
    streams = tmp_path / "cache" / "streams"
    with pytest.raises(files.CemWriteError,
                       match=f"cannot write {streams}: a part of the path is a file") as info:
        open_source(tmp_path / "coins.npz", module.SPEC, "trials",
                    cache=streams)
    assert "CEMODEL_CACHE" in (info.value.hint or "")


def test_ctrl_c_while_an_archive_is_built_waits_for_it(tmp_path, monkeypatch):
    """A SIGINT that arrives inside np.savez is delivered when the in-memory archive is done
    (a KeyboardInterrupt inside zipfile's constructor printed a traceback from a half-built
    ZipFile's __del__ after the CLI's clean "interrupted" message); nothing is written."""
    import signal

    import numpy as np

    from cemodel import files

    real, finished = np.savez, []

    def savez(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C now, in the middle of the archive
        real(*args, **kwargs)
        finished.append(True)

    monkeypatch.setattr(np, "savez", savez)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            files.write_npz(tmp_path / "a.npz", {"x": np.zeros(3)})
    finally:
        signal.signal(signal.SIGINT, previous)
    assert finished == [True]
    assert list(tmp_path.iterdir()) == []
