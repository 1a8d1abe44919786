#!/usr/bin/env bash
# profile_pyspy.sh - sample a sansmq server with py-spy while mqload drives one scenario.
#
# usage: benchmarks/profile_pyspy.sh KIND SCENARIO [mqload args...]
#   e.g. benchmarks/profile_pyspy.sh asyncio s4 -d 20 -w 2
#        benchmarks/profile_pyspy.sh asyncio s6 -d 20 -w 2 -c 10
#   PYSPY=/tmp/pyspy-venv/bin/py-spy  (python3 -m venv /tmp/pyspy-venv && /tmp/pyspy-venv/bin/pip install py-spy;
#                                      kept out of the project venv on purpose)
#   OUT=benchmarks/results/profile    RATE=100 (samples/s)
# Writes OUT/KIND-SCENARIO.txt (collapsed stacks, py-spy --format raw), OUT/KIND-SCENARIO.speedscope.json
# (a second pass, for https://www.speedscope.app), the mqload JSON line, and a hot-spot table from
# benchmarks/pyspy_top.py. sansmq runs on 127.0.0.1:61700 / :15700 in its own process group and is
# stopped by signalling exactly that group
# (started through benchmarks/sansmq_fresh.sh: fresh data dir under /tmp/sansmq-bench).
set -u
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIND=$1 SCEN=$2
shift 2
PYSPY=${PYSPY:-/tmp/pyspy-venv/bin/py-spy}
MQLOAD=${MQLOAD:-/tmp/mqload}
OUT=${OUT:-$ROOT/benchmarks/results/profile}
RATE=${RATE:-100}
mkdir -p "$OUT"
PORT=61700
[ "$SCEN" = s7 ] && PORT=15700

profile_once() { # FORMAT FILE MQLOAD-ARGS...
  local fmt=$1 file=$2
  shift 2
  setsid "$ROOT/benchmarks/sansmq_fresh.sh" "$KIND" ${SANSMQ_ARGS:-} > "$OUT/$KIND-$SCEN.server.log" 2>&1 < /dev/null &
  local pgid=$! pid="" i
  for i in $(seq 1 100); do
    pid=$(ss -ltnpH "sport = :$PORT" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] || { echo "server did not start" >&2; kill -TERM -- "-$pgid"; return 1; }
  "$MQLOAD" -s "$SCEN" -p "$PORT" --pid "$pid" --label "pyspy-$KIND" --quiet "$@" > "$OUT/$KIND-$SCEN.$fmt.mqload.json" &
  local mq=$!
  sleep 2   # skip connection set-up
  # the measured window is -d (default 10): sample for most of it
  "$PYSPY" record --pid "$pid" --rate "$RATE" --duration "${PYSPY_SECONDS:-15}" --format "$fmt" -o "$file" >/dev/null 2>&1
  wait "$mq"
  kill -TERM -- "-$pgid" 2>/dev/null
  wait "$pgid" 2>/dev/null
}

profile_once raw "$OUT/$KIND-$SCEN.txt" "$@" || exit 1
profile_once speedscope "$OUT/$KIND-$SCEN.speedscope.json" "$@" || exit 1
cat "$OUT/$KIND-$SCEN.raw.mqload.json"
python3 "$ROOT/benchmarks/pyspy_top.py" "$OUT/$KIND-$SCEN.txt" | tee "$OUT/$KIND-$SCEN.top.md"
