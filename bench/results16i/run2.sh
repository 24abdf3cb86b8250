#!/bin/sh
# The ninth run's second part: the same CenterNet job on a busy machine, one core held by a busy loop (what
# a service sees while another job or process runs): base f1fde64 then head, each with the loop running.
R=/work/main/bench/results16i
PY=/work/main/.venv/bin/python
CN=/tmp/perfbench8/wheel/cycle_center_net_v1.onnx
{ date -u +%FT%TZ; uptime; } > $R/started2.txt
for side in base head; do
  $PY -c "while True: pass" &
  HOG=$!
  sleep 5
  cd /tmp/perfbench9/$side
  PYTHONPATH=/tmp/perfbench9/$side $PY bench/cost_curve.py --sizes '' --real '' --file $CN \
    --options '{"input_shapes": {"input": [1, 3, 512, 512]}}' \
    --json $R/center_net512_busy_$side.json > $R/center_net512_busy_$side.log 2>&1
  kill $HOG
done
{ date -u +%FT%TZ; uptime; } > $R/finished2.txt
