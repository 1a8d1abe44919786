"""Format "sansmq": the PySpark Python Data Source tying options, readers and writers together."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from sansmq_client import sync

from .columns import SCHEMA_DDL, selected_columns
from .options import OptionError, ReadOptions, WriteOptions
from .retry import with_retries
from .sink import BatchWriter, StreamWriter, check_target
from .source import BatchReader, PushdownBatchReader, StreamReader

__all__ = ["SansmqDataSource"]


def _check_target(opts: WriteOptions) -> None:
    with sync.connect(opts.url, connect_timeout=opts.timeout, name="sansmq pipeline") as conn:
        check_target(conn, opts)


class SansmqDataSource(DataSource):
    #: the session's default parallelism (``for_session``)
    parallelism = 1

    @classmethod
    def name(cls) -> str:
        return "sansmq"

    @classmethod
    def for_session(cls, parallelism: int) -> type[SansmqDataSource]:
        """The format for a session of ``parallelism`` cores. Spark plans a Python source's reads in
        processes of their own, with no SparkContext to ask, so the number travels with the class
        (a class made here is pickled with its attributes, not imported by name)."""
        return type(cls.__name__, (cls,), {"parallelism": parallelism, "__qualname__": f"{cls.__name__}.for_session",
                                           "__module__": cls.__module__})

    def schema(self) -> str:
        # Spark asks for the schema in load() (reads only): bad option values fail there, at once
        ReadOptions.parse(self.options)
        return SCHEMA_DDL

    def _read_options(self, schema: StructType) -> ReadOptions:
        """The options, and the columns of ``schema``: the source's, or those of the schema the user
        gave (``.schema(...)``: PySpark hands it to the source only here, not in load())."""
        columns = selected_columns([(f.name, f.dataType.simpleString()) for f in schema.fields])
        return replace(ReadOptions.parse(self.options), columns=columns, parallelism=self.parallelism)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._read_options(schema).for_batch()
        return PushdownBatchReader(opts) if opts.filter_pushdown else BatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(self._read_options(schema))  # for_stream() on its first call (see there)

    def _write_options(self, schema: StructType) -> WriteOptions:
        return WriteOptions.parse(self.options, {f.name: f.dataType.simpleString() for f in schema.fields})

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # a stream is append-only: nothing to overwrite (Spark refuses Ignore/ErrorIfExists)
            raise OptionError('the sansmq sink only appends: use mode("append"), not "overwrite"')
        opts = self._write_options(schema)
        # on the driver, before any task (Spark pickles this writer for the commit: checked once)
        with_retries(lambda: _check_target(opts), opts.retry_deadline, "checking the sink's target")
        return BatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:  # type: ignore[override]
        # Spark builds the stream writer again for every batch's commit and abort, which must not
        # need the broker: the tasks check the target when they connect
        return StreamWriter(self._write_options(schema))
