#!/usr/bin/env bash
# Interop: drive a real strata broker with independent Kafka client
# implementations — librdkafka (kcat, confluent-kafka) and kafka-python —
# checking metadata, produce, consume, consumer groups and configs.
# Usage: test/interop/run.sh [path/to/strata]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
if [ -z "$bin" ]; then
  (cd "$root" && go build -o "$work/strata" ./cmd/strata)
  bin=$work/strata
fi
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
"$bin" serve --set log.dirs="$work/data" --set listeners=PLAINTEXT://$addr --set strata.admin.listener= \
  --set group.initial.rebalance.delay.ms=0 >"$work/broker.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then break; fi
  sleep 0.1
done

fail() { echo "interop: FAIL: $*"; echo "--- broker log"; tail -50 "$work/broker.log"; exit 1; }
pass() { echo "interop: ok: $*"; }

# kcat (librdkafka): metadata, produce, consume.
kcat -b "$addr" -L -J >"$work/meta.json" || fail "kcat metadata"
grep -q '"brokers"' "$work/meta.json" || fail "kcat metadata has no brokers"
pass "kcat metadata"
seq 1 100 | sed 's/^/kcat-/' | kcat -b "$addr" -P -t kcat-topic -K: -z lz4 -X enable.idempotence=true || fail "kcat produce"
got=$(kcat -b "$addr" -C -t kcat-topic -o beginning -e -q | wc -l)
[ "$got" = 100 ] || fail "kcat consumed $got of 100"
pass "kcat produce/consume (lz4, idempotent)"
got=$(kcat -b "$addr" -C -t kcat-topic -o -10 -e -q | wc -l)
[ "$got" = 10 ] || fail "kcat relative offset consumed $got of 10"
pass "kcat consume from end-10"

/usr/bin/python3 "$here/interop.py" "$addr" || fail "python clients"
echo "interop: all passed"
