"""Sphinx configuration of the sansmq documentation (built by `tox -e docs` and scripts/build-docs.sh).

Reference material is generated from the code at build time (see _ext/): the codecs' state tables,
the config schema and the CLI's argparse parser, so the pages follow the code after every merge.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # document the checkout, not whatever is installed
sys.path.insert(0, str(HERE / "_ext"))

project = "sansmq"
author = "the sansmq developers"
copyright = "the sansmq developers, MIT licence"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.graphviz",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sansmq_reference",  # _ext/: writes _generated/*.rst.inc from the code before reading
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# Option names and quotes stay as typed: "--tls-cert" must not become an en dash, "''" no curly quotes.
smartquotes = False
# _generated/ holds include files (not documents); examples/ are Python files shown with literalinclude.
exclude_patterns = ["_build", "_generated", "examples", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"  # type hints rendered beside each parameter's description
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Type hints name private modules' classes (stompproto._events.Frame): the public re-export documents them.
nitpicky = False
# Type hints name builtins (``type[Frame]``); without intersphinx the Python domain then searches by
# suffix and finds the generated AMQP classes' fields of the same name (BasicProperties.type,
# ExchangeDeclare.type) and warns that the match is ambiguous. Only that category is silenced.
suppress_warnings = ["ref.python"]

graphviz_output_format = "svg"
graphviz_dot_args = ["-Gfontname=Helvetica", "-Nfontname=Helvetica", "-Efontname=Helvetica"]

html_theme = "alabaster"
html_title = "sansmq"
html_theme_options = {
    "description": "sans-IO STOMP, AMQP 0-9-1 and WebSocket codecs, and a deterministic broker",
    "fixed_sidebar": True,
    "page_width": "1360px",  # room for the examples' 120-column lines
    "sidebar_width": "250px",
}
html_static_path: list[str] = []
