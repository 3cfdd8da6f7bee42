"""Strict anti-affinity without races: two worker processes place members of one
group at the same moment, and no two members ever share a host.

The group check is part of the store's atomic claim (one Lua script), not a
late check on the compute node: a worker whose view of the group is a few
milliseconds old has its claim refused with GroupPolicyViolation and falls
through to its next host. What does not fit ends in ERROR with the generic
NoValidHost fault, and its admin details say why.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections import Counter

from scheduler import rpc
from scheduler.engine.pipeline import GROUP_CONFLICT
from scheduler.exceptions import NoValidHost
from scheduler.objects import FINAL_STATES, Flavor, InstanceRecord, RequestSpec, ServerGroup
from tests.functional.conftest import Cluster

TINY = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)
HOSTS = 20
SINGLES = 30
MULTI = 5  # one request for five members, all or nothing
SENDERS = 4  # threads casting at once
#: The reasons a member that found no host may be counted under.
GROUP_REASONS = ("server group anti-affinity", GROUP_CONFLICT)


def test_two_workers_never_put_two_anti_affinity_members_on_one_host(
    cluster: Cluster, transport: object
) -> None:
    cluster.start_conductor()
    cluster.start_compute(HOSTS, "--build-time", "0.01")
    workers = [cluster.start_worker("worker-a"), cluster.start_worker("worker-b")]
    group = ServerGroup(uuid=str(uuidlib.uuid4()), policy="anti-affinity")
    client = rpc.SchedulerClient(transport)  # type: ignore[arg-type]
    single = RequestSpec(flavor=TINY, project_id="p", user_id="u", group=group)
    multi = single.replace(num_instances=MULTI)
    requests: list[tuple[RequestSpec, list[str]]] = [
        (single, [str(uuidlib.uuid4())]) for _ in range(SINGLES)
    ]
    requests.insert(SINGLES // 2, (multi, [str(uuidlib.uuid4()) for _ in range(MULTI)]))
    uuids = [u for _, batch in requests for u in batch]
    now = time.time()
    cluster.store.create_instances(
        InstanceRecord(uuid=u, created_at=now, updated_at=now) for u in uuids
    )

    # Cast every request at once from several threads, so both workers have a
    # backlog and decide concurrently.
    start = threading.Barrier(SENDERS)

    def send(share: list[tuple[RequestSpec, list[str]]]) -> None:
        start.wait()
        for spec, batch in share:
            client.run_instance(rpc.RequestContext(user_id="u", project_id="p"), spec, batch)

    senders = [threading.Thread(target=send, args=(requests[i::SENDERS],)) for i in range(SENDERS)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        records = cluster.store.list_instances(uuids)
        if all(r.state in FINAL_STATES for r in records):
            break
        time.sleep(0.2)
    records = {r.uuid: r for r in cluster.store.list_instances(uuids)}
    assert all(r.state in FINAL_STATES for r in records.values()), Counter(
        r.state for r in records.values()
    )

    active = [r for r in records.values() if r.state == "ACTIVE"]
    errors = [r for r in records.values() if r.state == "ERROR"]
    # No two members on one host: in the instance records and in the store.
    hosts = Counter(r.host for r in active)
    assert max(hosts.values()) == 1, hosts
    members = cluster.store.group_hosts(group.uuid)
    assert members == dict.fromkeys(hosts, 1)
    # Every host took a member (there were more than enough requests), and
    # the overflow ended in ERROR with the generic fault and counted reasons.
    assert len(active) == HOSTS, (len(active), [r.fault_details for r in errors])
    assert len(errors) == SINGLES + MULTI - HOSTS
    for record in errors:
        assert record.fault == NoValidHost.USER_MESSAGE
        assert record.fault_details and record.fault_details.startswith(f"0/{HOSTS} hosts")
        assert any(reason in record.fault_details for reason in GROUP_REASONS), (
            record.fault_details
        )
        assert cluster.store.get_consumer(record.uuid) is None
    # The multi-instance request is all or nothing.
    multi_states = {records[u].state for u in requests[SINGLES // 2][1]}
    assert len(multi_states) == 1, multi_states
    # Both workers decided: the race was between processes.
    decided = [w.count("instance_scheduled") + w.count("no_valid_host") for w in workers]
    assert all(decided), decided
    conflicts = sum(
        1
        for w in workers
        for e in w.log_events()
        if e.get("event") == "claim_conflict" and e.get("error") == "GroupPolicyViolation"
    )
    print(f"decisions per worker: {decided}; claims refused by the group policy: {conflicts}")
