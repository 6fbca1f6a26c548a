"""Bugs the suite found: the open ones (KNOWN_BUGS) and the fixed ones (FIXED_BUGS).

An open bug's reproducer is marked `@xfail_known(id)`, a strict xfail while the id is listed:
when the owner fixes it, the reproducer passes, strict xfail fails the run, and the entry moves
to FIXED_BUGS (the marker goes; the reproducer stays as a regression test).
docs/RELIABILITY.md lists both.
"""

from __future__ import annotations

import pytest

KNOWN_BUGS: dict[str, str] = {}

# Found by the suite and fixed since; their reproducers run as plain regression tests.
FIXED_BUGS: dict[str, str] = {
    "cgroup-negative-cpu-max": (
        "a negative cgroup v2 cpu.max quota became a 1-CPU limit (hwtune/probes/cgroup.py; "
        "test_known_bugs.py::test_negative_cgroup_v2_quota_is_not_a_limit)"),
    "ranks-huge-number": (
        "a launcher variable of over 4,300 digits raised a bare ValueError, a traceback from "
        "every planning command (hwtune/ranks.py; test_huge_launcher_variable_is_a_config_error)"),
    "exec-signal-during-start": (
        "a SIGTERM/SIGINT arriving while `hwtune exec` started an instance never reached it: "
        "hwtune then waited forever (hwtune/launch.py; test_processes.py::"
        "test_sigterm_while_an_instance_is_starting, made deterministic with strace's syscall "
        "delay injection)"),
    "huge-numbers": (
        "nine parsers leaked a bare ValueError/OverflowError on numbers of thousands of digits "
        "(cpulist, meminfo, NUMA meminfo, nvidia-smi XML and topo, lscpu, sysfs cache sizes, "
        "cgroup quotas, knowledge JSON, TOML config, ELF offsets; "
        "test_known_bugs.py::test_numbers_beyond_any_machine_word)"),
    "apply-follows-planted-symlink": (
        "an output file another user had replaced with a symlink was silently replaced, exit 0; "
        "now refused with a clear message (hwtune/apply; "
        "test_writes.py::test_planted_symlink_is_refused)"),
    "apply-into-foreign-directory": (
        "as root, `apply --output DIR` wrote into a directory owned by another user; now "
        "refused (hwtune/apply; test_writes.py::test_directory_not_owned_by_root_is_refused)"),
    "nul-value-crashes-exec": (
        "a NUL in a config value (TOML `\\u0000`) ended `hwtune exec` in a ValueError "
        "traceback (hwtune/config.py; "
        "test_hostile_values.py::test_nul_from_the_config_file_exec)"),
    "nul-value-raises-from-configure": (
        "the same value made `hwtune.configure()` raise into the user's program "
        "(hwtune/runtime.py; test_hostile_values.py::test_nul_from_the_config_file_configure)"),
    "exec-signal-stops-start": (
        "any forwarded signal during `hwtune exec` start-up (SIGUSR1 too) stopped the remaining "
        "instances from starting (hwtune/launch.py; "
        "test_processes.py::test_sigusr1_while_an_instance_is_starting)"),
}


def xfail_known(bug: str) -> pytest.MarkDecorator:
    """Expected to fail while `bug` is listed; strict, so the fix shows up as a failure."""
    return pytest.mark.xfail(bug in KNOWN_BUGS, reason=KNOWN_BUGS.get(bug, ""), strict=True)


def is_huge_int_error(err: BaseException) -> bool:
    """int() of a string over sys.get_int_max_str_digits() digits (Python >= 3.11), or an int
    too large for a float: the errors a parser leaks when it bounds no number's length."""
    text = str(err)
    return (isinstance(err, ValueError) and "Exceeds the limit" in text) or (
        isinstance(err, OverflowError) and ("too large" in text or "infinity" in text))
