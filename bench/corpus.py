"""Run the whole real-world corpus and print, per model, each path's status and time, and the share
of paths that succeeded.  Usage: .venv/bin/python bench/corpus.py [--full] [--install] [name ...]

Small calibration/eval counts, latency off: this measures whether each path works, not speed.
A pt2e_qdq cell of an ONNX upload also shows its ONNX -> torch conversion seconds (specialize, build,
parity run, torch.export: tool.conversion.seconds), part of the path's time.
--full also runs with 16 calibration samples. --install first puts in, with `pip install --no-deps`, the
bench-only wheels (tests/realworld/corpus.py's ON_DEMAND) that the selected models need and that are missing.
"""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PATHS = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


def run_one(model, folder: Path, extra: dict):
    from service.errors import QuantCompareError
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    t0 = time.perf_counter()
    try:
        path = model.locate(folder / "built")
        options = ComparisonOptions.model_validate(model.options_with(**extra))
        report = run_comparison(ComparisonRequest(model_path=path, model_name=model.name, options=options),
                                Path(tempfile.mkdtemp(prefix=model.name, dir=folder)))
    except QuantCompareError as e:
        return None, f"refused: {e.code}: {e.message}", time.perf_counter() - t0
    return report, None, time.perf_counter() - t0


def install_missing(models) -> None:
    """pip install --no-deps each pinned bench-only wheel the models read and this venv lacks."""
    from tests.realworld.corpus import ON_DEMAND

    wanted = {getattr(m.locate, "dist", None) for m in models} & set(ON_DEMAND)
    missing = []
    for dist in sorted(wanted):
        try:
            md.distribution(dist)
        except md.PackageNotFoundError:
            missing.append(f"{dist}=={ON_DEMAND[dist]}")
    if missing:
        print(f"installing (--no-deps): {' '.join(missing)}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *missing], check=True)


def main(argv: list[str]) -> int:
    from tests.realworld.corpus import CORPUS, MissingCorpusPackage
    from tests.realworld.outcomes import OUTCOMES

    full = "--full" in argv
    names = [a for a in argv if not a.startswith("--")]
    if "--install" in argv:
        install_missing([m for m in CORPUS if not names or m.name in names])
    extra = {"calibration_samples": 16} if full else {}
    rows, ok, total, moved, missing = [], 0, 0, [], []
    per_tool = {p: [0, 0] for p in PATHS}  # tool -> [ok, asked]
    with tempfile.TemporaryDirectory(prefix="corpus") as tmp:
        for model in CORPUS:
            if names and model.name not in names:
                continue
            try:
                report, refused, secs = run_one(model, Path(tmp), extra)
            except MissingCorpusPackage as e:  # a wheel not installed here: say so, run the others
                print(f"| {model.name} | not run: {e} |", flush=True)
                missing.append(model.name)
                continue
            cells = []
            for p in PATHS:
                if report is None or p not in report.artifacts:
                    cells.append("refused" if report is None else "-")
                    total += report is None
                    per_tool[p][1] += report is None
                    continue
                art = report.artifacts[p]
                total += 1
                ok += art.status == "ok"
                per_tool[p][0] += art.status == "ok"
                per_tool[p][1] += 1
                bad_levels = sum(1 for lvl in art.optimized.values() if lvl.error)
                cell = f"{art.status} {art.seconds or 0:.1f}s"
                conv = art.tool.conversion if art.tool else None
                if conv and conv.get("seconds"):  # ONNX upload: of which ONNX -> torch conversion
                    cell += f" (convert {sum(conv['seconds'].values()):.1f}s)"
                if art.status == "ok" and bad_levels:
                    cell += f" ({bad_levels} levels fail)"
                cells.append(cell)
            why = refused or "; ".join(f"{p}: {report.artifacts[p].error.message[:90]}" for p in PATHS
                                       if p in report.artifacts and report.artifacts[p].error)
            got = {p: ("refused" if report is None else report.artifacts[p].status) for p in PATHS
                   if report is None or p in report.artifacts}
            if got != OUTCOMES[model.name].statuses():  # the pinned table (tests/realworld/outcomes.py)
                moved.append(f"{model.name}: pinned {OUTCOMES[model.name].statuses()}, got {got}")
            rows.append((model.name, *cells, f"{secs:.1f}s", why))
            print(f"| {' | '.join(rows[-1])} |", flush=True)
    print()
    print(f"| model | {' | '.join(PATHS)} | total | why not ok |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {' | '.join(r)} |")
    print(f"\npaths ok: {ok}/{total} = {ok / max(total, 1):.0%} (a refused model counts its 3 paths as not ok)")
    print("per tool (ok / asked): " + ", ".join(f"{p} {k}/{n} = {k / max(n, 1):.0%}" for p, (k, n) in per_tool.items()))
    if missing:
        print(f"not run (corpus package not installed): {', '.join(missing)}")
    for line in moved:
        print(f"OUTCOME MOVED: {line} (update tests/realworld/outcomes.py on purpose)")
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
