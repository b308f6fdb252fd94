"""The results as a PNG: `python -m bench.plot [RESULTS.json] [--out PNG]`.

Left: events/s of the ceiling, txbuffer (both guarantees, 1 and 2 workers) and the peers.
Right: commit-to-emit p50/p99 against offered load, processor and passthrough.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def render(report: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = report.get("medians", {})
    bars = [
        ("passthrough\n(ceiling)", (med.get("ceiling") or {}).get("events_per_s")),
        ("txbuffer\nat_least_once", (med.get("steady") or {}).get("events_per_s")),
        ("txbuffer\nexactly_once", (med.get("steady_eos") or {}).get("events_per_s")),
        ("txbuffer\n2 workers", ((med.get("workers") or {}).get("2") or {}).get("events_per_s")),
        ("Quix Streams\npeer", ((med.get("peers") or {}).get("quix") or {}).get("events_per_s")),
        ("rocksdict\npeer", ((med.get("peers") or {}).get("rocksdict") or {}).get("events_per_s")),
    ]
    bars = [(n, v) for n, v in bars if v]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    colors = ["#888888" if "ceiling" in n else "#1f77b4" if "txbuffer" in n else "#ff7f0e" for n, _ in bars]
    ax1.bar([n for n, _ in bars], [v / 1000 for _, v in bars], color=colors)
    ceil = (med.get("ceiling") or {}).get("events_per_s")
    if ceil:
        ax1.axhline(0.7 * ceil / 1000, ls="--", color="red", lw=1, label="target 0.7× ceiling")
        ax1.legend()
    ax1.set_ylabel("k events/s (steady workload)")
    ax1.set_title(f"Throughput ({report.get('mode', '?')} run {report.get('started', '')})")
    ax1.tick_params(axis="x", labelsize=8)
    levels = ((med.get("latency_curve") or {}).get("levels")) or {}
    if levels:
        keys = sorted(levels, key=int)
        x = [int(k) for k in keys]
        for who, style in (("processor", "-"), ("passthrough", ":")):
            for q, marker in (("p50_ms", "o"), ("p99_ms", "s")):
                y = [levels[k][who][q] for k in keys]
                ax2.plot(x, y, style, marker=marker, label=f"{who} {q[:3]}")
        ax2.axhline(10, color="green", lw=0.8, ls="--", label="target p50 10 ms @50%")
        ax2.axhline(50, color="red", lw=0.8, ls="--", label="target p99 50 ms @50%")
        ax2.set_yscale("log")
        ax2.set_xlabel("offered load, % of measured steady maximum")
        ax2.set_ylabel("commit-to-emit ms")
        ax2.set_title("Latency against load")
        ax2.legend(fontsize=8)
    else:
        ax2.text(0.5, 0.5, "no latency_curve in this run", ha="center")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.plot")
    ap.add_argument("results", nargs="?", default=str(RESULTS / "latest.json"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    report = json.loads(Path(args.results).read_text())
    out = Path(args.out) if args.out else Path(args.results).with_suffix(".png")
    print(render(report, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
