"""The command-line reference, generated from the ``sansmq`` argparse parser.

Walks the parser the CLI itself builds (``servers.cli.build_parser``): for the program and every
subcommand (recursively), its usage, description, and each option with its help, default and
choices, grouped as ``--help`` groups them. Nothing is copied, so the page is what ``--help`` says.
"""

from __future__ import annotations

import argparse
import importlib

_UNDERLINES = "-~^\""  # section levels below the page title


def load_parser(dotted: str) -> argparse.ArgumentParser:
    """``module:function`` -> the parser that function builds."""
    module_name, _, func = dotted.partition(":")
    parser = getattr(importlib.import_module(module_name), func)()
    if not isinstance(parser, argparse.ArgumentParser):
        raise TypeError(f"{dotted} did not return an ArgumentParser")
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("|", "\\|")


def _option(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    formatter = parser._get_formatter()
    invocation = formatter._format_action_invocation(action)
    help_text = formatter._expand_help(action) if action.help and action.help != argparse.SUPPRESS else ""
    notes = []
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        notes.append("choices: " + ", ".join(f"``{c}``" for c in action.choices))
    shown_default = action.default not in (None, False, argparse.SUPPRESS, [], "") and "default" not in help_text
    if shown_default and action.option_strings and not isinstance(action, argparse._StoreConstAction):
        notes.append(f"default: ``{action.default}``")
    body = " ".join(filter(None, [_escape(help_text), "; ".join(notes)]))
    return [f"``{invocation}``", f"   {body or '(no help text)'}", ""]


def _group_lines(parser: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction,
                                                                          argparse._SubParsersAction))]
        if not actions:
            continue
        out += [f".. rubric:: {_escape(group.title or 'options')}", ""]
        if group.description:
            out += [_escape(group.description), ""]
        for action in actions:
            out += _option(parser, action)
    return out


def _text(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """A description or epilog as ``--help`` shows it: verbatim under a raw formatter, else a paragraph."""
    if isinstance(parser.formatter_class, type) and issubclass(parser.formatter_class,
                                                               argparse.RawDescriptionHelpFormatter):
        return ["::", ""] + ["   " + line for line in text.splitlines()] + [""]
    return [_escape(text), ""]


def _parser_lines(parser: argparse.ArgumentParser, level: int) -> list[str]:
    out: list[str] = []
    if level >= 0:  # the program itself sits under the page's own title
        out += [parser.prog, _UNDERLINES[level] * len(parser.prog), ""]
    out += ["::", ""] + ["   " + line for line in parser.format_usage().rstrip().splitlines()] + [""]
    if parser.description:
        out += _text(parser, parser.description)
    out += _group_lines(parser)
    if parser.epilog:
        out += _text(parser, parser.epilog)
    for sub in _subcommands(parser).values():
        out += _parser_lines(sub, level + 1)
    return out


def rst(dotted: str = "servers.cli:build_parser") -> str:
    """The whole CLI as reStructuredText sections, starting one level below the page title."""
    return "\n".join(_parser_lines(load_parser(dotted), -1)) + "\n"
