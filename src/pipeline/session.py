"""A SparkSession for the pipeline's own jobs (``sansmq analyze``, tests, benchmarks), and the fix for
the Python workers' start-up that a user's own session can take too (``worker_spark_home``).

Every Python process Spark starts (the executors' workers, and on the driver one per data source
planning step) gets ``$SPARK_HOME/python/lib/pyspark.zip`` first on its PYTHONPATH (Spark's
``PythonUtils.sparkPythonPath``; a pip-installed PySpark is its own SPARK_HOME and ships that zip).
Python's zipimport never caches compiled modules, so each such process compiles PySpark from source
again: about 0.5 s of CPU per process on our machine, against 0.25 s importing the same modules from
the installed package's cached bytecode.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

__all__ = ["make_session", "worker_spark_home"]


def worker_spark_home() -> str | None:
    """Point SPARK_HOME (for a Spark JVM this process starts from now on) at a copy of the
    pip-installed PySpark's home that lacks ``python/lib/pyspark.zip`` (every other entry a symlink),
    so that Python workers import PySpark from the installed package and its cached bytecode instead
    of compiling the zip's sources in every process. Returns that directory, or None and changes
    nothing where it would not be the same PySpark: SPARK_HOME already set (a Spark distribution),
    PySpark not pip-installed, or workers running another interpreter (PYSPARK_PYTHON)."""
    import pyspark

    home = os.path.dirname(os.path.abspath(pyspark.__file__))  # a pip install is its own SPARK_HOME
    if os.environ.get("SPARK_HOME") or not os.path.isfile(os.path.join(home, "python", "lib", "pyspark.zip")):
        return None
    if os.path.realpath(os.environ.get("PYSPARK_PYTHON", sys.executable)) != os.path.realpath(sys.executable):
        return None  # that interpreter may not have PySpark installed: it needs the zip
    shadow = tempfile.mkdtemp(prefix="sansmq-spark-home-")
    atexit.register(shutil.rmtree, shadow, True)
    for entry in os.listdir(home):
        if entry != "python":
            os.symlink(os.path.join(home, entry), os.path.join(shadow, entry))
    lib = os.path.join(home, "python", "lib")
    os.makedirs(os.path.join(shadow, "python", "lib"))
    for entry in os.listdir(lib):  # py4j's zip stays (small); only PySpark's goes
        if entry != "pyspark.zip":
            os.symlink(os.path.join(lib, entry), os.path.join(shadow, "python", "lib", entry))
    os.environ["SPARK_HOME"] = shadow
    return shadow


def make_session(master: str = "local[*]", app_name: str = "sansmq", conf: Mapping[str, str] | None = None) -> Any:
    """A session with format "sansmq" registered. Python workers run this interpreter (where the
    pipeline package is installed) unless PYSPARK_PYTHON says otherwise, importing PySpark from it
    (``worker_spark_home``); the web UI is off."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from . import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if SparkContext._gateway is None:  # the JVM starts now: it takes SPARK_HOME from this process
        worker_spark_home()
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
