"""Forged ``confirm_resize`` / ``revert_resize`` casts on the compute topic.

Someone who can publish on the compute topic names another ACTIVE
instance's uuid as the migration: a confirm would release that instance's
allocation, a revert would hand it to the instance named (and drop that
one's own). The compute reads the instance record first and refuses a step
the record does not wait for (a RESIZED instance whose confirm or revert the
conductor has begun, under that very migration): nothing changes, every
instance keeps exactly its own allocation and VM.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler import rpc
from scheduler.service import ServiceResolver
from tests.functional_faults.conftest import FaultCluster, wait_until

#: What the compute logs for a confirm or revert it carried out or refused.
HANDLED = ("step_refused", "resize_confirmed", "resize_reverted_here")


def holdings(cluster: FaultCluster) -> dict[str, dict[str, dict[str, int]]]:
    return {
        c.uuid: {rp: dict(a) for rp, a in c.allocations.items()}
        for c in cluster.store.list_consumers()
    }


@pytest.mark.timeout(120)
def test_forged_confirm_and_revert_naming_other_instances_change_nothing(
    cluster: FaultCluster, transport: Any
) -> None:
    cluster.start_conductor()
    compute = cluster.start_compute(2)
    cluster.start_worker()
    out = cluster.boot("--count", "4", "--flavor", "m1.tiny", timeout=60)
    assert out["summary"]["states"] == {"ACTIVE": 4}, out
    a, b, c, d = sorted(cluster.store.scan_instances(), key=lambda r: r.uuid)
    before = holdings(cluster)
    running = cluster.running_vms()

    client = rpc.ComputeClient(transport, ServiceResolver(cluster.store))
    ctxt = rpc.RequestContext(request_id="req-forged")
    assert a.host and c.host
    # "Confirm a's resize, whose migration is b": b's allocation released.
    client.confirm_resize(ctxt, a.host, a.uuid, b.uuid)
    # "Revert c's resize, whose migration is d": c takes d's allocation.
    client.revert_resize(ctxt, c.host, c.uuid, d.uuid)
    # ... and a confirm of an instance that is not resizing, naming itself.
    client.confirm_resize(ctxt, a.host, b.uuid, b.uuid)
    wait_until(lambda: sum(compute.count(e) for e in HANDLED) >= 3, 30, "the forged casts handled")

    refused = compute.refused("confirm_resize") + compute.refused("revert_resize")
    after = holdings(cluster)
    figures = {
        "forged_casts": 3,
        "refused": refused,
        "allocations_changed": sum(1 for u in before if after.get(u) != before[u]),
    }
    print("\nforged confirm/revert:", json.dumps(figures))
    assert refused == 3 and after == before
    assert cluster.running_vms() == running
    assert {r.state for r in cluster.store.scan_instances()} == {"ACTIVE"}
    cluster.check_accounting()
