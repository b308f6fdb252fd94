"""Processor sizing for a target event rate, from measured per-instance throughput (deploy/SIZING.md).

python deploy/sizing.py --throughput 52000 --event-bytes 310          # numbers from `make bench`
python deploy/sizing.py --throughput 52000 --event-bytes 310 --rate 250000 --open-window-s 120
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class Sizing:
    instances: int
    partitions: int
    disk_gib: int
    per_instance_rate: float
    buffered_bytes: float


def size(
    rate: float,
    throughput: float,
    event_bytes: float,
    utilisation: float = 0.6,
    partitions_per_instance: int = 4,
    open_window_s: float = 60.0,
    largest_txn_bytes: float = 4 * GIB,
    space_amplification: float = 2.0,
    min_disk_gib: int = 10,
) -> Sizing:
    """Instances N, partitions P and disk D per instance.

    N = max(ceil(R / (u*T)), ceil(R / T) + 1)   run at utilisation u, and survive one instance down
    P = N * k                                    k partitions per instance: scale out k-fold later
                                                 without repartitioning (XID -> partition is fixed)
    D = a * (R / (N-1) * s * W + L)              every event of the last W seconds still open, on the
                                                 N-1 instances left after a failover, plus the largest
                                                 transaction L, times RocksDB space amplification a
    """
    if min(rate, throughput, event_bytes) <= 0 or not 0 < utilisation <= 1:
        raise ValueError("rate, throughput and event size must be positive; 0 < utilisation <= 1")
    instances = max(math.ceil(rate / (utilisation * throughput)), math.ceil(rate / throughput) + 1)
    partitions = instances * partitions_per_instance
    per_instance_after_failover = rate / max(instances - 1, 1)
    buffered = per_instance_after_failover * event_bytes * open_window_s + largest_txn_bytes
    disk_gib = max(min_disk_gib, math.ceil(space_amplification * buffered / GIB))
    return Sizing(instances, partitions, disk_gib, rate / instances, buffered)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=1_000_000, help="R: target events/s (default 1M)")
    p.add_argument("--throughput", type=float, required=True, help="T: measured events/s of one instance (make bench)")
    p.add_argument("--event-bytes", type=float, required=True, help="s: mean encoded RawEvent size (make bench)")
    p.add_argument("--utilisation", type=float, default=0.6, help="u: planned share of T in steady state")
    p.add_argument("--partitions-per-instance", type=int, default=4, help="k")
    p.add_argument("--open-window-s", type=float, default=60.0, help="W: longest-open transaction to absorb, seconds")
    p.add_argument("--largest-txn-gib", type=float, default=4.0, help="L: largest single transaction, GiB")
    p.add_argument("--space-amplification", type=float, default=2.0, help="a: RocksDB WAL + compaction overhead")
    a = p.parse_args(argv)
    s = size(
        a.rate,
        a.throughput,
        a.event_bytes,
        a.utilisation,
        a.partitions_per_instance,
        a.open_window_s,
        a.largest_txn_gib * GIB,
        a.space_amplification,
    )
    print(f"instances (StatefulSet replicas): {s.instances}")
    print(f"raw topic partitions:             {s.partitions}")
    print(f"disk per instance (PVC):          {s.disk_gib}Gi")
    print(f"steady rate per instance:         {s.per_instance_rate:,.0f} events/s")


if __name__ == "__main__":
    main()
