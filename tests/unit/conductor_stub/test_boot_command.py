"""``conductor-stub boot``: extra specs, image properties, project and user,
an existing server group, scheduler hints; what it refuses (in one line,
before anything is recorded) and what it prints (the instances and the
group). In process on the in-memory store with recorded RPC clients, and
as the console script for the exit status and the one-line error."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid as uuidlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conductor_stub import cmd, commands
from conductor_stub.reconcile import ReconcileSettings
from conductor_stub.records import ConductorSettings, server_group
from scheduler import rpc
from scheduler.cmd import _commands
from scheduler.engine.settings import DEFAULT_FILTERS
from scheduler.exceptions import InvalidRequest
from scheduler.objects import InstanceRecord, RequestSpec, ServerGroup
from scheduler.store import MemoryStore
from tests.unit.conductor_stub.helpers import SPEC
from tests.unit.factories import Recorded

GROUP = ServerGroup(uuid=str(uuidlib.UUID(int=7)), policy="anti-affinity", max_server_per_host=2)
OTHER = str(uuidlib.UUID(int=9))


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    made = MemoryStore()
    monkeypatch.setattr(commands, "make_store", lambda conf: made)
    monkeypatch.setattr(commands, "conductor_settings", lambda conf: ConductorSettings())
    monkeypatch.setattr(commands, "reconcile_settings", lambda conf: ReconcileSettings())
    monkeypatch.setattr(rpc, "get_transport", lambda conf: Recorded())
    # No broker: nothing to ask whether a worker and a conductor consume.
    monkeypatch.setattr(commands.broker, "reach", lambda *args, **kwargs: None)
    return made


@pytest.fixture
def scheduler(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    recorded = Recorded()
    # (the command's clients give up after a few reconnections: ``retry``)
    monkeypatch.setattr(rpc, "SchedulerClient", lambda transport, topic, retry=None: recorded)
    monkeypatch.setattr(
        rpc,
        "ComputeClient",
        lambda transport, resolve, topic, retry=None, version_cap=None: Recorded(),
    )
    return recorded


def run(*args: str, filters: tuple[str, ...] = DEFAULT_FILTERS, max_wait: float = 600.0) -> int:
    """``conductor-stub boot ARGS``, parsed by the command's own parser."""
    parser = argparse.ArgumentParser()
    cmd._add_commands(parser.add_subparsers(dest="name"))
    command: Any = parser.parse_args(["boot", *args])
    conf = SimpleNamespace(
        command=command,
        conductor=SimpleNamespace(flavors_file="", topic=rpc.CONDUCTOR_TOPIC),
        filter_scheduler=SimpleNamespace(enabled_filters=list(filters)),
        scheduler=SimpleNamespace(topic=rpc.SCHEDULER_TOPIC),
        compute=SimpleNamespace(topic=rpc.COMPUTE_TOPIC),
        upgrade_levels=SimpleNamespace(compute=None),
        priority=SimpleNamespace(classes=CLASSES, default_class="standard", max_wait=max_wait),
    )
    return _commands.emit(commands.boot(conf), _commands.fmt_of(command))  # type: ignore[arg-type]


#: The ``[priority] classes`` of these boots (``standard`` the default class).
CLASSES = ["standard:100", "spot:10:preemptible", "batch:50:wait"]


def member(store: MemoryStore, group: ServerGroup | None) -> str:
    """An instance record in ``group``, as an earlier boot wrote it."""
    uuid = str(uuidlib.uuid4())
    spec = SPEC.replace(group=group).to_primitive()
    store.create_instances([InstanceRecord(uuid=uuid, request_spec=spec)])
    return uuid


def sent(scheduler: Recorded) -> RequestSpec:
    (_, spec, _), _ = scheduler.last("run_instance")
    assert isinstance(spec, RequestSpec)
    return spec


