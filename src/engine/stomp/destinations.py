"""STOMP destinations mapped onto the model the way RabbitMQ's STOMP plugin does (plus ocamlmq's
prefix topics and control destinations). Pure functions: no model access."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Destination", "parse_destination", "BadDestination", "is_prefix_topic", "destination_for"]


class BadDestination(ValueError):
    pass


@dataclass(slots=True)
class Destination:
    #: queue, amq-queue, topic, exchange, temp-queue, reply-queue, control
    kind: str
    #: queue or exchange name (or the temp-queue/control suffix)
    name: str = ""
    #: routing key (topic / exchange kinds)
    key: str = ""


_SIMPLE = (
    ("/queue/", "queue"),
    ("/amq/queue/", "amq-queue"),
    ("/temp-queue/", "temp-queue"),
    ("/reply-queue/", "reply-queue"),
    ("/control/", "control"),
)


def parse_destination(dest: str | None) -> Destination:
    if not dest:
        raise BadDestination("missing destination header")
    if dest.startswith("/topic/"):
        key = dest[7:]
        if not key:
            raise BadDestination(f"invalid destination '{dest}'")
        return Destination("topic", "amq.topic", key)
    if dest.startswith("/exchange/"):
        rest = dest[10:]
        name, _, key = rest.partition("/")
        if not name:
            raise BadDestination(f"invalid destination '{dest}'")
        return Destination("exchange", name, key)
    for prefix, kind in _SIMPLE:
        if dest.startswith(prefix):
            name = dest[len(prefix):]
            if not name:
                raise BadDestination(f"invalid destination '{dest}'")
            return Destination(kind, name)
    raise BadDestination(f"unknown destination '{dest}'")


def is_prefix_topic(key: str) -> bool:
    """``foo*`` (ocamlmq prefix subscription) but not ``foo.*`` or a bare ``*`` (AMQP wildcards)."""
    return len(key) > 1 and key.endswith("*") and key[-2] != "."


def destination_for(exchange: str, routing_key: str) -> str:
    """The ``destination`` header of a MESSAGE, derived from where it was published."""
    if exchange == "":
        return f"/queue/{routing_key}"
    if exchange == "amq.topic":
        return f"/topic/{routing_key}"
    return f"/exchange/{exchange}/{routing_key}" if routing_key else f"/exchange/{exchange}"
