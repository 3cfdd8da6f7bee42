"""A 3-node RabbitMQ cluster, a node stopped mid-storm: the one holding the
``scheduler`` queue, or the one holding most client connections.

The daemons (conductor stub, compute simulator, worker) name all three nodes
in their transport URL, each connection shuffling them, so their connections
spread over the nodes. 200 boots are cast; while they are in flight one node
is stopped (and left down until the test is over):

* ``queue_home``: the node the ``scheduler`` queue lives on (its leader, for a
  quorum queue);
* ``most_connections``: the node holding most of the deployment's client
  connections at that moment, as the broker lists them, of the two the queue
  does not live on (see ``node_to_stop``): clients are cut off, not the queue.

Clients connected to the node stopped reconnect to another node in the URL;
what was in flight on those connections (a cast being published, a reply on
a queue of the stopped node) is what the conductor re-drives.

* ``quorum``: ``[oslo_messaging_rabbit] rabbit_quorum_queue = True``: the topic
  queues are quorum queues, replicated on every node; the node stopped is the
  ``scheduler`` queue's leader (``queue_home``). The two nodes left are a
  majority: they elect a new leader, and keep what the queue held.
* ``classic``: the default: the ``scheduler`` queue lives on one node only;
  stopped (``queue_home``), the queue is gone with what it held, until the
  worker reconnects elsewhere and declares it again. What it held is lost and
  re-driven.

Either way the storm settles with every instance ACTIVE or in ERROR with a
reason, nothing lost, nothing doubled, usage equal to the sum of live
allocations; the storm time, the time from the fault to settled, the
connections per node and the re-drives are printed as figures.
"""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cluster import reap_vhost_deletions
from tests.functional_faults.conftest import (
    FaultCluster,
    PrivateRabbitCluster,
    wait_until,
)
from tests.functional_faults.storm import FAST_CONDUCTOR, assert_settled_cleanly, start_storm

BOOTS = 200


@pytest.fixture(params=[True, False], ids=["quorum", "classic"])
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, private_rabbit_cluster: PrivateRabbitCluster
) -> Iterator[FaultCluster]:
    """A deployment on the 3-node cluster (its topic queues quorum or classic
    ones), checked (accounting) and torn down after the test, once every node
    is running again."""
    ident = uuidlib.uuid4().hex[:10]
    made = FaultCluster(
        tmp_path,
        ident=ident,
        broker=private_rabbit_cluster.running(),
        rabbit_url=private_rabbit_cluster.url(f"test-{ident}"),
        rabbit_options={"rabbit_quorum_queue": request.param},
    )
    try:
        yield made
        made.check_accounting()
    finally:
        private_rabbit_cluster.heal()
        made.close()
        # Its quorum queues make the vhost slow to delete: done before the
        # next case, whose node stop must not wait for it mid-storm.
        reap_vhost_deletions()


#: The node stopped: the one the ``scheduler`` queue lives on (its leader, for
#: a quorum queue), or the one holding most of the deployment's client
#: connections when the fault comes, as the broker lists them (see node_to_stop).
FAULTS = ["queue_home", "most_connections"]


def node_to_stop(fault: str, home: str, connections: dict[str, int]) -> str:
    """The node ``fault`` stops. ``most_connections``: the node holding most
    connections, of those the queue does not live on. The clients shuffle the
    nodes of their URL, so the busiest node is now and then the queue's too;
    the other two nodes are chosen from then, so that the two faults always
    hit different nodes: one moves the queue, the other only clients."""
    if fault == "queue_home":
        return home
    return max((n for n in connections if n != home), key=lambda n: connections[n])


# The test's own budget: the module's cluster, started in the first case's
# setup, and every node's restart in teardown are bounded by rabbitmqctl's.
@pytest.mark.timeout(150, func_only=True)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_node_stopped_mid_storm(
    fault: str, deployment: FaultCluster, private_rabbit_cluster: PrivateRabbitCluster
) -> None:
    cluster, rabbit = deployment, private_rabbit_cluster
    cluster.write_config(conductor=FAST_CONDUCTOR)
    conductor = cluster.start_conductor()
    # Builds long enough that the fault lands while most are in flight, however
    # slowly the boot commands return once they have cast.
    cluster.start_compute(30, "--build-time", "4")
    worker = cluster.start_worker()

    queue = rabbit.queues(cluster.vhost)["scheduler"]
    quorum = cluster.rabbit_options["rabbit_quorum_queue"]
    assert queue["type"] == ("quorum" if quorum else "classic"), queue
    if quorum:
        assert len(queue["members"]) == 3, queue
    home = queue["home"]

    started = time.monotonic()
    storm = start_storm(cluster, BOOTS, wait=False)
    wait_until(lambda: storm.states()["ACTIVE"] >= 20, 60, "the storm to be under way")
    connections = rabbit.connections(cluster.vhost)
    stopped = rabbit.node_named(node_to_stop(fault, home, connections))
    in_flight = storm.mark_fault()
    stopped.stop()
    if stopped.node == home:
        wait_until(
            lambda: (
                rabbit.queues(cluster.vhost).get("scheduler", {}).get("home") not in (None, home)
            ),
            30,
            "the scheduler queue on another node",
        )

    storm.collect()
    assert len(storm.uuids) == BOOTS
    storm.settle(90)
    assert_settled_cleanly(storm)
    figures = storm.figures(
        storm_seconds=round(time.monotonic() - started, 1),
        queue_type=queue["type"],
        fault=fault,
        connections_at_fault=[connections[n.node] for n in rabbit.nodes],
        queue_home_node=rabbit.nodes.index(rabbit.node_named(home)),
        stopped_node=rabbit.nodes.index(stopped),
        stopped_held_most=connections[stopped.node] == max(connections.values()),
        redrives_logged=conductor.count("request_redriven"),
        claims_reused=worker.count("allocation_reused"),
    )
    print(f"\n{queue['type']} queues, {fault} node stopped:", json.dumps(figures))
    assert in_flight > 0
    assert figures["final_states"] == {"ACTIVE": BOOTS}, figures
    if fault == "most_connections":
        # Clients were cut off, not the queue: it stayed where it was.
        assert stopped.node != home and connections[stopped.node] > 0, figures
        assert rabbit.queues(cluster.vhost)["scheduler"]["home"] == home, figures
    worker.assert_kept_serving()
    assert conductor.popen.poll() is None
