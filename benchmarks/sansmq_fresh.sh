#!/bin/sh
# sansmq_fresh.sh KIND [extra serve args] - run `sansmq serve` in the foreground on the bench ports
# (STOMP 127.0.0.1:61700, WebSocket 127.0.0.1:15700, AMQP 127.0.0.1:5700 when the CLI has --amqp)
# with an empty private data directory, so each compare.sh run starts from a clean store (as
# brokers/rabbitmq-start.sh wipes its mnesia) and never touches ./sansmq-data or port 5672 of
# whoever else works on this machine.
set -e
KIND=$1
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SANSMQ=${SANSMQ:-$ROOT/.venv/bin/sansmq}
D=${SANSMQ_BENCH_DATA:-/tmp/sansmq-bench}/data-$KIND
rm -rf "$D"
mkdir -p "$D"
cd "$D"
set -- --server "$KIND" --stomp 127.0.0.1:61700 --ws 127.0.0.1:15700 --data "$D/store" "$@"
if "$SANSMQ" serve --help | grep -q -- '--amqp HOST'; then set -- --amqp 127.0.0.1:5700 "$@"; fi
exec "$SANSMQ" serve "$@"
