"""`txbuffer status`: lag, open transactions, buffered bytes and low watermarks, as a table or JSON."""

from __future__ import annotations

import json

import structlog

log = structlog.get_logger(__name__)


def register(sub) -> None:
    p = sub.add_parser("status", help="show lag, open transactions, buffered bytes and low watermarks")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--metrics-url", help="a running processor's Prometheus endpoint, e.g. http://127.0.0.1:9108/metrics"
    )
    source.add_argument("--state-dir", help="a processor state dir (read-only; works while it runs)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=5.0, help="scrape timeout in seconds")
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.runtime.status import StatusError, from_state_dir, from_url, render

    try:
        status = from_url(args.metrics_url, args.timeout) if args.metrics_url else from_state_dir(args.state_dir)
    except StatusError as exc:
        log.error("status.unavailable", error=str(exc))
        return 1
    print(json.dumps(status.to_dict(), indent=2) if args.json else render(status), flush=True)
    return 0
