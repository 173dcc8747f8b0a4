"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd started in the foreground as this
process's children, with a fresh munge key and a minimal slurm.conf in a private folder, on free ports, so
it never meets a cluster the machine may already run. `stop` ends exactly the daemons `start` started.

The packages (Debian's slurmctld, slurmd, slurm-client, munge) are installed by scripts/install-slurm, which
scripts/test runs. slurmd must run as root (it starts each job as the user who submitted it).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel")


def unavailable_reason() -> str | None:
    """Why a cluster cannot be started here, or None."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing; scripts/install-slurm needs root or sudo)"
    if os.geteuid() != 0:
        return "slurmd needs root to start jobs as their submitter"
    return None


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]  # os.environ plus SLURM_CONF: what every SLURM client call needs
    processes: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, check=False)

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in sorted(self.root.glob("log/*.log")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 3 // 4  # leave a quarter to the system
    return 4096


def _slurm_conf(root: Path, node: str) -> str:
    return "\n".join([
        "ClusterName=visbench-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge/run/munge.socket",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups needed, works in containers and VMs
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",  # CPUs are the consumable resource; --mem is checked, not reserved
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none",  # no slurmdbd: the executor does not need sacct
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=5",
        "MinJobAge=600",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory={_memory_mb()} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def start(timeout_s: float = 60.0) -> Cluster:
    """Write the key and config, start the three daemons, wait until the node is idle."""
    # munged insists that every folder above its socket is traversable by everyone: pytest's tmp folders are
    # not (0700), so the cluster lives in a folder of its own under the system's temporary directory
    root = Path(tempfile.mkdtemp(prefix="visbench-slurm-"))
    root.chmod(0o755)
    for sub in ("munge/run", "state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    (root / "munge/run").chmod(0o755)
    (root / "munge/etc").mkdir(mode=0o700)
    key = root / "munge/etc/munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    node = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, node))
    cluster = Cluster(root, {**os.environ, "SLURM_CONF": str(conf)})
    commands = [
        ["munged", "--foreground", f"--socket={root}/munge/run/munge.socket", f"--key-file={key}",
         f"--pid-file={root}/munge/run/munged.pid", f"--log-file={root}/log/munged.log",
         f"--seed-file={root}/munge/run/munged.seed"],
        ["slurmctld", "-D", "-i"],
        ["slurmd", "-D", "-N", node],
    ]
    try:
        for command in commands:
            cluster.processes.append(subprocess.Popen(command, env=cluster.env, stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL, start_new_session=True))
            time.sleep(0.5)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = cluster.run("sinfo", "-h", "-o", "%T").stdout.strip()
            if state == "idle":
                return cluster
            if any(p.poll() is not None for p in cluster.processes):
                break
            time.sleep(0.5)
        raise RuntimeError(f"the one-node cluster did not come up (node state {state!r})\n{cluster.log_tail()}")
    except BaseException:
        stop(cluster)
        raise


def stop(cluster: Cluster) -> None:
    """Cancel what is left of the jobs, then end the daemons this module started, by PID, newest first."""
    if any(p.poll() is None for p in cluster.processes):
        cluster.run("scancel", "--full", "--user=root")
        time.sleep(1)
    for process in reversed(cluster.processes):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    shutil.rmtree(cluster.root, ignore_errors=True)
