"""Retries counted honestly: "max retries exceeded" means ``max_attempts``
builds really failed.

A small cloud with little headroom (eight hosts of four instances each) takes
a storm of more instances than it holds while half of the builds fail. A
failed build's alternates were chosen when the request was placed; by the
time it is rescheduled the storm has often filled them, and they are
refused at their claim. Such an alternate was never built on: the conductor
asks the scheduler again (the hosts tried ignored) while fewer than
``max_attempts`` builds failed. So every instance in ERROR with
MaxRetriesExceeded had exactly ``max_attempts`` failed builds, as the
computes logged them (``build_failed``), and its admin details say so; an
instance the full cloud could not take after fewer failures ends "no valid
host". The accounting is checked after.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from scheduler.exceptions import MaxRetriesExceeded, NoValidHost
from tests.functional_faults.conftest import FaultCluster
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

HOSTS = 8
MAX_ATTEMPTS = 3
#: 512 MB of each host reserved: room for four m1.tiny (512 MB) a host.
MEMORY_MB = 512 + 4 * 512
INSTANCES = 64  # twice what the cloud holds


@pytest.mark.timeout(150)
def test_max_retries_exceeded_means_max_attempts_builds_failed(cluster: FaultCluster) -> None:
    cluster.write_config(
        scheduler={"max_attempts": MAX_ATTEMPTS},
        conductor=FAST_CONDUCTOR,
    )
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(
        HOSTS,
        "--memory-mb",
        str(MEMORY_MB),
        "--fail-rate",
        "0.5",
        "--build-time",
        "0.02",
    )
    worker = cluster.start_worker()
    storm = start_storm(cluster, INSTANCES, senders=2)
    storm.settle(90)
    records = assert_settled_cleanly(storm)

    failed_builds = Counter(
        e["instance_uuid"] for e in compute.log_events() if e.get("event") == "build_failed"
    )
    max_retries = [r for r in records if r.fault == MaxRetriesExceeded.USER_MESSAGE]
    counted = {r.uuid: failed_builds[r.uuid] for r in max_retries}
    refused = conductor.count("alternate_skipped")
    asked_again = conductor.count("alternates_exhausted")
    print(
        "\nretries:",
        json.dumps(
            storm.figures(
                max_retries_exceeded=len(max_retries),
                failed_builds_of_those=dict(Counter(counted.values())),
                alternates_refused=refused,
                asked_the_scheduler_again=asked_again,
                scheduler_decisions=worker.count("instance_scheduled"),
            )
        ),
    )
    # Some reschedules found their alternates taken (else this proved nothing).
    assert refused, "no alternate was refused at its claim"
    # Every "max retries exceeded" had max_attempts failed builds, and says so.
    short = {uuid: n for uuid, n in counted.items() if n != MAX_ATTEMPTS}
    assert not short, f"max retries exceeded after fewer failed builds: {short}"
    for record in max_retries:
        assert record.attempts == MAX_ATTEMPTS, record
        assert record.fault_details and record.fault_details.startswith(
            f"max retries exceeded: {MAX_ATTEMPTS} build(s) failed"
        ), record.fault_details
    # The rest of the errors: the cloud was full.
    others = Counter(r.fault for r in records if r.state == "ERROR" and r not in max_retries)
    assert set(others) <= {NoValidHost.USER_MESSAGE}, others
