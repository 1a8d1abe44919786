"""Public home of :class:`PostgresStore`, the durable store in a PostgreSQL database (see
``engine.storage.postgres.store``; needs the ``postgresql`` extra: psycopg 3).

The implementation talks to a database server and takes locks, so it lives in ``engine.storage``: the
engine core modules next to this one stay free of I/O imports.
"""

from .storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
