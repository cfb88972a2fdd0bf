"""cemodel.datasets: the GCIDE reader (dictd index + dict.dz, markup, the .deb), offline.

Everything runs on a tiny synthetic dictionary written to tmp_path; nothing is downloaded
(the system's /usr/share/dictd is hidden, and apt-get is replaced where the loader would call it).
"""

from __future__ import annotations

import gzip
import io
import lzma
import subprocess
import tarfile

import numpy as np
import pytest

from cemodel import datasets
from cemodel.datasets import (
    decode_dictd_number,
    dictd_entries,
    gcide_documents,
    is_dictd_metadata,
    parse_dictd_index,
    strip_gcide_markup,
)
from cemodel.errors import CemDataError, CemError

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

# A dictd text: a metadata entry, then entries in GCIDE's markup. Seven entries mention
# "vessel" and "water" so that they survive a min_df = 5 filter.
ENTRIES = [
    ("00-database-short", "00-database-short\n   A test dictionary of ships\n"),
    ("Ship", "Ship \\Ship\\ (sh[i^]p), n. [AS. scip, tre['o]w.]\n"
             "   A large vessel on the {open water}; a boat.\n   [1913 Webster]\n\n"
             "   Syn: boat, vessel.\n        [WordNet 1.5 +PJC]\n"),
    ("Boat", "Boat \\Boat\\ (b[=o]t), n. [Obs.]\n   A small vessel for water; [root]3 oars.\n"
             "   [1913 Webster +PJC]\n"),
    ("Raft", "Raft \\Raft\\, n.\n   A flat vessel or boat floating on water.\n   [1913 Webster]\n"),
    ("Canoe", "Canoe \\Ca*noe\"\\, n.\n   A light vessel moved on water by paddles.\n"
              "   Note: The canoe is narrow.\n   [Webster 1913 Suppl.]\n"),
    ("Barge", "Barge \\Barge\\, n.\n   A vessel for freight on water; a boat.\n   [PJC]\n"),
    ("Ferry", "Ferry \\Fer\"ry\\, n.\n   A vessel that carries people over water.\n"
              "   [1913 Webster]\n"),
    ("Yacht", "Yacht \\Yacht\\ (y[o^]t), n.\n   A vessel for pleasure on water; a boat.\n"
              "   [1913 Webster]\n"),
]
# index lines: each entry under its own headword; "Shipping" and "Sea boat" point into the
# entries of "Ship" and "Boat"; "Vessel" points to two entries; 00-gcide-short repeats the
# metadata entry, as GCIDE's index does
EXTRA = [("Shipping", 1), ("Sea boat", 2), ("Vessel", 1), ("Vessel", 3), ("00-gcide-short", 0)]


def encode(number: int) -> str:
    digits = ""
    while True:
        digits = ALPHABET[number % 64] + digits
        number //= 64
        if number == 0:
            return digits


def write_dictionary(directory, padding: int = 5000):
    """gcide.index and gcide.dict.dz in directory; entries start after `padding` bytes, so
    offsets take several base-64 digits. Returns (index path, dict path, raw text bytes)."""
    raw = bytearray(b"#" * padding)
    spans = []
    for _, text in ENTRIES:
        data = text.encode("utf-8")
        spans.append((len(raw), len(data)))
        raw += data + b"\n"
    lines = [f"{name}\t{encode(spans[i][0])}\t{encode(spans[i][1])}"
             for i, (name, _) in enumerate(ENTRIES)]
    lines += [f"{name}\t{encode(spans[i][0])}\t{encode(spans[i][1])}" for name, i in EXTRA]
    index = directory / "gcide.index"
    index.write_text("\n".join(sorted(lines)) + "\n", encoding="utf-8")
    dict_dz = directory / "gcide.dict.dz"
    dict_dz.write_bytes(gzip.compress(bytes(raw)))
    return index, dict_dz, bytes(raw)


