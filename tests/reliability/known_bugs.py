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
    "unicode-digits-version-tuple": (
        "the planner's version_tuple() fed str.isdigit() characters to int(): a compute "
        "capability '7.⁵' in hardware.json (`plan --hardware`) ended planning in a ValueError "
        "traceback, and '7.٣' was read as 7.3 (hwtune/planner/knowledge.py; "
        "test_known_bugs.py::test_compute_capability_with_unicode_digits_plans)"
    ),
    "tuned-instances-beyond-cores": (
        "a tuned result whose `instances` this machine cannot hold (1024 on 2 cores) made "
        "plan() raise PlanError, and `hwtune plan`/`apply`/`exec` failed instead of ignoring "
        "the result with a warning; now the pipeline plans with the rules and names "
        "the file (hwtune/pipeline/measured.py; "
        "test_faults.py::test_tuned_instances_beyond_this_machine)"
    ),
    "cgroup-negative-cpu-max": (
        "a negative cgroup v2 cpu.max quota became a 1-CPU limit (hwtune/probes/cgroup.py; "
        "test_known_bugs.py::test_negative_cgroup_v2_quota_is_not_a_limit)"
    ),
    "ranks-huge-number": (
        "a launcher variable of over 4,300 digits raised a bare ValueError, a traceback from "
        "every planning command (hwtune/pipeline/ranks.py; "
        "test_huge_launcher_variable_is_a_config_error)"
    ),
    "exec-signal-during-start": (
        "a SIGTERM/SIGINT arriving while `hwtune exec` started an instance never reached it: "
        "hwtune then waited forever (hwtune/apply/launch.py; test_processes.py::"
        "test_sigterm_while_an_instance_is_starting, made deterministic with strace's syscall "
        "delay injection)"
    ),
    "huge-numbers": (
        "nine parsers leaked a bare ValueError/OverflowError on numbers of thousands of digits "
        "(cpulist, meminfo, NUMA meminfo, nvidia-smi XML and topo, lscpu, sysfs cache sizes, "
        "cgroup quotas, knowledge JSON, TOML config, ELF offsets; "
        "test_known_bugs.py::test_numbers_beyond_any_machine_word)"
    ),
    "apply-follows-planted-symlink": (
        "an output file another user had replaced with a symlink was silently replaced, exit 0; "
        "now refused with a clear message (hwtune/apply; "
        "test_writes.py::test_planted_symlink_is_refused)"
    ),
    "apply-into-foreign-directory": (
        "as root, `apply --output DIR` wrote into a directory owned by another user; now "
        "refused (hwtune/apply; test_writes.py::test_directory_not_owned_by_root_is_refused)"
    ),
    "nul-value-crashes-exec": (
        "a NUL in a config value (TOML `\\u0000`) ended `hwtune exec` in a ValueError "
        "traceback (hwtune/pipeline/config.py; "
        "test_hostile_values.py::test_nul_from_the_config_file_exec)"
    ),
    "nul-value-raises-from-configure": (
        "the same value made `hwtune.configure()` raise into the user's program "
        "(hwtune/apply/runtime.py; "
        "test_hostile_values.py::test_nul_from_the_config_file_configure)"
    ),
    "exec-signal-stops-start": (
        "any forwarded signal during `hwtune exec` start-up (SIGUSR1 too) stopped the remaining "
        "instances from starting (hwtune/apply/launch.py; "
        "test_processes.py::test_sigusr1_while_an_instance_is_starting)"
    ),
    "unicode-digits": (
        "str.isdigit() is True for '²' and '①', which int() refuses: lscpu `-p` rows and "
        "summary numbers, meminfo, /proc/self/cgroup, sysfs cache sizes, $WATCHDOG_USEC and "
        "profile thread counts raised a bare ValueError, and '٣' was read as 3 there and in "
        "the sysfs, NUMA, nvidia-smi and TensorFlow version patterns; one ASCII-digit test "
        "now (hwtune/models/digits.py; test_known_bugs.py::test_unicode_digits_are_not_numbers)"
    ),
    "tuned-result-crashes-plan": (
        "a tuned result file that was not UTF-8, held a number of 5,000 digits or a ratio "
        "beyond any float, or nested arrays 100,000 deep ended `hwtune plan`/`apply` in a "
        "traceback (and configure() planned nothing), and so did a wrong-typed setting "
        "(threads.intra_op \"abc\": a ValueError in plan(); jit.level 'x': an ApplyError "
        "from render); "
        "a directory or dangling symlink in its place was skipped without a word "
        "(hwtune/pipeline/measured.py; test_fuzz_parsers.py::test_tuned_result_file, "
        "test_faults.py::test_tuned_result_faults)"
    ),
}


def xfail_known(bug: str) -> pytest.MarkDecorator:
    """Expected to fail while `bug` is listed; strict, so the fix shows up as a failure."""
    return pytest.mark.xfail(bug in KNOWN_BUGS, reason=KNOWN_BUGS.get(bug, ""), strict=True)


def is_huge_int_error(err: BaseException) -> bool:
    """int() of a string over sys.get_int_max_str_digits() digits (Python >= 3.11), or an int
    too large for a float: the errors a parser leaks when it bounds no number's length."""
    text = str(err)
    return (isinstance(err, ValueError) and "Exceeds the limit" in text) or (
        isinstance(err, OverflowError) and ("too large" in text or "infinity" in text)
    )
