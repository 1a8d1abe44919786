"""What a SEND or SUBSCRIBE to ``/queue/NAME`` that declares a stream or a quorum queue checks.
RabbitMQ's STOMP plugin declares the queue with the frame's headers, so a frame that would make a
new stream or quorum queue non-durable, auto-delete or exclusive gets the ERROR its queue.declare's
406 would give (naming the property), as does an argument the type refuses. (A frame giving
another type than an existing queue has is refused in ``base``.)"""

from __future__ import annotations

from typing import Any

from ..model.objects import check_queue_args, queue_type_of
from ..model.quorum import check_quorum_declare
from ..model.streams import check_stream_declare

__all__ = ["check_new_typed_queue"]


def check_new_typed_queue(name: str, vhost: str, headers: dict[str, str], args: dict[str, Any] | None) -> None:
    """A new stream or quorum queue must be durable, not auto-delete and not exclusive, read from
    the headers as RabbitMQ's plugin reads them for ``/queue/``: durable unless ``durable`` (or
    ``persistent``) says false, auto-delete when ``auto-delete`` says so or, without it, when not
    durable."""
    qtype = queue_type_of(args)
    if qtype == "classic":
        return
    durable = headers.get("durable", headers.get("persistent", "true")).lower() != "false"
    auto_delete = headers.get("auto-delete", "false" if durable else "true").lower() == "true"
    exclusive = headers.get("exclusive", "false").lower() == "true"
    check = check_stream_declare if qtype == "stream" else check_quorum_declare
    check(name, vhost, durable, exclusive, auto_delete, check_queue_args(args, name, vhost))
