"""With no consumer, the notification queue stays within its policy's bound.

The rabbit driver declares ``notifications.info`` when the worker first
publishes, so notifications wait there for a consumer that joins later; with
nothing consuming, it grows by every boot's notifications. The policy of
:func:`scheduler.notifier.queue_policy`, applied as the admin guide says, bounds
it (classic and quorum queues alike), dropping the oldest: a consumer that
joins later gets the newest notifications, as many as the bound.
"""

from __future__ import annotations

import threading
from typing import Any

import kombu
import oslo_messaging
import pytest

from bench.cluster import Cluster, rabbitmqctl
from scheduler import conf as conf_mod
from scheduler import notifier, rpc
from scheduler.cmd.notify_tail import NotificationCollector

BOUND = 20
#: Instances per batch: a batch publishes more notifications than BOUND (three each).
BATCH = 12


def queue_length(cluster: Cluster, name: str) -> int:
    """Messages in queue ``name``, from the queue itself (a passive declare:
    ``rabbitmqctl list_queues`` reports a quorum queue's length seconds late)."""
    url = "amqp://" + cluster.transport_url.split("://", 1)[1]
    with kombu.Connection(url) as conn:
        _, count, _ = conn.default_channel.queue_declare(queue=name, passive=True)
    return int(count)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("quorum", [False, True], ids=["classic", "quorum"])
def test_notification_queue_stays_within_its_bound_and_keeps_the_newest(
    cluster: Cluster, quorum: bool
) -> None:
    if quorum:
        cluster.write_config(oslo_messaging_rabbit={"rabbit_quorum_queue": True})
    topics = ["notifications", "versioned_notifications"]  # both formats, by default
    rabbitmqctl("set_policy", "-p", cluster.vhost, *notifier.queue_policy(topics, BOUND))
    cluster.start_conductor()
    cluster.start_compute(4, "--build-time", "0.01")
    worker = cluster.start_worker()

    first = cluster.boot("--count", str(BATCH), "--flavor", "m1.tiny")
    second = cluster.boot("--count", str(BATCH), "--flavor", "m1.tiny")
    newest = {i["uuid"] for i in second["instances"]}
    # Stopped, the worker has published every notification it queued: both
    # batches', more than twice the bound, of which the queue holds the bound.
    worker.stop()
    assert worker.count("instance_scheduled") == 2 * BATCH
    assert worker.count("notification_failed") == 0
    assert queue_length(cluster, "notifications.info") == BOUND
    assert queue_length(cluster, "versioned_notifications.info") == BOUND

    # A consumer that joins now, on the queue the driver declared (no pool).
    conf = conf_mod.CONF
    conf_mod.set_defaults()
    # (the deployment's config: a quorum queue is declared as one)
    conf(["--config-file", str(cluster.config_file)], project="scheduler", default_config_files=[])
    transport = rpc.get_notification_transport(conf, url=cluster.transport_url)
    seen: list[dict[str, Any]] = []
    got = threading.Event()

    def sink(note: dict[str, Any]) -> None:
        seen.append(note)
        if len(seen) >= BOUND:
            got.set()

    listener = oslo_messaging.get_notification_listener(
        transport,
        [oslo_messaging.Target(topic="notifications")],
        [NotificationCollector(sink)],
    )
    listener.start()
    try:
        assert got.wait(30), f"{len(seen)} of {BOUND} notifications"
    finally:
        listener.stop()
        listener.wait()
        transport.cleanup()
    assert len(seen) == BOUND
    # Three per instance (run_instance.start, .scheduled, .end), all of the
    # second batch's last instances: the oldest were dropped.
    about = [
        set(n["payload"].get("instance_uuids", [n["payload"].get("instance_uuid")])) for n in seen
    ]
    assert all(uuids <= newest for uuids in about), "an older notification was kept"
    assert {i["state"] for i in first["instances"] + second["instances"]} == {"ACTIVE"}
