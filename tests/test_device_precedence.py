"""One device channel, one precedence (harness.core.devices): an explicit argument (the CLI's `device=`/`devices=`,
`harness.run(device=...)`) beats params.yaml's `settings.device`, which beats a `VISBENCH_DEVICE` inherited from a
shell. The CLI's argument reaches the stages DVC starts through the environment, marked as handed on, so a stage
can tell it from an inherited variable. No torch device is asked for here: only which device a stage requests.
"""

from __future__ import annotations

import os

import pytest

from harness.cli.main import _check_devices
from harness.core.devices import (
    DEVICE_ENV,
    EXPLICIT_DEVICE_ENV,
    explicit_device,
    hand_on_device,
    handed_on_device,
    requested_device,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # each test starts as a shell without either variable. Set, then deleted: monkeypatch then restores the
    # variables as they were whatever the code under test writes to os.environ itself (an absent variable that
    # is only deleted would not be recorded, and what the CLI sets would leak into later tests)
    for name in (DEVICE_ENV, EXPLICIT_DEVICE_ENV):
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)


def test_settings_decide_without_an_argument():
    assert requested_device("cpu") == "cpu" and requested_device("auto") == "auto"
    assert handed_on_device() is None


def test_settings_beat_an_inherited_visbench_device(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda:1")  # exported in a shell: not an argument
    assert requested_device("cpu") == "cpu"
    assert handed_on_device() is None


def test_an_explicit_argument_beats_settings_and_an_inherited_visbench_device(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda:1")
    with explicit_device("cpu"):  # harness.run(device="cpu")
        assert requested_device("cuda") == "cpu"
    # afterwards the environment is the shell's again, and settings decide
    assert os.environ[DEVICE_ENV] == "cuda:1" and EXPLICIT_DEVICE_ENV not in os.environ
    assert requested_device("auto") == "auto"


def test_an_explicit_argument_beats_one_handed_on_before_it():
    hand_on_device("cuda:1")  # an outer entry point's device=
    with explicit_device("cpu"):
        assert requested_device("auto") == "cpu"
    assert requested_device("auto") == "cuda:1"  # the outer choice is back, and still beats settings


def test_the_clis_device_argument_reaches_the_stages_it_starts_over_settings(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda:3")  # inherited: overwritten by the argument
    assert _check_devices({"device": "cpu"}, "auto", "local") == ["cpu"]
    # what a stage process DVC starts sees: this environment, and params.yaml's settings
    assert (os.environ[DEVICE_ENV], os.environ[EXPLICIT_DEVICE_ENV]) == ("cpu", "1")
    assert requested_device("cuda") == "cpu"


def test_the_cli_without_an_argument_uses_settings_and_hands_nothing_on(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda:3")  # inherited from the shell: below settings
    assert _check_devices({}, "cpu", "local") == ["cpu"]
    assert EXPLICIT_DEVICE_ENV not in os.environ and requested_device("cpu") == "cpu"


def test_the_parallel_executors_per_process_device_is_explicit():
    """`devices=` marks the environment as handed on; the parallel executor then sets VISBENCH_DEVICE alone in
    each extraction process's environment (harness.executors.parallel), and that device beats settings there."""
    assert _check_devices({"devices": "cpu,cpu"}, "auto", "local") == ["cpu", "cpu"]
    worker = {**os.environ, DEVICE_ENV: "cuda:1"}  # as parallel._run_stages builds it
    assert worker[EXPLICIT_DEVICE_ENV] == "1"
    os.environ.update(worker)  # the worker's view (restored by the fixture's monkeypatch)
    assert requested_device("auto") == "cuda:1"
