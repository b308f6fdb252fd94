"""The kill campaign: `python -m bench.chaos [--quick|--storm] [--guarantee G|both] [--events N] [--kills K] ...`.

What it does, in one process tree:
  1. starts an embedded Apache Kafka broker on a data dir the campaign keeps, and fresh topics;
  2. feeds a seeded generated workload (processor.testing.generator) to the raw topic from a
     background thread, throttled to --rate events/s, while the generator writes the expected output;
  3. runs --instances `txbuffer run` subprocesses in one consumer group, each with its own state dir,
     its own Prometheus endpoint and (exactly_once) its own transactional.id;
  4. SIGKILLs a random live instance at a random point inside each of --kills equal slices of the
     feed (by events fed); every --wipe-every-th victim also loses its state dir; each victim is
     restarted after a random delay;
  5. SIGKILLs the broker itself --broker-kills times (in random kill slots) and restarts it on the
     same data dir after a short random outage; optionally SIGSTOPs it once for --pause seconds;
  6. or, with --storm-rounds R: restarts --storm-victims of the instances R times in quick
     succession (SIGTERM, start again, --storm-interval later the next round), then measures how long
     the group takes to have every partition assigned, and to reach the end after the later of the
     storm's end and the feed's end (--storm-bound);
  7. waits until the group's committed low watermark equals the true end of every raw partition,
     checks every partition is assigned to exactly one member, stops the instances with SIGTERM, then
     runs every instance once more with --available-now: each must exit 0 within --finish-timeout
     (an instance that does not is one that "never finishes");
  8. checks the output: processor.testing.verify.verify() against the generator's expected files,
     plus its own pass (bench/chaos_checks.py) over the changes topic with a read_committed consumer
     (duplicates before and after dedup, commit-order violations per input partition), the DLQ (the
     generator writes no bad input, so every dead letter is a false one), and every state dir
     opened read-only (leftover buffered keys).

Recovery time ("restart to first output") is measured per restart from the moment the restarted
process is spawned to the first Prometheus scrape of that process showing
txbuffer_changes_emitted_total > 0 (scrapes every 0.1 s; the runner refreshes its metrics every
commit_interval_ms, 1 s by default, so the figure is an upper bound by up to ~1.1 s).

Prints a table per campaign and writes bench/results/chaos-<UTC timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
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
from confluent_kafka.admin import AdminClient

from bench.chaos_checks import assigned_times, dist, dlq_reasons, inspect_state_dirs, own_pass, table
from processor.core import events as ev
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.embedded import EmbeddedKafka, free_port
from processor.kafka.end_offsets import end_offsets
from processor.kafka.rawtopic import RawTopicWriter
from processor.testing.generator import WorkloadGenerator
from processor.testing.verify import verify

RESULTS = Path(__file__).resolve().parent / "results"
GUARANTEES = ("at_least_once_dedup", "exactly_once")

PRESETS = {
    "full": dict(events=1_000_000, kills=20, instances=3, rate=4000, broker_kills=2, partitions=6, open_txns=100),
    "quick": dict(events=100_000, kills=5, instances=2, rate=4000, broker_kills=1, partitions=4, open_txns=100),
    "storm": dict(
        events=200_000, kills=0, instances=3, rate=4000, broker_kills=0, partitions=6, open_txns=100, storm_rounds=20
    ),
}


@dataclass
class Campaign:
    events: int = 1_000_000
    kills: int = 20
    instances: int = 3
    seed: int = 1
    guarantee: str = "at_least_once_dedup"
    rate: float = 4000.0  # feed rate, events/s (0 = as fast as possible)
    partitions: int = 6
    open_txns: int = 100  # concurrently open transactions in the generator
    broker_kills: int = 2  # SIGKILLs of the broker, each followed by a restart on the same data dir
    broker_down: tuple[float, float] = (1.0, 5.0)  # seconds the killed broker stays down
    pause: float = 0.0  # broker SIGSTOP duration, seconds (0 = no pause)
    wipe_every: int = 3  # every n-th killed instance also loses its state dir (0 = never)
    restart_delay: tuple[float, float] = (0.0, 3.0)
    storm_rounds: int = 0  # rebalance storm: rounds of restarting storm_victims instances
    storm_victims: int = 2
    storm_interval: float = 1.0  # seconds between storm rounds
    storm_bound_s: float = 120.0  # after the storm: every partition assigned and the end reached within this
    settle_timeout: float = 600.0  # after the feed: time allowed to reach the end
    finish_timeout: float = 180.0  # the closing --available-now round: each instance exits within this
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
    reason: str  # "kill", "storm" or "unplanned-exit"
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
        if c.guarantee not in GUARANTEES:
            raise ValueError(f"guarantee must be one of {GUARANTEES}, not {c.guarantee!r}")
        self.c = c
        self.say = log
        self.rng = random.Random(c.seed)
        self.tmp = Path(c.workdir or tempfile.mkdtemp(prefix="txbuffer-chaos-"))
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.tag = uuid.uuid4().hex[:8]
        tag = self.tag
        self.raw, self.changes, self.txns, self.dlq, self.outcomes = (
            f"raw-{tag}",
            f"changes-{tag}",
            f"transactions-{tag}",
            f"dlq-{tag}",
            f"outcomes-{tag}",
        )
        self.group = f"chaos-{tag}"
        self.expected_dir = self.tmp / "expected"
        self.broker = EmbeddedKafka(log_path=self.tmp / "broker.log", data_dir=self.tmp / "kafka", keep_data=True)
        self.instances = [
            Instance(i, self.tmp / f"state-{i}", self.tmp / f"instance-{i}.log") for i in range(c.instances)
        ]
        self.out = Outcome()
        self.t0 = 0.0
        self.feed_done = threading.Event()
        self.feed_error: list[str] = []
        self.fed = 0
        self.feed_done_at = 0.0
        self.summary: dict = {}
        self.restarts: list[Restart] = []
        self.broker_down_s: list[float] = []
        self._broker_up = threading.Event()
        self._broker_up.set()
        self._watch: list[tuple[Instance, Restart, int]] = []  # (instance, restart, start number)
        self._stop_watch = threading.Event()

    # ------------------------------------------------------------------ helpers

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, what: str, **kw) -> None:
        entry = {"t": round(self.now(), 2), "event": what, **kw}
        self.out.timeline.append(entry)
        self.say(f"[{entry['t']:8.2f}s] {what} " + " ".join(f"{k}={v}" for k, v in kw.items()))

    def _args(self, inst: Instance, available_now: bool = False) -> list[str]:
        args = [
            sys.executable, "-m", "processor.cli", "--log-format", "json", "run",
            "--bootstrap", self.broker.bootstrap,
            "--raw-topic", self.raw,
            "--changes-topic", self.changes,
            "--transactions-topic", self.txns,
            "--dlq-topic", self.dlq,
            "--outcomes-topic", self.outcomes,
            "--group", self.group,
            "--state-dir", str(inst.state_dir),
            "--metrics-port", str(inst.port),
            "--guarantee", self.c.guarantee,
            # One stable id per instance: a restart fences its killed predecessor's open transaction.
            "--transactional-id", f"{self.group}-{inst.index}",
        ]  # fmt: skip
        return args + (["--available-now"] if available_now else [])

    def start(self, inst: Instance, restart: Restart | None = None, available_now: bool = False) -> None:
        inst.port = free_port()
        with open(inst.log_path, "ab") as out:
            out.write(f'{{"chaos": "start", "n": {inst.starts + 1}}}\n'.encode())
            out.flush()
            inst.started_at = time.monotonic()
            inst.proc = subprocess.Popen(
                self._args(inst, available_now),
                stdout=out,
                stderr=out,
                env=dict(os.environ),
                cwd=str(Path(__file__).resolve().parent.parent),
            )
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
            writer.flush(600)  # idempotent producer: retries across broker restarts, raises on failures
            self.summary = gen.summary()
        except Exception as exc:  # reported, and the campaign fails
            self.feed_error.append(repr(exc))
        finally:
            self.feed_done_at = time.monotonic()
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
        self.broker.start(timeout_s=120)
        self.t0 = time.monotonic()
        watcher = threading.Thread(target=self._watcher, daemon=True)
        try:
            RawTopicWriter(self.broker.bootstrap, self.raw, partitions=c.partitions).flush()  # create the topic
            feeder = threading.Thread(target=self._feed, daemon=True)
            feeder.start()
            self.note("feed-start", events=c.events, rate=c.rate, guarantee=c.guarantee)
            for inst in self.instances:
                self.start(inst)
            watcher.start()
            if c.storm_rounds:
                self._storm()
            else:
                self._campaign()
            self.feed_done.wait()
            self.note("feed-done", fed=self.fed, errors=self.feed_error)
            if self.feed_error:
                raise RuntimeError(f"feeding the raw topic failed: {self.feed_error}")
            reached = self._wait_for_end()
            self.out.figures["partitions_assigned"] = self._settled_assignment()
            self._stop_all()
            self._stop_watch.set()
            self._finish_round()
            figures, rows = inspect_state_dirs(
                {i.index: i.state_dir for i in self.instances}, self.out.figures.get("raw_end_offsets", {})
            )
            self.out.figures.update(figures)
            self.out.state_dirs = rows
            self._check_output(reached)
        finally:
            self._stop_watch.set()
            for inst in self.instances:
                if inst.proc is not None and inst.proc.poll() is None:
                    inst.proc.kill()
                    inst.proc.wait(10)
            if self.broker.running():
                self.broker.resume()
            self.broker.stop()
            if not c.keep:
                shutil.rmtree(self.tmp / "expected", ignore_errors=True)
                shutil.rmtree(self.tmp / "kafka", ignore_errors=True)
                for inst in self.instances:
                    shutil.rmtree(inst.state_dir, ignore_errors=True)
        return self.out

    def _campaign(self) -> None:
        """Kill k falls at a random point of the k-th of `kills` equal slices of the feed (by events
        fed, not wall time: on a slow machine the kills still spread over the whole stream)."""
        c = self.c
        slots = max(1, c.kills)
        broker_slots = set(self.rng.sample(range(slots), min(c.broker_kills, slots)))
        pause_slot = self.rng.randrange(slots) if c.pause > 0 else -1
        self._sleep(5.0)  # past the group join: the first kill hits a running member
        for k in range(slots):
            self._wait_fed(c.events * (k + self.rng.uniform(0.1, 0.9)) / slots)
            if k < c.kills:
                self._kill(k)
            if k in broker_slots:
                self._sleep(self.rng.uniform(1.0, 3.0))
                self._kill_broker()
            if k == pause_slot:
                self._sleep(self.rng.uniform(1.0, 3.0))
                self._pause_broker()
        for _ in range(c.broker_kills - len(broker_slots)):  # more broker kills than slots
            self._kill_broker()

    def _wait_fed(self, events: float) -> None:
        while self.fed < events and not self.feed_done.is_set():
            self._sleep(0.2)

    def _kill(self, k: int) -> None:
        live = [i for i in self.instances if i.proc is not None and i.proc.poll() is None]
        if not live:
            self._check_unplanned()
            live = [i for i in self.instances if i.proc is not None]
        inst = self.rng.choice(live)
        wipe = bool(self.c.wipe_every) and (k + 1) % self.c.wipe_every == 0
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

    def _kill_broker(self) -> None:
        down = self.rng.uniform(*self.c.broker_down)
        self.note("broker-kill", fed=self.fed, down_s=round(down, 2))
        killed = time.monotonic()
        self.broker.kill()
        self._sleep(down)
        self.broker.restart(timeout_s=120)
        self.broker_down_s.append(round(time.monotonic() - killed, 2))
        self.note("broker-restarted", down_s=self.broker_down_s[-1], version=self.broker.version)

    def _pause_broker(self) -> None:
        self.note("broker-pause", seconds=self.c.pause)
        self.broker.pause()
        time.sleep(self.c.pause)
        self.broker.resume()
        self.note("broker-resume")

    def _storm(self) -> None:
        """Restart storm_victims of the instances storm_rounds times in quick succession."""
        c = self.c
        self._sleep(5.0)  # the group has formed
        victims = self.instances[: c.storm_victims]
        for n in range(c.storm_rounds):
            for inst in victims:
                if inst.proc is not None and inst.proc.poll() is None:
                    inst.proc.send_signal(signal.SIGTERM)
            for inst in victims:
                if inst.proc is None:
                    continue
                try:
                    inst.proc.wait(10)
                except subprocess.TimeoutExpired:
                    inst.proc.kill()  # a restart storm does not wait on a slow shutdown
                    inst.proc.wait(10)
                inst.proc = None
                r = Restart(inst.index, round(self.now(), 2), False, "storm")
                self.restarts.append(r)
                self.start(inst, r)
            self.note("storm-round", n=n + 1, fed=self.fed)
            self._sleep(c.storm_interval)
        storm_end = time.monotonic()
        assigned = None
        while time.monotonic() - storm_end < c.storm_bound_s:
            self._check_unplanned()
            if self._assignment_check()["ok"]:
                assigned = round(time.monotonic() - storm_end, 2)
                break
            time.sleep(0.5)
        self.out.figures["storm_assigned_s"] = assigned
        self._storm_end = storm_end
        self.note("storm-done", rounds=c.storm_rounds, all_assigned_after_s=assigned)

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
                # A group stalled after the feed (e.g. a member stuck in a transactional call) shows here.
                self.out.figures["end_after_feed_s"] = round(time.monotonic() - self.feed_done_at, 2)
                if self.c.storm_rounds:
                    # Measured from the storm's end or the feed's end, whichever is later: the bound
                    # is the catching up after both, not the rest of a slow feed.
                    since = max(self._storm_end, self.feed_done_at)
                    self.out.figures["storm_end_s"] = round(time.monotonic() - since, 2)
                return True
            time.sleep(2.0)
        self.note("end-not-reached", committed=committed, ends=ends)
        return False

    def _settled_assignment(self, bound_s: float = 15.0) -> dict:
        """The assignment check once it holds, or its last result after bound_s. The end can be
        reached while a cooperative rebalance is between its two phases (the storm's last joiner):
        a snapshot then shows revoked partitions that the follow-up rebalance hands out."""
        started = time.monotonic()
        while True:
            check = self._assignment_check()
            waited = time.monotonic() - started
            if check["ok"] or waited >= bound_s:
                return {**check, "after_s": round(waited, 2)}
            time.sleep(0.5)

    def _assignment_check(self) -> dict:
        """Every raw partition owned by exactly one live member of the group (the broker's view)."""
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        owners: dict[int, int] = {}
        try:
            desc = admin.describe_consumer_groups([self.group], request_timeout=10)[self.group].result(timeout=15)
            members = len(desc.members)
            for m in desc.members:
                for tp in m.assignment.topic_partitions if m.assignment else []:
                    if tp.topic == self.raw:
                        owners[tp.partition] = owners.get(tp.partition, 0) + 1
        except Exception as exc:
            return {"ok": False, "error": str(exc)}
        unowned = [p for p in range(self.c.partitions) if p not in owners]
        shared = [p for p, n in owners.items() if n > 1]
        return {"ok": not unowned and not shared, "members": members, "unowned": unowned, "shared": shared}

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
            inst.proc = None
        self.out.figures["final_exit_codes"] = codes
        self.out.figures["sigterm_ignored"] = sum(1 for code in codes.values() if isinstance(code, str))
        self.note("stopped", exit_codes=codes)

    def _finish_round(self) -> None:
        """Every instance once more with --available-now, together: each must exit 0 in time."""
        for inst in self.instances:
            self.start(inst, available_now=True)
        deadline = time.monotonic() + self.c.finish_timeout
        codes: dict[int, object] = {}
        while time.monotonic() < deadline and len(codes) < len(self.instances):
            for inst in self.instances:
                if inst.index not in codes and inst.proc.poll() is not None:
                    codes[inst.index] = inst.proc.returncode
            time.sleep(0.2)
        never = 0
        for inst in self.instances:
            if inst.index not in codes:
                never += 1
                inst.proc.kill()
                codes[inst.index] = f"still running after {self.c.finish_timeout} s"
            inst.proc.wait(10)
            inst.proc = None
        self.out.figures["finish_exit_codes"] = codes
        self.out.figures["never_finished"] = never
        self.note("available-now-round", exit_codes=codes)

    # ------------------------------------------------------------------ checks

    def _check_output(self, reached: bool) -> None:
        f = self.out.figures
        c = self.c
        rep = verify(
            self.broker.bootstrap, self.expected_dir, self.changes, self.txns, ordering="partition", timeout_s=600
        )
        self.out.verify = {k: v for k, v in asdict(rep).items() if k != "samples"}
        self.out.samples = rep.samples
        own = own_pass(self.broker.bootstrap, self.changes, self.txns, self.group)
        reasons = dlq_reasons(self.broker.bootstrap, self.dlq, self.group)
        recov = [r.first_output_s for r in self.restarts if r.first_output_s is not None]
        for inst in self.instances:
            mine = [r for r in self.restarts if r.instance == inst.index]
            for r, seconds in zip(mine, assigned_times(inst.log_path)):
                r.assigned_s = seconds
        joined = [r.assigned_s for r in self.restarts if r.assigned_s is not None]
        f.update(
            {
                "guarantee": c.guarantee,
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
                "dlq_records": sum(reasons.values()),  # the generator writes no bad input: all are false
                "dlq_reasons": reasons,
                "kills": sum(1 for r in self.restarts if r.reason == "kill"),
                "wipes": sum(1 for r in self.restarts if r.wiped),
                "storm_restarts": sum(1 for r in self.restarts if r.reason == "storm"),
                "broker_kills": len(self.broker_down_s),
                "broker_down_s": self.broker_down_s,
                "broker_pause_s": c.pause,
                "unplanned_exits": len(self.out.unplanned_exits),
                "unplanned_exit_codes": sorted({u["returncode"] for u in self.out.unplanned_exits}),
                "reached_end": reached,
                "restarts_with_output": len(recov),
                "recovery_first_output_s": dist(recov),
                "recovery_assigned_s": dist(joined),
                # exactly_once: transactional calls that missed their hard deadline (exit 3, restarted).
                "stuck_txn_calls": sum(
                    i.log_path.read_text(errors="replace").count('"exactly_once.stuck"')
                    for i in self.instances
                    if i.log_path.exists()
                ),
            }
        )
        self.out.restarts = [asdict(r) for r in self.restarts]
        dups = f["duplicates_before_dedup"] if c.guarantee == "exactly_once" else f["duplicates_after_dedup"]
        storm_ok = not c.storm_rounds or (
            f.get("storm_assigned_s") is not None and f.get("storm_end_s", c.storm_bound_s + 1) <= c.storm_bound_s
        )
        f["ok"] = bool(
            reached
            and rep.ok
            and not f["duplicates_after_dedup"]
            and not dups
            and not f["order_violations_per_input_partition"]
            and not f["leaked_txn_keys"]
            and not f["leaked_meta_keys"]
            and not f["resync_records"]
            and not f["dlq_records"]
            and not f["never_finished"]
            and not f.get("sigterm_ignored")
            and f["partitions_assigned"].get("ok")
            and storm_ok
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="100k events, 5 kills, 2 instances, 1 broker kill")
    mode.add_argument("--storm", action="store_true", help="rebalance storm: 200k events, 3 instances, 20 rounds")
    ap.add_argument("--guarantee", choices=(*GUARANTEES, "both"), default="at_least_once_dedup")
    ap.add_argument("--events", type=int)
    ap.add_argument("--kills", type=int)
    ap.add_argument("--instances", type=int, choices=(1, 2, 3))
    ap.add_argument("--broker-kills", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, help="feed rate, events/s (0 = unthrottled)")
    ap.add_argument("--pause", type=float, default=0.0, help="broker SIGSTOP seconds (0 = none)")
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--open-txns", type=int)
    ap.add_argument("--wipe-every", type=int, default=3)
    ap.add_argument("--storm-rounds", type=int)
    ap.add_argument("--storm-interval", type=float, default=1.0)
    ap.add_argument("--storm-bound", type=float, default=120.0, help="seconds allowed after the storm")
    ap.add_argument("--settle-timeout", type=float, default=600.0)
    ap.add_argument("--finish-timeout", type=float, default=180.0)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep state dirs, broker data and expected files")
    ap.add_argument("--out", type=Path, help="JSON results path (default bench/results/chaos-<ts>.json)")
    args = ap.parse_args(argv)
    preset = dict(PRESETS["quick" if args.quick else "storm" if args.storm else "full"])
    for name in ("events", "kills", "instances", "broker_kills", "rate", "partitions", "open_txns", "storm_rounds"):
        value = getattr(args, name)
        if value is not None:
            preset[name] = value
    guarantees = GUARANTEES if args.guarantee == "both" else (args.guarantee,)
    started = datetime.now(UTC)
    runs = []
    for guarantee in guarantees:
        c = Campaign(
            seed=args.seed,
            guarantee=guarantee,
            pause=args.pause,
            wipe_every=args.wipe_every,
            storm_interval=args.storm_interval,
            storm_bound_s=args.storm_bound,
            settle_timeout=args.settle_timeout,
            finish_timeout=args.finish_timeout,
            workdir=args.workdir / guarantee if args.workdir else None,
            keep=args.keep,
            **preset,
        )
        t = time.monotonic()
        out = Chaos(c).run()
        out.figures["seconds"] = round(time.monotonic() - t, 1)
        print()
        print(table(out.figures))
        if out.samples:
            print("samples:", json.dumps(out.samples)[:2000])
        runs.append(
            {"campaign": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(c).items()}, **asdict(out)}
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = args.out or RESULTS / f"chaos-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {
        "started": started.isoformat(),
        "command": "python -m bench.chaos " + " ".join(argv if argv is not None else sys.argv[1:]),
        "ok": all(r["figures"].get("ok") for r in runs),
        "runs": runs,
    }
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(f"results: {path}")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
