"""The shared replay driver: recorded source-log rows -> RawEvents on the raw topic, bad rows -> DLQ.

A source's mapper is pure: `map_row(row)` returns RawEvent dicts or raises BadRow; `finish()` returns
events still held back at end of input; `watermarks()` gives the highest commit position per thread.
`map_rows` runs a mapper over rows without any I/O (tests use it); `Replay` adds the Kafka writes.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)


class BadRow(ValueError):
    """A source row that cannot be mapped; it goes to the DLQ with this message as the reason."""


class Mapper(Protocol):
    def map_row(self, row: dict[str, Any]) -> list[dict]: ...

    def finish(self) -> list[dict]: ...

    def watermarks(self) -> dict[int, int]: ...


@dataclass
class SourceRow:
    line: int  # 1-based line (JSON lines) or record number (CSV) in the file
    row: dict[str, Any]
    original: bytes  # what goes to the DLQ if the row is bad


@dataclass
class Output:
    """One result of mapping: an event, or a dead letter (reason + original row)."""

    event: dict | None = None
    reason: str | None = None
    source: SourceRow | None = None


def _clean(value: Any) -> Any:
    # CSV has no NULL: an empty cell is one.
    return None if value == "" else value


def read_rows(path: str | Path) -> Iterator[SourceRow]:
    """Rows of a CSV file (header line first) or a JSON-lines file, detected by the first character."""
    path = Path(path)
    with open(path, encoding="utf-8", newline="") as f:
        head = f.read(4096)
        f.seek(0)
        if head.lstrip().startswith("{"):
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                original = line.rstrip("\r\n").encode()
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield SourceRow(n, {"__error__": f"invalid JSON: {exc}"}, original)
                    continue
                if not isinstance(row, dict):
                    yield SourceRow(n, {"__error__": "JSON line is not an object"}, original)
                    continue
                yield SourceRow(n, row, original)
        else:
            reader = csv.DictReader(f)
            for n, row in enumerate(reader, 1):
                clean = {k: _clean(v) for k, v in row.items() if k is not None}
                yield SourceRow(n, clean, _csv_line(reader.fieldnames or [], row))


def _csv_line(fields: list[str], row: dict) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([row.get(f, "") for f in fields])
    return buf.getvalue().encode()


def map_rows(rows: Iterable[SourceRow], mapper: Mapper) -> Iterator[Output]:
    """Run the mapper over rows: events in order, bad rows as dead letters; never stops on bad input."""
    for src in rows:
        if "__error__" in src.row:
            yield Output(reason=src.row["__error__"], source=src)
            continue
        try:
            produced = mapper.map_row(src.row)
        except BadRow as exc:
            yield Output(reason=str(exc), source=src)
            continue
        for event in produced:
            yield Output(event=event, source=src)
    for event in mapper.finish():
        yield Output(event=event)


@dataclass
class Summary:
    rows: int = 0
    events: int = 0
    dlq: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)


class Replay:
    """Writes a mapper's output: events through RawTopicWriter, dead letters through its DLQ writer."""

    def __init__(self, writer: Any, source: str, file: str | None = None):
        if writer.dlq is None:
            raise ValueError("Replay needs a RawTopicWriter with a dlq_topic: bad rows must go somewhere")
        self.writer = writer
        self.source = source
        self.file = file
        self.summary = Summary()

    def _dead_letter(self, out: Output) -> None:
        src = out.source
        xid = src.row.get("XID") if src is not None else None
        self.writer.dlq.write(
            str(xid).encode() if xid else None,
            src.original if src else b"",
            out.reason,
            self.source,
            file=self.file,
            line=src.line if src else None,
            xid=xid,
        )
        short = out.reason.split(":")[0]
        self.summary.reasons[short] = self.summary.reasons.get(short, 0) + 1
        self.summary.dlq += 1
        log.warning("replay.dead_letter", source=self.source, line=src.line if src else None, reason=out.reason)

    def run(self, rows: Iterable[SourceRow], mapper: Mapper, progress: bool | None = None) -> Summary:
        from tqdm import tqdm

        counted = _Counting(rows, self.summary)
        disable = not sys.stderr.isatty() if progress is None else not progress
        with tqdm(counted, unit="row", disable=disable, desc=f"replay {self.source}") as bar:
            for out in map_rows(bar, mapper):
                if out.event is None:
                    self._dead_letter(out)
                    continue
                self.writer.write(out.event)
                self.summary.events += 1
                op = out.event["op"]
                self.summary.by_op[op] = self.summary.by_op.get(op, 0) + 1
        # The whole file is on the topic: no COMMIT below these positions will follow.
        for thread, scn in sorted(mapper.watermarks().items()):
            self.writer.heartbeat(scn, thread=thread)
        self.writer.flush()  # raw events and dead letters
        return self.summary


class _Counting:
    def __init__(self, rows: Iterable[SourceRow], summary: Summary):
        self.rows, self.summary = rows, summary

    def __iter__(self) -> Iterator[SourceRow]:
        for row in self.rows:
            self.summary.rows += 1
            yield row


def as_int(row: dict[str, Any], name: str, required: bool = True) -> int | None:
    value = row.get(name)
    if value is None or value == "":
        if required:
            raise BadRow(f"missing {name}")
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadRow(f"{name} is not an integer: {value!r}") from None


def key_of(
    table: str, image: dict[str, Any] | None, key_columns: dict[str, list[str]], fallback_name: str, fallback: Any
) -> dict[str, Any]:
    """The primary-key map of a row image.

    Configured key columns win; else a column named ID; else the physical row address (Oracle ROWID,
    IBM i relative record number), which identifies the row as long as it does not move.
    """
    image = image or {}
    cols = key_columns.get(table) or key_columns.get(table.split(".")[-1])
    if cols:
        missing = [c for c in cols if c not in image]
        if missing:
            raise BadRow(f"key column(s) {missing} of {table} not in the row image")
        return {c: image[c] for c in cols}
    if "ID" in image:
        return {"ID": image["ID"]}
    if fallback is not None:
        return {fallback_name: fallback}
    raise BadRow(f"no key for {table}: configure --key {table}=COL,... or provide {fallback_name}")


def parse_key_specs(specs: Iterable[str]) -> dict[str, list[str]]:
    """`--key SCHEMA.TABLE=COL1,COL2` flags -> {table: [cols]}."""
    out: dict[str, list[str]] = {}
    for spec in specs or []:
        table, sep, cols = spec.partition("=")
        if not sep or not table or not cols:
            raise ValueError(f"--key expects TABLE=COL[,COL...], got {spec!r}")
        out[table.strip()] = [c.strip() for c in cols.split(",") if c.strip()]
    return out
