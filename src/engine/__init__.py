"""sansmq's broker core: deterministic, time-injected, single-threaded.

Servers drive a :class:`Broker` through the driver contract (``connection_made``, ``data_received``,
``connection_lost``, ``handle_timer``/``get_timer``, ``drain``, ``data_sent``, ``synced``, and
``run_sync`` on a worker thread) and execute the actions ``drain()`` returns. ``engine.testing``
runs the same broker in a simulated network.

Layout, top down (a module imports only those below it; tests/engine/test_engine_purity.py checks):

    _broker        the driver contract: sessions, timers, sync tokens, actions (``_actions``)
    stomp/ amqp/ ws/   protocol sessions: frames -> model operations, deliveries -> frames; they
                   reach the broker only through ``_session.Host``
    _session       what every session shares (output accounting, held receipts, codec timer)
    model/         the protocol-neutral model, in layers (see ``model.model``)
    store          the Store interface and MemoryStore; ``storage/`` the stores doing I/O
    _message, _timers, _props, config   messages, the timer queue, header mapping, settings
"""

from . import _broker as _hot_module
from ._actions import Action, Close, PauseReading, ResumeReading, Sync, Write
from ._broker import Broker
from ._message import Entry, Message
from .config import Config, Limits, User
from .model import (
    PUBLISH_REFUSED,
    PUBLISH_ROUTED,
    PUBLISH_WROTE,
    AccessRefused,
    Consumer,
    Exchange,
    Model,
    ModelError,
    NotFound,
    PreconditionFailed,
    Queue,
    ResourceLocked,
    VHost,
)
from .store import (
    BindingDef,
    ExchangeDef,
    MemoryStore,
    QueueDef,
    Recovered,
    Store,
    StoredMessage,
    StoreError,
)

#: True when the engine's per-message modules (setup.py's ENGINE_COMPILED) are the mypyc-compiled build
#: (``pip install .`` with a C compiler), False when they run as pure Python (docs/testing.md).
COMPILED: bool = not (_hot_module.__file__ or "").endswith(".py")

__all__ = [
    "COMPILED",
    "Broker", "Config", "Limits", "User",
    "Action", "Write", "Close", "PauseReading", "ResumeReading", "Sync",
    "Store", "MemoryStore", "StoreError", "ExchangeDef", "QueueDef", "BindingDef", "StoredMessage", "Recovered",
    "Model", "VHost", "Exchange", "Queue", "Consumer", "Message", "Entry",
    "ModelError", "NotFound", "AccessRefused", "PreconditionFailed", "ResourceLocked",
    "PUBLISH_ROUTED", "PUBLISH_REFUSED", "PUBLISH_WROTE",
]
