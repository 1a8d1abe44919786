"""Public home of :class:`PostgresStore`, the durable store in a PostgreSQL database (see
``engine._postgres.store``; needs the ``postgresql`` extra: psycopg 3).

The implementation talks to a database server and takes locks, so it lives in a subpackage: the
engine core modules next to this one stay free of I/O imports.
"""

from ._postgres.store import PostgresStore

__all__ = ["PostgresStore"]
