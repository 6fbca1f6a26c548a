"""hwtune.env (the EnvironmentFile= rendering) against systemd's parser rules.

What is verified, honestly: systemd (not running here, and no systemd tool parses an env file
without the manager) is represented by `parse_env_file` below, a line-for-line port of the
state machine in systemd's src/basic/env-file.c (`parse_env_file_internal`, v254+). The port
is first checked against the examples systemd's own test suite uses for that parser
(src/test/test-env-file.c), then the renderer's output is parsed by it. The same file is also
sourced by bash and dash in test_render.py, which read double quotes by the same rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.apply.render import render_env
from hwtune.errors import ApplyError
from tests.apply_profiles import hostile_values, make_profile

NEWLINE, WHITESPACE, COMMENTS = "\n\r", " \t\n\r", "#;"
SHELL_NEED_ESCAPE = '"\\`$'


def systemd_values(canary: Path) -> dict[str, str]:
    """The hostile values hwtune.env can hold: a carriage return is refused
    (test_systemd_format_refuses_what_older_systemd_drops)."""
    return {k: v for k, v in hostile_values(canary).items() if k != "HW_CR"}


def test_systemd_format_refuses_what_older_systemd_drops() -> None:
    """systemd before v248 drops a variable whose value holds a control character other
    than tab or newline (env_value_is_valid); newer ones keep it. Refused, not dropped."""
    for bad in ("a\rb", "esc\x1b[0m", "del\x7f", "bell\x07"):
        with pytest.raises(ApplyError, match="before v248"):
            render_env(make_profile({"X": bad}), "systemd")
    text = render_env(make_profile({"X": "tab\tand\nnewline"}), "systemd")
    assert parse_env_file(text)["X"] == "tab\tand\nnewline"


def parse_env_file(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    state, key, value = "PRE_KEY", "", ""
    key_ws: int | None = None  # where trailing whitespace of the key starts
    value_ws: int | None = None

    def push() -> None:
        nonlocal key, value
        name = key[:key_ws] if key_ws is not None else key
        env[name] = value
        key, value = "", ""

    for c in text:
        if state == "PRE_KEY":
            if c in COMMENTS:
                state = "COMMENT"
            elif c not in WHITESPACE:
                state, key_ws, key = "KEY", None, key + c
        elif state == "KEY":
            if c in NEWLINE:
                state, key = "PRE_KEY", ""
            elif c == "=":
                state, value_ws = "PRE_VALUE", None
            else:
                if c not in WHITESPACE:
                    key_ws = None
                elif key_ws is None:
                    key_ws = len(key)
                key += c
        elif state == "PRE_VALUE":
            if c in NEWLINE:
                state = "PRE_KEY"
                push()
            elif c == "'":
                state = "SINGLE_QUOTE_VALUE"
            elif c == '"':
                state = "DOUBLE_QUOTE_VALUE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in WHITESPACE:
                state, value = "VALUE", value + c
        elif state == "VALUE":
            if c in NEWLINE:
                state = "PRE_KEY"
                if value_ws is not None:
                    value = value[:value_ws]
                push()
            elif c == "\\":
                state, value_ws = "VALUE_ESCAPE", None
            else:
                if c not in WHITESPACE:
                    value_ws = None
                elif value_ws is None:
                    value_ws = len(value)
                value += c
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in NEWLINE:
                value += c
        elif state == "SINGLE_QUOTE_VALUE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value += c
        elif state == "DOUBLE_QUOTE_VALUE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_QUOTE_VALUE_ESCAPE"
            else:
                value += c
        elif state == "DOUBLE_QUOTE_VALUE_ESCAPE":
            state = "DOUBLE_QUOTE_VALUE"
            if c in SHELL_NEED_ESCAPE:
                value += c
            elif c != "\n":
                value += "\\" + c
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in NEWLINE:
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":
            state = "PRE_KEY" if c in NEWLINE else "COMMENT"
    if state in (
        "PRE_VALUE",
        "VALUE",
        "VALUE_ESCAPE",
        "SINGLE_QUOTE_VALUE",
        "DOUBLE_QUOTE_VALUE",
        "DOUBLE_QUOTE_VALUE_ESCAPE",
    ):
        if state == "VALUE" and value_ws is not None:
            value = value[:value_ws]
        push()
    return env


# Examples from systemd's src/test/test-env-file.c, with the results that test asserts.
SYSTEMD_EXAMPLES = [
    (
        "a=a\na=b\na=b\na=a\nb=b\\\nc\nd= d\\\ne  \\\nf  \ng=g\\ \nh= ąęół\\ śćńźżμ \ni=i\\",
        {"a": "a", "b": "bc", "d": "de  f", "g": "g ", "h": "ąęół śćńźżμ", "i": "i"},
    ),
    ("a=a\\\n", {"a": "a"}),
    (
        '#SPAMD_ARGS="-d --socketpath=/var/lib/bulwark/spamd \\\n#--nouser-config  \\\n'
        "normal1=line\\\n111\n;normal=ignored \\\nnormal2=line222\nnormal ignored \\\n",
        {"normal1": "line111", "normal2": "line222"},
    ),
    (
        '# Generated\n\nHWMON_MODULES="coretemp f71882fg"\n\n# For compatibility reasons\n\n'
        "MODULE_0=coretemp\nMODULE_1=f71882fg\n",
        {"HWMON_MODULES": "coretemp f71882fg", "MODULE_0": "coretemp", "MODULE_1": "f71882fg"},
    ),
    ("a=\nb=\n", {"a": "", "b": ""}),
    (
        "a=\\ \\n \\t \\x \\y \\' \nb= \\$'                  \n"
        "c= ' \\n\\t\\$\\`\\\\\n'   \nd= \" \\n\\t\\$\\`\\\\\n\"   \n",
        {"a": " n t x y '", "b": "$'", "c": " \\n\\t\\$\\`\\\\\n", "d": " \\n\\t$`\\\n"},
    ),
]


@pytest.mark.parametrize(("text", "expected"), SYSTEMD_EXAMPLES)
def test_port_agrees_with_systemds_own_examples(text: str, expected: dict[str, str]) -> None:
    assert parse_env_file(text) == expected


def test_hostile_values_round_trip_through_systemd_rules(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    values = systemd_values(canary)
    text = render_env(make_profile(values), "systemd")
    parsed = parse_env_file(text)
    assert {k: parsed.get(k) for k in values} == values
    # Only the planned variables: comments never turn into assignments.
    assert set(parsed) == set(values) | {
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "HWTUNE_PROFILE",  # the marker of what hwtune wrote (hwtune.apply.marker)
    }


def test_sh_quoting_would_be_misread_by_systemd() -> None:
    """Why hwtune writes a separate systemd file: systemd ends a single-quoted part and then
    takes `\\'` and the following quotes literally (VALUE state has no quoting), so the sh
    idiom `'it'\\''s'` reads back as `it''s'`."""
    text = render_env(make_profile({"Q": "it's"}), "sh").replace("export ", "")
    assert parse_env_file(text)["Q"] != "it's"
    assert parse_env_file(render_env(make_profile({"Q": "it's"}), "systemd"))["Q"] == "it's"
