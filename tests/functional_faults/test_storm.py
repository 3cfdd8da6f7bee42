"""Under load and races: three worker processes, 2,000 concurrent boots into a
cloud with room for 1,500, 200 of them members of one strict anti-affinity
group.

Exactly as many instances are placed as fit (every slot of the cloud ends up
used), no provider's usage exceeds its capacity, no two members of the group
share a host, and the rest end in ERROR with the generic NoValidHost fault;
all checked from the store afterwards. The workers are forked by one
``scheduler-worker`` with ``[scheduler] workers = 3``, and all three decide.

The cloud: 150 hosts with 10 VCPUs each at an allocation ratio of 1, so
``m1.tiny`` (1 VCPU, 512 MB, 1 GB) fits exactly 10 times per host and VCPU is
the only limit (``max_io_ops_per_host`` is raised so that builds in progress
never hide a slot).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter

from scheduler.exceptions import NoValidHost
from scheduler.objects import FINAL_STATES
from tests.fixtures.cli import boot_in_background
from tests.functional_faults.conftest import FaultCluster, wait_until

HOSTS, SLOTS = 150, 10
PLAIN_SENDERS, PLAIN_EACH = 3, 600
MEMBERS = 200


def collect(boot: subprocess.Popen[bytes]) -> list[str]:
    stdout, stderr = boot.communicate(timeout=180)
    assert boot.returncode == 0, stderr.decode()[-4000:]
    return list(json.loads(stdout)["instances"])


def test_three_workers_place_exactly_what_fits_and_never_break_anti_affinity(
    cluster: FaultCluster,
) -> None:
    cluster.write_config(
        scheduler={"workers": 3},
        filter_scheduler={"max_io_ops_per_host": 1000},
        compute={"cpu_allocation_ratio": 1.0},
    )
    cluster.start_conductor()
    cluster.start_compute(HOSTS, "--vcpus", str(SLOTS), "--build-time", "0.01")
    workers = cluster.start("workers", "scheduler.cmd.worker")
    wait_until(lambda: workers.count("scheduler_started") == 3, 60, "three workers")

    started = time.monotonic()
    boots = [boot_in_background(cluster, PLAIN_EACH) for _ in range(PLAIN_SENDERS)]
    group_boot = boot_in_background(cluster, MEMBERS, "--group-policy", "anti-affinity")
    plain = [u for boot in boots for u in collect(boot)]
    members = collect(group_boot)
    uuids = plain + members
    assert len(set(uuids)) == PLAIN_SENDERS * PLAIN_EACH + MEMBERS == 2000

    def all_final() -> bool:
        records = cluster.store.list_instances(uuids)
        return len(records) == len(uuids) and all(r.state in FINAL_STATES for r in records)

    wait_until(all_final, 240, "every instance ACTIVE or ERROR", interval=1.0)
    seconds = time.monotonic() - started

    records = {r.uuid: r for r in cluster.store.list_instances(uuids)}
    active = [r for r in records.values() if r.state == "ACTIVE"]
    errors = [r for r in records.values() if r.state == "ERROR"]
    consumers = {c.uuid: c for c in cluster.store.list_consumers()}
    providers = {p.uuid: p for p in cluster.store.list_providers()}

    # Exactly what fits: every slot used, one allocation per ACTIVE instance.
    assert len(active) == HOSTS * SLOTS, (len(active), Counter(r.fault for r in errors))
    assert set(consumers) == {r.uuid for r in active}
    for provider in providers.values():
        assert provider.usages.get("VCPU", 0) == SLOTS, provider.name
        assert provider.consumers == SLOTS
    # No overcommit (usage == sum of allocations is checked after the test too).
    cluster.check_accounting()
    # Strict anti-affinity: at most one member per host, in the records and the store.
    placed_members = [records[u] for u in members if records[u].state == "ACTIVE"]
    hosts = Counter(r.host for r in placed_members)
    assert hosts and max(hosts.values()) == 1, hosts
    member_consumers = [consumers[r.uuid] for r in placed_members]
    [group_uuid] = {c.group_uuid for c in member_consumers}
    assert cluster.store.group_hosts(group_uuid) == dict.fromkeys(hosts, 1)
    # The rest: ERROR, the generic fault, nothing held.
    assert len(errors) == 2000 - HOSTS * SLOTS
    assert {r.fault for r in errors} == {NoValidHost.USER_MESSAGE}
    assert all(r.fault_details and "hosts available" in r.fault_details for r in errors)
    # All three worker processes decided.
    decided = Counter(
        e.get("process")
        for e in workers.log_events()
        if e.get("event") in ("instance_scheduled", "no_valid_host") and "instance_uuids" not in e
    )
    figures = {
        "instances": len(uuids),
        "active": len(active),
        "error": len(errors),
        "members_placed": len(placed_members),
        "seconds": round(seconds, 1),
        "decisions_per_worker": dict(decided),
        "claim_conflicts": workers.count("claim_conflict"),
    }
    print("\nstorm:", json.dumps(figures))
    assert len(decided) == 3 and all(decided.values()), decided
    # ... the three processes started (a replacement would log under its slot's name).
    workers.assert_kept_serving()
