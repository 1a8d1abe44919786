#!/usr/bin/env bash
# PostgreSQL for the tests and benchmarks of the PostgreSQL store (sansmq serve --store postgresql://...).
#
#   scripts/install-postgres.sh [install]   apt-get install postgresql unless initdb is already there
#   scripts/install-postgres.sh start DIR   a throwaway cluster in DIR (created; must not exist or be
#                                           empty) on 127.0.0.1 and a free port, fsync on; prints
#                                           "SANSMQ_PG_DSN=postgresql://..." as its last line
#   scripts/install-postgres.sh stop DIR    stop that cluster (the caller removes DIR)
#   scripts/install-postgres.sh bindir      print the directory holding initdb/pg_ctl (exit 1 if none)
#
# Works as root or not. initdb refuses to run as root, so as root the cluster belongs to the
# `postgres` system user (created when missing) and is run through runuser/su.
set -euo pipefail

find_bindir() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
        return 0
    fi
    return 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else echo "install-postgres: need root (or sudo) to run: $*" >&2; return 1
    fi
}

wait_for_apt() {
    local waited=0
    command -v fuser >/dev/null 2>&1 || return 0   # no psmisc: rely on apt's own Lock::Timeout
    while fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock \
            /var/cache/apt/archives/lock >/dev/null 2>&1; do
        if [ "$waited" -ge 900 ]; then
            echo "install-postgres: apt/dpkg still locked after ${waited}s" >&2
            return 1
        fi
        sleep 5
        waited=$((waited + 5))
    done
}

do_install() {
    if bindir=$(find_bindir); then
        echo "install-postgres: found $bindir/initdb"
        return 0
    fi
    wait_for_apt
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q
    wait_for_apt
    # no-install-recommends: the binaries only; we never use the packaged (systemd) cluster
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends postgresql
    bindir=$(find_bindir) || { echo "install-postgres: initdb still not found" >&2; return 1; }
    echo "install-postgres: installed $bindir/initdb"
}

# Run "$@" as the cluster's owner: ourselves, or (as root) the postgres system user.
run_as_owner() {
    if [ "$(id -u)" -ne 0 ]; then "$@"; return; fi
    if command -v runuser >/dev/null 2>&1; then runuser -u "$PG_OWNER" -- "$@"
    else su -s /bin/sh "$PG_OWNER" -c "$(printf '%q ' "$@")"
    fi
}

setup_owner() {
    PG_OWNER=$(id -un)
    [ "$(id -u)" -ne 0 ] && return 0
    PG_OWNER=postgres
    if ! id -u "$PG_OWNER" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_OWNER"
    fi
}

free_port() {
    # a port the kernel just handed out, in the ephemeral range: nobody else listens there
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Start the server of data directory $1 on 127.0.0.1 and a free port, its socket and log in $2,
# extra "-c name=value" settings in $3; the port goes to $2/$4 (default "port").
start_on_free_port() {
    local data=$1 dir=$2 extra=${3:-} portfile=${4:-port} bindir port tries
    bindir=$(find_bindir)
    for tries in 1 2 3 4 5; do
        port=$(free_port)
        # fsync and synchronous_commit stay on (the defaults): the tests measure honest commits
        if run_as_owner "$bindir/pg_ctl" -D "$data" -l "$data.log" -w -t 60 start \
            -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=on -c max_connections=200 $extra" \
            >/dev/null; then
            echo "$port" >"$dir/$portfile"
            return 0
        fi
        tail -5 "$data.log" >&2 || true
    done
    echo "install-postgres: could not start PostgreSQL in $data" >&2
    return 1
}

# A new, empty directory $1 for clusters, owned by the cluster owner.
make_cluster_dir() {
    setup_owner
    mkdir -p "$1"
    [ "$(id -u)" -eq 0 ] && chown "$PG_OWNER" "$1"
    chmod 700 "$1"
}

do_start() {
    local dir=$1 bindir
    bindir=$(find_bindir) || { echo "install-postgres: PostgreSQL not installed (run: $0 install)" >&2; return 2; }
    make_cluster_dir "$dir"
    run_as_owner "$bindir/initdb" -D "$dir/data" -U sansmq --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    start_on_free_port "$dir/data" "$dir"
    echo "SANSMQ_PG_DSN=postgresql://sansmq@127.0.0.1:$(cat "$dir/port")/postgres"
}

do_stop() {
    local dir=$1 bindir
    bindir=$(find_bindir) || return 0
    setup_owner
    [ -f "$dir/data/postmaster.pid" ] || return 0
    run_as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
}

# sourced (scripts/pg-ha.sh): the functions only
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

cmd=${1:-install}
case "$cmd" in
    install) do_install ;;
    start) [ $# -eq 2 ] || { echo "usage: $0 start DIR" >&2; exit 2; }; do_start "$2" ;;
    stop) [ $# -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; do_stop "$2" ;;
    bindir) find_bindir ;;
    *) echo "usage: $0 [install|start DIR|stop DIR|bindir]" >&2; exit 2 ;;
esac
