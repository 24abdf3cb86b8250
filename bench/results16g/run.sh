#!/bin/sh
# Issue 16's seventh bench run (idle machine): the 960x960 detector and resnet18 from a snapshot of
# main (commit in started.txt), then the detector from the session's base 5f368e2 right after, so the
# robustness changes of this session (selection outputs, the ORT-abort guard, random seed) are
# measured side by side for what they cost.
R=/work/main/bench/results16g
PY=/work/main/.venv/bin/python
rm -rf /tmp/perfbench7 && mkdir -p /tmp/perfbench7
git clone -q /work/main /tmp/perfbench7/snap
git clone -q /work/main /tmp/perfbench7/base && git -C /tmp/perfbench7/base checkout -q 5f368e2
{ date -u +%FT%TZ; echo "commit $(git -C /tmp/perfbench7/snap rev-parse HEAD)"; uptime; } > $R/started.txt
cd /tmp/perfbench7/snap
PYTHONPATH=/tmp/perfbench7/snap $PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 --json $R/cost_curve.json > $R/cost_curve.log 2>&1
PYTHONPATH=/tmp/perfbench7/snap $PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record --json $R/resnet18.json > $R/resnet18.log 2>&1
cd /tmp/perfbench7/base
PYTHONPATH=/tmp/perfbench7/base $PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 --json $R/cost_curve_base_5f368e2.json > $R/cost_curve_base.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
