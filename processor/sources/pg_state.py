"""The PostgreSQL capture's own small state: which slot it created and how far the initial snapshot got.

One JSON file, `capture.json`, in the capture's state directory, replaced atomically (write, fsync,
rename), so a SIGKILL leaves either the old or the new version. It answers two questions on start:
- was the slot ours? A slot recorded here that has vanished from the server is lost state (its
  unconfirmed changes are gone), which the capture reports instead of re-creating it;
- which snapshot chunks are on the raw topic? Resuming skips them; a chunk sent but not yet recorded
  is sent again with the same xid and seq, so event_id dedup collapses it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TableProgress:
    chunks: int = 0  # chunks on the raw topic
    last_key: list[str] | None = None  # primary key of the last row sent, as text
    done: bool = False


@dataclass
class CaptureState:
    slot: str | None = None  # the slot this capture streams from (created or adopted)
    slot_lsn: int = 0  # its consistent point: snapshot rows sit just below it
    snapshot: str = "pending"  # pending | running | done | skipped
    snapshot_ts_ms: int = 0
    tables: dict[str, TableProgress] = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def load(cls, state_dir: str | Path) -> CaptureState:
        path = Path(state_dir) / "capture.json"
        if not path.exists():
            return cls(path=path)
        data: dict[str, Any] = json.loads(path.read_text())
        tables = {t: TableProgress(**p) for t, p in data.pop("tables", {}).items()}
        return cls(**data, tables=tables, path=path)

    def save(self) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        data.pop("path")
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def table(self, name: str) -> TableProgress:
        return self.tables.setdefault(name, TableProgress())
