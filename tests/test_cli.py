"""``quantcompare compare``: what a person runs, in a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "service.cli"]


def _run(*args, cwd=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def conv_relu_cli(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "out"
    proc = _run("compare", "--example", "conv_relu", "--options", '{"latency": {"runs": 2, "warmup": 1}}',
                "--out", str(out))
    return proc, out


def test_compare_writes_report_and_every_artifact(conv_relu_cli):
    proc, out = conv_relu_cli
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["schema_version"] == "1"
    names = {p.name for p in (out / "artifacts").iterdir()}
    for art in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator"):
        assert f"{art}.onnx" in names
        assert f"{art}.all.onnx" in names and f"{art}.disable_all.onnx" in names


def test_summary_fits_one_screen_and_names_each_artifact(conv_relu_cli):
    proc, _ = conv_relu_cli
    lines = proc.stdout.splitlines()
    # One screen of a 60-line terminal. Sections grow with what the CPU makes differ from the chapter:
    # on an x86 with VNNI ORT's uint8 QOperator candidate is adopted (an advice row) and the platform
    # notes name the int8 dot product, 51 lines for conv_relu, where an x86 without VNNI printed 50. The headline
    # (issue 52: the sentence and a line per card) adds 4; decisions alike for every artifact share one line.
    assert len(lines) <= 60
    text = proc.stdout
    for art in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        assert art in text
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


def test_the_structure_table_is_printed_as_soon_as_the_level_graphs_exist(conv_relu_cli):
    """On stderr, before the accuracy runs: the files and the level graphs with the decisions, no figure
    measured on a sample yet (issue 39); stdout keeps the one finished summary."""
    proc, _ = conv_relu_cli
    early = proc.stderr
    assert "(partial: files, level_graphs done; the rest follows)" in early
    assert "artifact      status" in early and "int8 coverage per level" in early and "decision" in early
    assert "timings:" not in early and "per-tensor error (" not in early and "advice (re-run" not in early
    assert "(partial" not in proc.stdout and "timings:" in proc.stdout


def test_compare_an_uploaded_onnx_file(tiny_onnx_models, tmp_path):
    proc = _run("compare", str(tiny_onnx_models["tiny_conv_net"]), "--options", '{"latency": {"enabled": false}}',
                "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["model"]["format"] == "onnx"
    assert report["artifacts"]["ort_qdq"]["status"] == "ok"


def test_a_second_run_into_the_same_out_folder_works_and_leaves_the_model_alone(tiny_onnx_models, tmp_path):
    """A rerun found artifacts/fp32.onnx there and stopped with 'internal_error: SameFileError'. And
    that file was a hard link to the user's model: saving the model again in place changed the
    earlier report's reference under its sha256; it is a copy now."""
    import shutil

    model = tmp_path / "mine" / "model.onnx"
    model.parent.mkdir()
    shutil.copyfile(tiny_onnx_models["tiny_conv_net"], model)
    before = model.read_bytes()
    for _ in range(2):
        proc = _run("compare", str(model), "--options", '{"latency": {"enabled": false}, "advice": {"enabled": false}, '
                    '"layers": {"enabled": false}}', "--out", str(tmp_path / "o"), "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert model.read_bytes() == before
    stored = tmp_path / "o" / "artifacts" / "fp32.onnx"
    assert stored.read_bytes() == before and not stored.samefile(model)
    model.write_bytes(b"the user saved another model here")
    assert stored.read_bytes() == before


@pytest.mark.parametrize("args, needle", [
    (["--example", "nope"], "unknown example"),
    (["--example", "conv_relu", "--options", "{not json"], "not valid JSON"),
    (["--example", "conv_relu", "--options", '{"calibration_samples": 0}'], "calibration_samples"),
    (["/nonexistent/model.onnx"], "no such model file"),
], ids=["unknown example", "options not JSON", "option out of range", "missing file"])
def test_refusals_exit_2_with_a_message_and_no_traceback(tmp_path, args, needle):
    proc = _run("compare", *args, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert needle in proc.stderr and "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_out_folder_that_cannot_be_made_exits_2_naming_it(tmp_path, where):
    """--out naming an existing file (or a folder under one) was exit 3, 'a quantcompare bug'
    (FileExistsError / NotADirectoryError from mkdir)."""
    (tmp_path / "taken").write_text("a file")
    out = tmp_path / "taken" if where == "a file" else tmp_path / "taken" / "o"
    proc = _run("compare", "--example", "conv_relu", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "invalid_options" in proc.stderr and "--out" in proc.stderr and "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr and "bug" not in proc.stderr


@pytest.mark.parametrize("content", [b"", b"\x00garbage" * 10, b"\x80\x04\x95 pickle"], ids=["empty", "random", "pickle"])
def test_bad_bytes_exit_2_with_invalid_model(tmp_path, content):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    proc = _run("compare", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    assert "invalid_model" in proc.stderr and "Traceback" not in proc.stderr


def test_a_failing_gate_exits_1(tmp_path):
    gates = '{"latency": {"enabled": false}, "gates": [{"artifact": "ort_qdq", "level": "all", "metric": "sqnr_db", "op": ">=", "value": 1000}]}'
    proc = _run("compare", "--example", "conv_relu", "--options", gates, "--out", str(tmp_path / "o"))
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stdout


def test_names_from_the_upload_cannot_drive_the_terminal(tmp_path):
    """An input named 'x\\x1b[31mRED' was printed as is: the summary turned the reader's terminal red
    (or worse: escape sequences can retitle windows, move the cursor, hide lines)."""
    from tests import models

    name = "x\x1b[31mRED\x07"
    models.save("matmul", tmp_path / "m.onnx", x=name, x_shape=[2, 4], w=(4, 4), ir=9)
    proc = _run("compare", str(tmp_path / "m.onnx"), "--options",
                '{"latency": {"enabled": false}, "advice": {"enabled": false}, "layers": {"enabled": false}, '
                '"levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1}', "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert "x?[31mRED?" in proc.stdout  # the name is still shown, its control characters as '?'
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["model"]["inputs"][0]["name"] == name  # the JSON keeps the exact name


def test_an_internal_error_exits_3_not_2(monkeypatch, tmp_path, capsys):
    """2 says "your input was refused, fix it"; a bug in quantcompare must not read like that to CI."""
    import service.cli as cli

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "run_comparison", broken)
    assert cli.main(["compare", "--example", "conv_relu", "--out", str(tmp_path / "o"), "-q"]) == 3
    assert "internal_error: RuntimeError: a bug" in capsys.readouterr().err


def test_a_model_with_its_external_data_beside_it_is_read_where_it_lies(tmp_path):
    """torch.onnx.export(dynamo=True) writes model.onnx + model.onnx.data by default; the CLI refused
    it ("refers to external data file ..., which was not uploaded with the model"). The user's two
    files are read in place and copied, never moved, into the artifacts."""
    import onnx

    from tests import models

    folder = tmp_path / "export"
    folder.mkdir()
    onnx.save(models.build("matmul_relu", x_shape=[2, 3], w=(3, 64), ir=9), folder / "m.onnx",
              save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(before) == {"m.onnx", "m.onnx.data"}
    proc = _run("compare", str(folder / "m.onnx"), "--options",
                '{"latency": {"enabled": false}, "advice": {"enabled": false}, "layers": {"enabled": false}, '
                '"levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1}', "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert {n: a["status"] for n, a in report["artifacts"].items()} == dict.fromkeys(
        ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator"), "ok")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # the user's files, untouched
    assert (tmp_path / "o" / "artifacts" / "m.onnx.data").read_bytes() == before["m.onnx.data"]
    # a data file that is not there is named
    (folder / "m.onnx.data").unlink()
    proc = _run("compare", str(folder / "m.onnx"), "--out", str(tmp_path / "o2"))
    assert proc.returncode == 2 and "'m.onnx.data', which is not among the files given" in proc.stderr, proc.stderr


def test_a_full_disk_says_so_and_exits_2_not_3(tmp_path):
    """Writing report.json onto a full disk (here /dev/full, whose writes fail with ENOSPC in the
    kernel) surfaced as internal_error, exit 3: "a quantcompare bug". It is the machine's state."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "report.json").symlink_to("/dev/full")
    proc = _run("compare", "--example", "conv_relu", "--options",
                '{"latency": {"enabled": false}, "advice": {"enabled": false}, "layers": {"enabled": false}, '
                '"levels": ["disable_all"], "artifacts": ["ort_qdq"], "calibration_samples": 2, "eval_samples": 1}',
                "--out", str(out), "-q")
    assert proc.returncode == 2, proc.stderr
    assert "error: disk_full: no space left on the disk while running `quantcompare compare`" in proc.stderr
    assert "free space" in proc.stderr and "Traceback" not in proc.stderr


def test_a_reader_that_leaves_early_does_not_change_the_exit_code(tmp_path):
    """`quantcompare compare ... | head`: the pipe closes before the summary is written. The report is on disk
    and the exit code is still the verdict's (0: no gate failed), not a broken pipe read as a failed gate or a bug."""
    proc = subprocess.Popen([*CLI, "compare", "--example", "conv_relu", "--options", '{"latency": {"enabled": false}}',
                             "--out", str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is printed
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    assert (tmp_path / "o" / "report.json").is_file()
