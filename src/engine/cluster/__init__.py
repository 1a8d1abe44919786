"""The model side of a cluster node (DESIGN.md section 8): deterministic, no I/O.

A node's model holds every shared definition; a queue led by another node is a *remote* queue
(``leader`` set in its extras: messages published to it go to its leader, never into this node's
memory). ``membership`` turns what the database says (leases moved, definitions changed) into
model operations; the servers' cluster layer (``servers.cluster``) does the I/O and calls these on
the loop thread.
"""

from .membership import apply_change, mark_remote, step_down, take_over

__all__ = ["apply_change", "mark_remote", "step_down", "take_over"]
