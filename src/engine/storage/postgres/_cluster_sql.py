"""SQL of a cluster node on the PostgreSQL store: membership, queue leases, the definitions log.

Every node given the same database and schema is one cluster. ``nodes`` has a row per node with
its heartbeat (the database's clock, so the nodes' clocks never matter); ``leases`` a row per
durable queue (by the store's queue id) naming its leader, the epoch (fencing token) and when the
lease runs out; ``changes`` logs every definition change (vhosts, exchanges, queues, bindings,
users, permissions, policies) with a serial the other nodes read on from.

Writers of ``changes`` hold one transaction-level advisory lock, so serials commit in order and a
reader that saw serial N never later meets a smaller one committing (no gaps to wait for).
``fence`` runs at the end of every transaction that writes messages: it share-locks the leases of
the queues written and raises SQLSTATE ``SMQ01`` (the lost queue ids in the detail) unless this
node still holds each at the epoch it believes, so a node whose lease moved writes nothing more.
"""

from __future__ import annotations

from zlib import crc32

#: raised by ``fence``: this node lost the lease of some queue it wrote (detail: the queue ids)
FENCED = "SMQ01"

DDL = """
CREATE TABLE IF NOT EXISTS {s}.nodes (
    name text PRIMARY KEY,
    no integer UNIQUE NOT NULL,
    address text NOT NULL DEFAULT '',
    started timestamptz NOT NULL DEFAULT now(),
    heartbeat timestamptz NOT NULL DEFAULT now(),
    lease_seconds double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.leases (
    queue bigint PRIMARY KEY,
    leader text NOT NULL,
    epoch bigint NOT NULL,
    expires timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.changes (
    serial bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node text NOT NULL,
    op text NOT NULL,
    params text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {s}.cluster (
    id integer PRIMARY KEY CHECK (id = 1),
    secret text NOT NULL
);
INSERT INTO {s}.cluster (id, secret) VALUES (1, md5(gen_random_uuid()::text) || md5(gen_random_uuid()::text))
    ON CONFLICT (id) DO NOTHING;
CREATE OR REPLACE FUNCTION {s}.fence(me text, qids bigint[], epochs bigint[]) RETURNS void
LANGUAGE plpgsql AS $fence$
DECLARE lost bigint[];
BEGIN
    -- a takeover committed before this sees its new epoch; one after it waits for our commit
    PERFORM 1 FROM {s}.leases WHERE queue = ANY(qids) ORDER BY queue FOR SHARE;
    SELECT array_agg(u.q) INTO lost FROM unnest(qids, epochs) AS u(q, e)
     WHERE NOT EXISTS (SELECT 1 FROM {s}.leases l WHERE l.queue = u.q AND l.leader = me AND l.epoch = u.e);
    IF lost IS NOT NULL THEN
        RAISE EXCEPTION 'node % is fenced off queues %', me, lost
            USING ERRCODE = 'SMQ01', DETAIL = array_to_string(lost, ',');
    END IF;
END
$fence$;
"""

