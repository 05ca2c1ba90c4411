"""One log line format for every ``inflight`` service, so their logs read alike."""

from __future__ import annotations

import logging
import sys

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: str) -> None:
    """Log to stderr at ``level`` (a name such as ``"info"``; case does not matter)."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)
