"""Benchmark workloads: RawEvents built with processor.events.raw_event, Avro-encoded, written
through RawTopicWriter (key = XID, murmur2), so the raw topic looks exactly as a source makes it.

Encoded by processor.core.codec: the compiled codec when built, whose bytes are fastavro's (the
property tests; the same 20,000 steady events compared equal), at an eighth of the CPU (57 -> 7 µs
an event). The slow writer made a run's workloads take minutes, and many_open's transactions old
enough in source time (wall clock at writing) to be spilled by age on a slow machine.

The workloads are shaped to the issue's numbers (average transaction size, open transactions,
rollback share, change size), which the general-purpose generator does not target, so they are
built here directly. Every builder is seeded and deterministic.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from processor.core import codec
from processor.core import events as ev
from processor.core.partitioning import partition_of
from processor.kafka.rawtopic import RawTopicWriter

BASE_TS_MS = 1_700_000_000_000
TABLES = ("app.accounts", "app.orders", "app.items", "app.ledger")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


@dataclass
class Workload:
    """What was written: counts the harness needs to check completeness and compute rates."""

    topic: str
    partitions: int
    events: int = 0
    changes: int = 0
    committed_changes: int = 0  # changes of committed transactions: what every buffer must emit
    committed: int = 0
    rolled_back: int = 0
    open_at_end: int = 0
    write_seconds: float = 0.0
    avg_event_bytes: float = 0.0
    extra: dict = field(default_factory=dict)


class _Encoder:
    """Encodes change events of ~`size` bytes; the row payload is padded to reach it."""

    def __init__(self, rng: random.Random, size: int = 200):
        self.rng = rng
        self.scn = 0
        self.ts_ms = 0  # source time: the wall clock at the last BEGIN/COMMIT/ROLLBACK written
        self.pad = "x" * max(0, size - 150)

    def change(self, xid: str, seq: int, pk: int) -> bytes:
        self.scn += 1
        rng = self.rng
        table = TABLES[pk & 3]
        op = ev.INSERT if seq == 1 or rng.random() < 0.5 else ev.UPDATE
        after = {
            "id": pk,
            "name": WORDS[pk % 10] + "-" + str(pk),
            "amount": rng.random() * 1000.0,
            "qty": int(rng.random() * 100),
            "active": True,
            "note": self.pad,
        }
        before = None if op == ev.INSERT else {"id": pk, "qty": 0}
        return codec.encode_raw(
            ev.raw_event(
                xid,
                op,
                seq,
                self.scn,
                ts_ms=BASE_TS_MS + self.scn,
                table=table,
                key={"id": pk},
                before=before,
                after=after,
                user="bench",
            )
        )

    def control(self, xid: str, op: str, seq: int) -> bytes:
        self.scn += 1
        self.ts_ms = int(time.time() * 1000)
        return codec.encode_raw(ev.raw_event(xid, op, seq, self.scn, ts_ms=self.ts_ms, user="bench"))


class SmallTxns:
    """An endless source-log stream of small interleaved transactions.

    `open_txns` transactions are open at once; each has 1..(2*avg-1) changes (mean `avg`), a BEGIN,
    and ends in COMMIT or, with probability `rollback_rate`, ROLLBACK. Yields (xid, value, kind)
    with kind in {"change", "begin", "commit", "rollback"}.
    """

    def __init__(
        self,
        prefix: str,
        seed: int,
        open_txns: int = 200,
        avg: int = 10,
        rollback_rate: float = 0.1,
        size: int = 200,
        xid_filter: Callable[[str], bool] | None = None,
    ):
        self.rng = random.Random(seed)
        self.enc = _Encoder(self.rng, size)
        self.prefix, self.open_target, self.avg, self.rollback_rate = prefix, open_txns, avg, rollback_rate
        self.xid_filter = xid_filter
        self.counter = 0
        self.open: list[list] = []  # [xid, seq, remaining, commits]
        self.pk = 0

    def _new_xid(self) -> str:
        while True:
            xid = f"{self.prefix}{self.counter}"
            self.counter += 1
            if self.xid_filter is None or self.xid_filter(xid):
                return xid

    def events(self, stop: Callable[[], bool] = lambda: False) -> Iterator[tuple[str, bytes, str]]:
        """Until stop() is true; then the open transactions are finished (not abandoned)."""
        rng, enc = self.rng, self.enc
        while True:
            stopping = stop()
            while not stopping and len(self.open) < self.open_target:
                xid = self._new_xid()
                remaining = 1 + int(rng.random() * (2 * self.avg - 1))
                self.open.append([xid, 1, remaining, rng.random() >= self.rollback_rate])
                yield xid, enc.control(xid, ev.BEGIN, 0), "begin"
            if not self.open:
                return
            i = int(rng.random() * len(self.open))
            t = self.open[i]
            if t[2] > 0 and not stopping:
                self.pk += 1
                yield t[0], enc.change(t[0], t[1], self.pk % 50_000), "change"
                t[1] += 1
                t[2] -= 1
            else:
                self.open[i] = self.open[-1]
                self.open.pop()
                if t[3]:
                    yield t[0], enc.control(t[0], ev.COMMIT, t[1]), "commit"
                else:
                    yield t[0], enc.control(t[0], ev.ROLLBACK, t[1]), "rollback"


def _writer(bootstrap: str, topic: str, partitions: int) -> RawTopicWriter:
    return RawTopicWriter(bootstrap, topic, partitions=partitions)


def _count(w: Workload, kind: str, nbytes: int) -> None:
    w.events += 1
    w.avg_event_bytes += nbytes
    if kind == "change":
        w.changes += 1
    elif kind == "commit":
        w.committed += 1
    elif kind == "rollback":
        w.rolled_back += 1


def _finish(w: Workload, writer: RawTopicWriter, started: float) -> Workload:
    writer.flush(300)
    w.write_seconds = time.monotonic() - started
    w.avg_event_bytes = round(w.avg_event_bytes / max(w.events, 1), 1)
    return w


def write_steady(
    bootstrap: str,
    topic: str,
    n_events: int,
    partitions: int = 4,
    seed: int = 1,
    open_txns: int = 200,
    avg: int = 10,
    rollback_rate: float = 0.1,
    xid_filter: Callable[[str], bool] | None = None,
) -> Workload:
    """~n_events of small interleaved transactions (all finished by the end)."""
    started = time.monotonic()
    writer = _writer(bootstrap, topic, partitions)
    w = Workload(topic, writer.partitions)
    src = SmallTxns("st-", seed, open_txns, avg, rollback_rate, xid_filter=xid_filter)
    pending: dict[str, int] = {}
    for xid, value, kind in src.events(lambda: w.events >= n_events):
        writer.write_encoded(xid, value)
        _count(w, kind, len(value))
        if kind == "change":
            pending[xid] = pending.get(xid, 0) + 1
        elif kind == "commit":
            w.committed_changes += pending.pop(xid, 0)
        elif kind == "rollback":
            pending.pop(xid, None)
    return _finish(w, writer, started)


def write_huge(
    bootstrap: str, topic: str, n_changes: int, partitions: int = 4, seed: int = 2, background_every: int = 100
) -> Workload:
    """One transaction of n_changes (~200 B each) with one small-transaction event every
    `background_every` changes around it, and a few small transactions before its BEGIN so the
    first outputs mark the start of processing."""
    started = time.monotonic()
    writer = _writer(bootstrap, topic, partitions)
    w = Workload(topic, writer.partitions)
    rng = random.Random(seed)
    enc = _Encoder(rng)
    bg = SmallTxns("bg-", seed + 1, open_txns=20)
    bg_iter = bg.events(lambda: w.extra.get("huge_done", False))
    xid = f"huge-{n_changes}"
    w.extra["huge_xid"] = xid
    for _ in range(200):
        bx, value, kind = next(bg_iter)
        writer.write_encoded(bx, value)
        _count(w, kind, len(value))
    writer.write_encoded(xid, enc.control(xid, ev.BEGIN, 0))
    w.events += 1
    for seq in range(1, n_changes + 1):
        value = enc.change(xid, seq, seq)
        writer.write_encoded(xid, value)
        _count(w, "change", len(value))
        if seq % background_every == 0:
            bx, bvalue, kind = next(bg_iter)
            writer.write_encoded(bx, bvalue)
            _count(w, kind, len(bvalue))
    writer.write_encoded(xid, enc.control(xid, ev.COMMIT, n_changes + 1))
    _count(w, "commit", 0)
    w.extra["huge_done"] = True
    w.extra["huge_partition"] = partition_of(xid, writer.partitions)
    for bx, value, kind in bg_iter:
        writer.write_encoded(bx, value)
        _count(w, kind, len(value))
    return _finish(w, writer, started)


def many_open_events(n_open: int, seed: int = 3) -> Iterator[tuple[str, bytes, str]]:
    """n_open transactions open at once: every BEGIN, then one change each, then every COMMIT, as
    (xid, value, kind) like SmallTxns.events. bench.steady_inproc applies the same records in process."""
    enc = _Encoder(random.Random(seed))
    xids = [f"mo-{i}" for i in range(n_open)]
    for x in xids:
        yield x, enc.control(x, ev.BEGIN, 0), "begin"
    for i, x in enumerate(xids):
        yield x, enc.change(x, 1, i), "change"
    for x in xids:
        yield x, enc.control(x, ev.COMMIT, 2), "commit"


def write_many_open(bootstrap: str, topic: str, n_open: int, partitions: int = 4, seed: int = 3) -> Workload:
    """many_open_events written to the raw topic."""
    started = time.monotonic()
    writer = _writer(bootstrap, topic, partitions)
    w = Workload(topic, writer.partitions)
    for xid, value, kind in many_open_events(n_open, seed):
        writer.write_encoded(xid, value)
        if kind == "begin":
            w.events += 1
        else:
            _count(w, kind, len(value) if kind == "change" else 0)
    return _finish(w, writer, started)


def write_open_only(
    bootstrap: str, topic: str, n_events: int, partitions: int = 4, seed: int = 4, n_txns: int = 1000
) -> Workload:
    """n_events of n_txns interleaved transactions that never end: all of it stays buffered."""
    started = time.monotonic()
    writer = _writer(bootstrap, topic, partitions)
    w = Workload(topic, writer.partitions)
    rng = random.Random(seed)
    enc = _Encoder(rng)
    xids = [f"cold-{i}" for i in range(n_txns)]
    seqs = [1] * n_txns
    for x in xids:
        writer.write_encoded(x, enc.control(x, ev.BEGIN, 0))
        w.events += 1
    while w.events < n_events:
        i = int(rng.random() * n_txns)
        value = enc.change(xids[i], seqs[i], w.events)
        seqs[i] += 1
        writer.write_encoded(xids[i], value)
        _count(w, "change", len(value))
    w.open_at_end = n_txns
    return _finish(w, writer, started)


def avoiding_partition(idle: int, partitions: int) -> Callable[[str], bool]:
    """An XID filter that keeps partition `idle` free of transactions."""
    return lambda xid: partition_of(xid, partitions) != idle


def pregenerate(src: SmallTxns, n_total: int) -> list[tuple[str, bytes, str, int, int]]:
    """`n_total` events of `src`, encoded up front so that a paced loop only produces them; each with
    the source's scn and time after it (what a heartbeat written after it may say)."""
    evs: list[tuple[str, bytes, str, int, int]] = []
    for xid, value, kind in src.events(lambda: len(evs) >= n_total):
        evs.append((xid, value, kind, src.enc.scn, src.enc.ts_ms))
    return evs


