"""The embedded durable store: segment files, per-queue indexes, records."""
