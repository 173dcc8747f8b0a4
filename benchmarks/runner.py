"""The one benchmark runner: repeats, interleaving, medians, the environment fingerprint, and the results file.

Every benchmark in this folder times its work through a `Bench` and ends with `Bench.write()`, which writes
`benchmarks/results/<bench>-<machine>.json`; docs/performance.md is generated from those files
(`python -m benchmarks.performance_page`), so no timing is ever typed into prose.

    bench = Bench("scene_render", argv=sys.argv)
    bench.interleave({"a": run_a, "b": run_b}, repeats=5, warmup=1)        # a b, b a, a b, ...
    bench.sample_command("dvc status", ["dvc", "status"], cwd, env, log, check=clean)  # a whole process
    bench.record("peak RSS growth", "MiB", [growth])                        # a value measured another way
    bench.ratio("b ÷ a", "b", "a")                                          # the same work, two ways
    bench.write()

A time sample is wall clock and CPU time: the process's own (`time.process_time`, every thread) for a callable,
the kernel's rusage of the process and its reaped children (`os.wait4`) for a command. A measurement given
`work=N, unit="img/s"` stores N ÷ wall per sample instead of seconds. `median`, `min` and `max` are always
computed from the stored samples, and the results model (`Results`) re-checks that, and that every ratio's value
is its numerator's median over its denominator's, so a results file edited by hand is refused.

The machine slug in the file name is the CPU model, a short hash of the kernel-relevant instruction-set flags
(`harness.core.devices.KERNEL_FLAGS`) and the core count: two kinds of machine never overwrite each other's files.
Nothing here imports torch or harness at import time (the page generator reads the schema only).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's harness, never the one an editable install points at
RESULTS = REPO / "benchmarks" / "results"
Scalar = str | int | float | bool | None
_TOLERANCE = 1e-9  # relative: a median re-derived from the stored samples, after a JSON round trip


# -- the results file ------------------------------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Measurement(_Strict):
    """One quantity: its per-sample values and their median, min and max (in `unit`)."""

    name: str = Field(min_length=1)
    unit: str = Field(min_length=1)
    samples: list[float] = Field(min_length=1)
    median: float
    min: float
    max: float
    cpu_samples: list[float] | None = None  # CPU seconds per sample, where the samples are timings
    cpu_median: float | None = None
    work: float | None = None  # items per sample: samples are work ÷ wall seconds
    max_rss_mb: float | None = None  # the largest peak RSS of a timed process
    details: dict[str, Scalar] = Field(default_factory=dict)  # what this row measured (backbone, batch, ...)

    @model_validator(mode="after")
    def _derived_from_samples(self) -> Measurement:
        for what, stored, derived in (("median", self.median, statistics.median(self.samples)),
                                      ("min", self.min, min(self.samples)), ("max", self.max, max(self.samples))):
            if not _close(stored, derived):
                raise ValueError(f"measurement {self.name!r}: {what} {stored} is not the samples' {what} {derived}")
        if (self.cpu_samples is None) != (self.cpu_median is None):
            raise ValueError(f"measurement {self.name!r}: cpu_samples and cpu_median go together")
        if self.cpu_samples is not None:
            if len(self.cpu_samples) != len(self.samples):
                raise ValueError(f"measurement {self.name!r}: {len(self.cpu_samples)} CPU samples for "
                                 f"{len(self.samples)} samples")
            if not _close(self.cpu_median, statistics.median(self.cpu_samples)):
                raise ValueError(f"measurement {self.name!r}: cpu_median is not the CPU samples' median")
        return self


class Ratio(_Strict):
    """numerator's median ÷ denominator's median: the same work done two ways, or against a limit."""

    name: str = Field(min_length=1)
    numerator: str
    denominator: str
    value: float


class Environment(_Strict):
    """What the numbers depend on: the CPU and its kernel flags, cores and threads, load, versions, commit."""

    cpu_model: str
    kernel_flags: list[str]
    nproc: int  # cores this process may run on
    cpu_count: int  # cores the machine has
    threads: int  # torch's compute threads (OMP_NUM_THREADS, else the usable cores)
    nice: int
    load_before: list[float] = Field(min_length=3, max_length=3)
    load_after: list[float] = Field(min_length=3, max_length=3)
    python: str
    torch: str | None
    numpy: str | None
    harness_version: str
    git_commit: str | None
    git_dirty: bool | None  # harness/, benchmarks/ or pyproject.toml differ from the commit


class Results(_Strict):
    """A benchmark's results file, benchmarks/results/<bench>-<machine>.json."""

    bench: str = Field(pattern=r"^[a-z0-9_]+$")
    machine: str = Field(pattern=r"^[a-z0-9-]+$")
    environment: Environment
    when: datetime.datetime
    duration_s: float
    command: list[str] = Field(min_length=1)
    measurements: list[Measurement] = Field(min_length=1)
    ratios: list[Ratio] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Results:
        by_name = {m.name: m for m in self.measurements}
        if len(by_name) != len(self.measurements):
            raise ValueError("two measurements share a name")
        for ratio in self.ratios:
            for side in (ratio.numerator, ratio.denominator):
                if side not in by_name:
                    raise ValueError(f"ratio {ratio.name!r} names {side!r}, which is no measurement here")
            derived = by_name[ratio.numerator].median / by_name[ratio.denominator].median
            if not _close(ratio.value, derived):
                raise ValueError(f"ratio {ratio.name!r}: value {ratio.value} is not {derived} (medians)")
        expected = machine_slug(self.environment.cpu_model, self.environment.kernel_flags,
                                self.environment.cpu_count)
        if self.machine != expected:
            raise ValueError(f"machine {self.machine!r} is not {expected!r}, the slug of its environment")
        return self


