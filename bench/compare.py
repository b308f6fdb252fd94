"""The benchmarks that compare txbuffer with something else on the same input.

* peers: the Quix Streams and the rocksdict buffer (bench/peers/) on the steady workload; their
  outputs are read back and must hold exactly the changes of the committed transactions.
* latency_curve: commit-to-emit p50/p99 at 10/25/50/80% of this run's steady maximum, for the
  processor and for a plain passthrough (bench.echo) at the same offered rates. Output topics are
  created with LogAppendTime, so "emitted" is the broker's append time for both.
* workers: the steady workload with 1 and 2 processor processes in one consumer group.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from processor.core import events as ev
from processor.kafka.admin import ensure_topics
from processor.kafka.rawtopic import RawTopicWriter

from . import measure as m
from . import workloads as wl
from .avro_prefix import first_string

ROOT = Path(__file__).resolve().parent.parent
# quixstreams pins confluent-kafka < 2.13, older than the project's: the peer gets its own virtualenv.
QUIX_VENV = Path(os.environ.get("TXBUFFER_QUIX_VENV", Path.home() / ".cache" / "txbuffer" / "quix-venv"))
QUIX_PYTHON = QUIX_VENV / "bin" / "python"
QUIX_REQUIREMENT = "quixstreams>=3.20,<4"
LOAD_LEVELS = (0.10, 0.25, 0.50, 0.80)
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def _peer_result(bench, name: str, res: m.ProcResult, w: wl.Workload) -> dict:
    out = m.read_topic(bench.bootstrap, f"out.{name}")
    xids = {r[2] for r in out}
    t = res.after_join_s()
    ok = len(out) == w.committed_changes and len(xids) <= w.committed
    bench.drop_outputs(name)
    return {
        "events": w.events,
        "after_join_s": t,
        "events_per_s": w.events / t if t else None,
        "wall_s": res.wall_s,
        "peak_rss_mb": res.peak_rss / 2**20,
        "outputs": len(out),
        "expected_outputs": w.committed_changes,
        "outputs_complete": ok,
        "rc": res.rc,
        "log_tail": [] if res.rc == 0 else res.log_tail[-5:],
    }


def ensure_quix_venv() -> str | None:
    """Create the Quix Streams virtualenv once (pip, the ordinary client); None when ready, else why not."""
    if QUIX_PYTHON.exists():
        return None
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(QUIX_VENV)], check=True, timeout=120)
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(QUIX_PYTHON), "install", "-q", QUIX_REQUIREMENT],
            check=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return f"could not create {QUIX_VENV}: {exc}"
    return None


def peers(bench, run: int) -> dict:
    w = bench.workloads["steady"]
    out = {}
    name = f"peer-rocksdict{run}"
    state = tempfile.mkdtemp(prefix=f"{name}-", dir=bench.workdir)
    res = m.Proc(
        "bench.peers.rocksdict_buffer",
        ["--bootstrap", bench.bootstrap, "--raw-topic", w.topic, "--out-topic", f"out.{name}"]
        + ["--group", f"bench-{name}", "--state-dir", state],
    ).wait(3600)
    out["rocksdict"] = _peer_result(bench, name, res, w)
    out["rocksdict"]["state_bytes_per_event"] = None  # deleted on commit: nothing stays buffered
    missing = ensure_quix_venv()
    if missing:
        out["quix"] = {"status": "n/a", "reason": missing}
        return out
    name = f"peer-quix{run}"
    state = tempfile.mkdtemp(prefix=f"{name}-", dir=bench.workdir)
    res = m.Proc(
        "bench.peers.quix_buffer",
        ["--bootstrap", bench.bootstrap, "--raw-topic", w.topic, "--out-topic", f"out.{name}"]
        + ["--group", f"bench-{name}", "--state-dir", state, "--expect", str(w.committed_changes)],
        python=str(QUIX_PYTHON),
    ).wait(3600)
    out["quix"] = _peer_result(bench, name, res, w)
    return out


# ---------------------------------------------------------------------- latency


def _paced(bench, name: str, rate: float, seconds: float, proc_factory) -> dict:
    """Write small transactions at `rate` events/s into a fresh raw topic while `proc_factory(raw)`
    runs; returns per-XID COMMIT produce instants (ms) and the achieved rate."""
    raw = f"raw.{name}"
    # The broker stamps the raw records too, so latency can also be taken from the COMMIT's arrival
    # in Kafka (what the buffer can see at the earliest), apart from the writer's own linger.
    ensure_topics(bench.bootstrap, {raw: 4}, config=APPEND_TIME)
    writer = RawTopicWriter(bench.bootstrap, raw, partitions=4)
    src = wl.SmallTxns(f"{name}-", 100)
    warm_up_s = bench.sizes.get("lat_warm_up_s", 0)
    evs = wl.pregenerate(src, max(200, int(rate * (warm_up_s + seconds))))
    proc = proc_factory(raw)
    proc.wait_marker("partition.assigned", 120)
    time.sleep(1.0)
    began, cpu_before, machine_before = time.time(), time.process_time(), _machine_busy()
    commit_ms, offered_s = wl.feed_paced(writer, evs, rate)
    machine_after = _machine_busy()
    return {
        "proc": proc,
        # The span the writer wrote (feed_paced's closing flush included) and this process's CPU over
        # it: the writer's, with the samplers' threads (_machine_cores).
        "span": (began, time.time()),
        "writer_cpu_s": time.process_time() - cpu_before,
        "machine_busy": (machine_before, machine_after),
        "commit_ms": commit_ms,
        "achieved_rate": len(evs) / offered_s,
        "events": len(evs),
        "raw": raw,
        "warm_up_s": warm_up_s,
    }


def _commit_append_ms(bench, raw: str) -> dict[str, int]:
    """xid -> the broker's append time (ms) of its COMMIT on the raw topic."""
    out = {}
    for _, _, _, value, ts in m.read_topic(bench.bootstrap, raw):
        e = ev.decode_raw(value)
        if e["op"] == ev.COMMIT:
            out[e["xid"]] = ts
    return out


