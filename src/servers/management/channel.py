"""The HTTP listeners' connections: waitress's channel with a deadline on reading a request's head.

waitress closes a connection only once it has been idle for ``channel_timeout``; a client sending
its request headers a byte at a time is never idle, so a few hundred of them (slowloris) would hold
every connection slot. Here a request's head (request line and headers) must arrive within
``HEADER_TIMEOUT`` seconds of its first byte, and a new connection must start one within that time;
a connection that misses it is closed (and logged). The check runs in ``readable()``, which the
server's loop calls for every connection at least once per loop timeout (1 s).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from waitress.channel import HTTPChannel

__all__ = ["HEADER_TIMEOUT", "DeadlineChannel"]

log = logging.getLogger("sansmq.http")

#: seconds a request's head may take to arrive (RabbitMQ's web server, cowboy, allows 5 s per request
#: by default; a little more here for slow links)
HEADER_TIMEOUT = 10.0


class DeadlineChannel(HTTPChannel):  # type: ignore[misc]
    name = "http"
    header_timeout = HEADER_TIMEOUT
    will_close: bool  # waitress's, untyped there

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map)
        #: when the head being read began (a new connection: when it was accepted); None: not reading one
        self.head_started: float | None = self.creation_time

    def received(self, data: bytes) -> bool:
        done: bool = super().received(data)
        request = self.request
        if request is None or request.headers_finished:
            self.head_started = None
        elif self.head_started is None:
            self.head_started = time.time()
        return done

    def readable(self) -> bool:
        started = self.head_started
        if started is not None and not self.will_close and time.time() - started > self.header_timeout:
            log.info("%s: closing the connection from %s: no complete request head within %gs", self.name,
                     self.addr, self.header_timeout, extra={"event": "http.timeout", "protocol": self.name})
            self.head_started = None
            self.will_close = True  # handle_write closes it (writable() is now true)
        return bool(super().readable())
