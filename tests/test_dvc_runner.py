"""The CLI's `dvc repro`: a workspace another DVC command holds, and an interrupt, against a stand-in for DVC that
behaves as DVC does (it ignores SIGINT while a stage runs and, like --keep-going, starts the next stage when the
running one died of it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness.pipeline import dvc_runner

KEEPS_GOING = """
import signal, subprocess, sys
pids = open(sys.argv[1], "a")
for n in range(3):
    print(f"Running stage 's{n}':", flush=True)
    stage = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pids.write(f"{stage.pid}\\n")
    pids.flush()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what DVC does while a stage command runs
    stage.wait()
    signal.signal(signal.SIGINT, previous)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _all_stale(monkeypatch) -> None:
    """`dvc status` (which the stand-in cannot answer) reports every target out of date."""
    monkeypatch.setattr(dvc_runner, "stale_stages", lambda stages, docs=None, echo=True: set(stages))


def test_an_interrupt_stops_dvc_and_its_stage_not_just_the_stage(tmp_path, monkeypatch):
    script, pids = tmp_path / "dvc.py", tmp_path / "pids"
    script.write_text(KEEPS_GOING)
    _all_stale(monkeypatch)
    monkeypatch.setattr(dvc_runner, "dvc_command", lambda args: [sys.executable, str(script), str(pids)])
    # SIGTERM (a scheduler's or `timeout`'s stop) is handled as Ctrl-C is
    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        dvc_runner.repro_with_progress(["s0", "s1", "s2"])
    assert time.monotonic() - started < 1.5 + dvc_runner.STOP_GRACE_S + 5  # not the three 60 s stages
    stages = [int(line) for line in pids.read_text().split()]
    assert stages  # a stage had started before the interrupt
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in stages) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in stages), "a stage outlived the interrupt"
    assert signal.getsignal(signal.SIGTERM) is not signal.default_int_handler  # the handler is put back


def test_a_lock_held_by_another_dvc_command_is_not_a_failed_run(tmp_path, monkeypatch):
    refusal = ("ERROR: Unable to acquire lock. Most likely another DVC process is running or was terminated "
               "abruptly.")
    script = tmp_path / "dvc.py"
    script.write_text(f"import sys\nprint({refusal!r})\nsys.exit(1)\n")
    monkeypatch.setattr(dvc_runner, "dvc_command", lambda args: [sys.executable, str(script)])
    with pytest.raises(dvc_runner.WorkspaceBusy, match="nothing ran"):
        dvc_runner.repro_with_progress(["s0"])
    Path(script).write_text("import sys\nprint(\"Running stage 's0':\")\nsys.exit(1)\n")  # a stage that failed
    assert dvc_runner.repro_with_progress(["s0"]) == 1


def test_the_corpus_stages_refused_after_the_runs_ran_are_one_line_not_a_failure(tmp_path, monkeypatch):
    """Another CLI held the results folder when this one reached collect and site: DVC 3 reports that inside
    "failed to reproduce 'collect': ..."; the runs before it ran, the corpus stages did not, and the command is
    refused in the one-command-per-workspace line rather than failing its runs (tests/test_faults.py does it with
    two real CLIs)."""
    script = tmp_path / "dvc.py"
    script.write_text(
        "import sys\n"
        "if sys.argv[1] == 'status':\n    sys.exit(1)\n"
        "if any('collect' in a for a in sys.argv):\n"
        "    print(\"ERROR: failed to reproduce 'collect': '/p/results' is busy, it is being blocked by:\")\n"
        "    sys.exit(1)\n"
        "print(\"Running stage 's0':\")\n")
    monkeypatch.setattr(dvc_runner, "dvc_command", lambda args: [sys.executable, str(script), *args])
    with pytest.raises(dvc_runner.WorkspaceBusy, match="the stages after the 1 checked did not run: run the same"):
        dvc_runner.repro_with_progress(["s0", "collect"])


def _dvc_project(folder: Path) -> None:
    """A git + DVC project of one stage whose command keeps a copy of DVC's rwlock as it stands while the stage
    runs (DVC holds the stage's paths locked then)."""
    folder.mkdir()
    (folder / "dvc.yaml").write_text("stages:\n  peek:\n    cmd: cp .dvc/tmp/rwlock seen.json\n"
                                     "    outs:\n    - seen.json:\n        cache: false\n")
    for command in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(command, cwd=folder, check=True, capture_output=True)


