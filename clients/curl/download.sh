#!/usr/bin/env bash
# List a comparison's .onnx files, or download one (to open in Netron).
#
#   BASE_URL=http://127.0.0.1:8000 clients/curl/download.sh JOB_ID                      # list
#   BASE_URL=http://127.0.0.1:8000 clients/curl/download.sh JOB_ID ort_qdq.all.onnx [DIR]
#
# NAME is <artifact>.onnx (the file the quantizer wrote) or <artifact>.<level>.onnx (the graph
# ONNX Runtime made of it at that optimization level).
set -euo pipefail
BASE_URL="${BASE_URL:-http://127.0.0.1:8000}"
[ $# -ge 1 ] || { echo "usage: $0 JOB_ID [NAME [DIR]]" >&2; exit 2; }
auth=(); [ -n "${QUANTCOMPARE_API_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $QUANTCOMPARE_API_TOKEN")

if [ $# -eq 1 ]; then
  curl -sS --fail-with-body "${auth[@]}" "$BASE_URL/v1/comparisons/$1/artifacts" \
    | jq -r '.artifacts[] | "\(.name)\t\(.size)"' || exit 2
  exit 0
fi
dir="${3:-.}"; mkdir -p "$dir"
curl -sS --fail-with-body "${auth[@]}" -o "$dir/$2" "$BASE_URL/v1/comparisons/$1/artifacts/$2" || { rm -f "$dir/$2"; exit 2; }
echo "$dir/$2"
