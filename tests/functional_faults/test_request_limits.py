"""Requests over the per-request limit (MAX_INSTANCES_PER_REQUEST instances).

A worker that refuses such a request fails every instance of it, however many
(none is left BUILDING for the conductor to re-drive and be refused again),
claims nothing, and logs the same refusal a few times a minute at most,
however often it comes; ``conductor-stub boot`` refuses one whole, in one
line, before anything is recorded or sent.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler import rpc
from scheduler.flavors import load_catalog
from scheduler.log import RepeatLimiter
from scheduler.objects import ERROR, MAX_INSTANCES_PER_REQUEST, InstanceRecord, RequestSpec
from tests.functional_faults.conftest import FaultCluster, PrivateRabbit, wait_until

OVER = MAX_INSTANCES_PER_REQUEST + 5
#: How many times the test sends the same oversized request.
REPEATS = 12


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, private_rabbit: PrivateRabbit
) -> Iterator[tuple[FaultCluster, Any]]:
    """A conductor, a worker and a compute; the conductor's deadlines far
    beyond the test, so only the worker's answer can end an instance."""
    cluster = FaultCluster(tmp_path_factory.mktemp("request-limits"), broker=private_rabbit)
    cluster.write_config(conductor={"build_timeout": 300})
    try:
        cluster.start_conductor()
        cluster.start_compute(2, "--build-time", "0.01")
        worker = cluster.start_worker()
        yield cluster, worker
        cluster.check_accounting()
    finally:
        cluster.close()


def _record_as_the_conductor_would(cluster: FaultCluster, n: int) -> tuple[list[str], Any]:
    """``n`` instance records of one request (spec and deadline as Booter writes
    them); the uuids and the request spec's primitive."""
    spec = RequestSpec(
        flavor=load_catalog("")["m1.tiny"], project_id="demo", user_id="demo", num_instances=n
    ).to_primitive()
    uuids = [str(uuidlib.uuid4()) for _ in range(n)]
    now = time.time()
    cluster.store.create_instances(
        InstanceRecord(
            uuid=u,
            request_spec=spec,
            created_at=now,
            updated_at=now,
            request_id="req-oversized",
            deadline=now + 300,
        )
        for u in uuids
    )
    return uuids, spec


@pytest.mark.timeout(90)
def test_an_oversized_request_fails_every_instance_and_its_refusal_is_rate_limited(
    deployment: tuple[FaultCluster, Any],
) -> None:
    cluster, worker = deployment
    conductor = cluster.processes[0]
    uuids, spec = _record_as_the_conductor_would(cluster, OVER)
    transport = cluster.open_transport()
    try:
        client = rpc.SchedulerClient(transport)
        ctxt = rpc.RequestContext(user_id="demo", project_id="demo")
        started = time.monotonic()
        client.cast_raw(ctxt, "run_instance", request_spec=spec, instance_uuids=uuids)
        wait_until(
            lambda: all(r.state == ERROR for r in cluster.store.list_instances(uuids)),
            20,
            f"all {OVER} instances of the oversized request to end in ERROR",
        )
        failed_in = time.monotonic() - started
        records = cluster.store.list_instances(uuids)
        assert len(records) == OVER
        assert {r.fault for r in records} == {
            "invalid request: request_spec.num_instances must be between 1 and "
            f"{MAX_INSTANCES_PER_REQUEST}, got {OVER}"
        }
        assert not cluster.store.list_consumers(), "nothing claimed"

        # The same request again and again (a client retrying blindly): every
        # one answered, the refusal logged a few times only.
        told = conductor.count("schedule_failed")
        for _ in range(REPEATS):
            client.cast_raw(ctxt, "run_instance", request_spec=spec, instance_uuids=uuids)
        per_request = -(-OVER // MAX_INSTANCES_PER_REQUEST)  # casts of schedule_failed
        wait_until(
            lambda: conductor.count("schedule_failed") >= told + REPEATS * per_request,
            30,
            "every repeat answered",
        )
    finally:
        transport.cleanup()
    refusals = [e for e in worker.log_events() if e.get("event") == "run_instance_refused"]
    warnings = Counter(e["event"] for e in worker.log_events() if e.get("level") == "warning")
    print(
        f"\noversized request: {OVER} instances in ERROR in {failed_in:.2f} s; "
        f"{1 + REPEATS} refusals, {len(refusals)} logged; warnings {dict(warnings)}"
    )
    assert len(refusals) <= RepeatLimiter().burst < 1 + REPEATS, refusals
    assert sum(warnings.values()) <= RepeatLimiter().burst, warnings
    for refusal in refusals:  # a log line lists a bounded number of uuids
        assert len(refusal["instance_uuids"]) == MAX_INSTANCES_PER_REQUEST
        assert refusal["instance_uuids_omitted"] == OVER - MAX_INSTANCES_PER_REQUEST
    assert not cluster.store.list_consumers(), "nothing claimed"
    worker.assert_kept_serving()


@pytest.mark.timeout(60)
def test_the_boot_command_refuses_an_oversized_request_before_recording_anything(
    cluster: FaultCluster,
) -> None:
    n = str(MAX_INSTANCES_PER_REQUEST + 1)
    code, stdout, stderr = cluster.conductor_stub("boot", "--count", n, "--per-request", n)
    assert code == 2, (code, stdout, stderr)
    assert stderr == (
        f"conductor-stub boot: --per-request must be at most {MAX_INSTANCES_PER_REQUEST} "
        "(the scheduler refuses a larger request whole)\n"
    )
    assert stdout == ""
    assert list(cluster.store.scan_instances()) == [], "nothing recorded"
    assert cluster.store.list_consumers() == []
