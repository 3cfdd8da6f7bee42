"""``scheduler-worker`` as a supervisor: its worker processes killed, stopped,
reloaded and crash-looping, on real processes against RabbitMQ and Redis.

The daemon's own process (``Process.popen``) is the cotyledon master; the
workers are its children, found by the pids they log in ``worker_starting``
(``Process.serving_pids``).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import urllib.request
import uuid as uuidlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

from bench.cluster import alive
from bench.nodes import wait_until
from scheduler import rpc
from scheduler.cmd.worker import server_name
from scheduler.flavors import load_catalog
from scheduler.objects import RequestSpec
from tests.functional.conftest import REDIS_URL, Cluster, Process


def tiny_spec() -> RequestSpec:
    return RequestSpec(
        flavor=load_catalog("")["m1.tiny"], project_id="p", user_id="u", num_instances=1
    )


def placed(cluster: Cluster, transport: Any, topic: str = "scheduler") -> bool:
    """A select_destinations call on ``topic`` is answered (its claim released)."""
    uuid = str(uuidlib.uuid4())
    client = rpc.SchedulerClient(transport, topic=topic, timeout=30)
    [[primary, *_]] = client.select_destinations(
        rpc.RequestContext(user_id="u", project_id="p"), tiny_spec(), [uuid]
    )
    assert cluster.store.release(uuid)
    return bool(primary.host)


def start_workers(cluster: Cluster, workers: int, *args: str) -> Process:
    proc = cluster.start("workers", "scheduler.cmd.worker", *args)
    wait_until(lambda: proc.count("scheduler_started") == workers, 60, f"{workers} workers")
    return proc


def stopped_within(proc: Process, timeout: float) -> tuple[int, float]:
    """SIGTERM the daemon; its exit code and how long it took."""
    began = time.monotonic()
    proc.popen.send_signal(signal.SIGTERM)
    code = proc.popen.wait(timeout)
    return code, time.monotonic() - began


class FreezableRelay:
    """A TCP relay to Redis that the test can freeze: while frozen, what a
    client sends is held, so its store call hangs as on a stalled server."""

    def __init__(self, url: str) -> None:
        target = urlsplit(url)
        self._target = (target.hostname or "127.0.0.1", target.port or 6379)
        self._db = target.path
        self._server = socket.create_server(("127.0.0.1", 0))
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.held = 0  # bytes clients sent while frozen
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self._server.getsockname()[1]}{self._db}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(
                target=self._pump, args=(upstream, client, False), daemon=True
            ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if from_client and not self._open.is_set():
                with self._lock:
                    self.held += len(data)
                self._open.wait()
            try:
                dst.sendall(data)
            except OSError:
                break
        for sock in (src, dst):
            sock.close()

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.thaw()
        self._server.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()


@pytest.fixture
def relay() -> Iterator[FreezableRelay]:
    r = FreezableRelay(REDIS_URL)
    yield r
    r.close()


def test_a_killed_worker_is_restarted_in_its_slot_and_the_daemon_serves_on(
    cluster: Cluster,
) -> None:
    cluster.write_config(scheduler={"workers": 2})
    cluster.start_conductor()
    cluster.start_compute(3, "--build-time", "0.01")
    workers = start_workers(cluster, 2)
    before = workers.serving_pids()
    assert set(before) == {"scheduler-worker.0", "scheduler-worker.1"}
    assert workers.popen.pid not in before.values(), "the master serves nothing itself"
    doomed = before["scheduler-worker.1"]

    os.kill(doomed, signal.SIGKILL)
    wait_until(lambda: workers.count("scheduler_started") == 3, 30, "the replacement serving")

    after = workers.serving_pids()
    assert after["scheduler-worker.0"] == before["scheduler-worker.0"]
    assert after["scheduler-worker.1"] not in (doomed, before["scheduler-worker.0"])
    [died] = [e for e in workers.log_events() if e.get("event") == "worker_died"]
    assert (died["pid"], died["worker"], died["exit_code"], died["signal"]) == (
        doomed,
        1,
        -signal.SIGKILL,
        "SIGKILL",
    )
    assert cluster.boot("--count", "4", "--flavor", "m1.tiny")["summary"]["states"] == {
        "ACTIVE": 4
    }
    assert workers.popen.poll() is None and all(alive(pid) for pid in after.values())


def test_sigterm_stops_every_worker_cleanly_within_the_graceful_timeout(cluster: Cluster) -> None:
    cluster.write_config(scheduler={"workers": 2, "graceful_shutdown_timeout": 10})
    workers = start_workers(cluster, 2)
    pids = workers.serving_pids()

    code, took = stopped_within(workers, 20)

    assert code == 0
    assert took < 10, took
    assert not any(alive(pid) for pid in pids.values())
    stopped = {e["process"] for e in workers.log_events() if e.get("event") == "scheduler_stopped"}
    assert stopped == set(pids), "every worker drained and closed, none was killed"


def test_a_worker_that_does_not_finish_is_killed_at_the_graceful_timeout_one_worker(
    cluster: Cluster, relay: FreezableRelay, transport: Any
) -> None:
    """With ``workers = 1`` the worker is a child of the master too. Its
    store stalls while it holds a request, so it cannot drain: it is killed
    after the timeout, long before its store calls would give up."""
    cluster.write_config(scheduler={"graceful_shutdown_timeout": 2})
    cluster.start_compute(3)
    stalled = cluster.tmp / "stalled-store.conf"
    stalled.write_text(f"[redis]\nurl = {relay.url}\n")
    workers = start_workers(cluster, 1, "--config-file", str(stalled))
    [(name, pid)] = workers.serving_pids().items()
    assert name == "scheduler-worker" and pid != workers.popen.pid
    assert placed(cluster, transport)

    relay.freeze()
    rpc.SchedulerClient(transport).run_instance(
        rpc.RequestContext(user_id="u", project_id="p"), tiny_spec(), [str(uuidlib.uuid4())]
    )
    wait_until(lambda: relay.held > 0, 30, "the worker to wait on the store with the request")
    code, took = stopped_within(workers, 30)

    # Killed at the timeout, not drained: redis-py would have waited 5 s a try,
    # four tries. (Whether the master exits 0 or 1 depends on which of its
    # alarm and the worker's fires first.)
    assert code in (0, 1)
    assert 2 <= took < 6, took
    assert not alive(pid)
    assert workers.count("worker_stopping") == 1 and workers.count("scheduler_stopped") == 0


def test_sighup_restarts_the_workers_on_the_reloaded_options(
    cluster: Cluster, transport: Any
) -> None:
    cluster.write_config(scheduler={"workers": 2})
    cluster.start_compute(3)
    workers = start_workers(cluster, 2)
    before = workers.serving_pids()
    assert placed(cluster, transport)

    # A file that does not parse changes nothing: the workers serve on.
    good = cluster.config_file.read_text()
    cluster.config_file.write_text(good + "[scheduler\n")
    workers.popen.send_signal(signal.SIGHUP)
    wait_until(lambda: workers.count("worker_reload_skipped") == 2, 30, "the reload refused")
    assert workers.count("config_reload_failed") == 1
    assert workers.serving_pids() == before

    cluster.write_config(scheduler={"topic": "scheduler-reloaded"})
    workers.popen.send_signal(signal.SIGHUP)
    wait_until(lambda: workers.count("scheduler_started") == 4, 60, "the workers restarted")

    after = workers.serving_pids()
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert not any(alive(pid) for pid in before.values())
    assert {e["topic"] for e in workers.worker_starts()[-2:]} == {"scheduler-reloaded"}
    assert workers.count("worker_died") == 0, "a reload is a clean stop, not a death"
    assert placed(cluster, transport, topic="scheduler-reloaded")
    assert workers.popen.poll() is None


def test_a_worker_dying_at_once_is_restarted_with_a_growing_delay(cluster: Cluster) -> None:
    """The worker's health port is taken, so it dies as soon as it serves;
    freed, the next start comes up and stays."""
    squatter = socket.create_server(("127.0.0.1", 0))
    port = squatter.getsockname()[1]
    cluster.write_config(scheduler={"health_port": port})
    try:
        workers = cluster.start("workers", "scheduler.cmd.worker")
        wait_until(lambda: workers.count("worker_died") >= 4, 90, "four deaths in a row")
    finally:
        squatter.close()
    workers.wait_for("health_endpoint", timeout=60)

    events = workers.log_events()
    died = [e for e in events if e.get("event") == "worker_died"][:4]
    assert [e["restart_in"] for e in died] == [0, 1, 2, 4]
    assert {e["exit_code"] for e in died} == {1}
    assert {e["pid"] for e in died} <= {e["pid"] for e in workers.worker_starts()}
    # Each replacement waited at least its delay before it served again.
    served = [stamp(e) for e in events if e.get("event") == "scheduler_started"]
    for death in died:
        after = [t for t in served if t > stamp(death)]
        assert after and after[0] - stamp(death) >= death["restart_in"], (death, after[:1])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        assert response.status == 200


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()


def test_a_second_worker_with_the_same_host_leaves_the_first_ones_queue_when_it_stops(
    cluster: Cluster, transport: Any
) -> None:
    """Two daemons started with one ``[DEFAULT] host`` by mistake serve one
    server queue: the one stopping keeps it (and says why) instead of deleting
    it under the other, which then lost its consumer and logged an error."""
    cluster.start_compute(1)
    first = cluster.start_worker("first")
    second = cluster.start_worker("second")
    queue = f"scheduler.{server_name(f'node-{cluster.ident}', 0)}"
    wait_until(lambda: cluster.queues().get(queue) == 2, 30, "both workers consuming")

    second.stop()
    assert cluster.queues().get(queue) == 1
    assert second.count("queues_kept") == 1
    assert placed(cluster, transport)
    first.assert_kept_serving()

    first.stop()
    assert cluster.queues().get(queue) is None  # the last one out deletes it
