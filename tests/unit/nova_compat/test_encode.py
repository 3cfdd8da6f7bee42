"""The Selections Nova reads: written by hand for speed, held equal to what
oslo.versionedobjects writes for the registered class (one rule, two writers:
a differential test)."""

from __future__ import annotations

import json

import pytest

from scheduler.nova_compat import encode
from scheduler.nova_compat.objects import (
    Flavor,
    NovaSerializer,
    SchedulerLimits,
    Selection,
    value,
)
from scheduler.objects import AllocationRequest
from scheduler.objects import Selection as OwnSelection

CELL = "5c1e7a2d-3b4f-4e6a-9d8c-0f1e2d3c4b5a"
RP = "0f3a9c1e-7b2d-4e5f-8a6b-2c4d6e8f0a1b"


@pytest.mark.parametrize("zone", ["east", None])
def test_the_primitive_is_the_one_oslo_versionedobjects_writes(zone: str | None) -> None:
    own = OwnSelection(
        "h1",
        "h1-node",
        RP,
        AllocationRequest({RP: {"VCPU": 2, "MEMORY_MB": 512}}, "p", "u"),
        0.75,
        zone,
    )
    written = encode.selection(own, CELL)
    by_ovo = Selection(
        compute_node_uuid=RP,
        service_host="h1",
        nodename="h1-node",
        cell_uuid=CELL,
        limits=SchedulerLimits(numa_topology=None, vcpu=None, disk_gb=None, memory_mb=None),
        allocation_request=encode.allocation_request(own),
        allocation_request_version="1.36",
        availability_zone=zone,
    ).obj_to_primitive()
    for prim in (written, by_ovo, by_ovo["nova_object.data"]["limits"]):
        prim["nova_object.changes"] = sorted(prim["nova_object.changes"])
    assert written == by_ovo
    read = NovaSerializer().deserialize_entity(None, json.loads(json.dumps(written)))
    assert isinstance(read, Selection) and read.service_host == "h1"
    assert json.loads(read.allocation_request) == {
        "allocations": {RP: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}},
        "mappings": {"": [RP]},
        "consumer_generation": None,
        "project_id": "p",
        "user_id": "u",
    }


def test_value_reads_what_the_primitive_set() -> None:
    flavor = Flavor.obj_from_primitive(
        {
            "nova_object.name": "Flavor",
            "nova_object.namespace": "nova",
            "nova_object.version": "1.2",
            "nova_object.data": {"vcpus": 2, "name": None},
        }
    )
    for name in Flavor.fields:
        expected = getattr(flavor, name) if flavor.obj_attr_is_set(name) else "unset"
        assert value(flavor, name, "unset") == expected
    assert value(None, "vcpus", 0) == 0


def test_the_serializer_sends_the_selections_as_written() -> None:
    own = OwnSelection("h1", "h1", RP, AllocationRequest({RP: {"VCPU": 1}}, "p", "u"), 0.5, None)
    answer = encode.selections([[own, own], [own]], CELL)
    serializer = NovaSerializer()
    sent = serializer.serialize_entity(None, answer)
    assert sent is answer  # not walked again
    # What the walk would have sent is the same.
    assert super(NovaSerializer, serializer).serialize_entity(None, list(answer)) == sent
    assert [[s["nova_object.data"]["service_host"] for s in per] for per in sent] == [
        ["h1", "h1"],
        ["h1"],
    ]
