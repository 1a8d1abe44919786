"""A SparkSession for the pipeline's own jobs (``sansmq analyze``, tests, benchmarks)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["make_session"]


def make_session(master: str = "local[*]", app_name: str = "sansmq", conf: Mapping[str, str] | None = None) -> Any:
    """A session with format "sansmq" registered. Python workers run this interpreter (where the
    pipeline package is installed) unless PYSPARK_PYTHON says otherwise; the web UI is off."""
    from pyspark.sql import SparkSession

    from . import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
