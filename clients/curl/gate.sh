#!/usr/bin/env bash
# CI gate with curl and jq: compare, save the job JSON, exit on the server's verdict.
#
#   BASE_URL=http://127.0.0.1:8000 clients/curl/gate.sh net.onnx \
#     '{"artifact": "ort_qdq", "level": "all", "metric": "sqnr_db", "op": ">=", "value": 25}' \
#     '{"metric": "status_ok"}'
#
# Each GATE is one entry of options.gates (JSON). OUT (default report.json) gets the job JSON.
# Exit: 0 every gate passed, 1 a gate failed, 2 usage, HTTP error or failed job.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 MODEL|EXAMPLE GATE_JSON [GATE_JSON...]" >&2; exit 2; }
model="$1"; shift
out="${OUT:-report.json}"
options=$(jq -n '{gates: $ARGS.positional | map(fromjson)}' --args "$@") || exit 2

"$(dirname "$0")/compare.sh" "$model" "$options" > "$out" || exit 2
jq -r '.report.verdict.gates[] | "\(if .passed then "PASS" else "FAIL" end)  \(.gate)  \(.message)"' "$out"
jq -e '.report.verdict.passed' "$out" > /dev/null
