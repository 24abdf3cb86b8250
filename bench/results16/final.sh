#!/bin/sh
# Issue 16's bench run, from a snapshot of the branch (commit in started.txt) so that edits in the
# worktree during the run cannot change what is measured.
S=/tmp/perfbench/snap
R=/work/wt/perf/bench/results16
PY=/work/wt/perf/.venv/bin/python
export PYTHONPATH=$S
cd $S
mkdir -p $R
{ date -u +%FT%TZ; echo "commit $(git -C /work/wt/perf rev-parse HEAD)"; uptime; } > $R/started.txt
nice -n 10 $PY bench/cost_curve.py --sizes 1,10,30,100,300 --real ppocr_v4_det --json $R/cost_curve.json > $R/cost_curve.log 2>&1
nice -n 10 $PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record --json $R/resnet18.json > $R/resnet18.log 2>&1
nice -n 10 $PY bench/cost_curve.py --sizes "" --real "" --big-gb 1.0 --json $R/big_archive.json > $R/big_archive.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
