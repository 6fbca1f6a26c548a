"""The package's structure follows the chain: detect -> plan -> apply -> tune -> daemon.

Each module belongs to one stage (a folder under hwtune/) and imports only from its own stage
or from the stages below it; no file imports itself back through others (a cycle), and nothing
below the command line imports it. Imports inside functions count: a lazy import is still a
dependency, only a cheaper one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hwtune"

# The stages, lowest first, each with the modules and folders it holds. A module may import
# from its own stage or any stage above it in this list, never from one below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("hwtune.errors", "hwtune.status"),  # what every stage reports with
    ("hwtune.models", "hwtune.paths"),  # the data every stage passes on, and where files live
    ("hwtune.fs",),  # safe reads and atomic writes
    ("hwtune.knowledge",),  # validated data files
    ("hwtune.probes",),  # detect
    ("hwtune.planner",),  # plan (pure)
    ("hwtune.pipeline",),  # inputs -> plan: config, ranks, measured results
    ("hwtune.apply",),  # render, write, launch, configure(), verify
    ("hwtune.tune",),  # measure
    ("hwtune.doctor",),  # watch a running job
    ("hwtune.daemon",),  # keep it current
    ("hwtune.commands", "hwtune.cli", "hwtune.__main__"),  # the command line
)
# The built-in tuner workloads are user programs run in subprocesses: they use the public
# `hwtune.configure()` as any program would.
USER_PROGRAMS = ("hwtune.tune.builtin.",)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(module: str) -> Iterator[tuple[str, str]]:
    """(imported module, the names imported from it) for every hwtune import in `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hwtune"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES:
                    yield submodule, ""
                else:
                    yield _resolve(node.module), alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hwtune"):
                    yield _resolve(alias.name), ""


def layer_of(module: str) -> int:
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            if module == entry or module.startswith(entry + "."):
                return index
    raise AssertionError(f"{module} belongs to no stage: add its folder to LAYERS")


STAGED = sorted(m for m in MODULES if m != "hwtune")


def test_every_module_has_a_stage_and_the_root_is_small() -> None:
    for module in STAGED:
        layer_of(module)
    at_root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert at_root == [
        "__init__.py",
        "__main__.py",
        "cli.py",
        "errors.py",
        "paths.py",
        "status.py",
    ], "a module at the package root: move it into the folder of the stage it serves"


@pytest.mark.parametrize("module", STAGED)
def test_imports_go_down_the_chain(module: str) -> None:
    mine = layer_of(module)
    for target, name in imports_of(module):
        if target == "hwtune":
            # the package itself: only its version (the facade's other names import stages)
            assert name == "__version__" or module.startswith(USER_PROGRAMS), (
                f"{module} imports hwtune.{name or '*'}: import the module that defines it"
            )
            continue
        assert layer_of(target) <= mine, (
            f"{module} imports {target}, a later stage of the chain ({LAYERS[layer_of(target)]})"
        )


def test_no_import_cycles() -> None:
    graph = {m: {t for t, _ in imports_of(m) if t not in (m, "hwtune")} for m in MODULES}
    # Tarjan's strongly connected components; any component of two or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []
