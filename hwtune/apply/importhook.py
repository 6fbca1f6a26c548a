"""A one-shot post-import hook: run callbacks right after named top-level modules import.

`configure()` uses it to apply tf.config settings the moment `import tensorflow` finishes,
without importing TensorFlow itself. It is a plain `sys.meta_path` finder: for a watched name
it asks the other finders for the spec, wraps the spec's loader so that `exec_module` calls
back when the module has executed, and restores the real loader on the module (so
importlib.resources and pkgutil see the usual one). It answers None for every other name and
removes itself from `sys.meta_path` once nothing is watched. Standard library only, and no
importlib.abc (its import costs milliseconds on the start-up path).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _NotifyingLoader:
    """Wraps a module's real loader; after the module executes, calls the hook back."""

    def __init__(self, inner: Any, name: str, hook: PostImportHook) -> None:
        self._inner = inner
        self._name = name
        self._hook = hook

    def create_module(self, spec: Any) -> ModuleType | None:
        module: ModuleType | None = self._inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._inner.exec_module(module)
        finally:  # introspection (importlib.resources, pkgutil) must see the real loader
            module.__loader__ = self._inner
            if module.__spec__ is not None:
                module.__spec__.loader = self._inner
        self._hook.fire(self._name, module)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)


class PostImportHook:
    """A `sys.meta_path` finder that answers only for watched top-level modules."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.callbacks or fullname in self._busy:
            return None
        from importlib.util import find_spec

        self._busy.add(fullname)  # find_spec consults sys.meta_path again, us included
        try:
            spec = find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        # duck-typed: importlib.abc.Loader would cost its import on the start-up path
        spec.loader = _NotifyingLoader(spec.loader, fullname, self)  # type: ignore[assignment]
        return spec

    def watch(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.callbacks.setdefault(name, []).append(callback)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def forget(self, callback: Callable[[ModuleType], None]) -> None:
        for name in list(self.callbacks):
            self.callbacks[name] = [cb for cb in self.callbacks[name] if cb != callback]
            if not self.callbacks[name]:
                del self.callbacks[name]
        self._uninstall_if_idle()

    def fire(self, name: str, module: ModuleType) -> None:
        for callback in self.callbacks.pop(name, []):
            callback(module)
        self._uninstall_if_idle()

    def _uninstall_if_idle(self) -> None:
        if not self.callbacks and self in sys.meta_path:
            sys.meta_path.remove(self)
