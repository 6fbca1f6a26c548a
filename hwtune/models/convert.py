"""Strict conversion between the dataclass models and JSON-shaped data, without pydantic.

`load(cls, data, where)` builds a model from parsed JSON/TOML and raises `ModelError` naming the
file and the key path of the first problem (unknown key, wrong type, missing field), with a
"did you mean" hint for near-miss keys. `dump(obj)` is the inverse (tuples become lists).
pydantic's `TypeAdapter` validates the same classes in the tests and exports the JSON Schema;
this module exists so that the hot paths (detect, configure) never import it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from hwtune.errors import HwtuneError, ModelError

T = TypeVar("T")


def dump(obj: Any) -> Any:
    """Turn a model (or nested models) into JSON-ready dicts, lists and scalars."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: dump(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [dump(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): dump(v) for k, v in obj.items()}
    return obj


def dumps_json(obj: Any, what: str, **options: Any) -> str:
    """`obj` (a model) as JSON text, with `json.dumps` `options` (indent...). NaN and ±Infinity
    are refused (allow_nan=False): Python writes them as bare NaN/Infinity, which are not JSON
    (RFC 8259 section 6) and which strict readers (jq, JavaScript's JSON.parse) reject, so a
    value no probe should let through is an error naming its key path, never invalid output."""
    import json

    data = dump(obj)
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError:
        where = _non_finite(data, "") or "?"
        raise HwtuneError(
            f"{what}: {where} is not a finite number, which JSON cannot hold: nothing written",
            hint="this is a bug in hwtune: please report it with the output of `hwtune snapshot`",
        ) from None


def _non_finite(data: Any, path: str) -> str | None:
    """The key path ("cpu.core_types[0].max_mhz") of the first NaN or infinity in `data`."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "the value"
    if isinstance(data, dict):
        items = [(f"{path}.{key}" if path else str(key), value) for key, value in data.items()]
    elif isinstance(data, list):
        items = [(f"{path}[{index}]", value) for index, value in enumerate(data)]
    else:
        return None
    return next((found for where, value in items if (found := _non_finite(value, where))), None)


@functools.cache
def _fields(cls: type) -> dict[str, tuple[Any, bool]]:
    """name -> (resolved annotation, required), computed once per class: detect validates
    every knowledge entry on each run, and re-resolving annotations dominated that cost."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: (
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    }


def load(cls: type[T], data: Any, where: str = "<data>") -> T:
    """Validate `data` against the model `cls` and build it; `where` names the source file."""
    return typing.cast(T, _convert(cls, data, where, ""))


def _fail(where: str, path: str, message: str, hint: str | None = None) -> ModelError:
    at = f" at '{path}'" if path else ""
    return ModelError(f"{where}{at}: {message}", hint=hint)


def _convert(tp: Any, value: Any, where: str, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        return _convert_union(tp, value, where, path)
    if origin is Literal:
        if value in get_args(tp) and type(value) in {type(a) for a in get_args(tp)}:
            return value
        allowed = ", ".join(repr(a) for a in get_args(tp))
        close = _close_match(str(value), [str(a) for a in get_args(tp)])
        hint = f"did you mean '{close[0]}'?" if close else None
        raise _fail(where, path, f"{value!r} is not one of {allowed}", hint)
    if origin is tuple or origin is list:
        if not isinstance(value, (list, tuple)):
            raise _fail(where, path, f"expected a list, got {type(value).__name__}")
        item = get_args(tp)[0]
        items = [_convert(item, v, where, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(where, path, f"expected a table, got {type(value).__name__}")
        key_tp, val_tp = get_args(tp)
        return {
            _convert(key_tp, k, where, path): _convert(val_tp, v, where, _join(path, str(k)))
            for k, v in value.items()
        }
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _convert_dataclass(tp, value, where, path)
    return _convert_scalar(tp, value, where, path)


def _convert_union(tp: Any, value: Any, where: str, path: str) -> Any:
    args = get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        raise _fail(where, path, "a value is required, got null")
    errors: list[ModelError] = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(arg, value, where, path)
        except ModelError as err:
            errors.append(err)
    raise errors[0] if len(errors) == 1 else _fail(where, path, f"unexpected value {value!r}")


def _convert_scalar(tp: Any, value: Any, where: str, path: str) -> Any:
    # bool is an int subclass in Python but never a valid int or float here, and vice versa.
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif tp is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"convert: unsupported annotation {tp!r}")
    if not ok:
        raise _fail(where, path, f"expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def _convert_dataclass(cls: type, value: Any, where: str, path: str) -> Any:
    if not isinstance(value, dict):
        got = type(value).__name__
        # The class is internal (a config file's "_ThreadsTable"): the key path names the table.
        raise _fail(where, path, f"expected a table, got {got} {value!r}")
    fields = _fields(cls)
    unknown = [k for k in value if k not in fields]
    if unknown:
        key = str(unknown[0])
        close = _close_match(key, list(fields))
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(fields)}"
        raise _fail(where, _join(path, key), "unknown key", hint=hint)
    kwargs: dict[str, Any] = {}
    for name, (annotation, required) in fields.items():
        if name in value:
            kwargs[name] = _convert(annotation, value[name], where, _join(path, name))
        elif required:
            raise _fail(where, _join(path, name), "missing required key")
    return cls(**kwargs)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _close_match(word: str, choices: list[str]) -> list[str]:
    # Imported here: only an error needs it, and `hwtune detect` loads this module to read
    # its knowledge tables (difflib costs ~2 ms of a 150 ms budget, python -X importtime).
    import difflib

    folded = [choice for choice in choices if choice.casefold() == word.casefold()]
    return folded or difflib.get_close_matches(word, choices, n=1)
