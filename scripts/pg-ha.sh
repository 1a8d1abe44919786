#!/usr/bin/env bash
# A PostgreSQL primary with a synchronous streaming standby on loopback, for the PostgreSQL
# failover tests and demos (sansmq serve --store with a multi-host DSN).
#
#   scripts/pg-ha.sh start DIR     primary DIR/primary and standby DIR/standby (pg_basebackup of it),
#                                  each on 127.0.0.1 and a free port, fsync on; the primary commits only
#                                  once the standby has the WAL (synchronous_standby_names). Waits until
#                                  the standby is in sync, then prints SANSMQ_PG_PRIMARY=, SANSMQ_PG_STANDBY=
#                                  and, last, SANSMQ_PG_DSN=postgresql://h1:p1,h2:p2/postgres?target_session_attrs=read-write
#   scripts/pg-ha.sh crash DIR     the primary dies (pg_ctl stop -m immediate: no shutdown checkpoint,
#                                  clients cut off, as a power loss of its machine looks to them)
#   scripts/pg-ha.sh promote DIR   the standby becomes the primary (pg_ctl promote; waits until it
#                                  accepts writes)
#   scripts/pg-ha.sh stop DIR      stop whichever of the two runs (the caller removes DIR)
#
# The promoted standby has no standby of its own, so it commits alone (it was never given
# synchronous_standby_names: otherwise every commit would wait forever for a standby that does not
# exist). Bringing the old primary back as a standby (pg_rewind or a new pg_basebackup) is what
# Patroni or a managed service automates; see "PostgreSQL failover" in docs/operator/index.md.
set -euo pipefail
# shellcheck source=install-postgres.sh
. "$(dirname "${BASH_SOURCE[0]}")/install-postgres.sh"

STANDBY_NAME=sansmq_standby

sql() {  # sql DIR NODE QUERY: one value from NODE's server
    run_as_owner "$(find_bindir)/psql" -h 127.0.0.1 -p "$(cat "$1/$2.port")" -U sansmq -d postgres -Atqc "$3"
}

dsn_of() { echo "postgresql://sansmq@127.0.0.1:$(cat "$1/$2.port")/postgres"; }

do_ha_start() {
    local dir=$1 bindir state waited=0
    bindir=$(find_bindir) || { echo "pg-ha: PostgreSQL not installed (run: scripts/install-postgres.sh)" >&2; return 2; }
    make_cluster_dir "$dir"
    run_as_owner "$bindir/initdb" -D "$dir/primary" -U sansmq --auth=trust -E UTF8 --no-locale \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
    start_on_free_port "$dir/primary" "$dir" "" primary.port
    # -R: standby.signal + primary_conninfo; the standby names itself through cluster_name, which
    # its WAL receiver sends as application_name
    run_as_owner "$bindir/pg_basebackup" -h 127.0.0.1 -p "$(cat "$dir/primary.port")" -U sansmq \
        -D "$dir/standby" -R -X stream -c fast >"$dir/basebackup.log" 2>&1 \
        || { cat "$dir/basebackup.log" >&2; return 1; }
    start_on_free_port "$dir/standby" "$dir" "-c cluster_name=$STANDBY_NAME" standby.port
    # only now, and only on the primary: the standby's copy of the configuration stays without it
    sql "$dir" primary "ALTER SYSTEM SET synchronous_standby_names = '$STANDBY_NAME'" >/dev/null
    sql "$dir" primary "SELECT pg_reload_conf()" >/dev/null
    until state=$(sql "$dir" primary \
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY_NAME'") \
            && [ "$state" = sync ]; do
        [ "$waited" -lt 600 ] || { echo "pg-ha: the standby did not become synchronous" >&2; return 1; }
        sleep 0.1
        waited=$((waited + 1))
    done
    echo "SANSMQ_PG_PRIMARY=$(dsn_of "$dir" primary)"
    echo "SANSMQ_PG_STANDBY=$(dsn_of "$dir" standby)"
    echo "SANSMQ_PG_DSN=postgresql://sansmq@127.0.0.1:$(cat "$dir/primary.port"),127.0.0.1:$(cat "$dir/standby.port")/postgres?target_session_attrs=read-write"
}

pg_ctl_node() {  # pg_ctl_node DIR NODE ARGS...
    local dir=$1 node=$2
    shift 2
    setup_owner
    run_as_owner "$(find_bindir)/pg_ctl" -D "$dir/$node" "$@" >/dev/null
}

do_ha_stop() {
    local node
    for node in primary standby; do
        [ -f "$1/$node/postmaster.pid" ] && pg_ctl_node "$1" "$node" -m fast -w -t 60 stop
    done
    return 0
}

cmd=${1:-}
[ $# -eq 2 ] || { echo "usage: $0 start|crash|promote|stop DIR" >&2; exit 2; }
case "$cmd" in
    start) do_ha_start "$2" ;;
    crash) pg_ctl_node "$2" primary -m immediate -w -t 60 stop ;;
    promote) pg_ctl_node "$2" standby -w -t 60 promote ;;
    stop) do_ha_stop "$2" ;;
    *) echo "usage: $0 start|crash|promote|stop DIR" >&2; exit 2 ;;
esac
