"""`txbuffer demo`: everything end to end on the embedded broker, verified."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("demo", help="embedded broker + generator + processor (+ Spark), verified end to end")
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--open-txns", type=int, default=200)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, default=None, help="keep state, expected output and Spark tables here")
    p.add_argument("--no-spark", dest="spark", action="store_false", help="skip the Spark stage")
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.testing.demo import DemoOptions, run_demo

    return run_demo(
        DemoOptions(
            events=args.events,
            open_txns=args.open_txns,
            partitions=args.partitions,
            seed=args.seed,
            workdir=args.workdir,
            spark=args.spark,
        )
    )
