"""The PostgreSQL store: schema, batched writes, the store."""
