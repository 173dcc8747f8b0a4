"""A name → constructor registry, in the spirit of timm's `register_model`, with lazy discovery.

One decorator registers a constructor under a name; `get` is the only door in, and an unknown name is an
error that lists the known ones. Each entry remembers the module that registered it: that module's file
is what the DVC stages using the name depend on (`harness.pipeline.topology`).

Registries are lazy: importing one imports none of its entries. `discover()` imports every module of the
registry's built-in packages (and the project's `plugins:`), so `names()` and a miss in `get()` see
everything; a stage that already knows which module it needs imports just that one (`load_code`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # harness/


class UnknownNameError(KeyError):
    """A name that no registry entry answers to; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class PluginError(ValueError):
    """A plugin module that cannot be loaded; the message names the file and the fix."""


class Registry(Generic[T]):
    def __init__(self, kind: str, packages: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.packages = packages  # built-in packages whose modules register entries when imported
        self._entries: dict[str, Callable[..., T]] = {}
        self._modules: dict[str, str] = {}  # name → module that registered it
        self._discovered = False

    def register(
        self, name: str | None = None, module: str | None = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Register under `name`; `module` is the registering module when it is not the function's own (a
        helper that builds the function for its caller passes the caller's module)."""

        def decorator(fn: Callable[..., T]) -> Callable[..., T]:
            key = name or fn.__name__
            source = module or _registering_module(fn)
            if key in self._entries and self._modules[key] != source:
                raise ValueError(f"{self.kind} {key!r} is registered twice: by {self._modules[key]} and {source}")
            self._entries[key] = fn
            self._modules[key] = source
            return fn

        return decorator

    def get(self, name: str) -> Callable[..., T]:
        if name not in self._entries:
            self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(unknown_name_message(self.kind, name, self.names())) from None

    def module_of(self, name: str) -> str:
        """The module that registered `name` (a plugin's synthetic module name for plugin files)."""
        self.get(name)
        return self._modules[name]

    def discover(self) -> None:
        """Import every module of the built-in packages once, so every built-in entry is registered."""
        if self._discovered:
            return
        self._discovered = True
        for package in self.packages:
            for module in walk_modules(package):
                importlib.import_module(module)

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self.discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def _registering_module(fn: Callable) -> str:
    module = getattr(fn, "__module__", None)
    if module is None:
        raise ValueError(f"cannot tell which module registers {fn!r}")
    return module


def walk_modules(package: str) -> list[str]:
    """Every module under a package (subpackages included), sorted: what `discover` imports."""
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not info.name.rsplit(".", 1)[-1].startswith("_"):
            names.append(info.name)
    return sorted(names)


def unknown_name_message(kind: str, name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Valid {kind}s: {', '.join(valid)}"


# -- code by file path: what DVC stages name in their commands -------------------------------------------


def plugin_module_name(path: Path) -> str:
    """A stable module name for a plugin file: `plugins/my_net.py` → `visbench_plugin.plugins.my_net`."""
    parts = Path(path).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return "visbench_plugin." + ".".join(p.replace("-", "_") for p in parts)


def module_for_path(path: str | Path) -> str:
    """The importable name of a code path relative to the project root: harness modules by their own name,
    any other `.py` file (or package folder) as a plugin."""
    path = Path(path)
    if path.parts and path.parts[0] == "harness":
        parts = list(path.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(parts)
    return plugin_module_name(path)


def load_code(path: str | Path) -> str:
    """Import the module at a project-relative path (a harness module or a plugin file/package); return its
    name. Importing registers whatever it defines. A plugin is imported once per process."""
    path = Path(path)
    name = module_for_path(path)
    if name in sys.modules:
        return name
    if path.parts and path.parts[0] == "harness":
        importlib.import_module(name)
        return name
    source = path / "__init__.py" if path.is_dir() else path
    if not source.is_file() or source.suffix != ".py":
        raise PluginError(f"plugin {path}: no such Python file or package (plugins: in params.yaml lists paths "
                          "relative to the project root, e.g. plugins/my_backbone.py)")
    spec = importlib.util.spec_from_file_location(
        name, source, submodule_search_locations=[str(path)] if path.is_dir() else None)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("visbench_plugin", _namespace("visbench_plugin"))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise PluginError(f"plugin {path} failed to import: {type(error).__name__}: {error}") from error
    return name


def _namespace(name: str):
    import types

    module = types.ModuleType(name)
    module.__path__ = []  # a package, so plugin modules can live "under" it
    return module


def load_plugins(paths: list[str]) -> list[str]:
    return [load_code(p) for p in paths]


def module_path(module: str) -> Path:
    """Project-relative path of a module's file (a package's folder for a plugin package)."""
    loaded = sys.modules.get(module) or importlib.import_module(module)
    file = getattr(loaded, "__file__", None)
    if file is None:
        raise ValueError(f"module {module} has no file")
    path = Path(file).resolve()
    if module.startswith("visbench_plugin."):
        path = path.parent if path.name == "__init__.py" else path
        return Path(_relative(path))
    return Path("harness") / path.relative_to(PACKAGE_ROOT)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        raise PluginError(f"plugin {path} lies outside the project: plugins must be files inside it, so DVC "
                          "can depend on them") from None
