#!/bin/sh
# Issue 16's third bench run (idle machine), from a snapshot of main (commit in started.txt), so
# edits in the work tree during the run cannot change what is measured.
S=/tmp/perfbench3/snap
R=/work/main/bench/results16c
PY=/work/main/.venv/bin/python
export PYTHONPATH=$S
cd $S
mkdir -p $R
{ date -u +%FT%TZ; echo "commit $(git -C $S rev-parse HEAD)"; uptime; } > $R/started.txt
$PY bench/cost_curve.py --sizes 1,10,30,100,300 --real ppocr_v4_det,ppocr_v4_det@960 --json $R/cost_curve.json > $R/cost_curve.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/cost_curve_finished.txt
$PY bench/cost_curve.py --sizes '' --real '' --big-gb 1.0 --json $R/big_archive.json > $R/big_archive.log 2>&1
$PY bench/cost_curve.py --sizes '' --real '' --big-gb 1.0 --json $R/big_archive_repeat.json > $R/big_archive_repeat.log 2>&1
$PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record --json $R/resnet18.json > $R/resnet18.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
