#!/usr/bin/env bash
# Upload a model (or name a built-in example), wait for the comparison, print the job JSON.
#
#   BASE_URL=http://127.0.0.1:8000 clients/curl/compare.sh net.onnx ['{"levels": ["all"]}'] [calib.npz]
#   BASE_URL=http://127.0.0.1:8000 clients/curl/compare.sh conv_relu
#
# MODEL is an .onnx / .pt2 file (multipart upload) or, when no such file exists, an example name
# (JSON body). The report is at .report of the printed JSON; .id names the job for the other recipes.
# Exit: 0 succeeded, 1 the job failed, 2 usage or HTTP error (curl prints the problem+json body).
set -euo pipefail
BASE_URL="${BASE_URL:-http://127.0.0.1:8000}"
WAIT="${WAIT:-60}"            # seconds the server holds the POST before answering 202
[ $# -ge 1 ] || { echo "usage: $0 MODEL|EXAMPLE [OPTIONS_JSON] [CALIBRATION.npz]" >&2; exit 2; }
model="$1"; options="${2:-{\}}"; calibration="${3:-}"
auth=(); [ -n "${QUANTCOMPARE_API_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $QUANTCOMPARE_API_TOKEN")

if [ -f "$model" ]; then
  form=(-F "model=@${model}" -F "options=${options}")
  [ -n "$calibration" ] && form+=(-F "calibration=@${calibration}")
  job=$(curl -sS --fail-with-body "${auth[@]}" "${form[@]}" "$BASE_URL/v1/comparisons?wait=$WAIT") || { echo "$job" >&2; exit 2; }
else
  body=$(jq -n --arg example "$model" --argjson options "$options" '{example: $example, options: $options}') || exit 2
  job=$(curl -sS --fail-with-body "${auth[@]}" -H 'Content-Type: application/json' -d "$body" \
        "$BASE_URL/v1/comparisons?wait=$WAIT") || { echo "$job" >&2; exit 2; }
fi

# Not done within WAIT (HTTP 202): poll until it is.
if [ "$(jq -r .status <<<"$job")" != succeeded ] && [ "$(jq -r .status <<<"$job")" != failed ]; then
  exec "$(dirname "$0")/poll.sh" "$(jq -r .id <<<"$job")"
fi
echo "$job"
[ "$(jq -r .status <<<"$job")" = succeeded ]
