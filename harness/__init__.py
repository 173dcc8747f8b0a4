"""visbench-harness: reproducible probes of frozen vision backbones.

`harness.run(backbone, task, dataset, ...)` runs one backbone × task without DVC (`harness.api`);
`harness.load_probe(path, backbone=...)` loads a saved probe head (`harness.api` too).
"""

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["load_probe", "run"]
# Imported by name on first use, not by an import statement: every DVC stage imports this package, and the
# stages' code dependencies are read from import statements (harness.pipeline.codedeps), so a static import here would
# make every stage depend on the API's code, which no stage runs.
_LAZY = {"run": "harness.api", "load_probe": "harness.api"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
