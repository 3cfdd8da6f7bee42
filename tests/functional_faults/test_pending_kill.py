"""A conductor killed while it retries PENDING requests.

Twelve boots wait for capacity on a full cloud; a compute with room for six
more is added, so the conductor's retrier sends the waiting requests again
(its slow pass is an hour away: the feed's "host added" wakes it), and the
conductor is killed with SIGKILL as soon as it has sent one. Whatever it had
done (an instance turned BUILDING and not sent, sent and not answered,
answered "no valid host" and not yet indexed), the new conductor's sweep,
first pass and reconciler finish it: exactly six more instances end ACTIVE,
each with one allocation, the others PENDING and in the index, nothing
doubled.
"""

from __future__ import annotations

import signal
from collections import Counter

from tests.functional_faults.conftest import FaultCluster, wait_until
from tests.functional_faults.storm import FAST_CONDUCTOR

SMALL_MB = 2048
RESERVED_MB = 512


def test_a_conductor_killed_while_it_retries_pending_requests(cluster: FaultCluster) -> None:
    cluster.write_config(
        conductor={**FAST_CONDUCTOR, "reconcile_interval": 1, "orphan_grace": 1},
        priority={"pending_retry_interval": 3600},
    )
    conductor = cluster.start_conductor()
    cluster.start_compute(1, "--memory-mb", str(2 * SMALL_MB + RESERVED_MB), name="full")
    cluster.start_worker()
    first = cluster.boot("--count", "2", "--flavor", "m1.small", timeout=60)["instances"]
    assert [i["state"] for i in first] == ["ACTIVE", "ACTIVE"]

    code, out, err = cluster.conductor_stub(
        "boot", "--count", "12", "--flavor", "m1.small", "--wait-for-capacity"
    )
    assert code == 0, err
    waiting = out.split()
    assert len(waiting) == 12

    def states() -> Counter[str]:
        return Counter(r.state for r in cluster.store.list_instances(waiting))

    wait_until(lambda: states() == {"PENDING": 12}, 60, "every boot to wait")
    assert set(cluster.store.list_pending()) == set(waiting)

    cluster.start_compute(1, "--memory-mb", str(6 * SMALL_MB + RESERVED_MB), name="more")
    conductor.wait_for("pending_retried", timeout=30)
    conductor.stop(signal.SIGKILL)
    cluster.start_conductor()

    def settled() -> bool:
        pending = {r.uuid for r in cluster.store.list_instances(waiting) if r.state == "PENDING"}
        return (
            states() == {"ACTIVE": 6, "PENDING": 6}
            and set(cluster.store.list_pending()) == pending
        )

    wait_until(settled, 120, "six placed, six waiting and indexed")
    records = cluster.store.list_instances(waiting)
    placed = {r.uuid: r for r in records if r.state == "ACTIVE"}
    assert {r.host for r in placed.values()} == {"more-0000"}
    held = {c.uuid: c for c in cluster.store.list_consumers()}
    assert set(held) == set(placed) | {i["uuid"] for i in first}
    for uuid in placed:
        assert len(held[uuid].allocations) == 1
    running = cluster.running_vms()
    assert all(running.get(uuid) == {"more-0000"} for uuid in placed), running
    assert not any(running.get(r.uuid) for r in records if r.state == "PENDING")