def _close(a: float | None, b: float) -> bool:
    return a is not None and (a == b or abs(a - b) <= _TOLERANCE * max(abs(a), abs(b)))


def machine_slug(cpu_model: str, kernel_flags: list[str] | tuple[str, ...], cpu_count: int) -> str:
    """`intel-xeon-processor-1a2b3c-2cpu`: the CPU model's words, a hash of its kernel flags, its core count."""
    words = re.sub(r"\((r|tm|c)\)|\bcpu\b|@.*$", " ", cpu_model.lower())
    model = "-".join(re.findall(r"[a-z0-9]+", words))[:40].strip("-") or "unknown"
    flags = hashlib.sha256(",".join(sorted(kernel_flags)).encode()).hexdigest()[:6]
    return f"{model}-{flags}-{cpu_count}cpu"


def results_path(bench: str, machine: str, directory: Path = RESULTS) -> Path:
    return directory / f"{bench}-{machine}.json"


# -- timing ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessTime:
    """One timed run: wall seconds (spawn to reap, or call to return), CPU seconds, peak RSS (MB; 0 if unknown)."""

    wall: float
    cpu: float
    max_rss_mb: float = 0.0

    def __add__(self, other: ProcessTime) -> ProcessTime:
        return ProcessTime(self.wall + other.wall, self.cpu + other.cpu, max(self.max_rss_mb, other.max_rss_mb))


class ProcessFailed(RuntimeError):
    """A timed process exited non-zero, or its output failed its check; the message carries the log tail."""


Command = list[str] | str
Check = Callable[[str], str | None]  # a run's output → what is wrong with it, or None


def time_call(fn: Callable[[], Any]) -> tuple[ProcessTime, Any]:
    """Wall and process CPU time (every thread of this process) of one call, and what it returned."""
    cpu, started = time.process_time(), time.perf_counter()
    value = fn()
    return ProcessTime(time.perf_counter() - started, time.process_time() - cpu), value


