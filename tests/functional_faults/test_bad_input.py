"""Bad input against real processes: hypothesis over real RabbitMQ, and foreign
or damaged values under the store's key prefix.

* A batch of generated request specs (the strategies of the in-process fuzz
  tests, tests/strategies.py) is sent to a worker process over the private
  broker: each gets a typed error or a decision whose primaries are claimed,
  nothing refused is claimed, the accounting holds, and the same worker
  process serves to the end.
* Garbage written under the deployment's key prefix (a provider, an
  aggregate, a service, a server group, an instance record, change-feed
  entries) is reported with its key in the logs of the worker and the
  conductor, and boots go on to end ACTIVE.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import oslo_messaging
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import rpc
from scheduler.exceptions import Forbidden, InvalidRequest, NoValidHost
from scheduler.objects import RequestSpec, Selection
from tests import strategies as fuzz
from tests.functional_faults.conftest import SHARED_REDIS_URL, FaultCluster

SCALE = float(os.environ.get("SCHEDULER_FUZZ_SCALE", "1"))
CASES = max(1, int(400 * SCALE))
CONTEXTS = {
    "member": lambda: rpc.RequestContext(user_id="u", project_id="p", roles=["member"]),
    "admin": lambda: rpc.RequestContext.admin(user_id="ops", project_id="admin"),
    "role-only": lambda: rpc.RequestContext(user_id="u", project_id="p", roles=["admin"]),
    "truthy-admin": lambda: rpc.RequestContext(user_id="u", project_id="p", is_admin=1),
}


def readable_uuids(raw: Any) -> list[str]:
    return [u for u in raw if isinstance(u, str)] if isinstance(raw, list) else []


def test_generated_requests_over_rabbitmq_get_a_clear_answer(
    cluster: FaultCluster, transport: Any
) -> None:
    cluster.start_conductor()
    cluster.start_compute(6, "--build-time", "0.01", "--availability-zones", "az1,az2")
    worker = cluster.start_worker()
    client = rpc.SchedulerClient(transport, timeout=30)
    outcomes: Counter[str] = Counter()

    @settings(
        max_examples=CASES,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )
    @given(kind=fuzz.contexts, data=st.data(), spec=fuzz.any_request_spec)
    def case(kind: str, data: st.DataObject, spec: Any) -> None:
        raw_uuids = data.draw(fuzz.instance_uuids_for(spec))
        try:
            raw = client.call_raw(
                CONTEXTS[kind](),
                "select_destinations",
                request_spec=spec,
                instance_uuids=raw_uuids,
                return_alternates=True,
            )
        except (InvalidRequest, Forbidden, NoValidHost) as exc:
            outcomes[type(exc).__name__.removesuffix("_Remote")] += 1
            assert exc.message
            for uuid in readable_uuids(raw_uuids):
                assert cluster.store.get_consumer(uuid) is None, "a refused request claimed"
        except oslo_messaging.MessagingTimeout:
            raise AssertionError("the worker did not answer") from None
        else:
            outcomes["placed"] += 1
            parsed = RequestSpec.from_primitive(spec)
            assert len(raw) == parsed.num_instances
            for uuid, per in zip(raw_uuids, raw, strict=True):
                primary = Selection.from_primitive(per[0])
                held = cluster.store.get_consumer(uuid)
                assert held is not None
                assert {rp: dict(a) for rp, a in held.allocations.items()} == {
                    rp: dict(a) for rp, a in primary.allocation_request.allocations.items()
                }
                cluster.store.release(uuid)
        worker.assert_kept_serving()

    case()
    cluster.check_accounting()
    print(f"\nfuzz over RabbitMQ: {CASES} cases, outcomes {dict(outcomes)}")
    assert sum(outcomes.values()) >= CASES and outcomes["placed"]
    # oslo.messaging logs an endpoint that raised something it does not declare.
    assert worker.count("Exception during message handling") == 0


GARBAGE = "{not json"


def test_foreign_values_under_the_prefix_are_reported_and_boots_go_on(
    cluster: FaultCluster,
) -> None:
    cluster.write_config(conductor={"build_timeout": 5, "sweep_interval": 0.5})
    conductor = cluster.start_conductor()
    cluster.start_compute(4, "--build-time", "0.01")
    k = cluster.store.keys  # type: ignore[attr-defined]
    with redis.Redis.from_url(SHARED_REDIS_URL, decode_responses=True) as raw:
        raw.hset(k.providers, "00000000-0000-4000-8000-00000000dead", GARBAGE)
        raw.hset(k.aggregates, "foreign", "[1, 2]")
        raw.hset(k.services, "ghost", json.dumps({"host": "ghost"}))
        raw.hset(k.instances, "not-an-instance", GARBAGE)
        # (as if it were pending: the sweep reads only what the deadline index names)
        raw.zadd(k.deadlines, {"not-an-instance": 0})
        raw.xadd(k.changes, {"k": "provider", "d": GARBAGE})
        worker = cluster.start_worker()
        # The first boot loads the damaged snapshot; the next reads more
        # damage as deltas.
        first = cluster.boot("--count", "2", "--flavor", "m1.tiny")
        raw.xadd(k.changes, {"k": "teleport", "d": "{}"})
        raw.xadd(k.changes, {"k": "usage", "d": "[]"})
        second = cluster.boot("--count", "8", "--flavor", "m1.tiny")

    assert first["summary"]["states"] == {"ACTIVE": 2}
    assert second["summary"]["states"] == {"ACTIVE": 8}
    reported = {
        e["key"]
        for e in worker.log_events()
        if e.get("event") in ("corrupt_record", "corrupt_change_skipped")
    }
    assert f"{k.providers}[00000000-0000-4000-8000-00000000dead]" in reported
    assert f"{k.aggregates}[foreign]" in reported
    assert f"{k.services}[ghost]" in reported
    assert any(key.startswith(f"{k.changes}[") for key in reported)
    assert len([key for key in reported if key.startswith(f"{k.changes}[")]) == 2
    # The conductor's sweep names the record it cannot read, and sweeps on.
    conductor_reported = {
        e["key"] for e in conductor.log_events() if e.get("event") == "corrupt_record"
    }
    assert f"{k.instances}[not-an-instance]" in conductor_reported
    assert conductor.count("sweep_failed") == 0
    assert worker.count("Exception during message handling") == 0
