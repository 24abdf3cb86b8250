"""Log lines that a request or a model cannot forge.

Input names, dim names, node names, option keys, error details and tracebacks quote what strangers
sent. Written as they are, a newline in a model's input name writes a second, fake log line (an
``ERROR`` that never happened) and an ANSI escape clears the operator's terminal. Every handler the
service installs formats through one of the two formatters below, which escape control characters
(C0, DEL, C1, and the Unicode line and paragraph separators) in the whole formatted record,
traceback included: one event is one line.

- ``text`` (the default, ``QUANTCOMPARE_LOG_FORMAT=text``): ``time name LEVEL message``;
- ``json``: one JSON object per line (``time``, ``level``, ``logger``, ``process``, ``message``,
  ``exception``), ASCII only, for a log shipper.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import datetime, timezone

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b"}
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def escaped(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group()) or
                        (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"), text)


class TextFormatter(logging.Formatter):
    """The standard library's text format, one line per record whatever the message holds."""

    def format(self, record: logging.LogRecord) -> str:
        return escaped(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record (json.dumps escapes every control character; ASCII only)."""

    def __init__(self, role: str | None = None):
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "process": record.process,
               "message": escaped(record.getMessage())}
        if self.role:
            out["role"] = self.role
        if record.exc_info:
            out["exception"] = escaped(self.formatException(record.exc_info))
        if record.stack_info:
            out["stack"] = escaped(self.formatStack(record.stack_info))
        return json.dumps(out, ensure_ascii=True)


def formatter(log_format: str, *, role: str | None = None, text_format: str = TEXT_FORMAT) -> logging.Formatter:
    return JsonFormatter(role) if log_format == "json" else TextFormatter(text_format)


def configure_logging(level: str, log_format: str = "text", *, role: str | None = None,
                      text_format: str = TEXT_FORMAT) -> None:
    """One stderr handler on the root logger with the chosen formatter (replacing any before it)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format, role=role, text_format=text_format))
    root.addHandler(handler)
    root.setLevel(level.upper())
