#!/usr/bin/env bash
# Poll a comparison until it is done; progress on stderr, the final job JSON on stdout.
#
#   BASE_URL=http://127.0.0.1:8000 clients/curl/poll.sh JOB_ID
#
# Exit: 0 succeeded, 1 failed (see .error), 2 HTTP error or MAX_WAIT seconds passed.
set -euo pipefail
BASE_URL="${BASE_URL:-http://127.0.0.1:8000}"
MAX_WAIT="${MAX_WAIT:-1800}"
[ $# -eq 1 ] || { echo "usage: $0 JOB_ID" >&2; exit 2; }
auth=(); [ -n "${QUANTCOMPARE_API_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $QUANTCOMPARE_API_TOKEN")

deadline=$(( $(date +%s) + MAX_WAIT ))
while :; do
  job=$(curl -sS --fail-with-body "${auth[@]}" "$BASE_URL/v1/comparisons/$1") || { echo "$job" >&2; exit 2; }
  status=$(jq -r .status <<<"$job")
  case "$status" in
    succeeded) echo "$job"; exit 0 ;;
    failed)    echo "$job"; jq -r '"failed: \(.error.code): \(.error.detail)"' <<<"$job" >&2; exit 1 ;;
  esac
  jq -r '"\(.id[0:12]) \(.status) \(.progress.stage // "-") \(.progress.done)/\(.progress.total)"' <<<"$job" >&2
  [ "$(date +%s)" -lt "$deadline" ] || { echo "still $status after ${MAX_WAIT}s" >&2; exit 2; }
  sleep 1
done
