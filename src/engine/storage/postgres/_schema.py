"""SQL of the PostgreSQL store: the schema (created on first use) and the statements a sync runs.

Everything lives in one schema (``sansmq`` by default) so the store can share a database with the
user's own tables. A message row is shared by every queue holding it; ``queue_messages`` says which
queue holds which message and how often it was delivered. Batches are written with ``unnest`` over
arrays: one statement per kind of change, however many messages a sync covers.
"""

from __future__ import annotations

from zlib import crc32

#: tables, in creation order; ``{s}`` is the schema name (an identifier we quote ourselves)
SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.vhosts (
    name text PRIMARY KEY,
    ord bigint GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE IF NOT EXISTS {s}.exchanges (
    vhost text NOT NULL,
    name text NOT NULL,
    type text NOT NULL,
    durable boolean NOT NULL,
    auto_delete boolean NOT NULL,
    internal boolean NOT NULL,
    args bytea,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE IF NOT EXISTS {s}.queues (
    id bigint PRIMARY KEY,
    vhost text NOT NULL,
    name text NOT NULL,
    durable boolean NOT NULL,
    auto_delete boolean NOT NULL,
    args bytea,
    UNIQUE (vhost, name)
);
CREATE TABLE IF NOT EXISTS {s}.bindings (
    vhost text NOT NULL,
    source text NOT NULL,
    dest text NOT NULL,
    dest_is_exchange boolean NOT NULL,
    key text NOT NULL,
    args_key text NOT NULL,
    args bytea,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (vhost, source, dest, dest_is_exchange, key, args_key)
);
CREATE TABLE IF NOT EXISTS {s}.messages (
    id bigint PRIMARY KEY,
    payload bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.queue_messages (
    queue bigint NOT NULL,
    msg_id bigint NOT NULL,
    delivery_count integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, msg_id)
);
CREATE INDEX IF NOT EXISTS queue_messages_msg_id ON {s}.queue_messages (msg_id);
"""


def lock_key(schema: str) -> int:
    """The advisory lock a broker holds on its database while it owns ``schema``."""
    return (0x736D71 << 32) | crc32(schema.encode())  # "smq" | crc: a positive bigint


# -- entity statements (each an upsert or an idempotent delete: a batch may be replayed) ------------
SQL = {
    "add_vhost": "INSERT INTO {s}.vhosts (name) VALUES (%s) ON CONFLICT DO NOTHING",
    "delete_vhost": "DELETE FROM {s}.vhosts WHERE name = %s",
    "add_exchange": (
        "INSERT INTO {s}.exchanges (vhost, name, type, durable, auto_delete, internal, args)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (vhost, name) DO UPDATE SET type = EXCLUDED.type,"
        " durable = EXCLUDED.durable, auto_delete = EXCLUDED.auto_delete, internal = EXCLUDED.internal,"
        " args = EXCLUDED.args"
    ),
    "delete_exchange": "DELETE FROM {s}.exchanges WHERE vhost = %s AND name = %s",
    "delete_exchange_bindings": (
        "DELETE FROM {s}.bindings WHERE vhost = %s AND (source = %s OR (dest_is_exchange AND dest = %s))"
    ),
    "add_queue": (
        "INSERT INTO {s}.queues (id, vhost, name, durable, auto_delete, args) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO NOTHING"
    ),
    "delete_queue": "DELETE FROM {s}.queues WHERE id = %s",
    # messages only this queue holds go first, while queue_messages still says which they are
    "delete_queue_messages": (
        "DELETE FROM {s}.messages m USING {s}.queue_messages qm WHERE qm.queue = %s AND m.id = qm.msg_id"
        " AND NOT EXISTS (SELECT 1 FROM {s}.queue_messages o WHERE o.msg_id = m.id AND o.queue <> qm.queue)"
    ),
    "delete_queue_entries": "DELETE FROM {s}.queue_messages WHERE queue = %s",
    "delete_queue_bindings": (
        "DELETE FROM {s}.bindings WHERE vhost = %s AND NOT dest_is_exchange AND dest = %s"
    ),
    "add_binding": (
        "INSERT INTO {s}.bindings (vhost, source, dest, dest_is_exchange, key, args_key, args)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
    ),
    "delete_binding": (
        "DELETE FROM {s}.bindings WHERE vhost = %s AND source = %s AND dest = %s AND dest_is_exchange = %s"
        " AND key = %s AND args_key = %s"
    ),
    # -- message batches --------------------------------------------------------------------------
    # the same id may come back after a restart (ids restart above the highest recovered one), so a
    # leftover row is overwritten rather than kept
    "put_messages": (
        "INSERT INTO {s}.messages (id, payload) SELECT * FROM unnest(%s::bigint[], %s::bytea[])"
        " ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload"
    ),
    "put_entries": (
        "INSERT INTO {s}.queue_messages (queue, msg_id, delivery_count)"
        " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::integer[])"
        " ON CONFLICT (queue, msg_id) DO UPDATE SET delivery_count = EXCLUDED.delivery_count"
    ),
    "set_counts": (
        "UPDATE {s}.queue_messages qm SET delivery_count = u.c"
        " FROM unnest(%s::bigint[], %s::bigint[], %s::integer[]) AS u(q, m, c)"
        " WHERE qm.queue = u.q AND qm.msg_id = u.m"
    ),
    "delete_entries": (
        "DELETE FROM {s}.queue_messages qm USING unnest(%s::bigint[], %s::bigint[]) AS u(q, m)"
        " WHERE qm.queue = u.q AND qm.msg_id = u.m"
    ),
    "delete_orphans": (
        "DELETE FROM {s}.messages m WHERE m.id = ANY(%s::bigint[])"
        " AND NOT EXISTS (SELECT 1 FROM {s}.queue_messages qm WHERE qm.msg_id = m.id)"
    ),
    # -- recovery ---------------------------------------------------------------------------------
    "cleanup_entries": (
        "DELETE FROM {s}.queue_messages qm WHERE NOT EXISTS (SELECT 1 FROM {s}.queues q WHERE q.id = qm.queue)"
    ),
    "cleanup_messages": (
        "DELETE FROM {s}.messages m WHERE NOT EXISTS (SELECT 1 FROM {s}.queue_messages qm WHERE qm.msg_id = m.id)"
    ),
    "load_vhosts": "SELECT name FROM {s}.vhosts ORDER BY ord",
    "load_exchanges": (
        "SELECT vhost, name, type, durable, auto_delete, internal, args FROM {s}.exchanges ORDER BY ord"
    ),
    "load_queues": "SELECT id, vhost, name, durable, auto_delete, args FROM {s}.queues ORDER BY id",
    "load_bindings": (
        "SELECT vhost, source, dest, dest_is_exchange, key, args FROM {s}.bindings ORDER BY ord"
    ),
    "load_messages": (
        "SELECT qm.queue, qm.msg_id, qm.delivery_count, m.payload FROM {s}.queue_messages qm"
        " LEFT JOIN {s}.messages m ON m.id = qm.msg_id ORDER BY qm.queue, qm.msg_id"
    ),
}


def statements(schema: str) -> dict[str, str]:
    """``SQL`` with the (quoted) schema filled in."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return {name: text.replace("{s}", quoted) for name, text in SQL.items()}


def schema_ddl(schema: str) -> str:
    quoted = '"' + schema.replace('"', '""') + '"'
    return SCHEMA.replace("{s}", quoted)
