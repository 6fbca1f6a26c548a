"""`hwtune schema [hardware|profile]`: print the JSON Schema of a model.

The models are stdlib dataclasses; pydantic's `TypeAdapter` derives the schema from them
(imported here, never on the detect path, because it costs ~200 ms to import).
"""

from __future__ import annotations

import argparse
import json

from hwtune.cli import Environment
from hwtune.status import ExitStatus

MODELS = ("hardware", "profile")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        choices=MODELS,
        default="hardware",
        help="which model (default: hardware, what `detect --json` prints)",
    )


def json_schema(model: str) -> dict[str, object]:
    """The JSON Schema of `model` ("hardware" or "profile"), with a $schema and a title."""
    from pydantic import TypeAdapter

    from hwtune.models.hardware import Hardware
    from hwtune.models.profile import Profile

    cls: type = Hardware if model == "hardware" else Profile
    schema: dict[str, object] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **TypeAdapter(cls).json_schema(),
    }
    return schema


def run(args: argparse.Namespace, env: Environment) -> int:
    env.stdout.write(json.dumps(json_schema(args.model), indent=2) + "\n")
    return ExitStatus.SUCCESS
