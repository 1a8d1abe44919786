"""Python workers' start-up (issue 28): Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on
every Python worker's path, and zipimport compiles PySpark from source in each new process;
``make_session`` points SPARK_HOME at the pip-installed PySpark's home without that zip, so workers
import PySpark from the installed package (its cached bytecode)."""

from __future__ import annotations

import os
import sys

import pytest

from pipeline.session import worker_spark_home


def _pyspark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def test_worker_spark_home_is_pysparks_home_without_its_zip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    home = _pyspark_home()
    assert os.path.isfile(os.path.join(home, "python", "lib", "pyspark.zip"))  # a pip install ships it
    shadow = worker_spark_home()
    assert shadow is not None and os.environ["SPARK_HOME"] == shadow
    assert os.path.realpath(os.path.join(shadow, "jars")) == os.path.realpath(os.path.join(home, "jars"))
    assert os.path.isfile(os.path.join(shadow, "bin", "spark-submit"))
    lib = sorted(os.listdir(os.path.join(shadow, "python", "lib")))
    assert lib == sorted(e for e in os.listdir(os.path.join(home, "python", "lib")) if e != "pyspark.zip")
    # nothing changes where workers might not find the same PySpark installed
    assert worker_spark_home() is None  # SPARK_HOME is set now (a distribution's, say)
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3-elsewhere")
    assert worker_spark_home() is None and "SPARK_HOME" not in os.environ


def test_workers_of_make_session_import_pyspark_from_the_installed_package(spark) -> None:
    def where(_: object) -> list[str]:
        import pyspark

        return [pyspark.__file__]

    files = spark.sparkContext.parallelize([1], 1).mapPartitions(where).collect()
    assert files == [os.path.join(_pyspark_home(), "__init__.py")], files
