"""The broker restarted while the worker casts a boot storm's builds.

The requests of a boot storm wait in the scheduler's queue (its worker
stopped once it had declared it); a worker started then drains them, casting
their builds, and the broker is restarted while it does. The worker
publishes its build casts on a connection of its own and returns
only once the broker confirmed them; a connection lost under a batch is
opened again, with the bounded back-off of ``[oslo_messaging_rabbit]``, and
the batch published again. Whatever the restart loses (the queues are not
durable: the requests and casts they held; a cast published before its
compute re-declared its queue) the conductor re-drives. The storm settles
with every instance ACTIVE, each built exactly once (one ``build_succeeded``
on the compute, however many casts reached it), nothing doubled or leaked.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.functional_faults.conftest import FaultCluster, PrivateRabbit, wait_until
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

INSTANCES = 300


@pytest.mark.timeout(240)
def test_a_broker_restart_mid_storm_loses_no_build_and_doubles_none(
    cluster: FaultCluster, private_rabbit: PrivateRabbit
) -> None:
    cluster.write_config(conductor=FAST_CONDUCTOR)
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(24, "--build-time", "1")
    # The scheduler's queue declared, then kept (not auto-deleted) with no consumer.
    cluster.start_worker(name="first-worker").stop()
    storm = start_storm(cluster, INSTANCES)
    worker = cluster.start_worker()
    wait_until(
        lambda: worker.count("instance_scheduled") >= 20, 60, "the worker to be casting builds"
    )

    in_flight = storm.mark_fault()
    private_rabbit.restart()

    storm.settle(150)
    records = assert_settled_cleanly(storm)
    built = Counter(
        e.get("instance_uuid") for e in compute.log_events() if e.get("event") == "build_succeeded"
    )
    figures = storm.figures(
        redrives_logged=conductor.count("request_redriven"),
        cast_connections_reopened=worker.count("cast_connection_lost"),
        duplicates_ignored=compute.count("build_duplicate_ignored")
        + compute.count("build_duplicate_reported"),
    )
    print("\nbuild casts, broker restart:", json.dumps(figures))
    assert in_flight > 0
    assert figures["final_states"] == {"ACTIVE": INSTANCES}, figures
    # Each instance built once, where its record says it runs.
    assert built == Counter({r.uuid: 1 for r in records}), figures
    # The worker's build channel saw its connection go, and published again.
    assert figures["cast_connections_reopened"] >= 1, figures
    worker.assert_kept_serving()
    assert conductor.popen.poll() is None
