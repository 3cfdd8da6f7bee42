"""Request objects: validation at the RPC boundary and the resources asked."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.objects import (
    AllocationRequest,
    Destination,
    InstanceRecord,
    RequestSpec,
    Selection,
    validate_instance_uuids,
)

GOOD = {
    "flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20},
    "project_id": "p1",
    "user_id": "u1",
}


def spec_with(path: str, value: object) -> dict:
    data = copy.deepcopy(GOOD)
    target = data
    *parents, last = path.split(".")
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        pytest.param(
            spec_with("flavor", KeyError), "missing field(s): flavor", id="missing-flavor"
        ),
        pytest.param(
            spec_with("flavor.memory_mb", -1), "memory_mb must be between", id="negative-memory"
        ),
        pytest.param(
            spec_with("flavor.vcpus", "2"), "vcpus must be an integer", id="vcpus-string"
        ),
        pytest.param(spec_with("flavor.vcpus", True), "vcpus must be an integer", id="vcpus-bool"),
        pytest.param(
            spec_with("flavor.extra_specs", {"a": 1}),
            "map strings to strings",
            id="extra-spec-int",
        ),
        pytest.param(spec_with("colour", "blue"), "unknown field(s): colour", id="unknown-field"),
        pytest.param(
            spec_with("flavor.gpus", 1),
            "flavor has unknown field(s): gpus",
            id="unknown-flavor-field",
        ),
        pytest.param(
            spec_with("num_instances", 0),
            "num_instances must be between 1 and 1000",
            id="zero-instances",
        ),
        pytest.param(
            spec_with("num_instances", 10000),
            "num_instances must be between 1 and 1000",
            id="ten-thousand-instances",
        ),
        pytest.param(
            spec_with("project_id", ""), "project_id must not be empty", id="empty-project"
        ),
        pytest.param(
            spec_with("group", {"uuid": "x", "policy": "anti-affinity"}),
            "group.uuid is not a valid UUID",
            id="bad-group-uuid",
        ),
        pytest.param(
            spec_with(
                "group", {"uuid": "2b6c0f0e-8f7a-4b7e-9c59-5a3f3c1a0b11", "policy": "nearby"}
            ),
            "group.policy must be one of",
            id="bad-group-policy",
        ),
        pytest.param(spec_with("is_bfv", "yes"), "is_bfv must be a boolean", id="bfv-string"),
        pytest.param(["not", "a", "dict"], "request_spec must be an object", id="list-spec"),
        pytest.param(None, "request_spec must be an object", id="none-spec"),
        # Forcing and destinations: typed and bounded (who may set them is policy's).
        pytest.param(
            spec_with("force_hosts", "h1"),
            "force_hosts must be a list, got str",
            id="force-hosts-string",
        ),
        pytest.param(
            spec_with("force_nodes", [""]),
            "force_nodes must hold non-empty strings",
            id="force-nodes-empty-name",
        ),
        pytest.param(
            spec_with("force_hosts", [f"h{i}" for i in range(101)]),
            "force_hosts has more than 100 items",
            id="too-many-forced",
        ),
        pytest.param(
            spec_with("requested_destination", {"node": "n1"}),
            "requested_destination is missing field(s): host",
            id="destination-no-host",
        ),
        pytest.param(
            spec_with("requested_destination", {"host": "h", "cell": "c"}),
            "requested_destination has unknown field(s): cell",
            id="destination-cell",
        ),
        # Sizes: a spec within every bound stays well under 1 MB.
        pytest.param(
            spec_with("flavor.extra_specs", {f"k{i}": "v" for i in range(257)}),
            "flavor.extra_specs has more than 256 entries",
            id="too-many-extra-specs",
        ),
        pytest.param(
            spec_with("flavor.extra_specs", {"k": "v" * 256}),
            "flavor.extra_specs entry 'k' is too long",
            id="extra-spec-too-long",
        ),
        pytest.param(
            spec_with("image", {"properties": {"p": "v" * 1025}}),
            "image.properties entry 'p' is too long",
            id="image-property-too-long",
        ),
        pytest.param(
            spec_with("scheduler_hints", {f"h{i}": ["x"] * 9 for i in range(30)}),
            "scheduler_hints hold more than 256 values in all",
            id="too-many-hint-values",
        ),
        pytest.param(
            spec_with("scheduler_hints", {"": ["x"]}),
            "scheduler_hints names must be strings",
            id="empty-hint-name",
        ),
        pytest.param(
            spec_with("ignore_hosts", ["h"] * 257),
            "ignore_hosts has more than 256 items",
            id="too-many-ignored",
        ),
        pytest.param(
            spec_with("user_id", "u" * (2 * 1024 * 1024)),
            "user_id is longer than 255 characters",
            id="two-megabyte-field",
        ),
    ],
)
def test_invalid_specs_are_refused_with_a_clear_reason(data: object, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        RequestSpec.from_primitive(data)
    assert message in err.value.message


def test_round_trip_keeps_every_field() -> None:
    data = {
        **copy.deepcopy(GOOD),
        "num_instances": 3,
        "availability_zone": "az1",
        "group": {
            "uuid": "2b6c0f0e-8f7a-4b7e-9c59-5a3f3c1a0b11",
            "policy": "anti-affinity",
            "max_server_per_host": 2,
        },
        "ignore_hosts": ["h1"],
        "scheduler_hints": {"same_host": ["abc"]},
    }
    spec = RequestSpec.from_primitive(data)
    again = RequestSpec.from_primitive(spec.to_primitive())
    assert again == spec
    assert again.group is not None and again.group.max_server_per_host == 2
    assert again.scheduler_hints["same_host"] == ("abc",)


def test_forcing_fields_round_trip_and_are_left_out_when_unset() -> None:
    plain = RequestSpec.from_primitive(copy.deepcopy(GOOD))
    assert not set(plain.to_primitive()) & set(RequestSpec.DESTINATION_FIELDS)
    assert not plain.has_destination
    data = {
        **copy.deepcopy(GOOD),
        "force_hosts": ["h1", "h2"],
        "force_nodes": ["h2"],
        "requested_destination": {"host": "h2", "node": None},
    }
    forced = RequestSpec.from_primitive(data)
    assert forced.has_destination
    assert forced.force_hosts == ("h1", "h2") and forced.force_nodes == ("h2",)
    assert forced.requested_destination == Destination("h2")
    assert RequestSpec.from_primitive(forced.to_primitive()) == forced


@pytest.mark.parametrize(
    "flavor, bfv, expected",
    [
        pytest.param(
            {"root_gb": 20}, False, {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}, id="root-only"
        ),
        pytest.param(
            {"root_gb": 20, "ephemeral_gb": 5, "swap_mb": 1025},
            False,
            {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 27},
            id="swap-rounded-up",
        ),
        pytest.param(
            {"root_gb": 20, "ephemeral_gb": 5},
            True,
            {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 5},
            id="volume-backed-no-root",
        ),
        pytest.param(
            {"root_gb": 20},
            True,
            {"VCPU": 1, "MEMORY_MB": 2048},
            id="volume-backed-no-disk-at-all",
        ),
        # What the engine claims: resource extra specs override the flavor's sizes.
        pytest.param(
            {
                "vcpus": 2,
                "root_gb": 10,
                "extra_specs": {"resources:VCPU": "4", "resources:DISK_GB": "0"},
            },
            False,
            {"VCPU": 4, "MEMORY_MB": 2048},
            id="extra-specs-override",
        ),
        pytest.param(
            {"root_gb": 20, "extra_specs": {"resources1:VCPU": "2"}},
            False,
            {"VCPU": 3, "MEMORY_MB": 2048, "DISK_GB": 20},
            id="numbered-group-added",
        ),
    ],
)
def test_resources_asked(flavor: dict, bfv: bool, expected: dict) -> None:
    data = copy.deepcopy(GOOD)
    data["flavor"] = {"name": "f", "vcpus": 1, "memory_mb": 2048, **flavor}
    data["is_bfv"] = bfv
    assert RequestSpec.from_primitive(data).resources == expected


def test_objects_are_frozen() -> None:
    spec = RequestSpec.from_primitive(GOOD)
    with pytest.raises(AttributeError):
        spec.num_instances = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.flavor.extra_specs["x"] = "y"  # type: ignore[index]


def test_instance_uuids_must_match_the_count_and_be_unique() -> None:
    u = "2b6c0f0e-8f7a-4b7e-9c59-5a3f3c1a0b11"
    assert validate_instance_uuids([u], 1) == (u,)
    with pytest.raises(InvalidRequest, match="has 1 entries but num_instances is 2"):
        validate_instance_uuids([u], 2)
    with pytest.raises(InvalidRequest, match="duplicates"):
        validate_instance_uuids([u, u], 2)
    with pytest.raises(InvalidRequest, match="not a valid UUID"):
        validate_instance_uuids(["nope"], 1)


def test_selection_round_trip_and_validation() -> None:
    rp = "7f1c9a52-0b7e-4d0a-8d7c-3e2b1a0c9d88"
    sel = Selection(
        host="h1",
        node="h1",
        provider_uuid=rp,
        weight=1.5,
        allocation_request=AllocationRequest({rp: {"VCPU": 1}}, "p", "u"),
    )
    assert Selection.from_primitive(sel.to_primitive()) == sel
    bad = sel.to_primitive()
    bad["allocation_request"]["allocations"][rp]["VCPU"] = 0
    with pytest.raises(InvalidRequest, match="VCPU must be between 1"):
        Selection.from_primitive(bad)
    # The zone (RPC 1.3) round trips; a Selection without one reads as before it.
    assert set(sel.to_primitive()) == PRE_ZONE_FIELDS
    zoned = dataclasses.replace(sel, availability_zone="east")
    assert zoned.to_primitive()["availability_zone"] == "east"
    assert Selection.from_primitive(zoned.to_primitive()) == zoned
    # For a reader older than the field: the same selection, the field left out.
    assert zoned.without_zone().to_primitive() == sel.to_primitive()
    for value, message in ((3, "must be a string"), ("z" * 256, "is longer than 255")):
        with pytest.raises(InvalidRequest, match=f"selection.availability_zone {message}"):
            Selection.from_primitive({**zoned.to_primitive(), "availability_zone": value})


#: The fields a Selection had before RPC 1.3: a reader of that time refuses any other.
PRE_ZONE_FIELDS = {"host", "node", "provider_uuid", "allocation_request", "weight"}


def test_instance_record_round_trip() -> None:
    rec = InstanceRecord(
        uuid="u", attempts=2, tried_hosts=("a", "b"), fault="x", availability_zone="east"
    )
    assert InstanceRecord.from_primitive(rec.to_primitive()) == rec


@pytest.mark.parametrize(
    ("data", "kept"),
    [
        pytest.param({"uuid": "u"}, (None, 0, False), id="written-before-classes"),
        pytest.param(
            {"uuid": "u", "priority_class": "spot", "priority": 10, "preemptible": True},
            ("spot", 10, True),
            id="a-class",
        ),
        pytest.param(
            {"uuid": "u", "priority": True, "preemptible": "yes"}, (None, 0, False), id="not-typed"
        ),
    ],
)
def test_an_instance_record_reads_its_priority_class(
    data: dict[str, object], kept: tuple[object, ...]
) -> None:
    record = InstanceRecord.from_primitive(data)
    assert (record.priority_class, record.priority, record.preemptible) == kept
    assert InstanceRecord.from_primitive(record.to_primitive()) == record
