#!/bin/bash
# A/B: the PT2E path of openWakeWord 0.4.0's hey_mycroft at the session's base and HEAD, alternated
# hey_mycroft_v0.1.onnx from the openwakeword==0.4.0 wheel (openwakeword/resources/models/)
M=${M:-/tmp/wh/m/oww/hey_mycroft_v0.1.onnx}
OPTS='{"calibration_samples":2,"eval_samples":1,"latency":{"enabled":false},"advice":{"enabled":false},"layers":{"enabled":false},"artifacts":["pt2e_qdq"]}'
for i in 1 2; do for v in base head; do
  rm -rf /tmp/ab/out_$v
  s=$(date +%s.%N)
  (cd /tmp/ab/$v && PYTHONPATH=/tmp/ab/$v /work/main/.venv/bin/python -m service.cli compare $M --options "$OPTS" --out /tmp/ab/out_$v -q >/dev/null 2>&1)
  e=$(date +%s.%N)
  /work/main/.venv/bin/python -c "
import json,sys;r=json.load(open('/tmp/ab/out_$v/report.json'));t=r['timings']
print('$v run $i wall %.1f s quantize %.1f s optimize %.1f s' % ($e-$s, t['quantize'], t['optimize']))"
done; cmp /tmp/ab/out_base/artifacts/pt2e_qdq.onnx /tmp/ab/out_head/artifacts/pt2e_qdq.onnx && echo "run $i: PT2E files identical"; done
uptime
