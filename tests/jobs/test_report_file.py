"""The stored report: compressed, atomic, and what a reader gets back is the JSON as written."""

from __future__ import annotations

import gzip
import json

import pytest

from service.jobs.storage.report_file import has_report, read_report_bytes, remove_report, write_report


def test_the_report_is_stored_compressed_and_read_back_as_written(tmp_path):
    text = json.dumps({"id": "x", "artifacts": {"a": {"nodes": [{"op_type": "Conv"}] * 2000}}})
    path = write_report(tmp_path, text)
    assert path.name == "report.json.gz" and has_report(tmp_path)
    assert read_report_bytes(tmp_path).decode() == text
    assert path.stat().st_size * 10 < len(text)  # node lists repeat: it compresses
    assert not list(tmp_path.glob("*.tmp"))
    # Deterministic bytes: the same report, the same file.
    first = path.read_bytes()
    write_report(tmp_path, text)
    assert path.read_bytes() == first and gzip.decompress(first).decode() == text


def test_a_folder_written_before_compression_is_read_as_it_is(tmp_path):
    (tmp_path / "report.json").write_text('{"id": "old"}')
    assert has_report(tmp_path) and read_report_bytes(tmp_path) == b'{"id": "old"}'
    write_report(tmp_path, '{"id": "new"}')  # a re-run replaces it: one report per folder
    assert not (tmp_path / "report.json").exists() and read_report_bytes(tmp_path) == b'{"id": "new"}'
    remove_report(tmp_path)
    assert not has_report(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_report_bytes(tmp_path)


def test_a_damaged_report_reads_as_an_os_error_which_the_api_treats_as_absent(tmp_path):
    good = write_report(tmp_path, '{"id": "x"}').read_bytes()
    for damaged in (good[: len(good) // 2], b"not gzip at all"):
        (tmp_path / "report.json.gz").write_bytes(damaged)
        with pytest.raises(OSError):
            read_report_bytes(tmp_path)
