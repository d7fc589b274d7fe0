"""One module per `astra` command, each with add_parser(subparsers) and run(args)."""
