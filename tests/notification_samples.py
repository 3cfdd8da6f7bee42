"""The samples in ``doc/notification_samples/``: one versioned notification per event.

Made from the payload objects themselves, with every field a consumer can
meet given a value (a field is null in a sample only where its event never
carries one), so a sample shows each field's type. ``tests/unit/
test_notifications.py`` keeps the files equal to what this module makes;
after changing a payload object (and bumping its version), write them again::

    tox -e samples
"""

from __future__ import annotations

import json
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler.exceptions import NoValidHost
from scheduler.notifications import (
    EVENTS,
    DestinationPayload,
    EventPayload,
    InstanceScheduledPayload,
    PreemptionPayload,
    PriorityClassPayload,
    ReconcileActionPayload,
    ResizePayload,
    SchedulingErrorPayload,
    SchedulingPayload,
    SelectionPayload,
    VictimPayload,
    check_value,
    field_types,
    registry,
)
from scheduler.objects import Destination, Flavor, Image, RequestSpec, ServerGroup
from scheduler.priority import NEVER, PriorityClass

DIRECTORY = Path(__file__).resolve().parents[1] / "doc" / "notification_samples"
PUBLISHER = "scheduler-worker:scheduler-host-1"

INSTANCE = "8f0e9c86-3d5c-4f4b-9b0e-6a3c1e2d4f51"
MIGRATION = "5b7d3f0a-1e2c-5d4b-8a6f-0c9e8d7b6a52"
GROUP = "e5d0c2b1-7a3f-4c6e-9d8b-1f2a3b4c5d63"

FLAVOR = Flavor(
    name="m1.numa",
    vcpus=4,
    memory_mb=4096,
    root_gb=40,
    ephemeral_gb=10,
    swap_mb=512,
    extra_specs={
        "hw:numa_nodes": "2",
        "pci_passthrough:alias": "a1:2",
        "sched:priority_class": "batch",
        "trait:HW_CPU_X86_AVX2": "required",
    },
)
#: The class the flavor chooses, as ``[priority] classes = batch:500:preemptible:never``.
PRIORITY_CLASS = PriorityClass("batch", 500, preemptible=True, preemption_policy=NEVER)
SPEC = RequestSpec(
    flavor=FLAVOR,
    project_id="6f70656e737461636b20342065766572",
    user_id="fake-user",
    num_instances=1,
    image=Image(
        id="155d900f-4e14-4e4c-a73d-069cbf4541e6",
        properties={"hw_disk_bus": "virtio"},
        disk_format="qcow2",
    ),
    availability_zone="az1",
    group=ServerGroup(uuid=GROUP, policy="anti-affinity", max_server_per_host=1),
    ignore_hosts=("compute-0007",),
    scheduler_hints={"different_host": ("0f1e2d3c-4b5a-4697-8877-665544332211",)},
    force_hosts=("compute-0001",),
    force_nodes=("compute-0001",),
    requested_destination=Destination(host="compute-0001", node="compute-0001"),
)
SELECTION = SelectionPayload(
    instance_uuid=INSTANCE,
    host="compute-0001",
    node="compute-0001",
    weight=0.8125,
    alternates=(
        DestinationPayload(host="compute-0002", node="compute-0002"),
        DestinationPayload(host="compute-0003", node="compute-0003"),
    ),
)


def _resize_start() -> ResizePayload:
    asked = {"instance_uuid": INSTANCE, "source_host": "compute-0004", "new_flavor": FLAVOR.name}
    return ResizePayload.starting(
        asked, INSTANCE, ("compute-0004", FLAVOR, SPEC), priority_class=PRIORITY_CLASS
    )


def payloads() -> dict[str, EventPayload]:
    """An example payload per versioned event type."""
    run = SchedulingPayload.starting(SPEC, [INSTANCE], priority_class=PRIORITY_CLASS)
    select = SchedulingPayload.starting(
        SPEC, [INSTANCE], MIGRATION, summary=True, priority_class=PRIORITY_CLASS
    )
    resize = _resize_start()
    error = SchedulingErrorPayload.of(
        [INSTANCE],
        NoValidHost(
            details="0/3 hosts available: 2 insufficient MEMORY_MB, 1 disabled",
            reasons={"insufficient MEMORY_MB": 2, "disabled": 1},
        ),
    )
    ends: dict[str, Any] = {"state": "scheduled", "selections": (SELECTION,)}
    return {
        "scheduler.run_instance.start": run,
        "scheduler.run_instance.scheduled": InstanceScheduledPayload(SELECTION),
        "scheduler.run_instance.end": _replace(run, **ends),
        "scheduler.run_instance.error": error,
        "scheduler.select_destinations.start": select,
        "scheduler.select_destinations.end": _replace(select, **ends),
        "scheduler.select_destinations.error": error,
        "scheduler.resize.start": resize,
        "scheduler.resize.end": _replace(
            resize, state="scheduled", migration_uuid=MIGRATION, selection=SELECTION
        ),
        "scheduler.resize.error": error,
        "scheduler.reconcile.action": ReconcileActionPayload(
            kind="lost_vm",
            action="error",
            instance_uuid=INSTANCE,
            host="compute-0001",
            reason="its record places it on compute-0001, whose report does not show it",
            outcome="ERROR, released",
        ),
        "scheduler.preempt": PreemptionPayload(
            instance_uuid=INSTANCE,
            request_id="req-0d1c2b3a-4f5e-4d6c-8b7a-695847362514",
            host="compute-0001",
            node="compute-0001",
            priority_class=PriorityClassPayload("gold", 1000, False, "preempt"),
            victims=(VictimPayload("0f1e2d3c-4b5a-4697-8877-665544332211", "batch", 500),),
        ),
    }


