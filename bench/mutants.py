"""A small mutation check: does the suite fail when the product is broken on purpose?

Each mutant replaces one snippet of one file (the snippet must occur exactly once) in a COPY of the
tree (``git ls-files`` of this checkout, the working copy's contents), then runs the tests that
should catch it, with this checkout's venv and the copy first on ``sys.path``. A mutant is
*killed* when those tests fail; a mutant that survives is a hole in the suite.

    .venv/bin/python bench/mutants.py                # every mutant; writes var/bench/mutants/MUTANTS.md + .json
    .venv/bin/python bench/mutants.py gate_flip ...  # some of them, no record
    .venv/bin/python bench/mutants.py gate_flip --record  # some of them, their rows replaced in the record
    .venv/bin/python bench/mutants.py --list

Not part of ``make test`` (each mutant costs a pytest start with torch, some a real comparison). The record
goes under ``var/`` (not in git); ``bench/RESULTS.md`` keeps the current table, copied from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
OUT = ROOT / "var" / "bench" / "mutants"


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str  # the break, in words
    file: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids / paths that must fail


MUTANTS: list[Mutant] = [
    Mutant("gate_flip", "flip a comparison in gates: >= reads as <=",
           "service/pipeline/verdict/gates.py", '">=": actual >= value', '">=": actual <= value',
           ("tests/pipeline/verdict/test_gates.py",)),
    Mutant("gate_worst_best", "a '*' gate judges the best artifact instead of the worst",
           "service/pipeline/verdict/gates.py", "        return min(values)\n", "        return max(values)\n",
           ("tests/pipeline/verdict/test_gates.py",)),
    Mutant("sqnr_doubled", "double every SQNR",
           "service/pipeline/runtime/numerics.py", "return max(_SQNR_FLOOR, 10.0 * math.log10(s / n))",
           "return max(_SQNR_FLOOR, 20.0 * math.log10(s / n))",
           ("tests/pipeline/scenarios/test_oracles.py::test_sqnr_of_a_known_noise_power",
            "tests/pipeline/scenarios/test_oracles.py::test_level_numerics_equal_a_recomputation_from_ort_outputs")),
    Mutant("sqnr_floor_off", "a zero reference with error reads as infinite (None) instead of the floor",
           "service/pipeline/runtime/numerics.py", "    if s == 0.0:\n        return _SQNR_FLOOR",
           "    if s == 0.0:\n        return None", ("tests/pipeline/scenarios/test_oracles.py::test_sqnr_of_a_zero_reference_is_the_floor",)),
    Mutant("cosine_zero_vectors", "cosine of two zero vectors reads 0",
           "service/pipeline/runtime/numerics.py", "    if na == 0.0 and nb == 0.0:\n        return 1.0",
           "    if na == 0.0 and nb == 0.0:\n        return 0.0",
           ("tests/pipeline/scenarios/test_oracles.py::test_cosine_of_zero_parallel_and_opposite_vectors",)),
    Mutant("drift_steps_off", "drift in steps divides by twice the step",
           "service/pipeline/runtime/numerics.py", "drift_steps = drift / steps[k]", "drift_steps = drift / (2 * steps[k])",
           ("tests/pipeline/scenarios/test_oracles.py::test_max_abs_error_and_drift_in_steps",)),
    Mutant("scale_scaled", "every reported scale x 1.01",
           "service/pipeline/inspect/inventory.py",
           "scale = np.atleast_1d(np.asarray(scale if scale is not None else [np.nan], dtype=np.float64))",
           "scale = 1.01 * np.atleast_1d(np.asarray(scale if scale is not None else [np.nan], dtype=np.float64))",
           ("tests/pipeline/scenarios/test_core.py::test_op_zoo_inventory_matches_the_file",)),
    Mutant("bias_flag_constant", "the bias-scale check always says it matches",
           "service/pipeline/inspect/inventory.py",
           "return bool(np.allclose(np.ravel(s_b), np.ravel(s_x * s_w), rtol=1e-5, atol=0))", "return True",
           ("tests/pipeline/scenarios/test_oracles.py::test_int32_bias_scale_is_input_scale_times_weight_scale_in_the_file",)),
    Mutant("op_key_no_domain", "histogram keys drop the domain (QLinearConv and com.microsoft.QLinearConv merge)",
           "service/pipeline/vocabulary.py",
           'return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"',
           "return node.op_type", ("tests/pipeline/scenarios/test_oracles.py::test_level_histograms_are_ort_saved_graphs",)),
    Mutant("archive_traversal", "turn off a safety check: '..' in an archive member is accepted",
           "service/pipeline/inputs/safety/archives.py", 'if any(p in (".", "..") for p in parts) or not parts or len(parts) > 2:',
           "if not parts or len(parts) > 2:", ("tests/safety/test_safety_archives.py",)),
    Mutant("u8s8_lint_off", "the AVX2-without-VNNI saturation lint never fires",
           "service/pipeline/verdict/lints.py", "and runs_u8 and s8_weights and not reduce_range:",
           "and runs_u8 and s8_weights and not reduce_range and False:", ("tests/pipeline/verdict/test_lints.py",)),
    Mutant("healthz_met_ignores_jobs", "the bench /healthz target ignores whether the jobs succeeded",
           "bench/run.py", 'and h.get("jobs_submitted", 2) == h.get("jobs_succeeded") and bool(h.get("requests"))',
           'and bool(h.get("requests"))', ("tests/bench/test_bench_checks.py",)),
    Mutant("upload_met_ignores_status", "the bench upload target ignores the HTTP status",
           "bench/run.py", 'return u.get("status") in (200, 202) and u.get("growth_mb") is not None',
           'return u.get("growth_mb") is not None', ("tests/bench/test_bench_checks.py",)),
    Mutant("ci_only_true", "a skip hides again: only CI=true counts as CI (CI=1 or yes would skip a missing tool)",
           "tests/missing_tools.py", 'return os.environ.get("CI", "").strip().lower() not in _FALSY',
           'return os.environ.get("CI", "") == "true"', ("tests/test_missing_tools.py",)),
    Mutant("qdq_upload_requantized", "a corpus outcome moves: a QDQ upload is no longer seen as already quantized",
           "service/pipeline/quantize/already_quantized.py", "    if not ops:\n        return None",
           '    if not ops or "DequantizeLinear" in ops:\n        return None',
           ("tests/realworld/test_corpus.py::test_corpus_model_returns_a_report_with_every_path_explained[already_quantized_qdq]",)),
    Mutant("histogram_search_float64", "the histogram search compares in float64, not torch's float32",
           "service/pipeline/quantize/shortcuts/pt2e.py", "            low = float(f32(next_alpha * total))",
           "            low = next_alpha * total",
           ("tests/pipeline/quantize/test_pt2e_shortcuts.py",)),
    Mutant("level_digest_names", "the level graph digest keeps node names (ORT varies them per session)",
           "service/pipeline/runtime/level_graphs.py", '        n.name = ""\n', "        pass\n",
           ("tests/pipeline/runtime/test_level_graphs.py",)),
    Mutant("advice_never_settles", "advice timing stops after the fewest pairs whatever they show",
           "service/pipeline/advice/advice.py",
           "        return (hi <= threshold and verdict_ratio <= threshold) or (lo > threshold and verdict_ratio > threshold)",
           "        return True", ("tests/pipeline/advice/test_advice.py",)),
    Mutant("calibration_all_ops", "calibration with the weights on disk calibrates every op type",
           "service/pipeline/quantize/ort_calibration.py",
           "    op_types = op_types or sorted(set(QLinearOpsRegistry) | set(QDQRegistry))  # quantize_static's default",
           "    op_types = op_types or []", ("tests/pipeline/quantize/test_ort_calibration.py",)),
    Mutant("layers_keep_previous_file", "the layers stage keeps the previous file's tensors while the next file runs",
           "service/pipeline/layers/layers.py", "                    got = value = None\n                    got = ctx.run(feed)",
           "                    got = ctx.run(feed)", ("tests/pipeline/layers/test_layers.py",)),
    Mutant("pt2e_outputs_torch_named", "the PT2E file of an ONNX upload keeps torch's output names",
           "service/pipeline/quantize/pt2e.py", "[o.name for o in source.onnx_model.graph.output] if source.onnx_model is not None else None",
           "None", ("tests/pipeline/quantize/onnx_torch/test_io_names.py",)),
    Mutant("converter_keeps_every_value", "the converted module's forward keeps every value to the end",
           "service/pipeline/quantize/onnx_torch/module.py", "            runner.run_node(node, scope, main=True)\n            _free(scope, frees)",
           "            runner.run_node(node, scope, main=True)", ("tests/pipeline/quantize/onnx_torch/test_converter_core.py",)),
    Mutant("unstable_fp32_unflagged", "an fp32 output that ORT's float rewrites move below 40 dB is not flagged",
           "service/pipeline/verdict/reference_noise.py", "UNSTABLE_DB = 40.0", "UNSTABLE_DB = -100.0",
           ("tests/pipeline/verdict/test_lints.py",)),
    Mutant("outputs_read_no_input", "a graph whose outputs read no input is taken (it 'succeeded' at 139 dB)",
           "service/pipeline/inputs/safety/onnx_checks.py", "    if any(o.name in reached for o in g.output):\n        return",
           "    if True:\n        return", ("tests/safety/test_hostile_structure.py::test_outputs_that_read_no_input_are_refused",)),
    Mutant("union_find_no_compression", "the iterative union-find stops pointing the path at the root",
           "service/pipeline/quantize/shortcuts/pt2e.py", "        shared_with_map[on_the_way] = node\n",
           "        pass\n",
           ("tests/pipeline/quantize/test_pt2e_shortcuts.py::test_the_loop_leaves_every_union_find_map_as_torchao_s_recursion_does",)),
    Mutant("postgres_no_write_lock", "PostgreSQL transactions run without the store's write lock",
           "service/jobs/db/postgres.py", '                conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (WRITE_LOCK_KEY,))\n',
           "", ("tests/jobs/test_store_backends.py",)),
    Mutant("bucket_report_first", "a bucket's report is stored before the artifacts it lists",
           "service/jobs/storage/bucket.py", "        stored = self._job_objects(job_id)\n        stored_inputs",
           "        if stored_report(folder) is not None:\n            self._put(self._key(job_id, stored_report(folder).name), "
           "stored_report(folder).read_bytes())\n        stored = self._job_objects(job_id)\n        stored_inputs",
           ("tests/jobs/test_bucket_files.py::test_a_reader_never_sees_the_report_before_every_artifact",)),
]


def copy_tree(dest: Path) -> None:
    """The files git tracks (and any new ones it does not ignore), as they are in this checkout."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def apply(m: Mutant, tree: Path) -> None:
    path = tree / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.id}: the snippet occurs {text.count(m.old)} times in {m.file} (the code moved: "
                         "update the mutant)")
    path.write_text(text.replace(m.old, m.new))


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "tests" / "jobs")]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    t = time.perf_counter()
    proc = subprocess.run(["nice", "-n", "10", PY, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    tail = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or [proc.stderr[-200:]]
    return proc.returncode, time.perf_counter() - t, tail[0]


def check_isolation(tree: Path) -> None:
    """The copy, not this checkout, is what the tests import."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([PY, "-c", "import service; print(service.__file__)"], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    if not out.startswith(str(tree)):
        raise SystemExit(f"the copy is not what gets imported: service comes from {out}")


def main(argv: list[str]) -> int:
    if "--list" in argv:
        for m in MUTANTS:
            print(f"{m.id:28} {m.file:45} {m.what}")
        return 0
    chosen = [a for a in argv if not a.startswith("--")]
    mutants = [m for m in MUTANTS if not chosen or m.id in chosen]
    unknown = set(chosen) - {m.id for m in MUTANTS}
    if unknown:
        raise SystemExit(f"unknown mutants: {', '.join(sorted(unknown))}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="qc-mutants-") as tmp:
        base = Path(tmp) / "base"
        copy_tree(base)
        check_isolation(base)
        # control: the unmutated copy passes the same tests, so a failure below is the mutant's doing
        for tests in sorted({m.tests for m in mutants}):
            rc, secs, tail = run_tests(base, tests, timeout=1800)
            print(f"control {' '.join(tests)}: rc={rc} ({secs:.0f}s) {tail}", flush=True)
            if rc != 0:
                raise SystemExit(f"the unmutated tree fails {tests}: fix that first")
        for m in mutants:
            tree = Path(tmp) / m.id
            shutil.copytree(base, tree)
            apply(m, tree)
            rc, secs, tail = run_tests(tree, m.tests, timeout=1800)
            killed = rc != 0
            rows.append({"id": m.id, "what": m.what, "file": m.file, "tests": list(m.tests), "killed": killed,
                         "seconds": round(secs, 1), "pytest": tail})
            print(f"{'KILLED ' if killed else 'SURVIVED'} {m.id}: {tail} ({secs:.0f}s)", flush=True)
            shutil.rmtree(tree, ignore_errors=True)
    survived = [r["id"] for r in rows if not r["killed"]]
    if not chosen:
        record(rows)
    elif "--record" in argv:  # re-ran some mutants: replace their rows in the last full record
        raw = OUT / "MUTANTS.json"
        previous = json.loads(raw.read_text()) if raw.exists() else []
        fresh = {r["id"]: r for r in rows}
        merged = [fresh.pop(r["id"], r) for r in previous] + list(fresh.values())
        record(merged, rerun=sorted({r["id"] for r in rows}))
    print(f"{len(rows) - len(survived)}/{len(rows)} mutants killed" + (f"; SURVIVED: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


def record(rows: list[dict], rerun: list[str] | None = None) -> None:
    lines = ["# Mutation check (`bench/mutants.py`, issue 19)", "",
             f"Run {datetime.now(timezone.utc).isoformat(timespec='seconds')}: each mutant is applied to a copy of the tree "
             "and the listed tests are run there (after the same tests passed on the unmutated copy). "
             "Killed = those tests failed." + (f" Re-run in this record: {', '.join(rerun)}." if rerun else ""), "",
             "| mutant | break | file | tests | killed | s |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['what']} | `{r['file']}` | {', '.join(f'`{t}`' for t in r['tests'])} | "
                     f"{'yes' if r['killed'] else '**NO**'} | {r['seconds']} |")
    killed = sum(r["killed"] for r in rows)
    lines += ["", f"{killed}/{len(rows)} mutants killed.", ""]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "MUTANTS.md").write_text("\n".join(lines))
    (OUT / "MUTANTS.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
