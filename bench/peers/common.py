"""What both peers share with the harness: the JSON markers it times, the raw schema, the op names.

Kept free of `processor` imports, so the Quix Streams peer runs in its own virtualenv
(quixstreams pins an older confluent-kafka than the project uses).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[2] / "processor" / "schemas"
CHANGE_OPS = frozenset({"INSERT", "UPDATE", "DELETE", "TRUNCATE", "DDL", "READ"})


def raw_schema() -> dict:
    return json.loads((SCHEMAS / "raw_event.avsc").read_text())


def mark(event: str, **kw: object) -> None:
    """A JSON log line on stderr, in the shape bench.measure.Proc reads."""
    ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    print(json.dumps({"event": event, "timestamp": ts, **kw}), file=sys.stderr, flush=True)