def _replace(payload: EventPayload, **changes: Any) -> EventPayload:
    from dataclasses import replace

    return replace(payload, **changes)  # type: ignore[type-var]


def sample_name(event_type: str) -> str:
    """``scheduler.resize.start`` -> ``scheduler-resize-start.json`` (Nova's naming)."""
    return event_type.replace(".", "-") + ".json"


def samples() -> dict[str, dict[str, Any]]:
    """Per file name, the sample notification (as a consumer receives it)."""
    out = {}
    for event_type, payload in payloads().items():
        priority, _ = EVENTS[event_type]
        out[sample_name(event_type)] = {
            "priority": priority,
            "event_type": event_type,
            "publisher_id": PUBLISHER,
            "payload": payload.to_primitive(),
        }
    return out


def render(sample: dict[str, Any]) -> str:
    return json.dumps(sample, indent=4, sort_keys=True) + "\n"


def main() -> None:
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    for old in DIRECTORY.glob("*.json"):
        old.unlink()
    for name, sample in samples().items():
        (DIRECTORY / name).write_text(render(sample))
    print(f"{len(samples())} samples written to {DIRECTORY}", file=sys.stderr)


if __name__ == "__main__":
    main()


def load() -> dict[str, dict[str, Any]]:
    """The committed samples, per versioned event type."""
    out = {}
    for path in sorted(DIRECTORY.glob("*.json")):
        sample = json.loads(path.read_text())
        out[sample["event_type"]] = sample
    return out


def check_against_sample(note: dict[str, Any], sample: dict[str, Any]) -> None:
    """Raise :class:`AssertionError` naming the first way a received versioned
    notification differs from its sample's schema: its priority and event
    type; each object's name, namespace and version (the version also the
    object's own); every field present, none unknown, each of the sample's
    JSON type (nested objects, list items and map values likewise); null
    only where the object declares the field nullable, and where the sample
    shows null or an empty list, the field's declared type decides."""
    for key in ("priority", "event_type"):
        assert note.get(key) == sample[key], f"{key}: {note.get(key)!r}, sample {sample[key]!r}"
    try:
        _like(note.get("payload"), sample["payload"], None, "payload")
    except ValueError as exc:  # the declared type's check
        raise AssertionError(str(exc)) from None


def _like(value: Any, example: Any, declared: Any, where: str) -> None:
    if isinstance(example, dict) and "nova_object.name" in example:
        _like_object(value, example, where)
    elif isinstance(example, list):
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        if not example:  # the sample's event never carries one: the declared type decides
            check_value(value, declared, where)
        for n, item in enumerate(value):
            _like(item, example[0] if example else None, _item(declared), f"{where}[{n}]")
    elif isinstance(example, dict):
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        typical = next(iter(example.values()), None)
        for key, item in value.items():
            _like(item, typical, _item(declared), f"{where}[{key!r}]")
    elif example is None:
        check_value(value, declared, where)
    elif isinstance(example, float):
        assert isinstance(value, int | float) and not isinstance(value, bool), (
            f"{where}: {value!r} is not a number"
        )
    else:
        assert type(value) is type(example), (
            f"{where}: {value!r} is not of the sample's type {type(example).__name__}"
        )
    if declared is not None and not isinstance(example, dict | list):
        check_value(value, declared, where)  # a state outside its values, ...


def _item(declared: Any) -> Any:
    """The item type of a declared list or map type, null or not (None if unknown)."""
    args = [a for a in typing.get_args(declared) if a is not type(None)]
    if typing.get_origin(declared) in (types.UnionType, typing.Union):
        declared = args[0]
        args = list(typing.get_args(declared))
    if typing.get_origin(declared) is tuple:
        return args[0]
    if typing.get_origin(declared) in (Mapping, dict):
        return args[1]
    return None


def _like_object(value: Any, example: dict[str, Any], where: str) -> None:
    assert isinstance(value, dict), f"{where}: {value!r} is not an object envelope"
    for key in ("nova_object.name", "nova_object.namespace", "nova_object.version"):
        assert value.get(key) == example[key], (
            f"{where}: {key} {value.get(key)!r}, sample {example[key]!r}"
        )
    cls = registry()[example["nova_object.name"]]
    assert example["nova_object.version"] == cls.VERSION, (
        f"{where}: the sample is not {cls.VERSION}"
    )
    data, shown = value.get("nova_object.data"), example["nova_object.data"]
    assert isinstance(data, dict), f"{where}: no nova_object.data"
    missing, unknown = sorted(set(shown) - set(data)), sorted(set(data) - set(shown))
    assert not missing and not unknown, f"{where}: missing {missing}, unknown {unknown}"
    types = field_types(cls)
    for name, field_value in data.items():
        if field_value is None:
            check_value(None, types[name], f"{where}.{name}")  # nullable or not
        else:
            _like(field_value, shown[name], types[name], f"{where}.{name}")
