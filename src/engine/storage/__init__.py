"""The stores that do I/O, behind the ``engine.store.Store`` interface: ``segment`` (the embedded
default: append-only segment files) and ``postgres`` (a PostgreSQL database). Their public homes
are ``engine.segment_store`` and ``engine.postgres_store``; everything outside this package is pure
(no clock, file, thread or socket: see tests/engine/test_engine_purity.py)."""
