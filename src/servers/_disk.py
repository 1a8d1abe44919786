"""The disk monitor: free space on the data directory's file system, sampled for the broker.

The engine never reads a disk (nor a clock); this thread measures the free bytes every
``interval`` seconds and hands them to the broker on its own thread (``Broker.disk_free_sampled``),
which raises or clears the disk alarm against its ``disk_free_limit`` (RabbitMQ's disk monitor).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from typing import Any

from ._driver import log

__all__ = ["DISK_INTERVAL", "DiskMonitor", "machine_memory"]

#: seconds between two samples (RabbitMQ checks at most every 10 s, more often near the limit; a
#: statvfs costs microseconds, so every second here)
DISK_INTERVAL = 1.0


def machine_memory() -> int:
    """Bytes of physical memory (what RabbitMQ's relative disk_free_limit multiplies)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class DiskMonitor:
    """Samples the free space under ``path`` for ``driver``'s broker until :meth:`stop`."""

    def __init__(self, driver: Any, path: str, interval: float = DISK_INTERVAL) -> None:
        self.driver = driver
        self.path = path
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sansmq-disk", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        broker = self.driver.broker
        failing = False
        while not self._stop.is_set():
            try:
                free = shutil.disk_usage(self.path).free
            except OSError as exc:  # the directory vanished, a stale mount...: said once, not per second
                if not failing:
                    log.warning("disk monitor: cannot measure free space under %s: %s", self.path, exc)
                failing = True
            else:
                failing = False
                self.driver.call_soon(lambda free=free: broker.disk_free_sampled(free, time.time()))
            self._stop.wait(self.interval)