def feed_paced(writer: RawTopicWriter, evs: list, rate: float) -> tuple[dict[str, float], float]:
    """Produce pregenerated events at `rate` events/s, with a heartbeat every 100 ms, then flush.

    A heartbeat carries the scn and source time of the last event written, as a source's would. The
    wall clock at feeding is ahead of the events' own time by how long pregenerating took (tens of
    seconds at 1M events): heartbeats stamped with it made every transaction look older than
    STAGE_MAX_AGE_MS, so each checkpoint spilled all of them to the store, and said that no COMMIT
    below the last pregenerated scn would follow, which was false.

    The events due in a lap go to the producer in one call (write_encoded_run): the writer shares the
    machine with the programs it measures, and a Python call per event took ~1.1 µs of its 220k
    events/s (session 55). Each COMMIT of a lap is stamped with the lap's start, before any of its
    events is produced: up to the lap's produce time (tens of µs) early, never late.

    Returns the wall-clock instant (ms) each COMMIT was produced, by XID, and the seconds it took."""
    commit_ms: dict[str, float] = {}
    commits = [j for j, e in enumerate(evs) if e[2] == "commit"]
    next_commit = 0  # commits[next_commit] is the first COMMIT not yet written
    t0 = time.monotonic()
    i, n, last_hb = 0, len(evs), t0
    while i < n:
        now = time.monotonic()
        due = min(n, int((now - t0) * rate) + 1)
        if i < due:
            stamp = time.time() * 1000
            writer.write_encoded_run(evs, i, due)
            while next_commit < len(commits) and commits[next_commit] < due:
                commit_ms[evs[commits[next_commit]][0]] = stamp
                next_commit += 1
            i = due
        if now - last_hb >= 0.1:
            _, _, _, scn, ts_ms = evs[i - 1]
            writer.heartbeat(scn, ts_ms=ts_ms)
            last_hb = now
        writer.producer.poll(0)
        time.sleep(0.0005)
    offered_s = time.monotonic() - t0
    _, _, _, scn, ts_ms = evs[-1]
    writer.heartbeat(scn + 1, ts_ms=ts_ms)
    writer.flush(60)
    return commit_ms, offered_s
