"""The versioned payload objects: pinned per version, sampled, checked.

``FINGERPRINTS`` pins each object's fields and types to its version, as
Nova's object hash test does. When a test here fails because you changed an
object: bump its ``VERSION`` (minor for an added field, major for a removed
or changed one, see :mod:`scheduler.notifications`), put the new
fingerprint here, write the samples again (``python -m
tests.notification_samples``) and update the tables of events and objects
in doc/source/reference/notifications.rst.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler import notifications
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.notifications import (
    EVENTS,
    ExceptionPayload,
    FlavorPayload,
    NotificationObject,
    check,
    field_types,
    fingerprint,
    registry,
    type_name,
)
from tests import notification_samples as samples

FINGERPRINTS = {
    "DestinationPayload": "1.0-141b72926ad8418119e04cd8029b2d3e",
    "ExceptionPayload": "1.0-21045f35deabf57a2695be9f2d300741",
    "FlavorPayload": "1.0-4724b3c247a6241e9c92ec493a457ca2",
    "ImageMetaPayload": "1.0-63f692caf9b91684126787c704b1c39c",
    "InstanceNUMACellPayload": "1.0-bdc6f0ce80cf491308bb4b8ebe9c3810",
    "InstanceNUMATopologyPayload": "1.0-6ac5782b3dd2772c161915056e596c5f",
    "InstancePCIRequestPayload": "1.0-60deb64a32db217565473ab1130ef8f5",
    "InstancePCIRequestsPayload": "1.0-73e63b48d6d4251d551137b5e24508de",
    "InstanceScheduledPayload": "1.0-b0ca816f3a505e9709591d2534b70ee2",
    "ReconcileActionPayload": "1.0-5a8238bb8601ce6358e11daa985930e4",
    "PreemptionPayload": "1.0-671e857abc38b7e4746e42f8aeae99cc",
    "PriorityClassPayload": "1.0-ee9948483804b0e304058597d0d085c3",
    "RequestSpecPayload": "1.1-3a5ca6730645aac4623f02606b534acb",
    "ResizePayload": "1.0-d178c5bdc245f4ad369b55976d54e198",
    "SchedulingErrorPayload": "1.1-007ccc9f4d6abe39a484809a84ccc825",
    "SchedulingPayload": "1.0-c64b29527f1826cb24001fe5d13c07a8",
    "SelectionPayload": "1.0-c13481170c819b2316fc4886458a3419",
    "ServerGroupPayload": "1.0-a70c08279850e67fc30cf1f38913dcb5",
    "VictimPayload": "1.0-83698634cd4c57e74b4773baad772f62",
}


def test_every_object_is_pinned_to_its_version() -> None:
    found = {name: fingerprint(cls) for name, cls in registry().items()}
    changed = {
        name: f"{FINGERPRINTS.get(name)} -> {value}"
        for name, value in found.items()
        if FINGERPRINTS.get(name) != value
    }
    assert not changed, (
        "payload objects changed: bump VERSION (minor: a field added; major: one "
        f"removed or changed) and pin the new fingerprint: {changed}"
    )
    assert set(FINGERPRINTS) == set(found), "an object pinned here is no longer published"


def test_a_change_without_a_bump_is_caught() -> None:
    """The fingerprint moves with a field added, a type changed, a field made nullable."""

    @dataclass(frozen=True)
    class Added(FlavorPayload):
        disabled: bool = False

    @dataclass(frozen=True)
    class Nullable(NotificationObject):
        VERSION = FlavorPayload.VERSION
        name: str | None

    @dataclass(frozen=True)
    class Plain(NotificationObject):
        VERSION = FlavorPayload.VERSION
        name: str

    base = fingerprint(FlavorPayload).split("-")[1]
    assert fingerprint(Added).split("-")[1] != base
    assert fingerprint(Nullable) != fingerprint(Plain)
    assert fingerprint(Plain).startswith("1.0-")


def test_the_samples_are_current_one_per_event() -> None:
    on_disk = {p.name: p.read_text() for p in samples.DIRECTORY.glob("*.json")}
    made = {name: samples.render(sample) for name, sample in samples.samples().items()}
    assert sorted(on_disk) == sorted(samples.sample_name(e) for e in EVENTS)
    stale = sorted(name for name in made if on_disk.get(name) != made[name])
    assert not stale, f"write them again (tox -e samples): {stale}"


@pytest.mark.parametrize("event_type", sorted(EVENTS))
def test_each_sample_is_its_events_object_with_every_type_shown(event_type: str) -> None:
    sample = samples.load()[event_type]
    priority, cls = EVENTS[event_type]
    assert sample["priority"] == priority
    check(sample["payload"], cls)
    samples.check_against_sample(sample, sample)


def _sample() -> dict[str, Any]:
    return copy.deepcopy(samples.load()["scheduler.run_instance.end"])


def _data(note: dict[str, Any], *path: str) -> dict[str, Any]:
    data: dict[str, Any] = note["payload"]["nova_object.data"]
    for name in path:
        data = data[name]["nova_object.data"]
    return data


def _missing(note: dict[str, Any]) -> None:
    del _data(note, "request_spec")["flavor"]


def _unknown(note: dict[str, Any]) -> None:
    _data(note)["hosts"] = []


def _wrong_type(note: dict[str, Any]) -> None:
    _data(note, "request_spec", "flavor")["vcpus"] = "4"


def _bool_for_int(note: dict[str, Any]) -> None:
    _data(note)["instance_uuids_omitted"] = False


def _null_not_nullable(note: dict[str, Any]) -> None:
    _data(note, "request_spec")["project_id"] = None


def _wrong_version(note: dict[str, Any]) -> None:
    note["payload"]["nova_object.data"]["request_spec"]["nova_object.version"] = "1.9"


def _wrong_name(note: dict[str, Any]) -> None:
    note["payload"]["nova_object.name"] = "RequestSpecPayload"


def _list_item(note: dict[str, Any]) -> None:
    _data(note)["instance_uuids"].append(7)


def _map_value(note: dict[str, Any]) -> None:
    _data(note, "request_spec", "flavor")["extra_specs"]["hw:numa_nodes"] = 2


def _bad_state(note: dict[str, Any]) -> None:
    _data(note)["state"] = "done"


def _priority(note: dict[str, Any]) -> None:
    note["priority"] = "ERROR"


@pytest.mark.parametrize(
    "spoil",
    [
        _missing,
        _unknown,
        _wrong_type,
        _bool_for_int,
        _null_not_nullable,
        _wrong_version,
        _wrong_name,
        _list_item,
        _map_value,
        _bad_state,
        _priority,
    ],
)
def test_the_sample_check_refuses_what_a_consumer_could_not_parse(spoil: Any) -> None:
    note = _sample()
    samples.check_against_sample(note, _sample())  # as is: it passes
    spoil(note)
    with pytest.raises(AssertionError):
        samples.check_against_sample(note, _sample())


def test_null_passes_only_where_declared_nullable() -> None:
    note = _sample()
    _data(note, "request_spec")["image"] = None
    _data(note, "request_spec")["availability_zone"] = None
    _data(note)["request_spec"] = None
    samples.check_against_sample(note, _sample())
    check(note["payload"], EVENTS["scheduler.run_instance.end"][1])


@pytest.mark.parametrize(
    "exc, kind, message",
    [
        pytest.param(
            NoValidHost(details="0/4 hosts: compute-1 ..."), "NoValidHost", None, id="nvh"
        ),
        pytest.param(
            InvalidRequest(reason="bad"), "InvalidRequest", "invalid request: bad", id="bad"
        ),
        pytest.param(KeyError("compute-1"), "InternalError", None, id="internal"),
    ],
)
def test_the_failure_names_its_kind_and_only_the_user_safe_reason(
    exc: Exception, kind: str, message: str | None
) -> None:
    payload = ExceptionPayload.of(exc)
    assert payload.exception == kind
    if message is not None:
        assert payload.exception_message == message
    assert "compute-1" not in json.dumps(payload.to_primitive())


def test_the_envelope_is_novas_with_our_namespace() -> None:
    primitive = samples.load()["scheduler.run_instance.scheduled"]["payload"]
    assert set(primitive) == {
        "nova_object.name",
        "nova_object.namespace",
        "nova_object.version",
        "nova_object.data",
    }
    assert primitive["nova_object.namespace"] == notifications.NAMESPACE == "vm_scheduler"


def _list_table_rows(text: str) -> list[list[str]]:
    """The rows of every list-table of a reStructuredText page, each cell on
    one line."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("   * - "):
            rows.append([line[len("   * - ") :]])
        elif line.startswith("     - ") and rows:
            rows[-1].append(line[len("     - ") :])
        elif line.startswith("       ") and rows:
            rows[-1][-1] += " " + line.strip()
    return rows


def test_the_docs_document_every_event_and_every_objects_version_and_fields() -> None:
    page = (samples.DIRECTORY.parent / "source" / "reference" / "notifications.rst").read_text()
    rows = _list_table_rows(page)
    for event_type, (priority, cls) in EVENTS.items():
        found = [row for row in rows if row[0] == f"``{event_type}`` ({priority})"]
        assert found and found[0][2] == cls.__name__, event_type
    for name, cls in registry().items():
        found = [row for row in rows if row[0].startswith(f"{name} ")]
        assert found, f"no row for {name}"
        assert found[0][0] == f"{name} {cls.VERSION}", found[0]
        for field, tp in field_types(cls).items():
            assert f"``{field}``: {type_name(tp)}" in found[0][1], (name, field, type_name(tp))
    for sample in sorted(samples.DIRECTORY.glob("*.json")):
        assert f"notification_samples/{sample.name}" in page, f"{sample.name} is not rendered"
