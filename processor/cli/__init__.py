"""The `txbuffer` console script: one module per command, assembled in processor.cli.app."""

from processor.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
