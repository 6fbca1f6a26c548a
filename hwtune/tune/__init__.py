"""The empirical tuner behind `hwtune tune`: measure settings on a workload, keep the best.

    config.py    the settings of one trial and how they reach its process (env variables)
    trial.py     run one trial in fresh processes: timeout, metric line, stderr tail
    stats.py     pooled noise, "clear of the noise" comparisons (t-interval, TOST)
    space.py     the settings searched, built around the plan
    search.py    hill climbing from the plan, each step a race with successive halving
    tuner.py     plan -> space -> search -> store (`tune`)
    workloads.py built-in workloads and user commands; builtin/ holds the built-in scripts
    progress.py, report.py   the terminal side

Importing this package imports nothing else: the built-in workloads run as
`python -m hwtune.tune.builtin.NAME` and must start fast.
"""
