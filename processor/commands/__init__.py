"""One module per `txbuffer` subcommand; each exposes register(subparsers)."""
