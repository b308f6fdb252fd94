"""The benchmark harness: `python -m bench.run [--quick] [--only steady,huge,...] [--runs 3]`.

Starts the embedded broker, writes every workload once, then measures each benchmark `--runs`
times side by side in one process tree (fresh consumer group, state dir and output topics per
run), prints a table of medians and writes bench/results/<timestamp>.json and latest.json.
The processor and the ceiling passthrough each run as their own subprocess, so RSS is theirs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka.admin import AdminClient

from processor.core import events as ev
from processor.kafka.embedded import JVM_FLAGS, SERVER_JVM_FLAGS, EmbeddedKafka
from processor.kafka.rawtopic import RawTopicWriter

from . import compare, issue_table, plot
from . import measure as m
from . import workloads as wl

RESULTS = Path(__file__).resolve().parent / "results"
BENCHES = (
    "ceiling", "steady", "steady_eos", "peers", "workers", "huge", "many_open", "latency", "latency_curve",
    "cold_rebuild", "ordering", "spark", "redo", "capture",
)  # fmt: skip

SIZES = {
    "full": {
        "steady": 1_000_000,
        "huge": (500_000, 1_000_000),
        "many_open": 100_000,
        "lat_rate": 20_000,
        "lat_seconds": 10,
        "lat_warm_up_s": 3,  # compare._stats: a warm-up before each latency level's measured seconds
        "cold": 1_000_000,
        "ordering": 200_000,
        "ord_lat_seconds": 6,
        # 2M-change batches (maxOffsetsPerTrigger), trigger available-now, the current state folded
        # from the change log every 4 batches: one MERGE per table per 8M changes. A streaming stage
        # runs for days, so the rate is that of a warm JVM: a 4M-change warm-up (two batches and a
        # fold) runs through the same query first, untimed, then 8M measured changes (four batches
        # and one fold, one whole cycle of what a long-running job repeats). Folding less often is
        # the lever: a fold's cost grows with the keys it merges and its JIT is paid per fold, so 8M
        # per fold costs 29-32 JVM CPU us/change here against 37-44 for 4M (docs/lakehouse.md,
        # session 29; the generator's tables hold at most ~1M keys, so a larger fold merges
        # proportionally fewer rows). The row takes ~10 min (producing 12M records ~4 min) and the
        # JVM peaks at ~4.5 GB.
        "spark": {
            "changes": 8_000_000,
            "warmup_changes": 4_000_000,
            "batch": 2_000_000,
            "trigger": "available-now",
            "fold_every": 4,
        },
        "capture": 20_000,  # pgbench transactions (4 row changes each)
    },
    "quick": {
        "steady": 100_000,
        "huge": (50_000, 100_000),
        "many_open": 20_000,
        "lat_rate": 20_000,
        "lat_seconds": 5,
        "lat_warm_up_s": 1,
        "cold": 100_000,
        "ordering": 50_000,
        "ord_lat_seconds": 5,
        "spark": {"changes": 20_000, "warmup_changes": 0, "batch": 10_000, "trigger": "available-now", "fold_every": 1},
        "capture": 5_000,
    },
}

TARGETS = {
    "steady_vs_ceiling": 0.7,
    "huge_linearity_max": 2.2,
    "huge_rate_min": 150_000,
    "rss_max_mb": 300,
    "latency_p99_max_ms": 50,
    "cold_vs_steady": 1.0,  # issue 14: at least the new steady rate
    "redo_rows_min": 50_000,  # issue 16: SQL_REDO rows per CPU second through parse_dml
}


def _cpu(res: m.ProcResult, events: int) -> dict:
    """CPU seconds after the join and µs per event: what a run costs, whatever the machine's load
    (wall-clock rates on a shared machine move with the neighbours). Unset under --profile."""
    if res.cpu_after_join_s is None:
        return {}
    out = {"cpu_s": res.cpu_after_join_s, "cpu_us_per_event": 1e6 * res.cpu_after_join_s / events}
    if res.cpu_main_after_join_s is not None:  # the Python loop's thread; the rest is librdkafka's and RocksDB's
        out["cpu_main_s"] = res.cpu_main_after_join_s
        out["cpu_main_us_per_event"] = 1e6 * res.cpu_main_after_join_s / events
    if res.cpu_broker_after_join_s is not None:  # the embedded broker, on the same two cores
        out["broker_cpu_us_per_event"] = 1e6 * res.cpu_broker_after_join_s / events
    if res.broker_jit_cpu_s is not None:  # of the broker's CPU over the whole run, its JIT compiler's
        out["broker_jit_cpu_s"] = res.broker_jit_cpu_s
    return out


class Bench:
    def __init__(self, bootstrap: str, sizes: dict, workdir: Path, profile_dir: Path | None = None):
        self.bootstrap = bootstrap
        self.sizes = sizes
        self.workdir = workdir
        self.profile_dir = profile_dir
        self.workloads: dict[str, wl.Workload] = {}
        self.steady_max: float | None = None
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    # ------------------------------------------------------------------ plumbing

    def processor(
        self,
        name: str,
        raw_topic: str,
        group: str,
        available_now: bool = True,
        state_dir: Path | None = None,
        ordering: str = "partition",
        profile: bool = False,
        guarantee: str | None = None,
    ) -> m.Proc:
        state_dir = state_dir or Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))
        args = [
            "--bootstrap",
            self.bootstrap,
            "--raw-topic",
            raw_topic,
            "--group",
            group,
            "--state-dir",
            str(state_dir),
            "--ordering",
            ordering,
            "--changes-topic",
            f"out.{name}.changes",
            "--transactions-topic",
            f"out.{name}.transactions",
            "--dlq-topic",
            f"out.{name}.dlq",
        ]
        if available_now:
            args.append("--available-now")
        if guarantee:
            args += ["--guarantee", guarantee]
        # --profile: py-spy records the steady and many-open runs of the first round (the others stay unprofiled,
        # so the comparisons in the same run are not skewed by the sampler).
        first_round = name in ("steady0", "many0")
        profile = profile or (self.profile_dir is not None and first_round)
        prof = self.profile_dir / f"{name}.speedscope.json" if (profile and self.profile_dir) else None
        return m.Proc("bench.procmain", args, profile=prof)

    def drop_outputs(self, name: str) -> None:
        """Free the broker's memory (Tansu keeps everything in RAM); best effort."""
        topics = [f"out.{name}.{t}" for t in ("changes", "transactions", "dlq")] + [f"out.{name}"]
        try:
            existing = self.admin.list_topics(timeout=10).topics
            doomed = [t for t in topics if t in existing]
            if doomed:
                for f in self.admin.delete_topics(doomed, operation_timeout=30).values():
                    try:
                        f.result()
                    except Exception:
                        pass
        except Exception:
            pass

    @staticmethod
    def _check(res: m.ProcResult, what: str) -> None:
        if res.rc != 0 or res.after_join_s() is None:
            raise RuntimeError(f"{what}: rc={res.rc}, log tail:\n" + "\n".join(res.log_tail[-10:]))

    def tx_records(self, name: str) -> list[tuple[dict, int]]:
        return [(ev.decode_transaction(r[3]), r[4]) for r in m.read_topic(self.bootstrap, f"out.{name}.transactions")]

    # ------------------------------------------------------------------ workloads

    def prepare(self, only: set[str]) -> dict:
        s, out = self.sizes, {}
        t0 = time.monotonic()
        if only & {"ceiling", "steady", "steady_eos", "peers", "workers", "latency_curve"}:
            self.workloads["steady"] = wl.write_steady(self.bootstrap, "raw.steady", s["steady"])
        if "huge" in only:
            for n in s["huge"]:
                self.workloads[f"huge{n}"] = wl.write_huge(self.bootstrap, f"raw.huge{n}", n)
        if "many_open" in only:
            self.workloads["many_open"] = wl.write_many_open(self.bootstrap, "raw.many", s["many_open"])
        if "cold_rebuild" in only:
            self.workloads["cold"] = wl.write_open_only(self.bootstrap, "raw.cold", s["cold"])
        if "ordering" in only:
            self.workloads["ordering"] = wl.write_steady(self.bootstrap, "raw.ord", s["ordering"], seed=7)
        for k, w in self.workloads.items():
            out[k] = {kk: v for kk, v in w.__dict__.items()}
            print(
                f"  workload {k}: {w.events} events, {w.changes} changes, avg {w.avg_event_bytes} B, "
                f"written in {w.write_seconds:.1f}s",
                flush=True,
            )
        if "cold_rebuild" in only:
            # First pass buffers everything and commits the low watermark (offset 0: all still open).
            res = self.processor("cold-initial", "raw.cold", "bench-cold").wait(3600)
            self._check(res, "cold initial")
            out["cold_initial"] = {
                "after_join_s": res.after_join_s(),
                "events": res.summary.get("events"),
                "peak_rss_mb": res.peak_rss / 2**20,
            }
        out["prepare_seconds"] = time.monotonic() - t0
        return out

    # ------------------------------------------------------------------ benchmarks

    def ceiling(self, run: int) -> dict:
        w = self.workloads["steady"]
        p = m.Proc(
            "bench.passthrough",
            [
                "--bootstrap",
                self.bootstrap,
                "--raw-topic",
                w.topic,
                "--out-topic",
                f"out.pt{run}",
                "--group",
                f"bench-pt-{run}",
            ],
        )
        res = p.wait(1800)
        self._check(res, "ceiling")
        self.drop_outputs(f"pt{run}")
        t = res.after_join_s()
        return {
            "events": w.events,
            "after_join_s": t,
            "events_per_s": w.events / t,
            "wall_s": res.wall_s,
            "peak_rss_mb": res.peak_rss / 2**20,
            **_cpu(res, w.events),
        }

    def warm_up(self) -> dict:
        """Unmeasured passes of the ceiling, steady and steady_eos over the steady workload, until the
        broker's JIT is warm: a served broker has run for days, and its JIT compiles Kafka's hot paths
        during the first minutes under load. One pass was not enough: through the first measured run
        the broker's C2 thread still took up to half a core of the two (docs/benchmarks.md, session
        51). A pass is repeated while the compiler threads used more than JIT_QUIET_CORES over it, at
        most WARM_UP_MAX_PASSES times; each pass's rates and compiler cores are in the results."""
        t0 = time.monotonic()
        passes = []
        for n in range(WARM_UP_MAX_PASSES):
            start, jit_before = time.monotonic(), m.broker_jit_cpu_s()
            run = WARM_UP_RUN - n  # a pass's own topics and groups: each reads the workload from its start
            rates = {b: getattr(self, b)(run)["events_per_s"] for b in ("ceiling", "steady", "steady_eos")}
            seconds, jit_after = time.monotonic() - start, m.broker_jit_cpu_s()
            cores = None if jit_before is None or jit_after is None else (jit_after - jit_before) / seconds
            passes.append({"seconds": seconds, "events_per_s": rates, "broker_jit_cores": cores})
            print(f"  warm-up pass {n + 1}: {json.dumps(passes[-1])}", flush=True)
            if cores is None or cores < JIT_QUIET_CORES:
                break
        return {"seconds": time.monotonic() - t0, "passes": passes}

    def steady(self, run: int, profile: bool = False, guarantee: str | None = None) -> dict:
        w = self.workloads["steady"]
        name = f"steady{guarantee or ''}{run}"
        res = self.processor(name, w.topic, f"bench-{name}", profile=profile, guarantee=guarantee).wait(3600)
        self._check(res, "steady")
        t = res.after_join_s()
        ok = res.summary.get("committed") == w.committed and res.summary.get("rolled_back") == w.rolled_back
        self.drop_outputs(name)
        return {
            "events": w.events,
            "after_join_s": t,
            "events_per_s": w.events / t,
            "wall_s": res.wall_s,
            "wall_events_per_s": w.events / res.wall_s,
            "peak_rss_mb": res.peak_rss / 2**20,
            "outputs_complete": ok,
            **_cpu(res, w.events),
            "changes_emitted": res.summary.get("changes_emitted"),
            "expected_changes": w.committed_changes,
            "phases": res.summary.get("phases"),  # the loop's wall and CPU seconds: computing or waiting
            "settling_flushes": res.summary.get("settling_flushes"),
            "deferred_settlements": res.summary.get("deferred_settlements"),  # a backlog's (delivery.py)
            "transactions": {  # what outputs_complete compares
                "committed": res.summary.get("committed"),
                "expected_committed": w.committed,
                "rolled_back": res.summary.get("rolled_back"),
                "expected_rolled_back": w.rolled_back,
            },
        }

    def steady_eos(self, run: int) -> dict:
        return self.steady(run, profile=self.profile_dir is not None and run == 0, guarantee="exactly_once")

    def peers(self, run: int) -> dict:
        return compare.peers(self, run)

    def workers(self, run: int) -> dict:
        return compare.workers(self, run)

    def latency_curve(self, run: int) -> dict:
        # The steady maximum of this run; measured here when steady was not asked for.
        steady_max = self.steady_max or self.steady(run)["events_per_s"]
        return compare.latency_curve(self, run, steady_max)

    def huge(self, run: int) -> dict:
        out = {}
        for n in self.sizes["huge"]:
            w = self.workloads[f"huge{n}"]
            name = f"huge{n}-{run}"
            res = self.processor(name, w.topic, f"bench-huge{n}-{run}").wait(3600)
            self._check(res, f"huge {n}")
            xid = w.extra["huge_xid"]
            recs = [(r, ts) for r, ts in self.tx_records(name) if r["id"] == xid]
            begin = next(ts for r, ts in recs if r["status"] == "BEGIN") / 1000
            end_rec, end = next((r, ts) for r, ts in recs if r["status"] == "END")
            end /= 1000
            start = res.last("partition.assigned")
            buffer_s, emit_s = begin - start, end - begin
            self.drop_outputs(name)
            out[str(n)] = {
                "changes": n,
                "events": w.events,
                "buffer_s": buffer_s,
                "emit_s": emit_s,
                "buffer_changes_per_s": n / buffer_s,
                "emit_changes_per_s": n / emit_s,
                "total_s": res.after_join_s(),
                "wall_s": res.wall_s,
                "peak_rss_mb": res.peak_rss / 2**20,
                "end_event_count": end_rec["event_count"],
                # Where the loop's time went (a stall shows as a phase's longest lap), and how it settled.
                "phases": res.summary.get("phases"),
                "stalls": res.summary.get("stalls"),
                "settling_flushes": res.summary.get("settling_flushes"),
                "deferred_settlements": res.summary.get("deferred_settlements"),
            }
        small, big = (str(x) for x in self.sizes["huge"])
        out["ratio_size"] = int(big) / int(small)
        out["ratio_buffer_time"] = out[big]["buffer_s"] / out[small]["buffer_s"]
        out["ratio_emit_time"] = out[big]["emit_s"] / out[small]["emit_s"]
        out["ratio_total_time"] = out[big]["total_s"] / out[small]["total_s"]
        return out

    def many_open(self, run: int) -> dict:
        w = self.workloads["many_open"]
        name = f"many{run}"
        res = self.processor(name, w.topic, f"bench-many-{run}").wait(3600)
        self._check(res, "many open")
        self.drop_outputs(name)
        t = res.after_join_s()
        return {
            "open_txns": self.sizes["many_open"],
            "events": w.events,
            "after_join_s": t,
            "events_per_s": w.events / t,
            "wall_s": res.wall_s,
            "peak_rss_mb": res.peak_rss / 2**20,
            "peak_open_txns": res.summary.get("peak_open_txns"),
            **_cpu(res, w.events),
            "phases": res.summary.get("phases"),
            "settling_flushes": res.summary.get("settling_flushes"),
            "deferred_settlements": res.summary.get("deferred_settlements"),
        }

    def latency(
        self,
        run: int,
        ordering: str = "partition",
        idle_partition: bool = False,
        seconds: float | None = None,
        tag: str = "lat",
    ) -> dict:
        """Commit-to-emit at a fixed offered rate: a paced producer writes small transactions while
        the processor runs continuously. Latency = END record's timestamp (produced after every
        change of the transaction is acknowledged) minus the instant the COMMIT was produced."""
        rate, seconds = self.sizes["lat_rate"], seconds or self.sizes["lat_seconds"]
        name = f"{tag}{run}"
        raw = f"raw.{name}"
        writer = RawTopicWriter(self.bootstrap, raw, partitions=4)
        xfilter = wl.avoiding_partition(3, writer.partitions) if idle_partition else None
        src = wl.SmallTxns(f"{name}-", 100 + run, xid_filter=xfilter)
        evs = wl.pregenerate(src, int(rate * seconds))
        proc = self.processor(name, raw, f"bench-{name}", available_now=False, ordering=ordering)
        proc.wait_marker("partition.assigned", 120)
        time.sleep(1.0)
        commit_ms, offered_s = wl.feed_paced(writer, evs, rate)
        n = len(evs)
        ends: dict[str, int] = {}
        deadline = time.monotonic() + max(120.0, 4 * seconds)
        while time.monotonic() < deadline:
            ends = {r["id"]: ts for r, ts in self.tx_records(name) if r["status"] == "END"}
            if len(ends) >= len(commit_ms):
                break
            time.sleep(2)
        proc.stop()
        res = proc.wait(120)
        lat = [ends[x] - c for x, c in commit_ms.items() if x in ends]
        self.drop_outputs(name)
        return {
            "offered_rate": rate,
            "achieved_rate": n / offered_s,
            "events": n,
            "commits": len(commit_ms),
            "ended": len(lat),
            "p50_ms": m.percentile(lat, 0.5),
            "p99_ms": m.percentile(lat, 0.99),
            "max_ms": max(lat) if lat else None,
            "peak_rss_mb": res.peak_rss / 2**20,
            "ordering": ordering,
            "idle_partition": idle_partition,
        }

    def cold_rebuild(self, run: int) -> dict:
        w = self.workloads["cold"]
        res = self.processor(f"cold{run}", w.topic, "bench-cold").wait(3600)  # same group, EMPTY state dir
        self._check(res, "cold rebuild")
        self.drop_outputs(f"cold{run}")
        t = res.after_join_s()
        return {
            "buffered_events": w.events,
            "events": res.summary.get("events"),
            "after_join_s": t,
            "events_per_s": (res.summary.get("events") or 0) / t,
            "wall_s": res.wall_s,
            "peak_rss_mb": res.peak_rss / 2**20,
        }

    def ordering(self, run: int) -> dict:
        w = self.workloads["ordering"]
        out = {}
        for mode in ("partition", "global"):
            name = f"ord-{mode}{run}"
            res = self.processor(name, w.topic, f"bench-{name}", ordering=mode).wait(3600)
            self._check(res, f"ordering {mode}")
            self.drop_outputs(name)
            out[f"{mode}_events_per_s"] = w.events / res.after_join_s()
        secs = self.sizes["ord_lat_seconds"]
        out["partition_latency"] = self.latency(run, "partition", seconds=secs, tag="olp")
        out["global_latency"] = self.latency(run, "global", seconds=secs, tag="olg")
        out["global_idle_latency"] = self.latency(run, "global", idle_partition=True, seconds=secs, tag="oli")
        out["throughput_ratio_global_vs_partition"] = out["global_events_per_s"] / out["partition_events_per_s"]
        p99p, p99g = out["partition_latency"]["p99_ms"], out["global_latency"]["p99_ms"]
        out["p99_ratio_global_vs_partition"] = p99g / p99p if p99p and p99g else None
        return out

    def spark(self, run: int) -> dict:
        try:
            from bench.spark_bench import bench_spark
        except Exception as exc:  # not there yet
            return {"status": "n/a", "reason": f"bench.spark_bench not importable: {type(exc).__name__}: {exc}"}
        try:
            t0 = time.monotonic()
            size = self.sizes["spark"]
            out = dict(
                bench_spark(
                    self.bootstrap,
                    size["changes"],
                    size["batch"],
                    trigger=size["trigger"],
                    fold_every=size["fold_every"],
                    warmup_changes=size.get("warmup_changes", 0),
                )
            )
            out.setdefault("seconds", time.monotonic() - t0)
            # The settings beside the rate (the table's spark row repeats them); the rate is the
            # measured run's, after the warm-up, whose own rate and the whole run's follow.
            warm, whole = out.get("warmup"), out["whole_run"]
            print(
                f"  spark: {out['changes_per_s']:,.0f} changes/s, {out['cpu_us_per_change']} JVM CPU us/change, "
                f"{out['records']:,} changes in batches of {out['max_offsets_per_trigger']:,} "
                f"(trigger {out['trigger']}, fold_every {out['fold_every']}, {out['batches']} batches, "
                f"per batch {out.get('batch_seconds')} s, load {out['load_average']})"
                + (
                    f"; after a warm-up of {out['warmup_changes']:,} changes in the same JVM and stream "
                    f"({warm['changes_per_s']:,.0f} changes/s, {warm['cpu_us_per_change']} us/change); whole run "
                    f"{whole['changes_per_s']:,.0f} changes/s, {whole['cpu_us_per_change']} us/change"
                    if warm
                    else ""
                )
                + (f"; CHECKS FAILED: {out['failed_checks']}" if out["failed_checks"] else ""),
                flush=True,
            )
            if out["failed_checks"]:  # a rate of a wrong result is no rate
                return {"status": "error", "reason": f"correctness checks failed: {out['failed_checks']}", "run": out}
            return out
        except Exception as exc:
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}

    def redo(self, run: int) -> dict:
        from bench import redo_bench

        return redo_bench.run()

    def capture(self, run: int) -> dict:
        from bench import capture_bench

        return capture_bench.run(self.bootstrap, transactions=self.sizes["capture"])


