#!/bin/sh
# Issue 16's sixth bench run (idle machine), from a snapshot of main (commit in started.txt): the
# 960x960 detector and resnet18 after the onnxscript matcher shortcut and the graph-diff fix.
S=/tmp/perfbench6/snap
R=/work/main/bench/results16f
PY=/work/main/.venv/bin/python
export PYTHONPATH=$S
cd $S
mkdir -p $R
{ date -u +%FT%TZ; echo "commit $(git -C $S rev-parse HEAD)"; uptime; } > $R/started.txt
$PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 --json $R/cost_curve.json > $R/cost_curve.log 2>&1
$PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record --json $R/resnet18.json > $R/resnet18.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
