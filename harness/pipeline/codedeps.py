"""The code a stage imports, read statically: the files a DVC stage depends on.

Starting from a stage's entry module and the module that defines what it runs (a backbone family, a dataset
kind, a probe, a plugin), follow every `import` of project code (ast; a parent package's `__init__` counts,
since importing a module runs it; imports under `if TYPE_CHECKING:` do not, since they never run). The
result is deterministic, needs no execution, and is tested against what a stage really loads
(tests/test_pipeline_generation.py), so an edit re-runs exactly the stages whose code it touches.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

ROOT_PACKAGE = "harness"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_checking: bool = False) -> Iterable[ast.Import | ast.ImportFrom]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _module_file(root: Path, module: str) -> Path | None:
    """harness.x.y → harness/x/y.py or harness/x/y/__init__.py (relative to root), if it exists."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def _package_of(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@cache
def _direct(root: Path, path: Path, type_checking: bool = False) -> tuple[Path, ...]:
    """Project files one file imports directly (with the `__init__` of every package on the way)."""
    tree = ast.parse((root / path).read_text(encoding="utf-8"), filename=str(path))
    own = _package_of(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: list[Path] = []

    def add(module: str) -> None:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
            file = _module_file(root, ".".join(parts[:i]))
            if file is not None:
                found.append(file)

    for node in _imports(tree, type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT_PACKAGE:
                    add(alias.name)
            continue
        if node.level:  # relative import inside a package (a plugin package, say)
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join([*anchor, node.module] if node.module else anchor)
        else:
            module = node.module or ""
        if module.split(".")[0] != ROOT_PACKAGE and not node.level:
            continue
        add(module)
        for alias in node.names:  # `from harness.probes import dense` imports the submodule
            if _module_file(root, f"{module}.{alias.name}") is not None:
                add(f"{module}.{alias.name}")
    return tuple(dict.fromkeys(found))


def direct_imports(path: str | Path, root: Path = Path("."), type_checking: bool = False) -> list[str]:
    """The project files one file imports (at module level or in a function; under `if TYPE_CHECKING:` too only
    with `type_checking`, for the layering test: such imports never run, so a stage's code is read without them)."""
    return [p.as_posix() for p in _direct(root.resolve(), Path(path), type_checking)]


def code_closure(paths: Iterable[str | Path], root: Path = Path(".")) -> list[str]:
    """Every project file that importing `paths` (files, or a plugin package's folder) runs, sorted."""
    root = root.resolve()
    todo: list[Path] = []
    for entry in paths:
        entry = Path(entry)
        if (root / entry).is_dir():
            todo += sorted(p.relative_to(root) for p in (root / entry).rglob("*.py"))
        else:
            todo.append(entry)
            parts = list(entry.with_suffix("").parts)
            for i in range(1, len(parts)):  # the packages above the entry module run first
                init = Path(*parts[:i]) / "__init__.py"
                if (root / init).is_file():
                    todo.append(init)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(p for p in _direct(root, path) if p not in seen)
    return sorted(p.as_posix() for p in seen)
