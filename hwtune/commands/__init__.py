"""One module per CLI subcommand: `add_arguments(parser)` and `run(args, env) -> int`.

Command modules import their heavy dependencies inside `run`, so that `hwtune --help` and the
fast commands (detect, env) stay cheap.
"""
