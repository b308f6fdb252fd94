"""The `txbuffer` console script.

Each subcommand lives in its own module, which exposes `register(subparsers)`; the parser it adds
sets `func`. This file only assembles them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from processor.runtime.logs import configure_logging
from processor.runtime.memory import limit_malloc_arenas

# module path -> registers these subcommands
COMMAND_MODULES = [
    "processor.cli.broker",
    "processor.cli.run",
    "processor.cli.generate",
    "processor.cli.demo",
    "processor.cli.replay",
    "processor.cli.capture",
    "processor.cli.status",
    "processor.cli.spark",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="txbuffer", description="The universal transaction buffer.")
    parser.add_argument(
        "--log-format",
        choices=["console", "json"],
        default=None,
        help="log output format (default: console on a terminal, json otherwise)",
    )
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    limit_malloc_arenas()
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # `run --workers` starts copies of it
    configure_logging(args.log_format, args.log_level)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
