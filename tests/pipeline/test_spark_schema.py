"""A narrower schema (issue 28): ``.schema("offset long, body binary")`` (any of the source's columns,
any order) makes batch and streaming reads build and send only those columns; option ``filter``
still selects messages when column ``filter`` is not read; a column the source does not have, or
with another type, is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipelinekit import Broker

from pipeline.columns import SchemaError, selected_columns


def test_selected_columns_are_the_sources_own_in_the_order_given() -> None:
    assert selected_columns([("body", "binary"), ("offset", "bigint")]) == ("body", "offset")
    with pytest.raises(SchemaError, match="no column 'key'; its columns: stream string, offset bigint"):
        selected_columns([("key", "string")])
    with pytest.raises(SchemaError, match="column 'offset' of the sansmq source is bigint, not int"):
        selected_columns([("offset", "int")])
    with pytest.raises(SchemaError, match="column 'body' is in the schema given to the sansmq source twice"):
        selected_columns([("body", "binary"), ("body", "binary")])


def test_a_narrower_schema_reads_only_its_columns_in_batch_and_streaming(spark, broker: Broker,
                                                                          tmp_path: Path) -> None:
    from pyspark.sql.functions import col

    stream = broker.stream("pipe-schema")
    broker.publish(stream, [b"eu-%d" % i for i in range(30)], {"x-stream-filter-value": "eu", "k": "v"})
    broker.publish(stream, [b"us-%d" % i for i in range(20)], {"x-stream-filter-value": "us", "k": "w"})

    def read(schema: str, **options: str):
        reader = spark.read.format("sansmq").schema(schema).option("url", broker.url).option("stream", stream)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    df = read("body binary, offset long")
    assert df.columns == ["body", "offset"]
    rows = df.collect()
    assert [(r.offset, bytes(r.body)) for r in rows] == (
        [(i, b"eu-%d" % i) for i in range(30)] + [(30 + i, b"us-%d" % i) for i in range(20)])
    assert [r.offset for r in read("offset long", filter="us").collect()] == list(range(30, 50))
    pushed = read("offset long, filter string").where(col("filter") == "us").collect()  # pushed down
    assert [(r.offset, r.filter) for r in pushed] == [(i, "us") for i in range(30, 50)]
    headers = read("headers map<string,string>, filter string").collect()
    assert headers[0].filter == "eu" and headers[0].headers["k"] == "v" and headers[49].headers["k"] == "w"

    query = (spark.readStream.format("sansmq").schema("filter string, offset long").option("url", broker.url)
             .option("stream", stream).option("maxRecordsPerTrigger", "20").load()
             .writeStream.format("memory").queryName("narrow_28")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    got = spark.sql("select * from narrow_28").collect()
    assert spark.table("narrow_28").columns == ["filter", "offset"]
    assert sorted((r.offset, r.filter) for r in got) == [(i, "eu" if i < 30 else "us") for i in range(50)]


def test_a_column_the_source_lacks_or_of_another_type_is_a_clear_error(spark, broker: Broker) -> None:
    stream = broker.stream("pipe-schema-bad")
    broker.publish(stream, [b"x"])
    for schema, message in (("offset int", "column 'offset' of the sansmq source is bigint, not int"),
                            ("offset long, key string", "the sansmq source has no column 'key'")):
        df = spark.read.format("sansmq").schema(schema).option("url", broker.url).option("stream", stream).load()
        with pytest.raises(Exception, match=message):
            df.collect()
        streaming = (spark.readStream.format("sansmq").schema(schema).option("url", broker.url)
                     .option("stream", stream).load())
        with pytest.raises(Exception, match=message):
            query = streaming.writeStream.format("noop").trigger(availableNow=True).start()
            query.awaitTermination(60)
            if query.exception() is not None:
                raise query.exception()
