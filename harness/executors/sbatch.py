"""The SLURM commands the coordinator runs: `sinfo` (what a partition offers), `sbatch` (submit), `squeue -t all`
(the state and times of its jobs, running or finished) and `scancel`.

Not `sacct`: it needs the accounting daemon (slurmdbd and a MySQL database), which small clusters and the
one-node CI cluster do not run. `squeue -t all` reports a finished job, with its state, start, end and
elapsed time, for `MinJobAge` seconds (300 by default) after it ends; the coordinator polls far more often
and keeps what it saw, and a job it never saw finish is judged by the result it left (or did not).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from harness.core.config import ConfigError
from harness.executors.jobs import Partition

COMMANDS = ("sbatch", "squeue", "sinfo", "scancel")
# What a finished job's state means for its runs (squeue's long state names, as sacct prints them).
DONE = "COMPLETED"
INTERRUPTED = frozenset({"CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"})  # missing
FAILED = frozenset({"FAILED", "TIMEOUT", "OUT_OF_MEMORY"})  # the job's own fault: failed records
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT",
                    "RESV_DEL_HOLD"})
# Pending reasons that mean no node can run the job now (drained or down nodes, a partition that is down).
UNAVAILABLE = ("ReqNodeNotAvail", "Nodes required for job are DOWN", "PartitionDown", "PartitionInactive")
_FIELDS = "%i|%T|%r|%M|%S|%e|%N"  # id, state, reason, elapsed, start, end, nodes


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str
    reason: str = ""
    elapsed: str = ""
    start: str = ""
    end: str = ""
    nodes: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=False)


def _last_line(out: subprocess.CompletedProcess) -> str:
    """What a SLURM command said last (its fatal error comes after the lines that led to it), for a one-line
    message."""
    lines = [line.strip() for line in (out.stderr or out.stdout or "").splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {out.returncode}, no output"


def require_slurm() -> None:
    missing = [name for name in COMMANDS if shutil.which(name) is None]
    if missing:
        raise ConfigError(f"executor=slurm needs the SLURM client commands on PATH ({', '.join(missing)} not "
                          "found); run on a login node of the cluster, see docs/cluster.md")


def partition(name: str | None) -> Partition:
    """The named partition, else the default one (sinfo marks it with *): its largest node."""
    out = _run(["sinfo", "-h", "-o", "%P|%c|%m|%G"])
    if out.returncode != 0:
        raise ConfigError(f"executor=slurm: sinfo failed ({_last_line(out)}): this machine reaches no SLURM "
                          "controller; run on a login node of the cluster, or fix its slurm.conf (docs/cluster.md)")
    rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 3]
    chosen = [r for r in rows if r[0].rstrip("*") == name] if name else [r for r in rows if r[0].endswith("*")]
    if not chosen:
        valid = sorted({r[0].rstrip("*") for r in rows})
        raise ConfigError(f"SLURM partition {name or '(default)'} not found; partitions: {', '.join(valid) or 'none'}")
    cpus = max(int(r[1].rstrip("+")) for r in chosen)
    mem_mb = max(int(r[2].rstrip("+")) for r in chosen)
    return Partition(name, cpus, mem_mb, any("gpu" in r[3] for r in chosen))


def submit(script: str, after: list[str]) -> str:
    """sbatch the script text (on stdin); the new job's id. `after`: job ids it may start only once they all
    succeeded; if one fails, SLURM cancels this job rather than leaving it pending forever."""
    args = ["sbatch", "--parsable"]
    if after:
        args += [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"]
    out = subprocess.run(args, input=script, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"sbatch failed: {_last_line(out)}")
    return out.stdout.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"


def job_states(ids: list[str]) -> dict[str, JobState] | None:
    """State and times of the jobs SLURM still knows (all of them while they run, finished ones for MinJobAge);
    None when squeue could not answer (the controller is busy or restarting: ask again later)."""
    if not ids:
        return {}
    out = _run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", _FIELDS])
    if out.returncode != 0:
        # squeue refuses a list in which it knows no id at all: every one of them is finished and forgotten
        return {} if "Invalid job id" in out.stderr else None
    states = {}
    for line in out.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 7 and parts[0] in ids:
            states[parts[0]] = JobState(*parts)
    return states


def cancel(ids: list[str]) -> None:
    if ids:
        _run(["scancel", *ids])


def job_table(rows: list[tuple[str, str, JobState | None, str]]) -> str:
    """sacct-style lines: JobID, JobName, State, Elapsed, Start, End, NodeList, and what came back."""
    header = ("JobID", "JobName", "State", "Elapsed", "Start", "End", "NodeList", "Result")
    lines = [header]
    for job_id, name, state, result in rows:
        s = state or JobState(job_id, "UNKNOWN")
        lines.append((job_id, name, s.state, s.elapsed, s.start, s.end, s.nodes, result))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines)
