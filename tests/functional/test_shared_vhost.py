"""Two deployments on one RabbitMQ vhost, kept apart by their topics.

Queues are named by topic alone (``control_exchange`` does not change a
queue's name), so two deployments on one vhost with the default topics
consume each other's requests. With ``[scheduler] topic``, ``[conductor]
topic`` and ``[compute] topic`` set apart (and a key prefix each), both run a
boot storm at once and neither sees the other's requests.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import Cluster

COUNT = 30


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cluster, Cluster]]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Cluster(tmp_path / "a")
    b = Cluster(tmp_path / "b", shared_vhost=a.vhost)
    try:
        yield a, b
        a.check_accounting()
        b.check_accounting()
    finally:
        try:
            b.close()
        finally:
            a.close()


@pytest.mark.timeout(120)
def test_two_deployments_on_one_vhost_with_their_own_topics_do_not_cross(
    pair: tuple[Cluster, Cluster],
) -> None:
    a, b = pair
    assert a.vhost == b.vhost and a.prefix != b.prefix
    b.write_config(
        scheduler={"topic": "scheduler-b"},
        conductor={"topic": "conductor-b"},
        compute={"topic": "compute-b"},
        # Another exchange too, as an operator would set it: it does not
        # separate the queues by itself.
        DEFAULT={"control_exchange": "deployment-b"},
    )
    workers = {}
    computes = {}
    for c in (a, b):
        c.start_conductor()
        computes[c.ident] = c.start_compute(4, "--build-time", "0.01")
        workers[c.ident] = c.start_worker()

    results: dict[str, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def storm(c: Cluster) -> None:
        try:
            results[c.ident] = c.boot("--count", str(COUNT), "--flavor", "m1.tiny", timeout=60)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=storm, args=(c,)) for c in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    uuids = {c.ident: [i["uuid"] for i in results[c.ident]["instances"]] for c in (a, b)}
    for c, other in ((a, b), (b, a)):
        assert Counter(i["state"] for i in results[c.ident]["instances"]) == {"ACTIVE": COUNT}
        records = c.store.list_instances(uuids[c.ident])
        assert Counter(r.state for r in records) == {"ACTIVE": COUNT}
        # Every instance went through this deployment's own worker and compute,
        # and none of the other deployment's did.
        assert workers[c.ident].count("instance_scheduled") == COUNT
        worker_log = workers[c.ident].log_path.read_text()
        compute_log = computes[c.ident].log_path.read_text()
        crossed = [u for u in uuids[other.ident] if u in worker_log or u in compute_log]
        assert not crossed, f"{c.ident}'s daemons handled {len(crossed)} of {other.ident}'s"
        assert not other.store.list_instances(uuids[c.ident])