def _machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of every CPU so far (psutil's /proc/stat: idle and iowait are idle)."""
    t = psutil.cpu_times()
    total = sum(t)
    return total - t.idle - getattr(t, "iowait", 0.0), total


def _machine_cores(paced: dict) -> dict:
    """Cores each party used while the writer wrote: the program (and its main thread), the broker,
    and the writer (this process, with the samplers' threads). The three share the machine's cores,
    so a level whose total nears os.cpu_count() queues wherever the scheduler makes one wait.
    machine_busy (/proc/stat) is the measure of that: near saturation the parties' own counts (psutil,
    sampled every 50 ms by a thread that is then starved) summed 0.3-0.5 cores above it, which
    session 46 did not explain, so they say which party, not how much in all."""
    began, ended = paced["span"]
    sampler = paced["proc"].rss
    program, main, broker = (sampler.cores_between(began, ended, column) for column in (1, 2, 3))
    out = {
        "program": program,
        "program_main": main,
        "broker": broker if sampler.broker is not None else None,
        "writer": paced["writer_cpu_s"] / max(ended - began, 1e-9),
    }
    out = {k: None if v is None else round(v, 2) for k, v in out.items()}
    out["total"] = round(sum(v for v in out.values() if v is not None), 2)
    (busy0, all0), (busy1, all1) = paced["machine_busy"]
    cpus = os.cpu_count() or 1
    # The machine's own count (/proc/stat) beside the parties' sum, which samples further apart.
    out["machine_busy"] = round((busy1 - busy0) / max(all1 - all0, 1e-9) * cpus, 2)
    out["cpu_count"] = cpus
    return out


def _stats(paced: dict, seen: dict[str, int], appended: dict[str, int], rate: float, res: m.ProcResult) -> dict:
    """Commit-to-output latency (ms) by XID: from the COMMIT's produce (paced["commit_ms"]) and from its
    append on the broker (appended) to its output's append (seen).

    The first warm_up_s seconds of commits are a warm-up, reported apart and left out of p50/p99: the
    program and its output topics are fresh (the first appends to new partitions, the broker compiling
    their paths, the first flushes: session 41 found the p99 of 10 s levels set in their first second).
    A latency benchmark measures the steady state after a warm-up (OpenMessaging Benchmark's warmup
    phase); a restart's first second is the cold start, and its figures stay in the JSON."""
    commit_ms = paced["commit_ms"]
    first = min(commit_ms.values(), default=0.0)
    cut = _warm_up_cut(paced)
    lat, warm, from_append, by_second = [], [], [], {}
    for xid, at in commit_ms.items():
        if xid not in seen:
            continue
        v = seen[xid] - at
        by_second.setdefault(int((at - first) // 1000), []).append(v)
        if at < cut:
            warm.append(v)
            continue
        lat.append(v)
        if xid in appended:
            from_append.append(seen[xid] - appended[xid])
    return {
        # From the COMMIT's arrival in Kafka (broker clock at both ends): the buffer's own share.
        "from_append_p50_ms": m.percentile(from_append, 0.5),
        "from_append_p99_ms": m.percentile(from_append, 0.99),
        "offered_rate": round(rate),
        "achieved_rate": paced["achieved_rate"],
        "commits": len(commit_ms),
        "ended": len(lat) + len(warm),
        "p50_ms": m.percentile(lat, 0.5),
        "p99_ms": m.percentile(lat, 0.99),
        "max_ms": max(lat) if lat else None,
        "warm_up_s": paced.get("warm_up_s", 0),
        "warm_up_p50_ms": m.percentile(warm, 0.5),
        "warm_up_p99_ms": m.percentile(warm, 0.99),
        "all_p99_ms": m.percentile(lat + warm, 0.99),
        # Each second of commits from the first: [second, commits, p50, p99, max] ms, so a reader sees
        # whether the tail is a start-up, a stall or a queue.
        "by_second": [
            [sec, len(v), m.percentile(v, 0.5), m.percentile(v, 0.99), max(v)] for sec, v in sorted(by_second.items())
        ],
        "peak_rss_mb": res.peak_rss / 2**20,
        # Whether the program kept up or queued: its loop's wall and CPU seconds by phase (the
        # processor's; the passthrough has none), and the machine's load when the level ended.
        "phases": res.summary.get("phases"),
        "settling_flushes": res.summary.get("settling_flushes"),
        "deferred_settlements": res.summary.get("deferred_settlements"),  # batches that did not wait
        "stalls": res.summary.get("stalls"),  # the loop's laps over 50 ms (figures.PhaseClock)
        "load_1min": round(os.getloadavg()[0], 2),
        "cores": _machine_cores(paced),
    }


def _warm_up_cut(paced: dict) -> float:
    """The produce time (ms) before which a level's commits are its warm-up (_stats)."""
    return min(paced["commit_ms"].values(), default=0.0) + paced.get("warm_up_s", 0) * 1000


def processor_latency(bench, tag: str, rate: float, seconds: float, split: bool = False) -> dict:
    """With split, also where each transaction's time went by the broker's append times (_split)."""
    name = tag

    def start(raw: str) -> m.Proc:
        ensure_topics(bench.bootstrap, {f"out.{name}.changes": 4, f"out.{name}.transactions": 4}, config=APPEND_TIME)
        return bench.processor(name, raw, f"bench-{name}", available_now=False)

    paced = _paced(bench, name, rate, seconds, start)
    ends: dict[str, int] = {}
    deadline = time.monotonic() + max(60.0, 4 * seconds)
    while time.monotonic() < deadline:
        ends = {r["id"]: ts for r, ts in bench.tx_records(name) if r["status"] == "END"}
        if len(ends) >= len(paced["commit_ms"]):
            break
        time.sleep(1)
    paced["proc"].stop()
    res = paced["proc"].wait(120)
    appended = _commit_append_ms(bench, paced["raw"])
    last_change = _last_change_ms(bench, f"out.{name}.changes") if split else {}
    bench.drop_outputs(name)
    out = _stats(paced, ends, appended, rate, res)
    if split:
        out["split"] = _split(paced, appended, last_change, ends)
    return out


def _last_change_ms(bench, topic: str) -> dict[str, int]:
    """xid -> the broker's append time (ms) of its last change. The xid is read from the event_id,
    ChangeEvent's first field (`<thread>:<commit_scn>:<xid>:<seq>`), without decoding the record."""
    out: dict[str, int] = {}
    for _, _, _, value, ts in m.read_topic(bench.bootstrap, topic):
        start, end = first_string(value)
        xid = value[start:end].decode().split(":")[2]
        if ts > out.get(xid, 0):
            out[xid] = ts
    return out


def _split(paced: dict, appended: dict[str, int], last_change: dict[str, int], ends: dict[str, int]) -> dict:
    """p50/p99 ms of COMMIT append -> last change append (the loop, the release, the changes' send)
    and last change -> END append (the changes' acknowledgement, the END's send), after the warm-up."""
    cut = _warm_up_cut(paced)
    xids = [x for x, at in paced["commit_ms"].items() if at >= cut and x in appended and x in last_change and x in ends]
    to_change = [last_change[x] - appended[x] for x in xids]
    to_end = [ends[x] - last_change[x] for x in xids]
    return {
        "transactions": len(xids),
        "commit_to_last_change_p50_ms": m.percentile(to_change, 0.5),
        "commit_to_last_change_p99_ms": m.percentile(to_change, 0.99),
        "last_change_to_end_p50_ms": m.percentile(to_end, 0.5),
        "last_change_to_end_p99_ms": m.percentile(to_end, 0.99),
    }


def passthrough_latency(
    bench, tag: str, rate: float, seconds: float, poll: str = "first", echo_args: tuple[str, ...] = ()
) -> dict:
    name = tag

    def start(raw: str) -> m.Proc:
        ensure_topics(bench.bootstrap, {f"out.{name}": 4}, config=APPEND_TIME)
        return m.Proc(
            "bench.echo",
            ["--bootstrap", bench.bootstrap, "--raw-topic", raw, "--out-topic", f"out.{name}", "--group", f"b-{name}"]
            + ["--poll", poll, *echo_args],
        )

    paced = _paced(bench, name, rate, seconds, start)
    seen: dict[str, int] = {}
    deadline = time.monotonic() + max(60.0, 4 * seconds)
    while time.monotonic() < deadline:
        seen = {}
        for _, _, _, value, ts in m.read_topic(bench.bootstrap, f"out.{name}"):
            e = ev.decode_raw(value)
            if e["op"] == ev.COMMIT:
                seen[e["xid"]] = ts
        if len(seen) >= len(paced["commit_ms"]):
            break
        time.sleep(1)
    paced["proc"].stop()
    res = paced["proc"].wait(60)
    bench.drop_outputs(name)
    return _stats(paced, seen, _commit_append_ms(bench, paced["raw"]), rate, res)


def latency_curve(bench, run: int, steady_max: float) -> dict:
    seconds = bench.sizes["lat_seconds"]
    out: dict = {"steady_max": steady_max, "levels": {}}
    for level in LOAD_LEVELS:
        rate = steady_max * level
        key = f"{round(level * 100)}"
        out["levels"][key] = {
            "processor": processor_latency(bench, f"lat{key}-{run}", rate, seconds),
            "passthrough": passthrough_latency(bench, f"echo{key}-{run}", rate, seconds),
        }
        lv = out["levels"][key]
        print(
            f"    load {key}% ({rate:,.0f} ev/s): processor p50/p99 "
            f"{_ms(lv['processor']['p50_ms'])}/{_ms(lv['processor']['p99_ms'])} ms, passthrough "
            f"{_ms(lv['passthrough']['p50_ms'])}/{_ms(lv['passthrough']['p99_ms'])} ms; from the COMMIT's "
            f"append: processor {_ms(lv['processor']['from_append_p50_ms'])}/"
            f"{_ms(lv['processor']['from_append_p99_ms'])} ms, passthrough "
            f"{_ms(lv['passthrough']['from_append_p50_ms'])}/{_ms(lv['passthrough']['from_append_p99_ms'])} ms",
            flush=True,
        )
    # Where the old floor came from: the same passthrough at the lowest rate, with consume() waiting up to
    # 100 ms for a full batch of max_batch records (the runner's loop before poll_batch).
    rate = steady_max * LOAD_LEVELS[0]
    out["floor_probe"] = {
        "rate": rate,
        "passthrough_poll_first": out["levels"]["10"]["passthrough"],
        "passthrough_consume_fill_100ms": passthrough_latency(bench, f"echo-fill-{run}", rate, seconds, "fill"),
    }
    return out


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.0f}"


# ---------------------------------------------------------------------- scale


def workers(bench, run: int, counts: tuple[int, ...] = (1, 2)) -> dict:
    """Processor processes sharing one consumer group on the steady workload: from the first
    assignment to the last member done."""
    w = bench.workloads["steady"]
    out = {}
    for n in counts:
        name = f"workers{n}-{run}"
        procs = [bench.processor(f"{name}", w.topic, f"bench-{name}") for _ in range(n)]
        results = [p.wait(3600) for p in procs]
        # A member that exits cleanly without ever being assigned joined after the others had read
        # everything (small --quick workloads): it did no work and is reported, not failed.
        idle = [r for r in results if r.rc == 0 and r.first("partition.assigned") is None]
        results = [r for r in results if r not in idle]
        for r in results:
            bench._check(r, f"workers {n}")
        start = min(r.first("partition.assigned") for r in results)
        done = max(r.first("run.available_now_done") for r in results)
        # Members that joined the first generation together are assigned within the broker's
        # initial rebalance delay of each other; a larger spread means partitions moved mid-run.
        first_assigned = [r.first("partition.assigned") for r in results]
        events = sum(r.summary.get("events") or 0 for r in results)
        bench.drop_outputs(name)
        out[str(n)] = {
            "workers": n,
            "members_never_assigned": len(idle),
            "events": events,
            "expected_events": w.events,
            "seconds": done - start,
            "events_per_s": w.events / (done - start),
            "assignment_spread_s": max(first_assigned) - min(first_assigned),
            "events_per_member": [r.summary.get("events") or 0 for r in results],
            "peak_rss_mb_sum": sum(r.peak_rss for r in results) / 2**20,
        }
    if "1" in out and "2" in out:
        out["speedup_2_vs_1"] = out["2"]["events_per_s"] / out["1"]["events_per_s"]
    return out
