"""Moved: the load generator behind ``sansmq bench`` is the top-level package ``sansmq_bench``.

This alias keeps ``from servers.bench import parse_options, run_sync`` (its public names) working.
"""

from sansmq_bench import *  # noqa: F403
from sansmq_bench import __all__  # noqa: F401