def write_deb(path, files: dict[str, bytes]) -> None:
    """A minimal .deb: an ar archive with debian-binary, control.tar.xz and data.tar.xz."""

    def tar_xz(members: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, content in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        return lzma.compress(buffer.getvalue())

    members = [("debian-binary", b"2.0\n"),
               ("control.tar.xz", tar_xz({"./control": b"Package: dict-gcide\n"})),
               ("data.tar.xz", tar_xz(files))]
    out = bytearray(b"!<arch>\n")
    for name, data in members:
        header = (f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}").encode()
        out += header + b"`\n" + data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(bytes(out))


# ---------------------------------------------------------------------------------------------
# the index: base-64 numbers, lines, metadata
# ---------------------------------------------------------------------------------------------


def test_dictd_numbers_are_base64_most_significant_first() -> None:
    assert decode_dictd_number("A") == 0
    assert decode_dictd_number("z") == 51
    assert decode_dictd_number("9") == 61
    assert decode_dictd_number("+") == 62
    assert decode_dictd_number("/") == 63
    assert decode_dictd_number("BA") == 64
    assert decode_dictd_number("Kj") == 10 * 64 + 35  # 00-database-info in GCIDE's index
    assert decode_dictd_number("Bchrk") == (((1 * 64 + 28) * 64 + 33) * 64 + 43) * 64 + 36
    for number in (0, 1, 63, 64, 4095, 4096, 39_952_096):
        assert decode_dictd_number(encode(number)) == number
    with pytest.raises(CemDataError, match="not a base-64 number"):
        decode_dictd_number("A=")
    with pytest.raises(CemDataError, match="empty"):
        decode_dictd_number("")


def test_index_lines_parse_and_bad_lines_are_named() -> None:
    text = "Ship\tBA\tC\r\nSea boat\tz\t/\n\n"
    assert parse_dictd_index(text) == [("Ship", 64, 2), ("Sea boat", 51, 63)]
    with pytest.raises(CemDataError, match="line 2"):
        parse_dictd_index("Ship\tBA\tC\nBroken line\n")


def test_metadata_headwords() -> None:
    for name in ("00-database-info", "00-database-short", "00databaseurl", "00-gcide-long",
                 "00-web1913-info"):
        assert is_dictd_metadata(name), name
    for name in ("0", "00", "1000th", "Ship", "database"):
        assert not is_dictd_metadata(name), name


# ---------------------------------------------------------------------------------------------
# entries: slicing by offset and length, grouping, metadata skipped
# ---------------------------------------------------------------------------------------------


def test_entries_are_sliced_by_offset_and_length(tmp_path) -> None:
    index, dict_dz, raw = write_dictionary(tmp_path)
    decompressed = gzip.decompress(dict_dz.read_bytes())
    assert decompressed == raw
    entries = dictd_entries(index.read_text(encoding="utf-8"), decompressed)
    texts = [text for _, text in entries]
    # the metadata entry is skipped (under both 00-database-short and 00-gcide-short)
    assert texts == [text for name, text in ENTRIES[1:]]
    assert not any("test dictionary" in text for text in texts)
    headwords = {names[0]: set(names) for names, _ in entries}  # the index is sorted
    assert headwords["Ship"] == {"Ship", "Shipping", "Vessel"}
    assert headwords["Boat"] == {"Boat", "Sea boat"}
    assert headwords["Raft"] == {"Raft", "Vessel"}
    assert headwords["Yacht"] == {"Yacht"}


def test_an_entry_past_the_end_is_an_error() -> None:
    with pytest.raises(CemDataError, match="past the end"):
        dictd_entries("Ship\tA\tBA\n", b"short")


def test_non_utf8_entries_are_read_as_windows_1252() -> None:
    entries = dictd_entries("Ship\tA\tL\n", b"Ship\x92s mast")
    assert entries == [(("Ship",), "Ship\u2019s mast")]


# ---------------------------------------------------------------------------------------------
# markup
# ---------------------------------------------------------------------------------------------


def test_markup_is_stripped() -> None:
    text = strip_gcide_markup(ENTRIES[1][1])
    assert "Webster" not in text and "WordNet" not in text and "PJC" not in text
    assert "\\" not in text and "sh" not in text.split()  # \Ship\ (sh[i^]p) removed
    assert text.startswith("Ship")  # the headword itself stays
    assert "treow" in text  # tre['o]w: the accent code is dropped, the letter kept
    assert "{" not in text and "}" not in text and "open water" in text
    assert "Syn:" not in text and "boat, vessel" in text
    boat = strip_gcide_markup(ENTRIES[2][1])
    assert "[Obs.]" in boat  # a usage label is text, not markup
    assert "root" not in boat and " 3 oars" in boat  # [root]3 is a symbol
    assert "Note:" not in strip_gcide_markup(ENTRIES[4][1])
    assert strip_gcide_markup("d[ae]mon, [=a]ble, [a^]ble, [oo^]ze, b[aum]r, [thorn]ing") == (
        "daemon, able, able, ooze, bar, thing")


def test_documents_per_entry_and_per_headword(tmp_path) -> None:
    index, dict_dz, _ = write_dictionary(tmp_path)
    index_text = index.read_text(encoding="utf-8")
    dictionary = gzip.decompress(dict_dz.read_bytes())
    entries = gcide_documents(index_text, dictionary)
    assert len(entries) == len(ENTRIES) - 1
    assert entries[0].startswith("Ship") and "vessel" in entries[0]
    by_headword = gcide_documents(index_text, dictionary, documents="headwords")
    # distinct headwords, metadata skipped: 7 entries' own + Shipping, Sea boat, Vessel
    assert len(by_headword) == len(ENTRIES) - 1 + 3
    vessel = next(doc for doc in by_headword if doc.startswith("Ship") and "Raft" in doc)
    assert "large vessel" in vessel and "flat vessel" in vessel  # both of Vessel's entries
    with pytest.raises(CemError, match="documents="):
        gcide_documents(index_text, dictionary, documents="pages")


# ---------------------------------------------------------------------------------------------
# counts, the .deb, the loader (no download)
# ---------------------------------------------------------------------------------------------


def test_counts_from_the_files(tmp_path) -> None:
    pytest.importorskip("sklearn")
    index, dict_dz, _ = write_dictionary(tmp_path)
    X, vocab = datasets.gcide_from_files(index, dict_dz, min_df=1)
    assert X.dtype == np.float64 and X.shape == (len(ENTRIES) - 1, len(vocab))
    assert vocab == sorted(vocab)
    for word in ("the", "a", "on", "for"):  # English stop words
        assert word not in vocab
    for word in ("webster", "wordnet", "pjc", "syn", "note"):  # markup
        assert word not in vocab
    assert {"ship", "vessel", "water", "treow", "obs"} <= set(vocab)
    ship = dict(zip([vocab[j] for j in X[0].indices], X[0].data, strict=True))
    assert ship["vessel"] == 2 and ship["boat"] == 2 and ship["ship"] == 1
    X5, vocab5 = datasets.gcide_from_files(index, dict_dz)  # min_df = 5
    assert vocab5 == ["boat", "vessel", "water"]
    assert X5.shape == (len(ENTRIES) - 1, 3)
    assert np.all(X5.getnnz(axis=1) > 0)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No system dictd files, and apt-get replaced by a function that fails the test."""
    monkeypatch.setattr(datasets, "_GCIDE_SYSTEM_DIR", tmp_path / "no-dictd")

    def no_download(*args, **kwargs):
        raise AssertionError(f"the test tried to run {args}")

    monkeypatch.setattr(datasets, "_apt_download", no_download)
    return tmp_path


def test_load_gcide_from_a_deb_in_the_cache_dir_then_from_the_cache(offline) -> None:
    pytest.importorskip("sklearn")
    source = offline / "src"
    source.mkdir()
    index, dict_dz, _ = write_dictionary(source)
    cache = offline / "cache"
    cache.mkdir()
    deb = cache / "dict-gcide_0.48.5_all.deb"
    write_deb(deb, {"./usr/share/dictd/gcide.index": index.read_bytes(),
                    "./usr/share/dictd/gcide.dict.dz": dict_dz.read_bytes(),
                    "./usr/share/doc/dict-gcide/copyright": b"GPL\n"})
    X, vocab = datasets.load_gcide(cache)
    assert vocab == ["boat", "vessel", "water"] and X.shape == (len(ENTRIES) - 1, 3)
    assert (cache / "gcide-v1.npz").exists() and (cache / "gcide-v1.vocab.txt").exists()
    Xh, vocab_h = datasets.load_corpus("gcide-headwords", cache)
    assert Xh.shape == (len(ENTRIES) - 1 + 3, 3) and vocab_h == vocab
    deb.unlink()  # now only the cache can answer
    X2, vocab2 = datasets.load_corpus("gcide", cache)
    assert vocab2 == vocab and (X2 != X).nnz == 0



def test_gcide_texts_are_the_entries_markup_stripped(offline) -> None:
    """gcide_texts reads a .deb in the cache directory (nothing downloaded): one text per
    distinct entry, metadata skipped, the same texts gcide_documents gives."""
    index, dict_dz, raw = write_dictionary(offline)
    cache = offline / "cache"
    cache.mkdir()
    write_deb(cache / "dict-gcide_0.48.5_all.deb",
              {"./usr/share/dictd/gcide.index": index.read_bytes(),
               "./usr/share/dictd/gcide.dict.dz": dict_dz.read_bytes()})
    texts = datasets.gcide_texts(cache)
    assert texts == gcide_documents(index.read_text(encoding="utf-8"), raw)
    assert len(texts) == len(ENTRIES) - 1 and texts[0].startswith("Ship")
    assert "A large vessel on the open water" in texts[0]
    assert not any("Webster" in text or "00-database" in text for text in texts)

def test_a_deb_without_the_files_is_a_clear_error(tmp_path) -> None:
    deb = tmp_path / "dict-gcide_0_all.deb"
    write_deb(deb, {"./usr/share/doc/readme": b"nothing\n"})
    with pytest.raises(CemDataError, match="has no gcide.index, gcide.dict.dz"):
        datasets.gcide_from_deb(deb)
    bad = tmp_path / "not.deb"
    bad.write_bytes(b"PK\x03\x04")
    with pytest.raises(CemDataError, match="not a Debian package"):
        datasets.gcide_from_deb(bad)


def test_without_apt_get_the_error_says_what_to_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(datasets, "_GCIDE_SYSTEM_DIR", tmp_path / "no-dictd")
    monkeypatch.setattr(datasets.shutil, "which", lambda name: None)
    with pytest.raises(CemDataError) as info:
        datasets.load_gcide(tmp_path / "cache")
    message = str(info.value)
    assert "apt-get is not available" in message
    assert "apt-get download dict-gcide" in message


def test_a_failed_download_says_what_to_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(datasets, "_GCIDE_SYSTEM_DIR", tmp_path / "no-dictd")
    monkeypatch.setattr(datasets.shutil, "which", lambda name: f"/usr/bin/{name}")
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 100, "",
                                           "E: Unable to locate package dict-gcide\n")

    monkeypatch.setattr(datasets.subprocess, "run", fake_run)
    with pytest.raises(CemDataError) as info:
        datasets.load_gcide(tmp_path / "cache")
    assert calls == [["/usr/bin/apt-get", "download", "dict-gcide"]]
    message = str(info.value)
    assert "exited with 100" in message and "Unable to locate package" in message
    assert "apt-get update" in message and "apt-get download dict-gcide" in message