def test_boot_sends_extra_specs_image_project_user_and_hints(
    store: MemoryStore, scheduler: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    near = member(store, None)
    code = run(
        "--flavor",
        "m1.tiny",
        "--extra-spec",
        "trait:CUSTOM_SSD=required",
        "aggregate_instance_extra_specs:ssd=true",
        "--image-property",
        "hw_architecture=x86_64",
        "--image-id",
        "img-1",
        "--project",
        "p1",
        "--user",
        "u1",
        "--hint",
        f"same_host={near}",
        "--hint",
        f"different_host={OTHER}",
        filters=(*DEFAULT_FILTERS, "SameHostFilter", "DifferentHostFilter"),
    )
    assert code == 0
    spec = sent(scheduler)
    assert dict(spec.flavor.extra_specs) == {
        "trait:CUSTOM_SSD": "required",
        "aggregate_instance_extra_specs:ssd": "true",
    }
    assert spec.image is not None and dict(spec.image.properties) == {"hw_architecture": "x86_64"}
    assert (spec.image.id, spec.project_id, spec.user_id) == ("img-1", "p1", "u1")
    assert dict(spec.scheduler_hints) == {"same_host": (near,), "different_host": (OTHER,)}
    out, err = capsys.readouterr()
    (uuid,) = out.split()
    assert store.get_instance(uuid).request_spec["project_id"] == "p1"  # type: ignore[index]
    assert err == ""  # both filters enabled: no warning


def test_boot_into_an_existing_group_takes_its_policy_from_its_members(
    store: MemoryStore, scheduler: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    member(store, None)
    member(store, GROUP)
    assert run("--count", "2", "--group", GROUP.uuid, "--json") == 0
    assert sent(scheduler).group == GROUP
    printed = json.loads(capsys.readouterr().out)
    assert printed["group_uuid"] == GROUP.uuid and len(printed["instances"]) == 2


def test_a_new_group_s_uuid_is_printed(
    store: MemoryStore, scheduler: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--count", "2", "--group-policy", "affinity") == 0
    group = sent(scheduler).group
    assert group is not None and group.policy == "affinity"
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"server group: {group.uuid} (affinity)"
    assert {store.get_instance(u).uuid for u in lines[:2]} == set(lines[:2])
    assert server_group(store, group.uuid) == group  # what a later --group finds


def test_a_hint_whose_filter_is_not_enabled_is_sent_with_a_warning(
    store: MemoryStore, scheduler: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--hint", f"different_host={OTHER}") == 0
    assert dict(sent(scheduler).scheduler_hints) == {"different_host": (OTHER,)}
    assert "DifferentHostFilter" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            ["--extra-spec", "capabilities:cpu_info:vendor=>= many"],
            "'>=' compares numbers and 'many' is not one",
            id="operator-spec-a-worker-refuses",
        ),
        pytest.param(
            ["--extra-spec", "trait:CUSTOM_X=maybe"],
            "must be 'required' or 'forbidden'",
            id="trait-spec",
        ),
        pytest.param(
            ["--extra-spec", "resources:VCPU=lots"], "resources:VCPU", id="resource-spec"
        ),
        pytest.param(
            ["--image-property", "hw_architecture=z80"], "hw_architecture", id="image-property"
        ),
        pytest.param(["--hint", "near=x"], "unknown hint 'near'", id="unknown-hint"),
        pytest.param(["--hint", "same_host=x"], "not a valid UUID", id="hint-not-a-uuid"),
        pytest.param(["--group", "x"], "--group is not a valid UUID", id="group-not-a-uuid"),
        pytest.param(
            ["--group", str(uuidlib.UUID(int=5))],
            "no instance is in server group",
            id="unknown-group",
        ),
        pytest.param(["--flavor", "m9.huge"], "unknown flavor 'm9.huge'", id="unknown-flavor"),
        pytest.param(
            ["--extra-spec", "sched:priority_class=gold"],
            "'sched:priority_class' = 'gold': no such priority class is defined",
            id="unknown-priority-class",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_is_recorded(
    store: MemoryStore, scheduler: Recorded, args: list[str], message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        run(*args)
    assert message in caught.value.message and "\n" not in caught.value.message
    assert scheduler.calls == [] and store.list_instances() == []


@pytest.mark.parametrize(
    "args, recorded",
    [
        pytest.param(
            ["--extra-spec", "sched:priority_class=spot"],
            ("spot", 10, True),
            id="the-flavor-s-class",
        ),
        pytest.param([], ("standard", 100, False), id="the-default-class"),
    ],
)
def test_each_record_keeps_the_class_its_flavor_chooses(
    store: MemoryStore,
    scheduler: Recorded,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    recorded: tuple[str, int, bool],
) -> None:
    assert run("--count", "2", *args) == 0
    uuids = capsys.readouterr().out.split()
    assert len(uuids) == 2
    for r in store.list_instances(uuids):
        assert (r.priority_class, r.priority, r.preemptible) == recorded


def test_the_console_script_says_a_mistake_in_one_line(tmp_path: Path) -> None:
    """The command as installed: exit status 2, one line on stderr, nothing on
    stdout (a fake transport and the in-process store: nothing is reached)."""
    conf = tmp_path / "fake.conf"
    conf.write_text("[DEFAULT]\ntransport_url = fake://\n[redis]\nurl = memory://\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conductor_stub.cmd",
            "--config-file",
            str(conf),
            "boot",
            "--extra-spec",
            "trait:CUSTOM_X=maybe",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("conductor-stub: ")


@pytest.mark.parametrize(
    ("args", "max_wait"),
    [
        pytest.param((), None, id="class-does-not-wait"),
        pytest.param(("--wait-for-capacity",), 600.0, id="asked-to-wait"),
        pytest.param(("--extra-spec", "sched:priority_class=batch"), 600.0, id="class-waits"),
        pytest.param(
            ("--extra-spec", "sched:priority_class=batch", "--no-wait-for-capacity"),
            None,
            id="asked-not-to-wait",
        ),
    ],
)
def test_boot_records_how_long_the_request_may_wait(
    store: MemoryStore, scheduler: Recorded, args: tuple[str, ...], max_wait: float | None
) -> None:
    assert run("--flavor", "m1.tiny", *args) == 0
    (record,) = store.list_instances()
    assert record.max_wait == max_wait
    assert record.waiting_since is None


def test_boot_refuses_both_wait_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run("--wait-for-capacity", "--no-wait-for-capacity")
    assert "not allowed with argument" in capsys.readouterr().err


def test_boot_refuses_to_wait_when_waiting_is_off(
    store: MemoryStore, scheduler: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--wait-for-capacity", max_wait=0.0) == 2
    assert capsys.readouterr().err.strip() == (
        "conductor-stub boot: --wait-for-capacity: waiting is turned off ([priority] max_wait = 0)"
    )
    assert store.list_instances() == [] and scheduler.calls == []