def run_timed(command: Command, cwd: Path, env: Mapping[str, str], log: Path, check: Check | None = None
              ) -> ProcessTime:
    """Run one whole process (a string goes through /bin/sh -c, as DVC runs a stage's cmd), its output appended
    to `log`, and time it from outside with wait4: wall clock, and the rusage the kernel accounts to it and its
    reaped children. A non-zero exit, or a `check` of its output that names a problem, is ProcessFailed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = log.stat().st_size if log.is_file() else 0
    with log.open("ab") as out:
        out.write(f"$ {command if isinstance(command, str) else ' '.join(map(str, command))}\n".encode())
        out.flush()
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                   shell=isinstance(command, str))
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    with log.open("rb") as read:
        read.seek(start)
        output = read.read().decode(errors="replace")
    problem = f"exit {process.returncode}" if process.returncode else check(output) if check else None
    if problem:
        tail = "".join(output.splitlines(keepends=True)[-15:])
        raise ProcessFailed(f"{problem} from {command!r} (log {log}):\n{tail}")
    return ProcessTime(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def load_average() -> list[float]:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else [0.0, 0.0, 0.0]


def fingerprint(load_before: list[float], load_after: list[float]) -> Environment:
    """The environment, from harness.core.devices (the CPU as records describe it) and harness.runs.environment."""
    from harness.core.devices import cpu_kernel_flags, cpu_model, default_threads
    from harness.runs.environment import code_commit, environment_fingerprint

    torch = sys.modules.get("torch")  # the threads the benchmark's torch runs with, when it imported torch
    record = environment_fingerprint()
    status = _git("status", "--porcelain", "--untracked-files=no", "--", "harness", "benchmarks", "pyproject.toml")
    return Environment(
        cpu_model=cpu_model(), kernel_flags=list(cpu_kernel_flags()),
        nproc=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        cpu_count=os.cpu_count() or 1, threads=torch.get_num_threads() if torch is not None else default_threads(),
        nice=os.nice(0), load_before=load_before, load_after=load_after, python=record.python,
        torch=record.torch, numpy=record.numpy, harness_version=record.harness_version, git_commit=code_commit(),
        git_dirty=None if status is None else bool(status))


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _unit(unit: str | None, work: float | None) -> str:
    return unit or ("s" if work is None else "items/s")


@dataclass
class _Series:
    unit: str
    work: float | None
    details: dict[str, Scalar]
    samples: list[float] = field(default_factory=list)
    cpu: list[float] | None = None
    rss: float = 0.0


class Bench:
    """One run of one benchmark: collects samples, ratios and notes, then writes its results file."""

    def __init__(self, name: str, argv: list[str] | None = None) -> None:
        self.name = name
        argv = list(sys.argv if argv is None else argv)
        if argv and Path(argv[0]).is_absolute() and Path(argv[0]).is_relative_to(REPO):
            argv[0] = Path(argv[0]).relative_to(REPO).as_posix()
        self.command = argv
        self.when = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        self.load_before = load_average()
        self._started = time.perf_counter()
        self._series: dict[str, _Series] = {}
        self._ratios: list[tuple[str, str, str]] = []
        self.notes: list[str] = []
        self._rounds = 0

    # samples

    def _series_for(self, name: str, unit: str, work: float | None, details: Mapping[str, Scalar] | None,
                    timed: bool) -> _Series:
        series = self._series.setdefault(name, _Series(unit, work, dict(details or {}), cpu=[] if timed else None))
        if (series.unit, series.work) != (unit, work):
            raise ValueError(f"{self.name}: measurement {name!r} sampled as {unit}/{work} and {series.unit}/"
                             f"{series.work}")
        return series

    def add_time(self, name: str, timed: ProcessTime, work: float | None = None, unit: str | None = None,
                 details: Mapping[str, Scalar] | None = None) -> ProcessTime:
        """One sample of a timing measured elsewhere (wall, CPU); with `work`, stored as work ÷ wall in `unit`."""
        series = self._series_for(name, _unit(unit, work), work, details, timed=True)
        series.samples.append(timed.wall if work is None else work / timed.wall)
        series.cpu.append(timed.cpu)
        series.rss = max(series.rss, timed.max_rss_mb)
        return timed

    def sample(self, name: str, fn: Callable[[], Any], work: float | None = None, unit: str | None = None,
               details: Mapping[str, Scalar] | None = None) -> Any:
        """Time one call of `fn` as a sample of `name`; returns what `fn` returned."""
        timed, value = time_call(fn)
        self.add_time(name, timed, work, unit, details)
        return value

    def sample_command(self, name: str, command: Command, cwd: Path, env: Mapping[str, str], log: Path,
                       check: Check | None = None, work: float | None = None, unit: str | None = None,
                       details: Mapping[str, Scalar] | None = None) -> ProcessTime:
        """Time one whole process (`run_timed`, its output checked by `check`) as a sample of `name`."""
        return self.add_time(name, run_timed(command, cwd, env, log, check), work, unit, details)

    def interleave(self, candidates: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 0,
                   work: float | None = None, unit: str | None = None,
                   details: Mapping[str, Mapping[str, Scalar]] | None = None) -> dict[str, list[Any]]:
        """`repeats` samples of each candidate, interleaved so a slow minute of the machine hits every one alike:
        forward on one round, backward on the next (a b c, c b a, ...), each call a sample of its name. `warmup`
        untimed calls of each first. Returns each candidate's return values."""
        for _ in range(warmup):
            for fn in candidates.values():
                fn()
        for name in candidates:  # the rows in the candidates' order, whichever way the first round runs
            self._series_for(name, _unit(unit, work), work, (details or {}).get(name), timed=True)
        returned: dict[str, list[Any]] = {name: [] for name in candidates}
        for name in self.rounds(list(candidates), repeats):
            returned[name].append(self.sample(name, candidates[name], work, unit, (details or {}).get(name)))
        return returned

    def rounds(self, names: list[str], repeats: int) -> Iterator[str]:
        """`names` `repeats` times, forward on one round and backward on the next (a b c, c b a, ...): the order
        `interleave` samples in, for a benchmark whose candidates take several steps (cold, then cached)."""
        for _ in range(repeats):
            yield from names if self._rounds % 2 == 0 else reversed(names)
            self._rounds += 1

    def record(self, name: str, unit: str, values: list[float], details: Mapping[str, Scalar] | None = None) -> None:
        """A measurement not timed here: memory, sizes, scores, counts (each value one sample)."""
        self._series_for(name, unit, None, details, timed=False).samples.extend(float(v) for v in values)

    def describe(self, name: str, **details: Scalar) -> None:
        """Add to what a measurement's row says it measured (known only after its samples, e.g. a check)."""
        self._series[name].details.update(details)

    def ratio(self, name: str, numerator: str, denominator: str) -> None:
        self._ratios.append((name, numerator, denominator))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def median(self, name: str) -> float:
        return statistics.median(self._series[name].samples)

    def samples(self, name: str) -> list[float]:
        return list(self._series[name].samples)

    def __contains__(self, name: str) -> bool:
        return name in self._series and bool(self._series[name].samples)

    # the file

    def results(self) -> Results:
        env = fingerprint(self.load_before, load_average())
        measurements = [Measurement(
            name=name, unit=s.unit, samples=s.samples, median=statistics.median(s.samples), min=min(s.samples),
            max=max(s.samples), cpu_samples=s.cpu, cpu_median=statistics.median(s.cpu) if s.cpu else None,
            work=s.work, max_rss_mb=s.rss or None, details=s.details)
            for name, s in self._series.items() if s.samples]
        medians = {m.name: m.median for m in measurements}
        ratios = [Ratio(name=name, numerator=num, denominator=den, value=medians[num] / medians[den])
                  for name, num, den in self._ratios if num in medians and den in medians]
        return Results(bench=self.name, machine=machine_slug(env.cpu_model, env.kernel_flags, env.cpu_count),
                       environment=env, when=self.when, duration_s=time.perf_counter() - self._started,
                       command=self.command, measurements=measurements, ratios=ratios, notes=self.notes)

    def write(self, directory: Path | None = None) -> Path:
        """Validate and write `<directory>/<bench>-<machine>.json` (default benchmarks/results); returns the path."""
        results = self.results()
        path = results_path(results.bench, results.machine, directory or RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(results.model_dump_json(indent=1) + "\n")
        print(f"{self.name}: {len(results.measurements)} measurements, {len(results.ratios)} ratios → {path}")
        return path


def add_results_argument(parser: Any) -> None:
    """`--results DIR` (default benchmarks/results), the folder `Bench.write` writes to."""
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for <bench>-<machine>.json")


def matmul(bench: Bench, dtype_name: str, size: int, repeats: int) -> str:
    """A physical limit: the FLOP rate of one size×size matmul (2·n³ FLOPs) at the current thread count, one
    warm-up then `repeats` samples, recorded as GFLOP/s; returns the measurement's name."""
    import torch

    dtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[dtype_name])
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    name = f"matmul {dtype_name} {size}²"
    bench.interleave({name: lambda: a @ b}, repeats, warmup=1, work=2 * size**3 / 1e9, unit="GFLOP/s",
                     details={name: {"dtype": dtype_name, "size": size}})
    return name
