"""The protocol-neutral model, split by concern (see ``model.Model`` for the layers)."""

from .._message import Entry, Message
from .errors import (
    AccessRefused,
    ModelError,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
    Unsupported,
)
from .light import LightConsumer
from .model import Model
from .objects import STANDARD_EXCHANGES, Consumer, ConsumerOwner, Exchange, Queue, VHost
from .publish import PUBLISH_REFUSED, PUBLISH_ROUTED, PUBLISH_WROTE

__all__ = [
    "Model", "VHost", "Exchange", "Queue", "Consumer", "ConsumerOwner", "LightConsumer", "Message", "Entry",
    "ModelError", "NotFound", "AccessRefused", "PreconditionFailed", "ResourceLocked", "Unsupported",
    "STANDARD_EXCHANGES",
    "PUBLISH_ROUTED", "PUBLISH_REFUSED", "PUBLISH_WROTE",
]
