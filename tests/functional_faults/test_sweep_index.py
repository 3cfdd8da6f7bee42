"""The conductor's sweep costs what is due, not what the store has ever kept.

Records of finished instances stay in the store; a sweep that reads every
record (one Lua script, Redis blocked while it runs) costs more with each
one. The store keeps its pending records in an index by deadline, so a sweep
reads only the due ones. On a private ``redis-server`` (so SLOWLOG may be
set to log every command), a store holding many finished records, written
directly as a store from before the index holds them, and a few due ones
(two written the same way, two by the store itself): the sweep returns
exactly the due ones, Redis's own time for a sweep stays under
:data:`BOUND_US`, and a real conductor re-drives every due instance, found
through the index, to ACTIVE.
"""

from __future__ import annotations

import hashlib
import statistics
import time
import uuid as uuidlib
from collections.abc import Callable

import pytest
import redis

from scheduler.objects import ACTIVE, ERROR, Flavor, InstanceRecord, RequestSpec
from scheduler.store.redis_codec import instance_json
from scheduler.store.scripts import DUE_INSTANCES
from tests.functional_faults.conftest import FaultCluster, PrivateRedis, wait_until

pytestmark = pytest.mark.timeout(120)

#: Finished records in the store (the full scan reads each: ~3 us apiece).
FINISHED = 30_000
#: Redis's own time for a sweep (the median: a loaded machine may pause Redis
#: mid-command once in a while), at most; a full scan takes 0.1-1 s here.
BOUND_US = 10_000
SWEEPS = 5
#: What the redis client names the sweep script by.
DUE_SHA = hashlib.sha1(DUE_INSTANCES.encode()).hexdigest()

FLAVOR = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1, extra_specs={})
SPEC = RequestSpec(flavor=FLAVOR, project_id="demo", user_id="demo").to_primitive()


def _pending(deadline: float) -> InstanceRecord:
    """A boot the conductor sent and has not heard back on by ``deadline``."""
    return InstanceRecord(
        uuid=str(uuidlib.uuid4()),
        request_spec=SPEC,
        request_id=f"req-{uuidlib.uuid4()}",
        created_at=deadline - 60,
        updated_at=deadline - 60,
        deadline=deadline,
    )


def _write_directly(raw: redis.Redis, key: str, records: list[InstanceRecord]) -> None:
    """Records in the instances hash only, as a store from before the index holds them."""
    pipe = raw.pipeline(transaction=False)
    for start in range(0, len(records), 5000):
        pipe.hset(key, mapping={r.uuid: instance_json(r) for r in records[start : start + 5000]})
    pipe.execute()


def _sweep_usec(raw: redis.Redis) -> list[int]:
    """Redis's own time (µs) of each sweep script it ran since SLOWLOG was reset."""
    # (redis-py hands the command back as bytes, whatever the client decodes)
    return [
        int(e["duration"])
        for e in raw.slowlog_get(100000)
        if bytes(e["command"]).split(b" ")[:2] == [b"EVALSHA", DUE_SHA.encode()]
    ]


def test_the_sweep_reads_only_what_is_due_among_many_finished_records(
    private_redis: Callable[..., PrivateRedis], make_cluster: Callable[..., FaultCluster]
) -> None:
    # (private_redis first: it is torn down after the cluster's final checks.)
    server = private_redis()
    cluster = make_cluster(redis_url=server.url())
    cluster.write_config(conductor={"sweep_interval": 0.5, "build_timeout": 10})
    store = cluster.store
    cluster.start_compute(2, "--build-time", "0.01")
    worker = cluster.start_worker()
    raw = redis.Redis.from_url(server.url(), decode_responses=True)
    now = time.time()
    finished = [
        InstanceRecord(
            uuid=str(uuidlib.uuid4()),
            state=ACTIVE,
            task_state=None,
            host="gone-host",
            node="gone-host",
            request_spec=SPEC,
            request_id=f"req-{uuidlib.uuid4()}",
            created_at=now - 3600,
            updated_at=now - 3500,
        )
        for _ in range(FINISHED)
    ]
    written_before = [_pending(now - 30 - i) for i in range(2)]
    _write_directly(raw, store.keys.instances, [*finished, *written_before])
    created = [_pending(now - 10 - i) for i in range(2)]
    later, ended = _pending(now + 3600), _pending(now - 5)
    store.create_instances([*created, later, ended])
    store.update_instance(ended.uuid, state=ERROR, task_state=None, deadline=None)
    due = [r.uuid for r in sorted([*written_before, *created], key=lambda r: r.deadline or 0)]

    # The first sweep also indexes what the store held from before the index.
    assert [r.uuid for r in store.list_instances_due(time.time())] == due
    raw.config_set("slowlog-log-slower-than", 0)
    raw.config_set("slowlog-max-len", 100000)
    raw.slowlog_reset()
    for _ in range(SWEEPS):
        assert [r.uuid for r in store.list_instances_due(time.time())] == due
    own = _sweep_usec(raw)
    assert len(own) == SWEEPS
    assert statistics.median(own) < BOUND_US, f"the sweeps held Redis {own} us"

    # A real conductor finds them through the index and re-drives them.
    raw.slowlog_reset()
    conductor = cluster.start_conductor()
    wait_until(
        lambda: [r.state for r in store.list_instances(due)] == [ACTIVE] * len(due),
        30,
        "the due instances re-driven and built",
    )
    redriven = {
        e.get("instance_uuid")
        for e in conductor.log_events()
        if e.get("event") == "request_redriven"
    }
    assert set(due) <= redriven
    assert all(r.redrives == 1 and r.host for r in store.list_instances(due))
    sweeps = _sweep_usec(raw)
    assert sweeps, "the conductor swept"
    assert statistics.median(sweeps) < BOUND_US, f"the conductor's sweeps held Redis {sweeps} us"
    assert store.list_instances_due(time.time()) == []
    assert store.get_instance(later.uuid).deadline == later.deadline
    assert store.get_instance(finished[0].uuid) == finished[0], "finished records untouched"
    print(
        f"\nsweep over {FINISHED} finished records: Redis {statistics.median(own):.0f} us "
        f"(median of {SWEEPS}), the conductor's {len(sweeps)} sweeps at most {max(sweeps)} us"
    )
    cluster.check_accounting()
    worker.assert_kept_serving()
    assert conductor.count("sweep_failed") == 0
    raw.close()
