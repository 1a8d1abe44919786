"""Format "sansmq": the PySpark Python Data Source tying options, readers and writers together."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from .client import ChannelError, Client
from .options import OptionError, ReadOptions, WriteOptions
from .sink import BatchWriter, StreamWriter
from .source import SCHEMA_DDL, BatchReader, StreamReader

__all__ = ["SansmqDataSource"]


class SansmqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sansmq"

    def schema(self) -> str:
        # Spark asks for the schema in load() (reads only): bad option values fail there, at once
        ReadOptions.parse(self.options)
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(ReadOptions.parse(self.options).for_batch())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(ReadOptions.parse(self.options))  # for_stream() on its first call (see there)

    def _write_options(self, schema: StructType) -> WriteOptions:
        opts = WriteOptions.parse(self.options, {f.name: f.dataType.simpleString() for f in schema.fields})
        with Client(opts.url, timeout=opts.timeout) as client:  # fail on the driver, before any task
            if opts.target_stream is not None:
                client.declare_passive(opts.target_stream)
            else:
                try:
                    client.exchange_exists(opts.exchange)
                except ChannelError as exc:
                    raise OptionError(f"option exchange: {exc}") from None
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # a stream is append-only: nothing to overwrite (Spark refuses Ignore/ErrorIfExists)
            raise OptionError('the sansmq sink only appends: use mode("append"), not "overwrite"')
        return BatchWriter(self._write_options(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:  # type: ignore[override]
        return StreamWriter(self._write_options(schema))
