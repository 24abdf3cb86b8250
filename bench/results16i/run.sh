#!/bin/sh
# Issue 16's ninth bench run (idle machine): this session's head against its base f1fde64, alternated:
# wired_table_rec 0.0.3's 72 MB CenterNet at 512x512 (base, head), the 960x960 PP-OCRv4 detector (base, head,
# base, head), resnet18 by hand / CLI / service (head, base); then the cost curve's built sizes on head.
R=/work/main/bench/results16i
PY=/work/main/.venv/bin/python
BASE=f1fde64
CN=/tmp/perfbench8/wheel/cycle_center_net_v1.onnx
rm -rf /tmp/perfbench9 && mkdir -p /tmp/perfbench9
git clone -q /work/main /tmp/perfbench9/head
git clone -q /work/main /tmp/perfbench9/base && git -C /tmp/perfbench9/base checkout -q $BASE
if [ ! -f $CN ]; then
  mkdir -p /tmp/perfbench8/wheel && cd /tmp/perfbench8/wheel
  pip download -q --no-deps wired_table_rec==0.0.3 -d . && unzip -q -o -j wired_table_rec-0.0.3-*.whl '*cycle_center_net_v1.onnx' -d .
fi
{ date -u +%FT%TZ; echo "head $(git -C /tmp/perfbench9/head rev-parse HEAD)"; echo "base $BASE"; uptime; } > $R/started.txt
for side in base head; do
  cd /tmp/perfbench9/$side
  PYTHONPATH=/tmp/perfbench9/$side $PY bench/cost_curve.py --sizes '' --real '' --file $CN \
    --options '{"input_shapes": {"input": [1, 3, 512, 512]}}' \
    --json $R/center_net512_$side.json > $R/center_net512_$side.log 2>&1
done
for i in 1 2; do
  for side in base head; do
    cd /tmp/perfbench9/$side
    PYTHONPATH=/tmp/perfbench9/$side $PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 \
      --json $R/detector960_${side}_$i.json > $R/detector960_${side}_$i.log 2>&1
  done
done
for side in head base; do
  cd /tmp/perfbench9/$side
  PYTHONPATH=/tmp/perfbench9/$side $PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record \
    --json $R/resnet18_$side.json > $R/resnet18_$side.log 2>&1
done
{ date -u +%FT%TZ; uptime; } > $R/finished.txt
cd /tmp/perfbench9/head
PYTHONPATH=/tmp/perfbench9/head $PY bench/cost_curve.py --sizes 1,10,30,100,300 --real '' \
  --json $R/cost_curve_head.json > $R/cost_curve_head.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished_curve.txt