# ---------------------------------------------------------------------- report


def _med(runs: list[dict], *path: str):
    vals = []
    for r in runs:
        v = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals.append(v)
    return m.median(vals)


def medians(results: dict) -> dict:
    med = {}
    for bench, runs in results.items():
        if not runs or not isinstance(runs[0], dict):
            continue
        med[bench] = _deep_median(runs)
    return med


def _deep_median(runs: list):
    first = runs[0]
    if isinstance(first, dict):
        return {k: _deep_median([r.get(k) for r in runs if isinstance(r, dict)]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return m.median([r for r in runs if isinstance(r, (int, float))])
    return first


def checks(med: dict) -> dict:
    c = {}

    def add(name: str, value, target, ok: bool | None, margin: str):
        c[name] = {"value": value, "target": target, "pass": ok, "margin": margin}

    ceil, steady = med.get("ceiling", {}), med.get("steady", {})
    if ceil.get("events_per_s") and steady.get("events_per_s"):
        r = steady["events_per_s"] / ceil["events_per_s"]
        add(
            "steady >= 0.7x ceiling",
            round(r, 3),
            TARGETS["steady_vs_ceiling"],
            r >= 0.7,
            f"{r / 0.7:.2f}x of target ({r:.3f} vs 0.7)",
        )
    huge = med.get("huge", {})
    if huge:
        big = str(max(int(k) for k in huge if k.isdigit()))
        lin = max(huge["ratio_buffer_time"], huge["ratio_emit_time"])
        lim = TARGETS["huge_linearity_max"] * huge["ratio_size"] / 2
        add(
            "huge linear (2x size <= 2.2x time)",
            round(lin, 3),
            lim,
            lin <= lim,
            f"buffer {huge['ratio_buffer_time']:.2f}x, emit {huge['ratio_emit_time']:.2f}x for {huge['ratio_size']:.1f}x size",
        )
        for k in ("buffer", "emit"):
            v = huge[big][f"{k}_changes_per_s"]
            lo = TARGETS["huge_rate_min"]
            add(f"huge {k} >= {lo // 1000}k changes/s", round(v), lo, v >= lo, f"{v / lo:.2f}x of target")
        rss = huge[big]["peak_rss_mb"]
        add("huge peak RSS <= 300 MB", round(rss, 1), 300, rss <= 300, f"{300 - rss:+.0f} MB headroom")
    mo = med.get("many_open", {})
    if mo:
        rss = mo["peak_rss_mb"]
        add("many-open peak RSS <= 300 MB", round(rss, 1), 300, rss <= 300, f"{300 - rss:+.0f} MB headroom")
    lat = med.get("latency", {})
    if lat and lat.get("p99_ms") is not None:
        p = lat["p99_ms"]
        add("latency p99 <= 50 ms @20k ev/s", round(p, 1), 50, p <= 50, f"{p / 50:.2f}x of limit")
    cold = med.get("cold_rebuild", {})
    if cold and steady.get("events_per_s"):
        r = cold["events_per_s"] / steady["events_per_s"]
        lo = TARGETS["cold_vs_steady"]
        add(f"cold rebuild >= {lo}x steady", round(r, 3), lo, r >= lo, f"{r / lo:.2f}x of target")
    redo = med.get("redo", {})
    if redo.get("parse_dml_rows_per_s"):
        v, lo = redo["parse_dml_rows_per_s"], TARGETS["redo_rows_min"]
        add(f"SQL_REDO >= {lo // 1000}k rows/CPU s", round(v), lo, v >= lo, f"{v / lo:.2f}x of target")
    return c


def _f(v, digits=0):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def table(med: dict, results: dict) -> str:
    rows = []

    def row(bench, metric, value, runs=""):
        rows.append((bench, metric, value, runs))

    def per_run(bench, *path, digits=0):
        return " / ".join(_f(_get(r, path), digits) for r in results.get(bench, []))

    ceil, st = med.get("ceiling"), med.get("steady")
    if ceil:
        row("ceiling", "events/s after join", _f(ceil["events_per_s"]), per_run("ceiling", "events_per_s"))
        row("ceiling", "wall s", _f(ceil["wall_s"], 1), per_run("ceiling", "wall_s", digits=1))
    if st:
        row("steady", "events/s after join", _f(st["events_per_s"]), per_run("steady", "events_per_s"))
        row(
            "steady",
            "wall s (events/s)",
            f"{_f(st['wall_s'], 1)} ({_f(st['wall_events_per_s'])})",
            per_run("steady", "wall_s", digits=1),
        )
        row("steady", "peak RSS MB", _f(st["peak_rss_mb"], 0), per_run("steady", "peak_rss_mb"))
        if ceil:
            row("steady", "ratio to ceiling", _f(st["events_per_s"] / ceil["events_per_s"], 3))
    hu = med.get("huge")
    if hu:
        for k in sorted((k for k in hu if k.isdigit()), key=int):
            h = hu[k]
            row(
                f"huge {int(k):,}",
                "buffer s (changes/s)",
                f"{_f(h['buffer_s'], 1)} ({_f(h['buffer_changes_per_s'])})",
                per_run("huge", k, "buffer_s", digits=1),
            )
            row(
                f"huge {int(k):,}",
                "emit s (changes/s)",
                f"{_f(h['emit_s'], 1)} ({_f(h['emit_changes_per_s'])})",
                per_run("huge", k, "emit_s", digits=1),
            )
            row(f"huge {int(k):,}", "peak RSS MB", _f(h["peak_rss_mb"]), per_run("huge", k, "peak_rss_mb"))
        row(
            "huge",
            f"time ratio for {hu['ratio_size']:.1f}x size",
            f"buffer {hu['ratio_buffer_time']:.2f}x, emit {hu['ratio_emit_time']:.2f}x, total {hu['ratio_total_time']:.2f}x",
        )
    mo = med.get("many_open")
    if mo:
        row(
            "many open",
            f"{mo['open_txns']:,} open: events/s",
            _f(mo["events_per_s"]),
            per_run("many_open", "events_per_s"),
        )
        row("many open", "peak RSS MB", _f(mo["peak_rss_mb"]), per_run("many_open", "peak_rss_mb"))
    la = med.get("latency")
    if la:
        row(
            "latency",
            f"p50 / p99 ms @{la['offered_rate']:,} ev/s",
            f"{_f(la['p50_ms'], 1)} / {_f(la['p99_ms'], 1)}",
            per_run("latency", "p99_ms", digits=1),
        )
        row("latency", "achieved offered rate", _f(la["achieved_rate"]), per_run("latency", "achieved_rate"))
    co = med.get("cold_rebuild")
    if co:
        row(
            "cold rebuild",
            f"{co['buffered_events']:,} buffered: events/s",
            _f(co["events_per_s"]),
            per_run("cold_rebuild", "events_per_s"),
        )
        if st:
            row("cold rebuild", "ratio to steady", _f(co["events_per_s"] / st["events_per_s"], 3))
    od = med.get("ordering")
    if od:
        if od.get("status") == "n/a":
            row("ordering", "global vs partition", "n/a: " + od["reason"])
        else:
            row("ordering", "throughput global/partition", _f(od["throughput_ratio_global_vs_partition"], 3))
            row(
                "ordering",
                "p99 ms partition / global / global+idle",
                " / ".join(
                    _f(od[k]["p99_ms"], 1) for k in ("partition_latency", "global_latency", "global_idle_latency")
                ),
            )
    sp = med.get("spark")
    if sp:
        row(
            "spark",
            "changes/s (JVM CPU µs/change; batch, trigger, fold_every)",
            f"{_f(sp['changes_per_s'])} ({sp.get('cpu_us_per_change')}; {sp.get('max_offsets_per_trigger'):,}, "
            f"{sp.get('trigger')}, {sp.get('fold_every')})"
            if sp.get("changes_per_s")
            else f"{sp.get('status', 'n/a')}: {sp.get('reason', '')}",
        )
    rd = med.get("redo")
    if rd:
        row(
            "redo",
            "SQL_REDO rows/CPU s, parse_dml",
            _f(rd["parse_dml_rows_per_s"]),
            per_run("redo", "parse_dml_rows_per_s"),
        )
        row(
            "redo",
            "fast parser alone / sqlglot alone",
            f"{_f(rd['fast_only_rows_per_s'])} / {_f(rd['sqlglot_rows_per_s'])}",
        )
    ca = med.get("capture")
    if ca:
        row("capture", "PostgreSQL rows/s to raw topic", _f(ca["rows_per_s"]), per_run("capture", "rows_per_s"))
        row("capture", "rows/CPU s (load avg)", f"{_f(ca['rows_per_cpu_s'])} ({ca['load_average']})")
    w = [max(len(r[i]) for r in rows + [("bench", "metric", "median", "runs")]) for i in range(4)]
    lines = [" | ".join(h.ljust(w[i]) for i, h in enumerate(("bench", "metric", "median", "runs")))]
    lines.append("-+-".join("-" * x for x in w))
    lines += [" | ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join(lines)


def _get(d, path):
    for p in path:
        d = d.get(p) if isinstance(d, dict) else None
    return d


# ---------------------------------------------------------------------- main


WARM_UP_RUN = -1  # the warm-up's first run index (then -2, ...): its topics and groups are apart from the measured runs
WARM_UP_MAX_PASSES = 4
JIT_QUIET_CORES = 0.1  # the broker's JIT compiler threads below this over a warm-up pass: it is warm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one run (development)")
    ap.add_argument("--only", default=",".join(BENCHES), help=f"comma list of {','.join(BENCHES)}")
    ap.add_argument("--runs", type=int, default=None, help="runs per benchmark (default 3, quick 1)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="py-spy record the processor runs of the first round (speedscope JSON in bench/results/)",
    )
    ap.add_argument(
        "--broker-jvm",
        choices=("server", "quick"),
        default="server",
        help="the broker's JVM: a served broker's (embedded.SERVER_JVM_FLAGS) or the tests' quick-start one (JVM_FLAGS)",
    )
    ap.add_argument("--out", default=None, help="results JSON path (default bench/results/<timestamp>.json)")
    args = ap.parse_args(argv)
    only = {b.strip() for b in args.only.split(",") if b.strip()}
    unknown = only - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmarks: {sorted(unknown)}")
    mode = "quick" if args.quick else "full"
    runs = args.runs or (1 if args.quick else 3)
    sizes = SIZES[mode]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="txbuffer-bench-"))
    started = time.monotonic()
    print(f"bench: mode={mode} runs={runs} only={sorted(only)} workdir={workdir}", flush=True)
    results: dict[str, list] = {b: [] for b in BENCHES if b in only}
    broker_jvm = list(SERVER_JVM_FLAGS if args.broker_jvm == "server" else JVM_FLAGS)
    info = {
        "started": stamp,
        "mode": mode,
        "runs": runs,
        "sizes": sizes,
        "machine": m.machine_info(),
        "command": " ".join(["python -m bench.run", *(argv if argv is not None else sys.argv[1:])]),
        "method": inspect.getdoc(m),
        "git": _git_state(),
        "broker_jvm_flags": broker_jvm,
    }
    try:
        # Kafka's own default (the embedded broker's 0 suits tests): a group's first rebalance waits
        # 3 s for more members, so `workers` members started together share the partitions from
        # the start, as a deployment's do, instead of one taking all and giving half away mid-run.
        # Every rate here is timed from the assignment, so the wait is not in any figure.
        # And the JVM a served broker gets (embedded.SERVER_JVM_FLAGS), not the tests' quick-start one.
        with EmbeddedKafka(extra_config={"group.initial.rebalance.delay.ms": "3000"}, jvm_flags=broker_jvm) as broker:
            m.watch_broker(broker.process.pid)
            bench = Bench(broker.bootstrap, sizes, workdir, RESULTS if args.profile else None)
            info["prepare"] = bench.prepare(only)
            if only & {"ceiling", "steady", "steady_eos", "peers", "workers", "latency_curve"}:
                info["warm_up"] = bench.warm_up()
                print(
                    f"  warm-up (unmeasured): {info['warm_up']['seconds']:.0f}s, {len(info['warm_up']['passes'])} passes",
                    flush=True,
                )
            for run in range(runs):
                for b in BENCHES:
                    if b not in only:
                        continue
                    t0 = time.monotonic()
                    if b == "steady":
                        r = bench.steady(run, profile=args.profile and run == 0)
                        bench.steady_max = r["events_per_s"]
                    else:
                        r = getattr(bench, b)(run)
                    results[b].append(r)
                    print(
                        f"  run {run + 1}/{runs} {b}: {time.monotonic() - t0:.0f}s  {json.dumps(_brief(r))}", flush=True
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = medians(results)
    report = {
        **info,
        "git_end": _git_state(),
        "seconds": time.monotonic() - started,
        "runs_data": results,
        "medians": med,
        "checks": checks(med),
    }
    text = table(med, results)
    print()
    print(text)
    print()
    for name, c in report["checks"].items():
        print(f"  [{'PASS' if c['pass'] else 'FAIL'}] {name}: {c['value']} ({c['margin']})")
    report["table"] = text
    report["ratios"] = issue_table.ratios(med)
    report["issue_table"] = issue_table.render(issue_table.rows(med))
    print("\n" + report["issue_table"])
    out = Path(args.out) if args.out else RESULTS / f"{stamp}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    # latest.* is the last complete `make bench`; a partial run (--only) leaves it alone.
    complete = only == set(BENCHES)
    if complete:
        (RESULTS / "latest.json").write_text(json.dumps(report, indent=2, default=str))
    try:
        png = plot.render(report, out.with_suffix(".png"))
        if complete:
            shutil.copyfile(png, RESULTS / "latest.png")
        print(f"wrote {png}")
    except Exception as exc:  # matplotlib is in the bench extra; the JSON stands without it
        print(f"no PNG: {type(exc).__name__}: {exc}")
    print(f"\nwrote {out}" + (f" and {RESULTS / 'latest.json'}" if complete else "") + f" ({report['seconds']:.0f}s)")
    return 0


def _git_state() -> dict:
    """The code measured: HEAD and the uncommitted processor files (others edit while we run)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            return ""

    return {
        "head": git("rev-parse", "HEAD"),
        "dirty": git("status", "--short", "--", "processor", "schemas").splitlines(),
    }


def _brief(r: dict) -> dict:
    return {
        k: (round(v, 1) if isinstance(v, float) else v)
        for k, v in r.items()
        if not isinstance(v, dict)
        and k
        in (
            "events_per_s",
            "p50_ms",
            "p99_ms",
            "peak_rss_mb",
            "after_join_s",
            "status",
            "records_per_s",
            "ratio_buffer_time",
            "ratio_emit_time",
            "parse_dml_rows_per_s",
            "rows_per_s",
        )
    }


if __name__ == "__main__":
    sys.exit(main())
