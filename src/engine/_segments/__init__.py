"""The embedded durable store's implementation (file I/O lives here, outside the pure engine core)."""
