"""One latency level, repeated, on its own broker: `python -m bench.latency_probe RATE [--seconds S]
[--rounds N] [--passthrough] [--split]`.

The latency curve in `bench.run` measures each level once, after the other benchmarks; a change to
the settlement is judged faster here, round after round at one rate. Each round prints commit-to-END
p50/p99 (from the COMMIT's produce, and from its append on the broker; with --split also split at the
last change's append: the loop and the release before it, the changes' acknowledgement and the
END's send after it), the settling flushes, the batches that did not wait for the broker, and the
loop's wall/CPU seconds by phase with each phase's longest lap. Each round first writes the warm-up
seconds of bench.run's sizes (left out of p50/p99, printed apart). The first round on a fresh broker
runs while its JVM still warms up (2-5x slower at 133k events/s): compare later rounds.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench import compare
from bench import measure as m
from bench.run import SIZES, Bench
from processor.kafka.embedded import SERVER_JVM_FLAGS, EmbeddedKafka


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rate", type=float, help="offered events/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long each round writes")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--passthrough", action="store_true", help="the passthrough (bench.echo) instead")
    ap.add_argument(
        "--echo",
        default="",
        help="with --passthrough: bench.echo's own flags, space-separated (e.g. '--commit-after-ack flush')",
    )
    ap.add_argument(
        "--broker-jvm",
        default=None,
        help="the broker's JVM flags, space-separated (default: embedded.SERVER_JVM_FLAGS, as bench.run)",
    )
    ap.add_argument(
        "--split",
        action="store_true",
        help="also split commit-to-END at the last change's append (reads the changes topic back)",
    )
    args = ap.parse_args()

    if args.passthrough:
        echo_args = tuple(args.echo.split())

        def level(bench, tag, rate, seconds):
            return compare.passthrough_latency(bench, tag, rate, seconds, echo_args=echo_args)
    else:

        def level(bench, tag, rate, seconds):
            return compare.processor_latency(bench, tag, rate, seconds, split=args.split)

    jvm = args.broker_jvm.split() if args.broker_jvm else list(SERVER_JVM_FLAGS)
    with EmbeddedKafka(extra_config={"group.initial.rebalance.delay.ms": "3000"}, jvm_flags=jvm) as broker:
        m.watch_broker(broker.process.pid)
        bench = Bench(broker.bootstrap, SIZES["full"], Path(tempfile.mkdtemp(prefix="latency-probe-")))
        for i in range(args.rounds):
            r = level(bench, f"probe{i}", args.rate, args.seconds)
            phases = " ".join(
                f"{k}={v['wall_s']:.1f}/{v['cpu_s']:.1f}s(longest {v.get('longest_ms', 0):.0f} ms)"
                for k, v in (r.get("phases") or {}).items()
            )
            print(
                f"round {i + 1}: offered {args.rate:,.0f} achieved {r['achieved_rate']:,.0f} events/s; "
                f"p50/p99 {r['p50_ms']:.0f}/{r['p99_ms']:.0f} ms (the {r['warm_up_s']} s warm-up before: "
                f"{_ms(r['warm_up_p50_ms'])}/{_ms(r['warm_up_p99_ms'])}), from the append "
                f"{r['from_append_p50_ms']:.0f}/{r['from_append_p99_ms']:.0f} ms; "
                f"flushes {r.get('settling_flushes')}, not waited {r.get('deferred_settlements')}; {phases}",
                flush=True,
            )
            if r.get("split"):
                sp = r["split"]
                print(
                    f"  COMMIT append -> last change {_ms(sp['commit_to_last_change_p50_ms'])}/"
                    f"{_ms(sp['commit_to_last_change_p99_ms'])} ms, last change -> END "
                    f"{_ms(sp['last_change_to_end_p50_ms'])}/{_ms(sp['last_change_to_end_p99_ms'])} ms "
                    f"({sp['transactions']} transactions)",
                    flush=True,
                )
            cores = r["cores"]
            print(
                f"  cores while writing: program {cores['program']} (main thread {cores['program_main']}), broker "
                f"{cores['broker']}, writer {cores['writer']}; total {cores['total']}; the machine busy "
                f"{cores['machine_busy']} of {cores['cpu_count']}",
                flush=True,
            )
            for stall in r.get("stalls") or []:  # the loop's laps over 50 ms, with when they ended
                at = datetime.fromtimestamp(stall["at"], UTC).strftime("%H:%M:%S.%f")[:-3]
                print(f"  stall {at} {stall['phase']} {stall['wall_ms']:.0f} ms (CPU {stall['cpu_ms']:.0f} ms)")


if __name__ == "__main__":
    main()
