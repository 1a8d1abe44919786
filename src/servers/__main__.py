"""``python -m servers serve ...`` is ``sansmq serve ...``."""

import sys

from .cli import main

sys.exit(main())
