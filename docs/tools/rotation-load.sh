#!/usr/bin/env bash
# Steady load against a running `devshard-gateway demo --rotation`, then its rotation figures.
#
#   docs/tools/rotation-load.sh GATEWAY_URL ADMIN_KEY CHAIN_URL [SECONDS=180] [STREAMS=4]
#
# STREAMS loops send one streaming chat request after the other for SECONDS; a request fails
# unless it answers 200 and its stream ends with [DONE]. Then it prints the requests, failures,
# rotations (escrows the gateway created on chain), how many retired escrows the chain reports
# settled, and the deposits of today against the daily cap.
set -euo pipefail
url=$1 key=$2 chain=$3 seconds=${4:-180} streams=${5:-4}
out=$(mktemp -d)
body='{"stream":true,"max_tokens":24,"messages":[{"role":"user","content":"rotate"}]}'
end=$(( $(date +%s) + seconds ))
for s in $(seq 1 "$streams"); do
  (
    ok=0 bad=0
    while [ "$(date +%s)" -lt "$end" ]; do
      if curl -sS -N --max-time 60 "$url/v1/chat/completions" -H 'Content-Type: application/json' \
           -d "$body" -o "$out/body.$s" -w '%{http_code}' >"$out/code.$s" 2>/dev/null \
         && [ "$(cat "$out/code.$s")" = 200 ] && grep -q '\[DONE\]' "$out/body.$s"; then
        ok=$((ok + 1))
      else
        bad=$((bad + 1))
      fi
    done
    echo "$ok $bad" >"$out/count.$s"
  ) &
done
wait
read -r ok bad < <(cat "$out"/count.* | awk '{o+=$1; b+=$2} END {print o, b}')
rot=$(curl -sS -H "Authorization: Bearer $key" "$url/v1/admin/rotation")
# Let the last retired escrow finish settling.
sleep 20
rot=$(curl -sS -H "Authorization: Bearer $key" "$url/v1/admin/rotation")
escrows=$(curl -sS -H "Authorization: Bearer $key" "$url/v1/admin/escrows" | jq -r '.data[].escrow_id')
settled=0 open=0
for id in $escrows; do
  if [ "$(curl -sS "$chain/productscience/inference/inference/devshard_escrow/$id" | jq -r .escrow.settled)" = true ]; then
    settled=$((settled + 1))
  else
    open=$((open + 1))
  fi
done
echo "requests: $((ok + bad)), failed: $bad, streams: $streams, seconds: $seconds"
echo "$rot" | jq -r '.view.models[] | "rotations: \(.rotations), deposited today: \(.deposited_today) of cap \(.max_deposit_per_day), failures: \(.failures)"'
echo "escrows registered: $(echo "$escrows" | wc -w), settled on chain: $settled, still open: $open"
curl -sS "$url/metrics" | grep -E '^devshard_(escrow_creations_total|rotation_deposit_today|rotations_total)' || true
rm -rf "$out"
