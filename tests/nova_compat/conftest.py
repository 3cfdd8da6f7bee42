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

    def call(
        self, spec: dict[str, Any], instance_uuids: list[str], return_alternates: bool
    ) -> dict[str, Any]:
        """drive.py's answer: ``{"selections": ...}`` or ``{"error": ...}``."""
        if not self.ready:
            assert self._read(timeout=60) == {"ready": True}
            self.ready = True
        self.release.update(instance_uuids)
        request = {
            "spec": spec,
            "instance_uuids": instance_uuids,
            "return_alternates": return_alternates,
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        return self._read(timeout=120)

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
        nova_compat={"enabled": "true", "cell_uuid": CELL_UUID},
        scheduler={"topic": "scheduler-native"},
    )
    return cluster


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
        "[oslo_messaging_notifications]\n"
        "driver = noop\n"
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
