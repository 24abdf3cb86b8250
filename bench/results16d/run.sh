#!/bin/sh
# Issue 16's fourth bench run (idle machine), from a snapshot of main (commit in started.txt): the
# 960x960 detector after the layers-stage memory fix and the PT2E file check, and resnet18 beside it.
S=/tmp/perfbench4/snap
R=/work/main/bench/results16d
PY=/work/main/.venv/bin/python
export PYTHONPATH=$S
cd $S
mkdir -p $R
{ date -u +%FT%TZ; echo "commit $(git -C $S rev-parse HEAD)"; uptime; } > $R/started.txt
$PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 --json $R/cost_curve.json > $R/cost_curve.log 2>&1
$PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record --json $R/resnet18.json > $R/resnet18.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
