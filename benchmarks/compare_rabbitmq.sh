#!/usr/bin/env bash
# compare_rabbitmq.sh - sansmq vs RabbitMQ for the STOMP scenarios of issue 7, one
# ../shared/bench/compare.sh call per (scenario, server kind): alternated ABBA rounds,
# broker restarted for every run, ratio of medians median(sansmq)/median(RabbitMQ).
#
# usage: benchmarks/compare_rabbitmq.sh [SCENARIO...]        (default: s1 s2 s3 s4 s5 s6 s7 s8 s9 s10)
#   KINDS="asyncio threads trio"   server kinds to measure (env)
#   ROUNDS=3                        rounds per comparison (>= 3, medians)
#   DUR=8 WARM=2                    mqload -d / -w for the throughput scenarios
#   LONG=1                          opt-in long runs: -d 30 -w 5, 5 rounds, s9 -q 20000, s10 -C 10000
#   OUT=benchmarks/results/run-<UTC stamp>   where compare.sh logs + JSONL and our index go
#   BENCH=../shared/bench (beside the checkout)  MQLOAD=/tmp/mqload  SANSMQ=.venv/bin/sansmq
#   SANSMQ_ARGS="--store memory"    extra `sansmq serve` args (default: the CLI's defaults)
#   The durable rows on both stores (S2: confirmed msg/s, S5: receipted SEND/s; the summary's p99
#   column is S5's receipt round trip, its cpu-s per 100k the broker's CPU per message):
#     KINDS=threads OUT=benchmarks/results/durable-segment benchmarks/compare_rabbitmq.sh s2 s5
#     KINDS=threads OUT=benchmarks/results/durable-pg SANSMQ_ARGS="--store postgresql://USER@HOST:PORT/DB" \
#       benchmarks/compare_rabbitmq.sh s2 s5       (an empty database: it keeps its tables between runs)
# sansmq is started by benchmarks/sansmq_fresh.sh: empty data dir under /tmp/sansmq-bench per start.
#
# Ports: sansmq on 127.0.0.1:61700 (STOMP) and :15700 (WebSocket), RabbitMQ's private bench
# node on 61623 / 15684 (brokers/rabbitmq-start.sh). compare.sh refuses a port already taken,
# so never run this while another bench RabbitMQ node is up.
# Afterwards: python3 benchmarks/summarize_compare.py "$OUT" > "$OUT/summary.md"
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH:-$ROOT/../shared/bench}
export MQLOAD=${MQLOAD:-/tmp/mqload}
export SANSMQ=${SANSMQ:-$ROOT/.venv/bin/sansmq}
KINDS=${KINDS:-asyncio threads trio}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-8}
WARM=${WARM:-2}
Q=5000
C=2000
M=300000
if [ "${LONG:-0}" = 1 ]; then DUR=30; WARM=5; ROUNDS=5; Q=20000; C=10000; fi
OUT=${OUT:-$ROOT/benchmarks/results/run-$(date -u +%Y%m%dT%H%M%SZ)}
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=(s1 s2 s3 s4 s5 s6 s7 s8 s9 s10)

if [ ! -x "$MQLOAD" ]; then
  gcc -O2 -o "$MQLOAD" "$BENCH/mqload.c" -lpthread -lm || { echo "mqload build failed" >&2; exit 2; }
fi
mkdir -p "$OUT"
INDEX="$OUT/index.tsv"   # one line per comparison: what ran, where its JSONL is, load averages

# scenario_args SCENARIO -> sets PORTS_A PORTS_B ARGS METRIC for compare.sh
scenario_args() {
  PORTS_A="-p 61700" PORTS_B="-p 61623" METRIC=""
  case "$1" in
    s1|s2|s3) ARGS=(-d "$DUR" -w "$WARM"); PORTS_A="-p 5700" PORTS_B="-p 5682" ;;
    s8) ARGS=(-P amqp -m "$M"); PORTS_A="-p 5700" PORTS_B="-p 5682"; METRIC=backlog_bytes_per_msg ;;
    s8stomp) ARGS=(-P stomp -m "$M" --sync-every 20 --ack auto); METRIC=backlog_bytes_per_msg ;;
    s4) ARGS=(-d "$DUR" -w "$WARM" --ack client-individual --prefetch 100) ;;
    s5) ARGS=(-d "$DUR" -w "$WARM") ;;
    s6) ARGS=(-d "$DUR" -w "$WARM" -c 10) ;;
    s7) ARGS=(-d "$DUR" -w "$WARM" -c 75 -b 117 --ws-path /ws)
        PORTS_A="-p 15700" PORTS_B="-p 15684" ;;
    s9) ARGS=(-P stomp -q "$Q" --pipeline 20 --sub-headers auto-delete:true); METRIC=rss_kb_per_queue ;;
    s10) ARGS=(-P stomp -C "$C"); METRIC=rss_kb_per_conn ;;
    *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

for scen in "${SCENARIOS[@]}"; do
  scenario_args "$scen" || exit 2
  for kind in $KINDS; do
    dir="$OUT/$scen-$kind"
    mkdir -p "$dir"
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "== $scen sansmq[$kind] vs RabbitMQ ($(date -u +%H:%M:%S), load $load0)"
    mflag=()
    [ -n "$METRIC" ] && mflag=(-m "$METRIC")
    scen_id=${scen%stomp}   # s8stomp is mqload's s8 with -P stomp
    OUT="$dir" A_ARGS="$PORTS_A" B_ARGS="$PORTS_B" "$BENCH/compare.sh" -n "$ROUNDS" "${mflag[@]}" \
      "$ROOT/benchmarks/sansmq_fresh.sh $kind ${SANSMQ_ARGS:-}" \
      "$BENCH/brokers/rabbitmq-start.sh" "$scen_id" "${ARGS[@]}" 2>&1 | tee "$dir/compare.txt"
    load1=$(cut -d' ' -f1-3 /proc/loadavg)
    # the checkout is edited by others while we run: fingerprint the code each comparison ran
    src=$(cd "$ROOT" && find src -name '*.py' | sort | xargs cat | sha1sum | cut -c1-12)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scen" "$kind" "$(date -u +%FT%TZ)" "$load0" "$load1" \
      "${ARGS[*]} | serve ${SANSMQ_ARGS:-}" "$src" >> "$INDEX"
  done
done
echo "done: $OUT (summarise with: python3 $ROOT/benchmarks/summarize_compare.py $OUT)"
