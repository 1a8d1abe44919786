#!/usr/bin/env bash
# profile_speed.sh - py-spy profile of a sansmq server from a given source tree (default: this
# checkout's src/) on private ports while mqload drives one scenario; prints the hot-spot tables.
#
# usage: benchmarks/profile_speed.sh KIND SCENARIO [mqload args...]
#   SRC=src  PORTS="61760 15760 5760"  PYSPY=/tmp/pyspy-venv/bin/py-spy  MQLOAD=/tmp/mqload
#   OUT=/tmp/sansmq-profile  PYSPY_SECONDS=8  RATE=100
# Unlike profile_pyspy.sh (fixed bench ports, sansmq_fresh.sh) this one is for before/after work
# on a branch: several can run side by side on different PORTS.
set -u
[ $# -ge 2 ] || { sed -n '2,9p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIND=$1 SCEN=$2
shift 2
SRC=${SRC:-$ROOT/src}
PY=${PY:-$ROOT/.venv/bin/python}
PYSPY=${PYSPY:-/tmp/pyspy-venv/bin/py-spy}
MQLOAD=${MQLOAD:-/tmp/mqload}
OUT=${OUT:-/tmp/sansmq-profile}
read -r PSTOMP PWS PAMQP <<< "${PORTS:-61760 15760 5760}"
mkdir -p "$OUT"
PORT=$PSTOMP
[ "$SCEN" = s7 ] && PORT=$PWS
data=$(mktemp -d "$OUT/data-XXXXXX")
PYTHONPATH=$SRC setsid "$PY" -m servers serve --server "$KIND" --stomp "127.0.0.1:$PSTOMP" \
  --ws "127.0.0.1:$PWS" --amqp "127.0.0.1:$PAMQP" --data "$data/store" > "$data/server.log" 2>&1 < /dev/null &
pgid=$! pid=""
for i in $(seq 1 100); do
  pid=$(ss -ltnpH "sport = :$PORT" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "server did not start" >&2; kill -TERM -- "-$pgid"; exit 1; }
"$MQLOAD" -s "$SCEN" -p "$PORT" --pid "$pid" --quiet -d 12 -w 2 "$@" > "$OUT/$KIND-$SCEN.mqload.json" &
mq=$!
sleep 3
"$PYSPY" record --pid "$pid" --rate "${RATE:-100}" --duration "${PYSPY_SECONDS:-8}" --format raw \
  -o "$OUT/$KIND-$SCEN.txt" >/dev/null 2>&1
wait "$mq"
kill -TERM -- "-$pgid" 2>/dev/null
wait "$pgid" 2>/dev/null
rm -rf "$data"
cat "$OUT/$KIND-$SCEN.mqload.json"
python3 "$ROOT/benchmarks/pyspy_top.py" "$OUT/$KIND-$SCEN.txt" --top "${TOP:-30}"
