#!/usr/bin/env bash
# sansmq_medians.sh - sansmq only (no RabbitMQ): N short mqload runs of each scenario against a
# fresh `sansmq serve` per run, started from THIS checkout's src/, and the median per server kind.
# For before/after comparisons of engine/codec work on one machine in one sitting.
#
# usage: benchmarks/sansmq_medians.sh [SCENARIO...]          (default: s4 s6 s7)
#   KINDS="asyncio threads trio"  ROUNDS=3  DUR=6  WARM=2
#   VARIANTS="before=/tmp/base/src after=src"   compare source trees, alternated within each round
#                                               (default: one variant, this checkout's src/)
#   PORTS="61760 15760 5760"      (STOMP, WebSocket, AMQP; private, loopback)
#   MQLOAD=/tmp/mqload  PY=.venv/bin/python  OUT=/tmp/sansmq-medians  LABEL=...
# Prints one line per (scenario, kind, variant): the runs' msg/s and deliveries per broker
# CPU-second (steadier than msg/s when other work shares the cores) with their medians; appends
# the mqload JSON lines to $OUT/runs.jsonl. Rounds alternate kinds (k1 k2 k3 k1 k2 k3 ...) so load drifts hit all alike.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MQLOAD=${MQLOAD:-/tmp/mqload}
PY=${PY:-$ROOT/.venv/bin/python}
KINDS=${KINDS:-asyncio threads trio}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-6}
WARM=${WARM:-2}
read -r PSTOMP PWS PAMQP <<< "${PORTS:-61760 15760 5760}"
OUT=${OUT:-/tmp/sansmq-medians}
LABEL=${LABEL:-$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)}
VARIANTS=${VARIANTS:-$LABEL=$ROOT/src}
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=(s4 s6 s7)
mkdir -p "$OUT"

args_for() {
  case "$1" in
    s4) echo "-p $PSTOMP -d $DUR -w $WARM --ack client-individual --prefetch 100" ;;
    s6) echo "-p $PSTOMP -d $DUR -w $WARM -c 10" ;;
    s7) echo "-p $PWS -d $DUR -w $WARM -c 75 -b 117 --ws-path /ws" ;;
    *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

run_one() { # KIND SCENARIO LABEL SRC -> prints deliver rate, appends JSON
  local kind=$1 scen=$2 label=$3 src=$4 data pgid pid="" i port json
  data=$(mktemp -d "$OUT/data-XXXXXX")
  PYTHONPATH=$src setsid "$PY" -m servers serve --server "$kind" --stomp "127.0.0.1:$PSTOMP" \
    --ws "127.0.0.1:$PWS" --amqp "127.0.0.1:$PAMQP" --data "$data/store" ${SANSMQ_ARGS:-} \
    > "$data/server.log" 2>&1 < /dev/null &
  pgid=$!
  port=$PSTOMP
  [ "$scen" = s7 ] && port=$PWS
  for i in $(seq 1 100); do
    pid=$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
    [ -n "$pid" ] && break
    sleep 0.1
  done
  if [ -z "$pid" ]; then echo "server did not start" >&2; kill -TERM -- "-$pgid"; return 1; fi
  # shellcheck disable=SC2046
  json=$("$MQLOAD" -s "$scen" $(args_for "$scen") --pid "$pid" --quiet --label "$label-$kind" 2>/dev/null | grep '^{')
  kill -TERM -- "-$pgid" 2>/dev/null
  wait "$pgid" 2>/dev/null
  rm -rf "$data"
  echo "$json" >> "$OUT/runs.jsonl"
  "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); r=d.get("deliver_rate") or 0; c=d.get("broker_cpu_s_per_100k") or 0; print(int(r), int(1e5/c) if c else 0, d.get("broker_cpu_pct", "?"))' "$json"
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for scen in "${SCENARIOS[@]}"; do
  declare -A rates=() percpu=()
  for r in $(seq 1 "$ROUNDS"); do
    for kind in $KINDS; do
      for v in $VARIANTS; do
        res=$(run_one "$kind" "$scen" "${v%%=*}" "${v#*=}") || exit 1
        rates[$kind ${v%%=*}]="${rates[$kind ${v%%=*}]:-} ${res%% *}"
        set -- $res
        percpu[$kind ${v%%=*}]="${percpu[$kind ${v%%=*}]:-} $2"
        echo "  $scen $kind ${v%%=*} round $r: $res (msg/s, msg per broker CPU-second, broker cpu%)" >&2
      done
    done
  done
  for kind in $KINDS; do
    for v in $VARIANTS; do
      key="$kind ${v%%=*}"
      med=$(median ${rates[$key]})
      echo "$scen $key msg/s:${rates[$key]} median $med | per CPU-s:${percpu[$key]} median $(median ${percpu[$key]})  (load $(cut -d' ' -f1 /proc/loadavg), $(date -u +%H:%M))"
    done
  done
  unset rates percpu
done
