"""Nova-compat tier: Nova 34's own scheduler client against a running worker.

The deployment is the functional tier's (its fixtures, imported below: a
private vhost and key prefix per test, real processes, and
:meth:`Cluster.check_accounting` after every test), with the worker's
Nova-compatible endpoint enabled. The caller is ``drive.py`` run by the
python of a side environment where ``nova==34.0.0`` is installed (named by
``SCHEDULER_TEST_NOVA_PYTHON``; ``tox -e nova-compat`` builds it): Nova's
code runs only in that process, never in this one.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# The functional tier's fixtures (the deployment and its invariant check, the
# services' check), reused as they are.
from tests.functional.conftest import Cluster, cluster, services_up  # noqa: F401

NOVA_PYTHON = os.environ.get("SCHEDULER_TEST_NOVA_PYTHON", "")
DRIVER = Path(__file__).with_name("drive.py")
#: The cell the endpoint names in every Selection (``[nova_compat] cell_uuid``).
CELL_UUID = "5b1cf2a8-6f0e-4c39-9d53-2f6f3c0d7a11"
#: The project and user of the driver's admin context (drive.py's).
PROJECT_ID = "nova-compat-project"
#: Where the worker publishes Nova's notifications ([nova_compat] exchange and
#: notifications_topic, the defaults), and those of its own ([notifications]
#: versioned_topic moved off Nova's: queues are named by topic alone).
NOVA_EXCHANGE = "nova"
NOVA_NOTIFICATIONS_TOPIC = "versioned_notifications"
OWN_VERSIONED_TOPIC = "scheduler_versioned_notifications"
START = "scheduler.select_destinations.start"
END = "scheduler.select_destinations.end"


class Listened:
    """Notifications read off the broker, in the order they arrived."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, notification: dict[str, Any]) -> None:
        with self._lock:
            self.seen.append(notification)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The first ``count`` (then a moment for any more to show up)."""
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        with self._lock:
            return list(self.seen)


@dataclass
class NovaCaller:
    """The driver process: one Nova ``select_destinations`` per :meth:`call`.

    Every instance uuid it was asked to place is released when the test ends
    (before the invariants are checked), as a conductor that gave up would;
    a test adds the other consumers it made (a migration's) to ``release``.
    """

    proc: subprocess.Popen[bytes]
    log_path: Path
    release: set[str] = field(default_factory=set)
    #: Whether the driver said it is ready (Nova imported and configured).
    ready: bool = False
    #: Per call, in order: the RequestSpecPayload Nova's scheduler makes of
    #: its spec, and whether it was answered with Selections.
    payloads: list[tuple[dict[str, Any], bool]] = field(default_factory=list)

    def call(
        self, spec: dict[str, Any], instance_uuids: list[str], return_alternates: bool
    ) -> dict[str, Any]:
        """drive.py's answer: ``{"selections": ...}`` or ``{"error": ...}``
        (the payload Nova makes of the spec kept in :attr:`payloads`)."""
        self.release.update(instance_uuids)
        answer = self._ask(
            {
                "spec": spec,
                "instance_uuids": instance_uuids,
                "return_alternates": return_alternates,
            }
        )
        self.payloads.append((answer.pop("payload"), "selections" in answer))
        return answer

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if not self.ready:
            assert self._read(timeout=60) == {"ready": True}
            self.ready = True
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        return self._read(timeout=120)

    def check_notifications(self, listened: Listened, publisher_id: str) -> None:
        """Nova's notifications of every call so far, as Nova's scheduler
        publishes them: per call, in call order, a ``.start`` and, when it was
        answered with Selections, an ``.end`` (only for calls refused by the
        decision, not before it), at INFO from ``publisher_id``; each payload
        equal to the one Nova's scheduler makes of the same RequestSpec, and
        read by Nova's own ``RequestSpecPayload`` to the same."""
        expected = []
        for payload, selected in self.payloads:
            expected += [(START, payload)] + ([(END, payload)] if selected else [])
        seen = listened.wait_for(len(expected))
        assert [n["event_type"] for n in seen] == [e for e, _ in expected]
        for n, (_, payload) in zip(seen, expected, strict=True):
            assert (n["priority"], n["publisher_id"]) == ("INFO", publisher_id), n
            assert n["payload"] == payload, (n["event_type"], n["payload"], payload)
        read = self._ask({"notification_payloads": [n["payload"] for n in seen]})
        assert read == {"read": [p for _, p in expected]}

    def select(
        self, spec: dict[str, Any], instance_uuids: list[str], return_alternates: bool = True
    ) -> list[list[dict[str, Any]]]:
        """The Selections per instance, as Nova's caller deserialized them."""
        answer = self.call(spec, instance_uuids, return_alternates)
        assert "selections" in answer, answer
        selections: list[list[dict[str, Any]]] = answer["selections"]
        return selections

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        assert line, f"drive.py did not answer:\n{self.log_path.read_text()[-4000:]}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def nova_cluster(cluster: Cluster) -> Cluster:  # noqa: F811
    """The functional tier's deployment, its workers serving Nova's RPC API.

    The scheduler's own topic is moved off ``scheduler``, the one Nova's
    client sends to ([nova_compat] topic): RabbitMQ queues are named by topic
    alone, whatever the exchange, so with both on ``scheduler`` the two RPC
    servers of a worker share one queue and the native server takes Nova's
    calls (UnsupportedVersion 4.5).
    """
    cluster.write_config(
        nova_compat={"enabled": "true", "cell_uuid": CELL_UUID, "notifications": "true"},
        scheduler={"topic": "scheduler-native"},
        notifications={"versioned_topic": OWN_VERSIONED_TOPIC},
    )
    return cluster


@pytest.fixture
def nova_notifications(nova_cluster: Cluster) -> Iterator[Listened]:
    """What arrives on Nova's exchange and notification topic from now on, as
    a consumer of Nova's notifications reads it (a pool of its own)."""
    import oslo_messaging

    from scheduler import conf as conf_mod
    from scheduler import rpc
    from scheduler.cmd.notify_tail import NotificationCollector

    conf = conf_mod.CONF
    conf_mod.set_defaults()
    conf([], project="scheduler", default_config_files=[])
    transport = rpc.get_notification_transport(conf, url=nova_cluster.transport_url)
    listened = Listened()
    listener = oslo_messaging.get_notification_listener(
        transport,
        [oslo_messaging.Target(exchange=NOVA_EXCHANGE, topic=NOVA_NOTIFICATIONS_TOPIC)],
        [NotificationCollector(listened.add)],
        pool="nova-compat-test",
    )
    listener.start()
    try:
        yield listened
    finally:
        listener.stop()
        listener.wait()
        transport.cleanup()


def publisher_id(deployment: Cluster) -> str:
    """Nova's scheduler, on the worker's host."""
    return f"nova-scheduler:node-{deployment.ident}"


@pytest.fixture
def nova(nova_cluster: Cluster) -> Iterator[NovaCaller]:
    """Nova 34's client (drive.py in the side environment) into the cluster's vhost.

    Start the worker first: a call is answered only once its server listens.
    """
    if not NOVA_PYTHON or not Path(NOVA_PYTHON).is_file():
        pytest.fail(
            "SCHEDULER_TEST_NOVA_PYTHON must name the python of an environment with "
            "nova==34.0.0 (tox -e nova-compat builds one)",
            pytrace=False,
        )
    conf = nova_cluster.tmp / "nova.conf"
    conf.write_text(
        "[DEFAULT]\n"
        f"transport_url = {nova_cluster.transport_url}\n"
        "rpc_response_timeout = 30\n"
        # Nova's select_destinations waits long_rpc_timeout (30 minutes by
        # default): an unanswered call fails the test in a minute instead.
        "long_rpc_timeout = 60\n"
        # Nova makes its notification payloads only with notifications on:
        # the driver's payloads (drive.py's answers) are made, not sent.
        "[oslo_messaging_notifications]\n"
        "driver = test\n"
        "[notifications]\n"
        "notification_format = versioned\n"
    )
    log_path = nova_cluster.tmp / "nova-drive.log"
    # The side environment is installed without bytecode: let the driver
    # write it for what it imports (Nova's import takes twice as long without).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(
        [NOVA_PYTHON, str(DRIVER), "--config-file", str(conf)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log_path.open("wb"),
        env=env,
    )
    # Nova's import (seconds) overlaps the test's start of its processes: the
    # first call waits for the driver to be ready.
    caller = NovaCaller(proc, log_path)
    try:
        yield caller
    finally:
        caller.close()
        for consumer in caller.release:
            nova_cluster.store.release(consumer)


def new_uuids(n: int) -> list[str]:
    return [str(uuidlib.uuid4()) for _ in range(n)]
