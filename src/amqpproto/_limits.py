"""Bounds the connection's parts share (below ``_base`` and the parsers, so none imports another for them)."""

#: Bound of each per-connection encode/decode cache (entries); a full cache is cleared, so
#: unbounded name sets (routing keys) cost at most this many entries per connection.
CACHE_MAX = 256
