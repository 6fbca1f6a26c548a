"""Built-in workloads for `hwtune tune --workload builtin:NAME`: small, synthetic, seconds each.

Each is a script run in a fresh process (`python -m hwtune.tune.builtin.NAME`), reads the trial
settings hwtune passes in the environment (see `hwtune.tune.trial`), warms up, measures its
steady-state throughput and prints one line `hwtune-metric: samples_per_sec=<value>`.
"""
