"""The docs' generated reference pages (docs/_ext) cover what the code has: every state table entry,
every config key, every CLI option, every public event and error. They are generated at build time, so
these tests check the generators, not a copy."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
import cliref  # noqa: E402
import configref  # noqa: E402
import events  # noqa: E402
import sansmq_reference  # noqa: E402
import statetables  # noqa: E402

from engine import config_schema  # noqa: E402

CODECS = sansmq_reference.CODECS


@pytest.mark.parametrize("codec", CODECS)
def test_every_state_table_is_found_and_drawn_row_for_row(codec: str) -> None:
    module = importlib.import_module(f"{codec}._state")
    found = sansmq_reference.state_tables(codec)
    assert found, f"no state table found in {codec}._state"
    for dotted in found:
        table = getattr(module, dotted.rpartition(".")[2])
        text = statetables.rst(dotted)
        assert text.count("   * - ") == len(table) + 1  # a header row, then one row per entry
        assert text.count(" -> ") >= len({(k[0], k[-2], v) if len(k) == 3 else (k[0], v) for k, v in table.items()})
        for key, new in table.items():
            assert f"``{new.name}``" in text and f'"{key[-2].name}"' in text


def test_state_table_labels_use_the_module_constants_for_non_classes() -> None:
    rows = statetables.rows(*statetables.load_table("amqpproto._state.CHANNEL_TABLE"))
    assert ("CLIENT", "CH_OPEN", "ANY_METHOD", "CH_OPEN") in rows
    content = statetables.rows(*statetables.load_table("amqpproto._state.CONTENT_TABLE"))
    assert content[0] == ("", "C_IDLE", "METHOD", "C_IDLE")


def test_config_reference_has_every_key_with_a_description() -> None:
    text, problems = configref.rst()
    assert problems == []
    tables = {k: configref._section_keys(config_schema, k) for k, c in config_schema.TOP_LEVEL_KEYS.items() if c is dict}
    keys = [k for k, c in config_schema.TOP_LEVEL_KEYS.items() if c is not dict]
    keys += [f"{table}.{k}" for table, sub in tables.items() for k in sub]
    for key in keys:
        row = text.split(f"   * - ``{key}``\n", 1)
        assert len(row) == 2, f"{key} missing from the config reference"
        meaning = row[1].split("\n")[2]
        assert meaning.strip() != "-", f"{key} has no description"
    assert "``limits.queue_window``\n     - integer >= 0\n     - ``2048``" in text


def test_config_reference_reports_keys_nobody_described() -> None:
    # tls.cert and tls.key are described only by their comments in the example file: without it
    # (an empty file in its place) the generator must name them, which fails the -W build
    _, problems = configref.rst(example=("servers", "py.typed"))
    assert any("'tls.cert'" in p for p in problems) and any("'tls.key'" in p for p in problems)


def test_example_comments_are_read_trailing_or_above() -> None:
    assert configref.example_comments("[limits]\nfoo = 1\n") == {}
    assert configref.example_comments("[limits]\nfoo = 1   # what foo is\n") == {"limits.foo": "what foo is"}
    assert configref.example_comments('# block\n# text\nbar = "#x"\n') == {"bar": "block text"}
    assert configref.example_comments("[users.app]  # every user\n# password = 1  # commented out\n") == {
        "users": "every user", "users.password": "commented out"}


def _all_options(parser: argparse.ArgumentParser) -> list[str]:
    options = [o for a in parser._actions for o in a.option_strings
               if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    for sub in cliref._subcommands(parser).values():
        options += _all_options(sub)
    return options


def test_cli_reference_has_every_subcommand_and_option() -> None:
    parser = cliref.load_parser("servers.cli:build_parser")
    text = cliref.rst()
    for name in cliref._subcommands(parser):
        assert f"\nsansmq {name}\n---" in text
    missing = [o for o in _all_options(parser) if o not in text]
    assert missing == []


@pytest.mark.parametrize("codec", CODECS)
def test_events_reference_lists_every_public_event_and_error(codec: str) -> None:
    module = importlib.import_module(codec)
    text = events.rst(codec)
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, type) and (hasattr(obj, "__dataclass_fields__") or issubclass(obj, BaseException)):
            assert f":class:`{codec}.{name}`" in text
    assert "Send(headers" not in text  # dataclasses' generated signatures are not shown as descriptions
