#!/usr/bin/env bash
# Save the readable report page of a comparison (open it in a browser).
#
#   BASE_URL=http://127.0.0.1:8000 clients/curl/page.sh JOB_ID [report.html]
set -euo pipefail
BASE_URL="${BASE_URL:-http://127.0.0.1:8000}"
[ $# -ge 1 ] || { echo "usage: $0 JOB_ID [OUT.html]" >&2; exit 2; }
out="${2:-report.html}"
auth=(); [ -n "${QUANTCOMPARE_API_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $QUANTCOMPARE_API_TOKEN")
curl -sS --fail-with-body "${auth[@]}" -o "$out" "$BASE_URL/v1/comparisons/$1/report.html" || exit 2
echo "$out"
