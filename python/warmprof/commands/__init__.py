"""One module per subcommand: each has NAME, HELP, setup(parser) and run(args) -> int."""
