"""Strict affinity under concurrency: racing workers never refuse a member the
group's host has room for.

Three worker processes decide members of the same groups at once. A worker
reads a group's members when a request starts; another worker may place the
group's first member between that read and this worker's claim, and the
store's atomic claim then refuses every other host for the group. The refused
claim re-reads the members and decides again (``GROUP_REREADS``), so the
member follows the group to its host instead of ending in ERROR with
"server group policy (refused at claim)" while that host has room.

Many small affinity groups, each sent as consecutive single-instance
requests (the broker hands consecutive casts to different workers), make the
race happen once per group; an anti-affinity group sent the same way is the
control (its members spread, one per host). Every member must end ACTIVE,
each affinity group on one host; the accounting is checked after.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter, defaultdict

import pytest

from scheduler import rpc
from scheduler.objects import FINAL_STATES, Flavor, InstanceRecord, RequestSpec, ServerGroup
from tests.functional_faults.conftest import FaultCluster, wait_until

TINY = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)
HOSTS = 20  # each fits every member of a group many times over
WORKERS = 3  # worker processes of one scheduler-worker
AFFINITY_GROUPS = 12
MEMBERS = 6
ANTI_AFFINITY_MEMBERS = 12


@pytest.mark.timeout(120)
def test_racing_workers_put_every_affinity_member_on_its_group_host(
    cluster: FaultCluster, transport: object
) -> None:
    cluster.write_config(scheduler={"workers": WORKERS})
    cluster.start_conductor()
    cluster.start_compute(HOSTS, "--build-time", "0.01")
    worker = cluster.start_worker()
    wait_until(lambda: len(worker.serving_pids()) == WORKERS, 60, "every worker process")
    wait_until(lambda: worker.count("scheduler_started") >= WORKERS, 60, "every worker serving")

    def members(policy: str, count: int) -> tuple[ServerGroup, list[str]]:
        return ServerGroup(uuid=str(uuidlib.uuid4()), policy=policy), [
            str(uuidlib.uuid4()) for _ in range(count)
        ]

    groups = [members("affinity", MEMBERS) for _ in range(AFFINITY_GROUPS)]
    control = members("anti-affinity", ANTI_AFFINITY_MEMBERS)
    uuids = [u for _, batch in [*groups, control] for u in batch]
    now = time.time()
    cluster.store.create_instances(
        InstanceRecord(uuid=u, created_at=now, updated_at=now) for u in uuids
    )
    client = rpc.SchedulerClient(transport)  # type: ignore[arg-type]
    ctxt = rpc.RequestContext(user_id="u", project_id="p")
    # One group after the other, its members in a row: the broker gives
    # consecutive casts to different workers, which decide them at once.
    for group, batch in [*groups, control]:
        spec = RequestSpec(flavor=TINY, project_id="p", user_id="u", group=group)
        for uuid in batch:
            client.run_instance(ctxt, spec, [uuid])

    def final() -> bool:
        return all(r.state in FINAL_STATES for r in cluster.store.list_instances(uuids))

    wait_until(final, 90, "every member ACTIVE or ERROR", interval=0.2)
    records = {r.uuid: r for r in cluster.store.list_instances(uuids)}
    errors = {u: r.fault_details for u, r in records.items() if r.state != "ACTIVE"}
    events = worker.log_events()
    refused = sum(
        1
        for e in events
        if e.get("event") == "claim_conflict" and e.get("error") == "GroupPolicyViolation"
    )
    rereads = sum(1 for e in events if e.get("event") == "group_members_reread")
    print(
        f"\ngroup race: {len(uuids)} members, {len(errors)} not ACTIVE, "
        f"claims refused for the group: {refused}, members re-read: {rereads}"
    )
    assert not errors, errors
    for group, batch in groups:
        hosts = Counter(records[u].host for u in batch)
        assert len(hosts) == 1, (group.uuid, hosts)
        assert cluster.store.group_hosts(group.uuid) == dict(hosts)
    spread: defaultdict[str | None, int] = defaultdict(int)
    for uuid in control[1]:
        spread[records[uuid].host] += 1
    assert set(spread.values()) == {1}, spread
    # Every worker process decided: the race was between processes.
    deciders = {e.get("process") for e in events if e.get("event") == "instance_scheduled"}
    assert len(deciders) == WORKERS, deciders
