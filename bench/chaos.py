"""The kill campaign: `python -m bench.chaos [--quick] [--events N] [--kills K] [--instances I] [--seed S]`.

What it does, in one process tree:
  1. starts an embedded (Tansu) broker and fresh topics;
  2. feeds a seeded generated workload (processor.sources.generator) to the raw topic from a
     background thread, throttled to --rate events/s, while the generator writes the expected output;
  3. runs --instances `txbuffer run` subprocesses in one consumer group, each with its own state dir
     and its own Prometheus endpoint;
  4. SIGKILLs a random live instance at a random instant inside each of --kills equal time slots
     spread over the feed; with probability --wipe-prob (and at least --min-wipes times) the victim's
     state dir is deleted before it is restarted after a random delay;
  5. once, between two kills, SIGSTOPs the broker for --pause seconds, then SIGCONTs it;
  6. waits until the group's committed low watermark equals the true end of every raw partition
     (nothing open, nothing pending anywhere), stops the instances with SIGTERM;
  7. checks the output: processor.verify.verify() against the generator's expected files, plus its
     own pass over the changes topic (duplicates before and after dedup, from event_ids AND content;
     commit-order violations per input partition), and opens every state dir read-only to count
     leftover buffered keys (TXN) and transaction metadata (META).

Recovery time ("restart to first output") is measured per restart from the moment the restarted
process is spawned to the first Prometheus scrape of that process showing
txbuffer_changes_emitted_total > 0 (the scrape runs every 0.1 s; the runner refreshes its metrics
every commit_interval_ms, 1 s by default, so the figure is an upper bound by up to ~1.1 s). A restart
that never emits (nothing left for it, or killed first) has no recovery time. The log-based time to
`partition.assigned` (group join) is reported too.

Prints a table and writes bench/results/chaos-<UTC timestamp>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import TopicPartition

from processor.core import events as ev
from processor.core import keys
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.end_offsets import end_offsets
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.read import read_to_end
from processor.kafka.embedded import EmbeddedKafka, free_port
from processor.testing.expected import dumps
from processor.testing.generator import WorkloadGenerator
from processor.testing.verify import read_topic, verify

RESULTS = Path(__file__).resolve().parent / "results"

PRESETS = {
    "full": dict(events=1_000_000, kills=20, instances=3, rate=4000, pause=30.0, partitions=6, open_txns=100),
    "quick": dict(events=100_000, kills=5, instances=2, rate=4000, pause=5.0, partitions=4, open_txns=100),
}


@dataclass
class Campaign:
    events: int = 1_000_000
    kills: int = 20
    instances: int = 3
    seed: int = 1
    rate: float = 4000.0  # feed rate, events/s (0 = as fast as possible)
    partitions: int = 6
    open_txns: int = 100  # concurrently open transactions in the generator
    pause: float = 30.0  # broker SIGSTOP duration, seconds (0 = no pause)
    wipe_prob: float = 0.25
    min_wipes: int = 1
    restart_delay: tuple[float, float] = (0.0, 3.0)
    settle_timeout: float = 600.0  # after the feed: time allowed to reach the end
    workdir: Path | None = None
    keep: bool = False


@dataclass
class Instance:
    index: int
    state_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    port: int = 0
    started_at: float = 0.0
    starts: int = 0


@dataclass
class Restart:
    instance: int
    at_s: float  # seconds since campaign start
    wiped: bool
    reason: str  # "kill" or "unplanned-exit"
    first_output_s: float | None = None
    assigned_s: float | None = None


@dataclass
class Outcome:
    figures: dict = field(default_factory=dict)
    restarts: list = field(default_factory=list)
    unplanned_exits: list = field(default_factory=list)
    state_dirs: dict = field(default_factory=dict)
    verify: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)
    timeline: list = field(default_factory=list)


class Chaos:
    def __init__(self, c: Campaign, log=print):
        self.c = c
        self.say = log
        self.rng = random.Random(c.seed)
        self.tmp = Path(c.workdir or tempfile.mkdtemp(prefix="txbuffer-chaos-"))
        self.tmp.mkdir(parents=True, exist_ok=True)
        tag = uuid.uuid4().hex[:8]
        self.raw, self.changes, self.txns, self.dlq = (
            f"raw-{tag}",
            f"changes-{tag}",
            f"transactions-{tag}",
            f"dlq-{tag}",
        )
        self.group = f"chaos-{tag}"
        self.expected_dir = self.tmp / "expected"
        self.broker = EmbeddedKafka(log_path=self.tmp / "broker.log")
        self.instances = [
            Instance(i, self.tmp / f"state-{i}", self.tmp / f"instance-{i}.log") for i in range(c.instances)
        ]
        self.out = Outcome()
        self.t0 = 0.0
        self.feed_done = threading.Event()
        self.feed_error: list[str] = []
        self.fed = 0
        self.summary: dict = {}
        self.restarts: list[Restart] = []
        self._watch: list[tuple[Instance, Restart, int]] = []  # (instance, restart, start number)
        self._stop_watch = threading.Event()

    # ------------------------------------------------------------------ helpers

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, what: str, **kw) -> None:
        entry = {"t": round(self.now(), 2), "event": what, **kw}
        self.out.timeline.append(entry)
        self.say(f"[{entry['t']:8.2f}s] {what} " + " ".join(f"{k}={v}" for k, v in kw.items()))

    def _args(self, inst: Instance) -> list[str]:
        return [
            sys.executable,
            "-m",
            "processor.cli",
            "--log-format",
            "json",
            "run",
            "--bootstrap",
            self.broker.bootstrap,
            "--raw-topic",
            self.raw,
            "--changes-topic",
            self.changes,
            "--transactions-topic",
            self.txns,
            "--dlq-topic",
            self.dlq,
            "--group",
            self.group,
            "--state-dir",
            str(inst.state_dir),
            "--metrics-port",
            str(inst.port),
        ]

    def start(self, inst: Instance, restart: Restart | None = None) -> None:
        inst.port = free_port()
        out = open(inst.log_path, "ab")
        out.write(f'{{"chaos": "start", "n": {inst.starts + 1}}}\n'.encode())
        out.flush()
        inst.started_at = time.monotonic()
        inst.proc = subprocess.Popen(
            self._args(inst),
            stdout=out,
            stderr=out,
            env=dict(os.environ),
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        out.close()
        inst.starts += 1
        if restart is not None:
            self._watch.append((inst, restart, inst.starts))

    def _scrape_emitted(self, inst: Instance) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{inst.port}/metrics", timeout=0.5) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("txbuffer_changes_emitted_total "):
                return float(line.split()[1])
        return None

    def _watcher(self) -> None:
        """Recovery times: spawn -> first scrape showing an emitted change, per restart."""
        while not self._stop_watch.is_set():
            for item in list(self._watch):
                inst, restart, n = item
                if inst.starts != n or inst.proc is None or inst.proc.poll() is not None:
                    self._watch.remove(item)  # killed or gone before it emitted
                    continue
                emitted = self._scrape_emitted(inst)
                if emitted:
                    restart.first_output_s = round(time.monotonic() - inst.started_at, 2)
                    self._watch.remove(item)
            time.sleep(0.1)

    def _feed(self) -> None:
        try:
            gen = WorkloadGenerator(
                self.c.events, seed=self.c.seed, expected_dir=self.expected_dir, open_txns=self.c.open_txns
            )
            writer = RawTopicWriter(self.broker.bootstrap, self.raw, partitions=self.c.partitions)
            started = time.monotonic()
            for event in gen:
                if event["op"] == ev.HEARTBEAT:
                    writer.heartbeat(event["scn"], ts_ms=event["ts_ms"])
                else:
                    writer.write(event)
                self.fed += 1
                if self.c.rate and self.fed % 500 == 0:
                    ahead = self.fed / self.c.rate - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
            writer.flush(600)
            self.summary = gen.summary()
        except Exception as exc:  # reported, and the campaign fails
            self.feed_error.append(repr(exc))
        finally:
            self.feed_done.set()

    def _check_unplanned(self) -> None:
        for inst in self.instances:
            if inst.proc is not None and inst.proc.poll() is not None:
                code = inst.proc.returncode
                tail = inst.log_path.read_text(errors="replace")[-2000:]
                self.out.unplanned_exits.append(
                    {"instance": inst.index, "t": round(self.now(), 2), "returncode": code, "log_tail": tail}
                )
                self.note("unplanned-exit", instance=inst.index, returncode=code)
                r = Restart(inst.index, round(self.now(), 2), False, "unplanned-exit")
                self.restarts.append(r)
                self.start(inst, r)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._check_unplanned()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    # ------------------------------------------------------------------ the campaign

    def run(self) -> Outcome:
        c = self.c
        self.broker.start()
        self.t0 = time.monotonic()
        watcher = threading.Thread(target=self._watcher, daemon=True)
        try:
            RawTopicWriter(self.broker.bootstrap, self.raw, partitions=c.partitions).flush()  # create the topic
            feeder = threading.Thread(target=self._feed, daemon=True)
            feeder.start()
            self.note("feed-start", events=c.events, rate=c.rate)
            for inst in self.instances:
                self.start(inst)
            watcher.start()
            self._campaign()
            self.feed_done.wait()
            self.note("feed-done", fed=self.fed, errors=self.feed_error)
            if self.feed_error:
                raise RuntimeError(f"feeding the raw topic failed: {self.feed_error}")
            reached = self._wait_for_end()
            self._stop_all()
            self._stop_watch.set()
            self._inspect_state_dirs()
            self._check_output(reached)
        finally:
            self._stop_watch.set()
            for inst in self.instances:
                if inst.proc is not None and inst.proc.poll() is None:
                    inst.proc.kill()
                    inst.proc.wait(10)
            try:
                self.broker.resume()
            except Exception:
                pass
            self.broker.stop()
            if not c.keep:
                shutil.rmtree(self.tmp / "expected", ignore_errors=True)
                for inst in self.instances:
                    shutil.rmtree(inst.state_dir, ignore_errors=True)
        return self.out

    def _campaign(self) -> None:
        c = self.c
        duration = c.events / c.rate if c.rate else max(20.0, c.events / 15000)
        slot = duration / max(1, c.kills)
        wipe_slots = set(self.rng.sample(range(c.kills), min(c.min_wipes, c.kills))) if c.kills else set()
        pause_after = self.rng.randrange(c.kills) if c.kills and c.pause > 0 else -1
        first_delay = 5.0  # past the ~3 s group join: the first kill hits a running member
        for k in range(c.kills):
            start = first_delay + k * slot
            instant = start + self.rng.uniform(0.1, 0.9) * slot
            self._sleep(max(0.0, instant - self.now()))
            self._kill(k, wipe=(k in wipe_slots or self.rng.random() < c.wipe_prob))
            if k == pause_after:
                self._sleep(self.rng.uniform(1.0, 3.0))
                self.note("broker-pause", seconds=c.pause)
                self.broker.pause()
                time.sleep(c.pause)
                self.broker.resume()
                self.note("broker-resume")
        if c.kills == 0 and c.pause > 0:
            self._sleep(duration / 2)
            self.note("broker-pause", seconds=c.pause)
            self.broker.pause()
            time.sleep(c.pause)
            self.broker.resume()
            self.note("broker-resume")

    def _kill(self, k: int, wipe: bool) -> None:
        live = [i for i in self.instances if i.proc is not None and i.proc.poll() is None]
        if not live:
            self._check_unplanned()
            live = [i for i in self.instances if i.proc is not None]
        inst = self.rng.choice(live)
        uptime = round(time.monotonic() - inst.started_at, 2)
        inst.proc.send_signal(signal.SIGKILL)
        inst.proc.wait(10)
        inst.proc = None  # not an unplanned exit
        self.note("kill", n=k + 1, instance=inst.index, uptime_s=uptime, fed=self.fed, wipe=wipe)
        if wipe:
            shutil.rmtree(inst.state_dir, ignore_errors=True)
        self._sleep(self.rng.uniform(*self.c.restart_delay))
        r = Restart(inst.index, round(self.now(), 2), wipe, "kill")
        self.restarts.append(r)
        self.start(inst, r)

    def _committed(self, parts: list[int]) -> dict[int, int]:
        consumer = KafkaClientConfig(self.broker.bootstrap).consumer(self.group)
        try:
            got = consumer.committed([TopicPartition(self.raw, p) for p in parts], timeout=10)
            return {tp.partition: tp.offset for tp in got}
        finally:
            consumer.close()

    def _wait_for_end(self) -> bool:
        ends = end_offsets(self.broker.bootstrap, self.raw)
        self.out.figures["raw_end_offsets"] = ends
        deadline = time.monotonic() + self.c.settle_timeout
        committed: dict[int, int] = {}
        while time.monotonic() < deadline:
            self._check_unplanned()
            try:
                committed = self._committed(sorted(ends))
            except Exception as exc:
                self.note("committed-probe-failed", error=str(exc))
            if committed and all(committed.get(p, -1) >= end for p, end in ends.items()):
                self.note("reached-end", committed=committed)
                return True
            time.sleep(2.0)
        self.note("end-not-reached", committed=committed, ends=ends)
        return False

    def _stop_all(self) -> None:
        codes = {}
        for inst in self.instances:
            if inst.proc is not None and inst.proc.poll() is None:
                inst.proc.send_signal(signal.SIGTERM)
        for inst in self.instances:
            if inst.proc is None:
                continue
            try:
                codes[inst.index] = inst.proc.wait(60)
            except subprocess.TimeoutExpired:
                inst.proc.kill()
                codes[inst.index] = f"killed after 60 s: {inst.proc.wait(10)}"
        self.out.figures["final_exit_codes"] = codes
        self.note("stopped", exit_codes=codes)

    # ------------------------------------------------------------------ checks

    def _inspect_state_dirs(self) -> None:
        """Leftover keys per state dir and partition, from the store opened read-only."""
        from processor.runtime.status import ReadOnlyRocksStore

        ends = self.out.figures.get("raw_end_offsets", {})
        leaked = stale = meta = 0
        for inst in self.instances:
            store_dir = inst.state_dir / "store"
            row: dict = {"partitions": {}}
            if not (store_dir / "CURRENT").is_file():
                row["note"] = "no store"
                self.out.state_dirs[inst.index] = row
                continue
            store = ReadOnlyRocksStore(store_dir)
            try:
                per: dict[int, dict] = {}
                for kind, name in ((keys.TXN, "txn_keys"), (keys.META, "meta_keys")):
                    for key, _ in store.scan_prefix(kind):
                        p = int.from_bytes(key[1:5], "big")
                        per.setdefault(p, {"txn_keys": 0, "meta_keys": 0})[name] += 1
                for key, raw in store.scan_prefix(keys.POS):
                    p = int.from_bytes(key[1:5], "big")
                    per.setdefault(p, {"txn_keys": 0, "meta_keys": 0})["next_offset"] = json.loads(raw)["next_offset"]
            finally:
                store.close()
            for p, fig in sorted(per.items()):
                current = fig.get("next_offset", -1) >= ends.get(p, 0)
                fig["current"] = current  # this store processed the partition to the end
                if current:
                    leaked += fig["txn_keys"]
                    meta += fig["meta_keys"]
                else:
                    stale += fig["txn_keys"] + fig["meta_keys"]
                row["partitions"][p] = fig
            self.out.state_dirs[inst.index] = row
        f = self.out.figures
        f["leaked_txn_keys"] = leaked  # TXN keys left in stores that processed their partition to the end
        f["leaked_meta_keys"] = meta  # open/pending transaction metadata left there
        f["stale_cache_keys"] = stale  # TXN+META keys of partitions this store lost to another member (a cache)

    def _check_output(self, reached: bool) -> None:
        f = self.out.figures
        rep = verify(
            self.broker.bootstrap, self.expected_dir, self.changes, self.txns, ordering="partition", timeout_s=600
        )
        self.out.verify = {k: v for k, v in asdict(rep).items() if k != "samples"}
        self.out.samples = rep.samples
        own = self._own_pass()
        dlq_reasons = self._dlq_reasons()
        dlq = sum(dlq_reasons.values())
        recov = [r.first_output_s for r in self.restarts if r.first_output_s is not None]
        self._assigned_times()
        joined = [r.assigned_s for r in self.restarts if r.assigned_s is not None]
        f.update(
            {
                "events_fed": self.fed,
                "expected_changes": rep.expected,
                "expected_transactions": rep.expected_transactions,
                "changes_records": rep.emitted,
                "lost": rep.lost,
                "unexpected": rep.unexpected,
                "mismatches": rep.mismatches,
                "duplicates_before_dedup": own["duplicates_before_dedup"],
                "duplicates_after_dedup": own["duplicates_after_dedup"],
                "dedup_conflicts": own["dedup_conflicts"],
                "same_change_other_event_id": own["same_change_other_event_id"],
                "order_violations": rep.order_violations,
                "order_violations_per_input_partition": own["order_violations_per_input_partition"],
                "missing_ends": rep.missing_ends,
                "unexpected_ends": rep.unexpected_ends,
                "end_count_mismatches": rep.end_count_mismatches,
                "end_count_conflicts": own["end_count_conflicts"],
                "resync_records": own["resync_records"],
                "dlq_records": dlq,  # the generator writes no bad input: every DLQ record here is a false one
                "dlq_reasons": dlq_reasons,
                "kills": sum(1 for r in self.restarts if r.reason == "kill"),
                "wipes": sum(1 for r in self.restarts if r.wiped),
                "unplanned_exits": len(self.out.unplanned_exits),
                "broker_pause_s": self.c.pause,
                "reached_end": reached,
                "restarts_with_output": len(recov),
                "recovery_first_output_s": _dist(recov),
                "recovery_assigned_s": _dist(joined),
            }
        )
        self.out.restarts = [asdict(r) for r in self.restarts]
        f["ok"] = bool(
            reached
            and rep.ok
            and not f["duplicates_after_dedup"]
            and not f["leaked_txn_keys"]
            and not f["leaked_meta_keys"]
            and not f["resync_records"]
        )

    def _dlq_reasons(self) -> dict[str, int]:
        """DLQ records by reason (the xid in the reason is cut off so that reasons group)."""
        reasons: dict[str, int] = {}
        for msg in read_to_end(self.broker.bootstrap, self.dlq, self.group + "-dlq", 120):
            reason = read_dlq_headers(msg.headers()).get("reason", "?").rsplit(" in ", 1)[0]
            reasons[reason] = reasons.get(reason, 0) + 1
        return reasons

    def _own_pass(self) -> dict:
        """Duplicates from event_ids and content, and order per input partition (first occurrence kept)."""
        input_partition: dict[str, int] = {}
        end_counts: dict[str, set] = {}
        resync = 0
        for _, _, _, value in read_topic(self.broker.bootstrap, self.txns, timeout_s=600, group=self.group + "-own"):
            if value is None:
                continue
            t = ev.decode_transaction(value)
            if t["status"] == "END":
                ident = f"{t['id']}@{t['commit_scn']}"
                input_partition.setdefault(ident, t["input_partition"])
                end_counts.setdefault(ident, set()).add(t["event_count"])
            elif t["status"] == "RESYNC_REQUIRED":
                resync += 1
        by_event: dict[bytes, bytes] = {}  # event_id digest -> content digest of the first copy
        by_change: dict[bytes, bytes] = {}  # (xid, seq) digest -> event_id digest of the first copy
        records = conflicts = other_id = 0
        conflict_ids: set[bytes] = set()
        last: dict[tuple, tuple[int, int]] = {}
        violations: dict[int, int] = {}
        for partition, _, key, value in read_topic(
            self.broker.bootstrap, self.changes, timeout_s=600, group=self.group + "-own"
        ):
            if value is None:
                continue
            records += 1
            ch = ev.decode_change(value)
            src = ch["source"]
            eid = _digest(ch["event_id"])
            content = _digest(
                dumps(
                    [
                        ch["op"],
                        src["table"],
                        _s(ch["key"]),
                        _s(ch["before"]),
                        _s(ch["after"]),
                        ch["ddl"],
                        src["xid"],
                        src["seq"],
                        src["commit_scn"],
                    ]
                )
            )
            first = by_event.get(eid)
            if first is not None:
                if first != content and eid not in conflict_ids:
                    conflict_ids.add(eid)
                    conflicts += 1
                continue
            by_event[eid] = content
            ident = _digest(f"{src['xid']}\x00{src['seq']}")
            if ident in by_change:
                other_id += 1  # the same source change survived dedup under a second event_id
            else:
                by_change[ident] = eid
            ip = input_partition.get(f"{src['xid']}@{src['commit_scn']}", -1)
            scope = (partition, key, ip)
            pos = (src["commit_scn"], src["seq"])
            prev = last.get(scope)
            if prev is not None and pos < prev:
                violations[ip] = violations.get(ip, 0) + 1
            else:
                last[scope] = pos
        return {
            "records": records,
            "duplicates_before_dedup": records - len(by_event),
            "dedup_conflicts": conflicts,
            "same_change_other_event_id": other_id,
            "duplicates_after_dedup": conflicts + other_id,
            "order_violations_per_input_partition": violations,
            "resync_records": resync,
            # verify() keeps the first END per transaction; a later END with another event_count
            # (e.g. an empty re-commit after a rebuild) is only seen here.
            "end_count_conflicts": sum(1 for counts in end_counts.values() if len(counts) > 1),
        }

    def _assigned_times(self) -> None:
        """Per restart: spawn -> first `partition.assigned` log line of that process (log timestamps)."""
        for inst in self.instances:
            starts: list[tuple[datetime | None, datetime | None]] = []
            for line in inst.log_path.read_text(errors="replace").splitlines():
                if line.startswith('{"chaos": "start"'):
                    starts.append([None, None])
                    continue
                if not starts or not line.startswith("{"):
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                ts = rec.get("timestamp")
                if not ts:
                    continue
                when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
                if starts[-1][0] is None:
                    starts[-1][0] = when  # first log line: the process is up (interpreter start excluded)
                if rec.get("event") == "partition.assigned" and starts[-1][1] is None:
                    starts[-1][1] = when
            mine = [r for r in self.restarts if r.instance == inst.index]
            for r, (first, assigned) in zip(mine, starts[1:]):
                if first is not None and assigned is not None:
                    r.assigned_s = round((assigned - first).total_seconds(), 2)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def _s(row: dict | None) -> list | None:
    return None if row is None else sorted(row.items())


def _dist(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    values = sorted(values)
    return {
        "n": len(values),
        "min": values[0],
        "median": round(statistics.median(values), 2),
        "p90": values[min(len(values) - 1, int(0.9 * len(values)))],
        "max": values[-1],
    }


def table(fig: dict) -> str:
    rows = [
        ("events fed", fig.get("events_fed")),
        ("expected changes / transactions", f"{fig.get('expected_changes')} / {fig.get('expected_transactions')}"),
        ("change records read (before dedup)", fig.get("changes_records")),
        ("kills (SIGKILL)", fig.get("kills")),
        ("state dir wipes", fig.get("wipes")),
        ("unplanned exits (restarted)", fig.get("unplanned_exits")),
        ("broker SIGSTOP pause (s)", fig.get("broker_pause_s")),
        ("reached end (committed = log end)", fig.get("reached_end")),
        ("changes lost", fig.get("lost")),
        ("unexpected changes", fig.get("unexpected")),
        ("content mismatches", fig.get("mismatches")),
        ("duplicates after dedup", fig.get("duplicates_after_dedup")),
        ("  same event_id, other content", fig.get("dedup_conflicts")),
        ("  same (xid, seq), other event_id", fig.get("same_change_other_event_id")),
        ("duplicates before dedup", fig.get("duplicates_before_dedup")),
        ("commit-order violations", fig.get("order_violations")),
        ("  per input partition", fig.get("order_violations_per_input_partition")),
        ("missing / unexpected ENDs", f"{fig.get('missing_ends')} / {fig.get('unexpected_ends')}"),
        ("END count mismatches (first END)", fig.get("end_count_mismatches")),
        ("ENDs of one txn with differing counts", fig.get("end_count_conflicts")),
        ("leftover TXN keys (current stores)", fig.get("leaked_txn_keys")),
        ("leftover META keys (current stores)", fig.get("leaked_meta_keys")),
        ("stale-cache keys (partitions moved away)", fig.get("stale_cache_keys")),
        ("RESYNC_REQUIRED records / DLQ records", f"{fig.get('resync_records')} / {fig.get('dlq_records')}"),
        ("  DLQ reasons", fig.get("dlq_reasons")),
        ("restart -> first output (s)", _fmt(fig.get("recovery_first_output_s"))),
        ("restart -> partition.assigned (s)", _fmt(fig.get("recovery_assigned_s"))),
        ("final exit codes (SIGTERM)", fig.get("final_exit_codes")),
        ("verdict", "OK" if fig.get("ok") else "FAILED"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)} | {value}" for name, value in rows)


def _fmt(d: dict | None) -> str:
    if not d or not d.get("n"):
        return "n=0"
    return f"n={d['n']} min={d['min']} median={d['median']} p90={d['p90']} max={d['max']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k events, 5 kills, 2 instances, 5 s pause")
    ap.add_argument("--events", type=int)
    ap.add_argument("--kills", type=int)
    ap.add_argument("--instances", type=int, choices=(1, 2, 3))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, help="feed rate, events/s (0 = unthrottled)")
    ap.add_argument("--pause", type=float, help="broker SIGSTOP seconds (0 = none)")
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--open-txns", type=int)
    ap.add_argument("--wipe-prob", type=float, default=0.25)
    ap.add_argument("--min-wipes", type=int, default=1)
    ap.add_argument("--settle-timeout", type=float, default=600.0)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep state dirs and expected files")
    ap.add_argument("--out", type=Path, help="JSON results path (default bench/results/chaos-<ts>.json)")
    args = ap.parse_args(argv)
    preset = dict(PRESETS["quick" if args.quick else "full"])
    for name in ("events", "kills", "instances", "rate", "pause", "partitions", "open_txns"):
        value = getattr(args, name)
        if value is not None:
            preset[name] = value
    c = Campaign(
        seed=args.seed,
        wipe_prob=args.wipe_prob,
        min_wipes=args.min_wipes,
        settle_timeout=args.settle_timeout,
        workdir=args.workdir,
        keep=args.keep,
        **preset,
    )
    started = datetime.now(UTC)
    t = time.monotonic()
    out = Chaos(c).run()
    fig = out.figures
    fig["seconds"] = round(time.monotonic() - t, 1)
    print()
    print(table(fig))
    if out.samples:
        print("samples:", json.dumps(out.samples)[:2000])
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = args.out or RESULTS / f"chaos-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {
        "started": started.isoformat(),
        "command": "python -m bench.chaos " + " ".join(argv or sys.argv[1:]),
        "campaign": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(c).items()},
        **asdict(out),
    }
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(f"results: {path}")
    return 0 if fig.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