SQL = {
    # -- membership ---------------------------------------------------------------------------------
    "defs_lock": "SELECT pg_advisory_xact_lock(%s)",
    "register": (
        "INSERT INTO {s}.nodes (name, no, address, lease_seconds)"
        " VALUES (%(name)s, (SELECT coalesce(max(no), 0) + 1 FROM {s}.nodes), %(address)s, %(lease)s)"
        " ON CONFLICT (name) DO UPDATE SET address = EXCLUDED.address, started = now(), heartbeat = now(),"
        " lease_seconds = EXCLUDED.lease_seconds RETURNING no"
    ),
    "heartbeat": "UPDATE {s}.nodes SET heartbeat = now(), address = %s WHERE name = %s",
    "nodes": (
        "SELECT name, no, address, started, heartbeat,"
        " heartbeat > now() - lease_seconds * interval '1 second' AS alive,"
        " extract(epoch FROM now() - heartbeat) AS age FROM {s}.nodes ORDER BY no"
    ),
    "secret": "SELECT secret FROM {s}.cluster WHERE id = 1",
    "addresses": "SELECT name, address FROM {s}.nodes",
    "forget_node": "DELETE FROM {s}.nodes WHERE name = %s",
    # -- leases -------------------------------------------------------------------------------------
    # queues that have no lease yet (declared before clustering) get one led by whoever asks first
    "lease_orphans": (
        "INSERT INTO {s}.leases (queue, leader, epoch, expires)"
        " SELECT q.id, %(me)s, 0, now() - interval '1 second' FROM {s}.queues q"
        " ON CONFLICT (queue) DO NOTHING"
    ),
    # a (re)starting node takes back the leases of its previous life and every expired one
    "lease_acquire": (
        "UPDATE {s}.leases l SET leader = %(me)s, epoch = l.epoch + 1,"
        " expires = now() + %(lease)s * interval '1 second'"
        " WHERE l.queue IN (SELECT queue FROM {s}.leases WHERE leader = %(me)s AND %(restart)s"
        "   OR expires < now() ORDER BY queue FOR UPDATE SKIP LOCKED)"
        " RETURNING l.queue, l.epoch"
    ),
    "lease_renew": (
        "UPDATE {s}.leases SET expires = now() + %(lease)s * interval '1 second'"
        " WHERE leader = %(me)s RETURNING queue, epoch"
    ),
    "lease_new": (
        "INSERT INTO {s}.leases (queue, leader, epoch, expires)"
        " VALUES (%s, %s, 1, now() + %s * interval '1 second') ON CONFLICT (queue) DO NOTHING"
    ),
    "lease_mine": "SELECT queue, epoch FROM {s}.leases WHERE leader = %s",
    "lease_check": "SELECT queue, leader, epoch FROM {s}.leases WHERE queue = ANY(%s::bigint[])",
    "lease_leaders": (
        "SELECT q.vhost, q.name, l.leader FROM {s}.leases l JOIN {s}.queues q ON q.id = l.queue WHERE l.leader <> %s"
    ),
    "lease_drop": "DELETE FROM {s}.leases WHERE queue = %s",
    "fence": "SELECT {s}.fence(%s, %s::bigint[], %s::bigint[])",
    "leases": (
        "SELECT q.vhost, q.name, l.leader, l.epoch, l.expires, extract(epoch FROM l.expires - now())"
        " FROM {s}.leases l JOIN {s}.queues q ON q.id = l.queue ORDER BY q.vhost, q.name"
    ),
    # live nodes and how many queues each leads (``balanced`` placement)
    "node_load": (
        "SELECT n.name, count(l.queue) FROM {s}.nodes n LEFT JOIN {s}.leases l ON l.leader = n.name"
        " WHERE n.heartbeat > now() - n.lease_seconds * interval '1 second' GROUP BY n.name"
    ),
    # -- loading the queues this node leads ---------------------------------------------------------
    "load_messages": (
        "SELECT qm.queue, qm.msg_id, qm.delivery_count, m.payload FROM {s}.queue_messages qm"
        " LEFT JOIN {s}.messages m ON m.id = qm.msg_id"
        " WHERE qm.queue IN (SELECT queue FROM {s}.leases WHERE leader = %s)"
        " ORDER BY qm.queue, qm.msg_id"
    ),
    "load_queue_messages": (
        "SELECT qm.queue, qm.msg_id, qm.delivery_count, m.payload FROM {s}.queue_messages qm"
        " JOIN {s}.messages m ON m.id = qm.msg_id WHERE qm.queue = ANY(%s::bigint[])"
        " ORDER BY qm.queue, qm.msg_id"
    ),
    "queue_names": "SELECT id, vhost, name FROM {s}.queues WHERE id = ANY(%s::bigint[])",
    "max_ids": (
        "SELECT (SELECT max(id) FROM {s}.messages WHERE id >= %(lo)s AND id < %(hi)s),"
        " (SELECT max(id) FROM {s}.queues WHERE id >= %(lo)s AND id < %(hi)s)"
    ),
    # -- the definitions log ------------------------------------------------------------------------
    "log_change": "INSERT INTO {s}.changes (node, op, params) VALUES (%s, %s, %s)",
    "last_change": "SELECT coalesce(max(serial), 0) FROM {s}.changes",
    "changes_since": (
        "SELECT serial, node, op, params, extract(epoch FROM at) FROM {s}.changes WHERE serial > %s ORDER BY serial"
    ),
}


def defs_key(schema: str) -> int:
    """The advisory lock definition writers take for the length of their transaction."""
    return (0x736D64 << 32) | crc32(schema.encode())  # "smd" | crc


def _quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def cluster_statements(schema: str) -> dict[str, str]:
    quoted = _quoted(schema)
    return {name: text.replace("{s}", quoted) for name, text in SQL.items()}


def cluster_ddl(schema: str) -> str:
    return DDL.replace("{s}", _quoted(schema))