def test_many_stages_reach_dvc_through_a_file_not_its_argv(tmp_path, monkeypatch):
    """A command naming many stages runs as DVC would run it on the command line, but DVC's argv, which it writes
    into its rwlock for every path of every stage it checks, stays short; the file is removed once read."""
    project = tmp_path / "project"
    _dvc_project(project)
    monkeypatch.chdir(project)
    targets = ["dvc.yaml:peek"] * (dvc_runner.ARGV_LIMIT // 10)  # DVC takes a stage named twice once
    args = ["repro", "--single-item", *targets]
    assert len(" ".join(args)) > dvc_runner.ARGV_LIMIT
    command = dvc_runner.dvc_command(args)
    args_file = Path(command[-1])
    assert command[:-1] == [sys.executable, "-m", "harness.pipeline.dvc_args"] and args_file.is_file()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=dvc_runner.dvc_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Running stage 'peek'" in done.stdout
    assert not args_file.exists()
    held = json.loads((project / "seen.json").read_text())
    recorded = {info["cmd"] for info in held.get("write", {}).values()}
    recorded |= {info["cmd"] for infos in held.get("read", {}).values() for info in infos}
    assert recorded and all(cmd.endswith(f" {args_file}") and "dvc.yaml:peek" not in cmd for cmd in recorded)
    status = subprocess.run(dvc_runner.dvc_command(["status", "--json", *targets]), capture_output=True, text=True,
                            check=True, env=dvc_runner.dvc_env())
    assert json.loads(status.stdout) == {}  # the same stage, up to date: what `dvc status` alone prints


def test_a_short_command_is_dvc_itself():
    assert dvc_runner.dvc_command(["status", "--json"]) == [sys.executable, "-m", "dvc", "status", "--json"]


CHAIN = """stages:
  first:
    cmd: cp in.txt a.txt && echo first >> ran.log
    deps: [in.txt]
    outs: [a.txt]
  second:
    cmd: cp a.txt b.txt && echo second >> ran.log
    deps: [a.txt]
    outs: [b.txt]
  other:
    cmd: cp other.txt c.txt && echo other >> ran.log
    deps: [other.txt]
    outs: [c.txt]
"""


def _chain_project(tmp_path: Path, monkeypatch) -> Path:
    """A real DVC project of CHAIN's three stages, none run yet, as the working directory."""
    project = tmp_path / "project"
    project.mkdir()
    for command in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(command, cwd=project, check=True, capture_output=True)
    (project / "dvc.yaml").write_text(CHAIN)
    (project / "in.txt").write_text("1\n")
    (project / "other.txt").write_text("x\n")
    monkeypatch.chdir(project)
    return project


def test_the_cli_reproduces_what_dvc_status_finds_stale_and_its_readers_only(tmp_path, monkeypatch, caplog, capsys):
    """A real DVC project: the first run runs all three stages; with nothing changed, `dvc repro` is not even
    started; after an edit of `first`'s input, `first` and `second` (which reads `first`'s output) run, `other`
    does not."""
    project = _chain_project(tmp_path, monkeypatch)
    ran = project / "ran.log"
    caplog.set_level("INFO", logger="visbench")
    assert dvc_runner.repro_with_progress(["first", "second", "other"]) == 0
    assert ran.read_text().split() == ["first", "second", "other"]
    assert dvc_runner.stale_stages(["first", "second", "other"]) == set()
    caplog.clear()
    capsys.readouterr()
    assert dvc_runner.repro_with_progress(["first", "second", "other"]) == 0
    assert "dvc status: all 3 stages up to date; nothing to reproduce" in caplog.text
    assert "$ dvc repro" not in caplog.text and capsys.readouterr().out == ""  # DVC's repro never started
    (project / "in.txt").write_text("2\n")
    ran.write_text("")
    assert dvc_runner.stale_stages(["first", "second", "other"]) == {"first"}  # second's input has not changed yet
    caplog.clear()
    assert dvc_runner.repro_with_progress(["first", "second", "other"]) == 0
    assert ran.read_text().split() == ["first", "second"]
    assert "1 of 3 stages out of date; dvc repro of those and the 1 reading their outputs" in caplog.text
    assert (project / "b.txt").read_text() == "2\n"


def test_a_dry_run_prints_dvcs_report_of_the_stale_stages_only(tmp_path, monkeypatch, capfd):
    """`dry_run=true`'s report (show_status): DVC's printed `dvc status` of what is stale; with nothing stale,
    one line of ours, and DVC is asked only for JSON (its printed form would load every stage of the project
    to say so)."""
    project = _chain_project(tmp_path, monkeypatch)
    names = ["first", "second", "other"]
    assert dvc_runner.show_status(names) == 0
    report = capfd.readouterr().out
    assert all(f"{name}:" in report for name in names)  # nothing has run: DVC reports each
    assert dvc_runner.repro_with_progress(names) == 0
    capfd.readouterr()
    asked: list[list[str]] = []
    real_run_dvc = dvc_runner.run_dvc
    monkeypatch.setattr(dvc_runner, "run_dvc", lambda args: asked.append(args) or real_run_dvc(args))
    assert dvc_runner.show_status(names) == 0
    assert capfd.readouterr().out == "dvc status: all 3 stages up to date\n" and asked == []
    (project / "in.txt").write_text("2\n")
    assert dvc_runner.show_status(names) == 0
    report = capfd.readouterr().out
    assert asked == [["status", "first"]]  # the stale stage alone reaches DVC's printed form
    assert "first:" in report and "changed deps" in report and "other" not in report


def test_stages_reading_a_stale_stages_outputs_are_reproduced_with_it(repo_root):
    """On the committed pipeline: a dataset's prepare stage out of date brings in the extract stages reading its
    data, the probes reading their features, and collect and site; nothing reading another dataset."""
    from harness.pipeline.stage_model import load_stages, with_downstream

    stages = load_stages()
    names = [*(n for n in stages if n not in ("collect", "site")), "collect", "site"]  # an order DVC can run
    kept = with_downstream(names, {"prepare-fashion_mnist"}, stages)
    extracts = [n for n in names if n.startswith("extract-") and "-fashion_mnist@" in n]
    assert extracts and set(extracts) <= set(kept)
    probe = "default-classification@efficientnet_lite0"
    assert probe in kept and "collect" in kept and "site" in kept
    assert [n for n in names if n in kept] == kept  # the given order
    reads = {n for n in kept if n.startswith("extract-")}
    assert reads == set(extracts)  # no other dataset's extraction
    assert not any(n.startswith("prepare-") and n != "prepare-fashion_mnist" for n in kept)
    assert "default-correspondence@efficientnet_lite0" not in kept  # reads the homography pairs' features
    # the code fingerprints are read by every stage: all of them may change
    assert with_downstream(names, {"codedeps"}, stages) == names
    assert with_downstream(names, set(), stages) == []


def test_a_stage_reads_a_folder_around_or_inside_what_another_writes():
    from harness.pipeline.stage_model import Out, StageSpec, with_downstream

    def stage(name: str, deps: tuple[str, ...], out: str, params_file: str | None = None) -> StageSpec:
        return StageSpec(name, Path("dvc.yaml"), "", deps, params_file=params_file, outs=(Out(out),))

    stages = {
        "make": stage("make", ("src",), "features/a/b"),
        "inside": stage("inside", ("features/a/b/x.npy",), "r1"),
        "around": stage("around", ("features",), "r2"),
        "beside": stage("beside", ("features/a/c",), "r3"),
        "params": stage("params", (), "r4", params_file="r2"),
    }
    names = list(stages)
    assert with_downstream(names, {"make"}, stages) == ["make", "inside", "around", "params"]
    assert with_downstream([*names, "unknown"], {"beside"}, stages) == ["beside", "unknown"]  # DVC decides


def test_force_runs_the_chosen_stages_and_only_the_stale_ones_around_them(tmp_path, monkeypatch, caplog):
    """`force=true`: a stage DVC finds up to date runs again (a file to re-derive), in a `dvc repro --force` of its
    own; a stale stage upstream of it still runs first, and an up-to-date one nobody forced does not."""
    project = _chain_project(tmp_path, monkeypatch)
    ran = project / "ran.log"
    assert dvc_runner.repro_with_progress(["first", "second", "other"]) == 0
    ran.write_text("")
    caplog.set_level("INFO", logger="visbench")
    assert dvc_runner.repro_with_progress(["first", "second", "other"], force=["second"]) == 0
    assert ran.read_text().split() == ["second"]
    assert "0 of 3 stages out of date, 1 forced" in caplog.text
    (project / "in.txt").write_text("3\n")
    ran.write_text("")
    assert dvc_runner.repro_with_progress(["first", "second", "other"], force=["other"]) == 0
    assert ran.read_text().split() == ["first", "second", "other"]
    assert dvc_runner.stale_stages(["first", "second", "other"]) == set()


SLEEPY = """stages:
  sleepy:
    cmd: python stage.py
    deps: [stage.py]
    outs: [out.txt]
"""
# the stage: its pid and its parent's (DVC) in pids.txt, then it waits while `hold` exists
SLEEPY_STAGE = """import os, pathlib, time
pathlib.Path("pids.txt").write_text(f"{os.getpid()} {os.getppid()}")
while pathlib.Path("hold").exists():
    time.sleep(0.05)
pathlib.Path("out.txt").write_text("done")
"""
RUNNER = """import sys
from harness.pipeline import dvc_runner
sys.exit(dvc_runner.repro_with_progress(["sleepy"]))
"""


def _wait_for(predicate, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_killing_the_cli_group_takes_dvc_and_its_stage_with_it_and_a_re_run_succeeds(tmp_path, monkeypatch):
    """`kill -9` of the CLI's process group (a CI timeout, a closed terminal) while DVC runs a stage: neither DVC
    nor the stage survives it (they run in a group of their own, led by dvc_guard, which dies with the CLI), and
    the immediate re-run is not refused as busy: DVC drops the dead process's rwlock entries itself."""
    project = tmp_path / "project"
    project.mkdir()
    for command in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(command, cwd=project, check=True, capture_output=True)
    (project / "dvc.yaml").write_text(SLEEPY)
    (project / "stage.py").write_text(SLEEPY_STAGE)
    (project / "hold").write_text("")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cli = subprocess.Popen([sys.executable, "-c", RUNNER], cwd=project, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = project / "pids.txt"
    assert _wait_for(pids.is_file), "the stage never started"
    stage, dvc = (int(pid) for pid in pids.read_text().split())
    assert _alive(stage) and _alive(dvc)
    os.killpg(cli.pid, signal.SIGKILL)
    cli.wait()
    assert _wait_for(lambda: not _alive(stage) and not _alive(dvc), timeout=10), "DVC or its stage outlived the CLI"
    # killed without its cleanup, DVC left its rwlock naming its dead pid: the re-run must not take that for busy
    held = json.loads((project / ".dvc" / "tmp" / "rwlock").read_text())
    owners = {info["pid"] for info in held.get("write", {}).values()}
    owners |= {info["pid"] for infos in held.get("read", {}).values() for info in infos}
    assert owners and not any(_alive(pid) for pid in owners)
    (project / "hold").unlink()
    again = subprocess.run([sys.executable, "-c", RUNNER], cwd=project, env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (project / "out.txt").read_text() == "done"


def test_a_lock_entry_whose_pid_was_reused_is_cleared_with_one_line(tmp_path, monkeypatch):
    """DVC's rwlock naming a pid that is now another process, started after the lock was written (its DVC died
    and the pid came back, as a container's pids do): DVC takes it for a live holder and refuses as busy; the CLI
    says so in one line, clears those entries, and the same command then runs."""
    project = _chain_project(tmp_path, monkeypatch)
    rwlock = project / ".dvc" / "tmp" / "rwlock"
    rwlock.parent.mkdir(parents=True, exist_ok=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        # the entry a dead `dvc repro` left, a minute before `other` started under the same pid
        rwlock.write_text(json.dumps({"write": {str(project / "a.txt"): {"pid": other.pid, "cmd": "dvc repro"}},
                                      "read": {}}))
        written = time.time() - 60
        os.utime(rwlock, (written, written))
        with pytest.raises(dvc_runner.WorkspaceBusy, match=rf"named pid {other.pid}, which is now another process"):
            dvc_runner.repro_with_progress(["first", "second"])  # both blocked: nothing ran
        assert str(other.pid) not in rwlock.read_text()
        assert dvc_runner.repro_with_progress(["first", "second", "other"]) == 0
        assert (project / "b.txt").read_text() == "1\n"
    finally:
        other.kill()
        other.wait()


def test_a_live_holder_of_the_lock_is_left_alone(tmp_path, monkeypatch):
    """A live process whose command line is the one the entry records, started before the lock was written, may
    hold it: nothing is cleared, and the message is the one-command-per-workspace line."""
    project = _chain_project(tmp_path, monkeypatch)
    rwlock = project / ".dvc" / "tmp" / "rwlock"
    rwlock.parent.mkdir(parents=True, exist_ok=True)
    # a stand-in for a running `dvc repro`: its command line ends as the command the entry records
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "repro"])
    try:
        holder = {"write": {str(project / "a.txt"): {"pid": live.pid, "cmd": "/venv/bin/dvc repro"}}, "read": {}}
        rwlock.write_text(json.dumps(holder))
        with pytest.raises(dvc_runner.WorkspaceBusy, match="another DVC command holds this workspace's lock"):
            dvc_runner.repro_with_progress(["first", "second"])
        assert json.loads(rwlock.read_text()) == holder
    finally:
        live.kill()
        live.wait()
