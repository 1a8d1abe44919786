"""File descriptors: raising the soft limit at start, and counting them for the operator.

A broker holds one descriptor per connection; the usual soft limit (1,024) is far below what the
kernel allows (the hard limit), so the server raises it at start as RabbitMQ's packaging does.
"""

from __future__ import annotations

import os
import resource

from ._driver import log

__all__ = ["FD_RESERVE", "raise_fd_limit", "fd_limit", "open_fds", "fd_alarm"]

#: descriptors left below the limit at which the file descriptor alarm is on: new connections
#: (and the store's files) are about to be refused with EMFILE
FD_RESERVE = 32


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (logged); returns the limit now in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. an unlimited hard limit on macOS
            log.warning("cannot raise the open file limit from %d to %d: %s", soft, hard, exc)
    log.info("open file limit: %d descriptors", soft, extra={"event": "server.fd_limit", "fd_limit": soft})
    return soft


def fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_fds() -> int:
    """Descriptors open in this process (from /proc/self/fd, else /dev/fd; 0 when neither exists)."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(where)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return 0


def fd_alarm(used: int, limit: int) -> bool:
    """RabbitMQ's file_descriptor_limit alarm: the process is about to run out of descriptors."""
    return used >= limit - FD_RESERVE
