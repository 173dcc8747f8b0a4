"""What every stage entry point shares: logging, the exit code of a failure, the failure files."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable

from harness.core.config import ConfigError

log = logging.getLogger("visbench")


class StageFailed(RuntimeError):
    """The stage's work failed and its failed attempt is recorded; the process exits 1."""


def stage_main(name: str, parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace], None],
               argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        body(args)
    except ConfigError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    except StageFailed as error:
        print(f"{name}: FAILED: {error}", file=sys.stderr)
        return 1
    log.info("stage %s done in %.1fs", name, time.monotonic() - started)
    return 0


def csv_list(text: str) -> list[str]:
    return [part for part in text.split(",") if part]
