"""Fault tier: private RabbitMQ and Redis nodes the tests may stop, restart and
lock down, real processes, and faults injected mid-storm.

* One private RabbitMQ node per session (its own node name, AMQP port,
  distribution port, data and log directories, owned by the ``rabbitmq``
  user), with a TLS listener beside the plain one. Every test of this tier
  talks to it, in a virtual host of its own; the restart test stops and
  starts it. The shared broker on 5672 is never touched.
* Private ``redis-server`` processes on ports and directories of their own
  (append-only persistence, passwords, ACL users, TLS), made per test where a
  test needs to restart or lock down its store; other tests use the shared
  Redis under a key prefix of their own (never restarted, never flushed).
* A self-signed CA and a server certificate for ``localhost``, made with
  ``openssl`` once per session.

Nothing here is skipped: a missing ``rabbitmq-server``, ``redis-server`` or
``openssl`` fails the tier. After every test the store's accounting is
checked (usage == sum of live allocations, within capacity).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
import uuid as uuidlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import key_slot

from bench.cluster import (
    Cluster,
    Process,
    add_vhost,
    alive,
    delete_vhost_later,
    reap_vhost_deletions,
)
from bench.nodes import Certs, PrivateRedis, free_port, port_open, wait_until
from bench.nodes import private_dir as _private_dir
from scheduler.store import Store, open_store
from tests.ordering import longest_first

SHARED_REDIS_URL = os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: The private node's administrator (created in it, with every permission).
ADMIN_USER, ADMIN_PASSWORD = "ftest-admin", "ftest-admin-pw"

#: Back-off bounds for the daemons of this tier: reconnect within seconds of
#: a broker coming back, so a test waits seconds, not the 30 s default.
RABBIT_BACKOFF = {
    "rabbit_retry_interval": 1,
    "rabbit_retry_backoff": 1,
    "rabbit_interval_max": 3,
    "kombu_reconnect_delay": 0.5,
}


def _need(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        pytest.fail(f"the fault tier needs {program} on PATH", pytrace=False)
    return path


# --- certificates ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def certs() -> Iterator[Certs]:
    _need("openssl")
    base = _private_dir("sched-certs-")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    ca_key, ca, key, csr, cert = (
        base / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    )
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=scheduler-test-ca",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=localhost",
    )
    ext = base / "ext.cnf"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    for path in base.iterdir():
        path.chmod(0o644)
    yield Certs(ca=ca, cert=cert, key=key)
    shutil.rmtree(base, ignore_errors=True)


#: The tier's longest modules, longest first (see :mod:`tests.ordering`), from
#: ``pytest -n 2 --dist loadscope --durations=0 tests/functional_faults``
#: (summed per module): the 3-node cluster's four cases (300 s on a loaded
#: machine) and the bad-input fuzz (one test, 70-160 s) must not come last.
LONGEST_FIRST = (
    "test_rabbit_cluster.py",
    "test_bad_input_rpc.py",
    "test_reconcile.py",
    "test_build_guard.py",
    "test_restarts.py",
    "test_build_cast_restart.py",
    "test_storm.py",
    "test_bad_input.py",
    "test_redis_cluster.py",
    "test_secrets.py",
    "test_worker_kill.py",
    "test_move_rollback.py",
    "test_sentinel_failover.py",
    "test_compute_kill.py",
    "test_step_replay.py",
    "test_view_rollback.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items, Path(__file__).parent, LONGEST_FIRST)


# --- the private RabbitMQ node --------------------------------------------------------


class PrivateRabbit:
    """A RabbitMQ node of the tests' own: start, stop, restart, rabbitmqctl."""

    def __init__(self, certs: Certs) -> None:
        _need("rabbitmq-server")
        self.base = _private_dir("sched-rabbit-", owner="rabbitmq")
        self.node = f"ftest{uuidlib.uuid4().hex[:8]}@localhost"
        self.port, self.tls_port, self.dist_port = free_port(), free_port(), free_port()
        for name in ("mnesia", "log"):
            (self.base / name).mkdir()
        (self.base / "enabled_plugins").write_text("[].\n")
        (self.base / "rabbitmq.conf").write_text(
            "\n".join(
                [
                    f"listeners.tcp.default = 127.0.0.1:{self.port}",
                    f"listeners.ssl.default = 127.0.0.1:{self.tls_port}",
                    f"ssl_options.cacertfile = {certs.ca}",
                    f"ssl_options.certfile = {certs.cert}",
                    f"ssl_options.keyfile = {certs.key}",
                    "ssl_options.verify = verify_none",
                    "ssl_options.fail_if_no_peer_cert = false",
                    "loopback_users = none",
                    "log.console = false",
                    "log.file.level = warning",
                ]
            )
            + "\n"
        )
        for path in self.base.rglob("*"):
            shutil.chown(path, "rabbitmq", "rabbitmq")
        self.env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.base / "rabbit.pid"),
        }
        self.stops = 0

    def ctl(self, *args: str, timeout: float = 60) -> str:
        out = subprocess.run(
            ["rabbitmqctl", "-q", "-n", self.node, *args],
            env=self.env,
            capture_output=True,
            timeout=timeout,
        )
        if out.returncode:
            raise AssertionError(f"rabbitmqctl {args[0]} failed: {out.stderr.decode()[-2000:]}")
        return out.stdout.decode()

    def start(self) -> None:
        # ``rabbitmqctl wait`` reads the pid file once it exists, and fails
        # (garbage_in_pid_file) if it reads it between its creation and the
        # write of the pid, which a loaded machine makes likely: wait for a
        # pid in it first, a stale file of an earlier run removed beforehand.
        (self.base / "rabbit.pid").unlink(missing_ok=True)
        subprocess.run(
            ["rabbitmq-server", "-detached"],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_until(lambda: self._pid() is not None, 90, "the broker's pid file")
        self.ctl("wait", str(self.base / "rabbit.pid"), "--timeout", "90", timeout=120)
        self.ctl("await_startup", "--timeout", "90", timeout=120)
        wait_until(lambda: port_open(self.port), 30, "the private broker's AMQP port")

    def stop(self) -> None:
        """Stop the node and wait until its OS process is gone and its ports closed
        (once the vhost deletions under way have ended: none is cut short)."""
        reap_vhost_deletions()
        pid = self._pid()
        self.ctl("stop", timeout=90)
        if pid is not None:
            wait_until(lambda: not alive(pid), 60, "the broker's process to exit")
        wait_until(lambda: not port_open(self.port), 30, "the broker's port to close")
        self.stops += 1

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        try:
            reap_vhost_deletions()
        finally:
            pid = self._pid()
            try:
                self.ctl("stop", timeout=60)
            except (AssertionError, subprocess.TimeoutExpired):
                if pid is not None and alive(pid):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(self.base, ignore_errors=True)

    def _pid(self) -> int | None:
        try:
            return int((self.base / "rabbit.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def add_vhost(self, vhost: str, user: str = ADMIN_USER) -> None:
        add_vhost(vhost, user, ctl=self.ctl)

    def url(
        self,
        vhost: str,
        user: str = ADMIN_USER,
        password: str = ADMIN_PASSWORD,
        tls: bool = False,
        host: str = "127.0.0.1",
    ) -> str:
        return f"rabbit://{user}:{password}@{host}:{self.tls_port if tls else self.port}/{vhost}"


@pytest.fixture(scope="session")
def private_rabbit(certs: Certs) -> Iterator[PrivateRabbit]:
    node = PrivateRabbit(certs)
    node.start()
    try:
        node.ctl("add_user", ADMIN_USER, ADMIN_PASSWORD)
        node.ctl("set_user_tags", ADMIN_USER, "administrator")
        yield node
    finally:
        node.destroy()


# --- private Redis servers ------------------------------------------------------------


@pytest.fixture
def private_redis() -> Iterator[Callable[..., PrivateRedis]]:
    """Start private Redis servers: ``private_redis(*redis_args, tls=certs)``."""
    made: list[PrivateRedis] = []

    def make(*args: str, tls: Certs | None = None) -> PrivateRedis:
        server = PrivateRedis(*args, tls=tls)
        made.append(server)
        server.start()
        return server

    yield make
    for server in made:
        server.destroy()


# --- a deployment on the private broker -------------------------------------------------


@dataclass
class FaultCluster(Cluster):
    """A :class:`Cluster` on the private broker (a vhost of its own) and on the
    store at ``redis_url`` (the shared Redis under a prefix of its own, or a
    private one). ``rabbit_url`` overrides the transport URL (another user,
    TLS); ``rabbit_options`` go to ``[oslo_messaging_rabbit]``."""

    broker: PrivateRabbit | None = None
    redis_url: str = SHARED_REDIS_URL
    rabbit_url: str | None = None
    rabbit_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.broker is not None
        self.vhost = f"test-{self.ident}"
        self.prefix = f"test-{self.ident}"
        self.broker.add_vhost(self.vhost)
        self.transport_url = self.rabbit_url or self.broker.url(self.vhost)
        self.store: Store = open_store(self.redis_url, self.prefix)
        self.extra_conf.setdefault("redis", {})["url"] = self.redis_url
        self.extra_conf.setdefault("oslo_messaging_rabbit", {}).update(
            {**RABBIT_BACKOFF, **self.rabbit_options}
        )
        self.write_config()

    def close(self) -> None:
        for proc in self.processes:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self.processes:
            proc.stop()
        try:
            self.store.wipe()
        finally:
            self.store.close()
            assert self.broker is not None
            if port_open(self.broker.port):
                # In the background, while the next test starts (nothing uses
                # the vhost any more); reaped by make_cluster, or before the
                # node is stopped, or at the end of the session.
                delete_vhost_later(self.vhost, "-n", self.broker.node, env=self.broker.env)

    def logs(self) -> str:
        """Everything every process of this deployment wrote."""
        return "".join(p.log_path.read_text(errors="replace") for p in self.processes)


@pytest.fixture(scope="session", autouse=True)
def shared_redis_up() -> None:
    host, _, port = SHARED_REDIS_URL.split("//", 1)[1].split("/", 1)[0].rpartition(":")
    if not port_open(int(port), host):
        pytest.fail(
            f"the fault tier needs Redis at {SHARED_REDIS_URL} (see .ci/run)", pytrace=False
        )


@pytest.fixture
def make_cluster(
    tmp_path: Path, private_rabbit: PrivateRabbit
) -> Iterator[Callable[..., FaultCluster]]:
    """Build deployments (``make_cluster(redis_url=..., rabbit_url=...)``); each is
    checked (accounting) and torn down after the test."""
    made: list[FaultCluster] = []
    # Earlier tests' vhost deletions that have ended (one that failed fails here).
    reap_vhost_deletions(block=False)

    def make(**kwargs: Any) -> FaultCluster:
        sub = tmp_path / f"cluster-{len(made)}"
        sub.mkdir()
        c = FaultCluster(sub, broker=private_rabbit, **kwargs)
        made.append(c)
        return c

    yield make
    try:
        for c in made:
            c.check_accounting()
    finally:
        for c in made:
            c.close()


@pytest.fixture
def cluster(make_cluster: Callable[..., FaultCluster]) -> FaultCluster:
    return make_cluster()


@pytest.fixture
def transport(cluster: FaultCluster) -> Iterator[Any]:
    """An oslo.messaging transport into the cluster's vhost, for the test itself."""
    t = cluster.open_transport()
    yield t
    t.cleanup()


# --- probes ---------------------------------------------------------------------------


def healthz(port: int) -> tuple[int, dict[str, Any]]:
    """The worker's /healthz: (HTTP status, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# --- a private Redis Cluster ------------------------------------------------------------


class PrivateRedisCluster:
    """Three private ``redis-server`` masters made one Redis Cluster (no replicas,
    no persistence), each slot range on its own node."""

    def __init__(self, masters: int = 3) -> None:
        _need("redis-cli")
        self.nodes = [
            PrivateRedis(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",  # in the node's own directory
                "--cluster-port",  # the default, port + 10000, may pass 65535
                str(free_port()),
                "--cluster-node-timeout",
                "1000",
                "--appendonly",
                "no",
            )
            for _ in range(masters)
        ]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_until(self.ready, 30, "cluster_state:ok on every node")

    def ready(self) -> bool:
        """Whether every node answers and says ``cluster_state:ok``."""
        for node in self.nodes:
            try:
                with redis.Redis(port=node.port, decode_responses=True) as client:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
            except redis.ConnectionError:
                return False
        return True

    def url(self) -> str:
        """The store URL, naming two of the nodes to discover the cluster from."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:2])

    def port_of(self, prefix: str) -> int:
        """The port of the master holding the slot of a store under ``prefix``."""
        slot = key_slot(f"{{{prefix}}}".encode())
        with redis.Redis(port=self.nodes[0].port, decode_responses=True) as client:
            for start, end, (_host, port, *_), *_replicas in client.execute_command(
                "CLUSTER", "SLOTS"
            ):
                if start <= slot <= end:
                    return int(port)
        raise AssertionError(f"no node holds slot {slot}")

    def destroy(self) -> None:
        for node in self.nodes:
            node.destroy()


@pytest.fixture(scope="module")
def private_redis_cluster() -> Iterator[PrivateRedisCluster]:
    """A private 3-master Redis Cluster, shared by a module's tests."""
    made = PrivateRedisCluster()
    try:
        made.start()
        yield made
    finally:
        made.destroy()


# --- a private RabbitMQ cluster -------------------------------------------------------


class PrivateRabbitCluster:
    """Three private RabbitMQ nodes made one cluster: each a :class:`PrivateRabbit`
    (its own node name, ports and directories), all sharing the ``rabbitmq``
    user's Erlang cookie; nodes 2 and 3 join node 1. Users, virtual hosts and
    permissions are cluster-wide, so any running node manages them."""

    def __init__(self, certs: Certs, size: int = 3) -> None:
        self.nodes = [PrivateRabbit(certs) for _ in range(size)]

    def start(self) -> None:
        """Start every node at once, then join the others to the first."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.start(), self.nodes))
        first = self.nodes[0]
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", first.node)
            node.ctl("start_app")
            node.ctl("await_startup", "--timeout", "90", timeout=120)
        first.ctl("add_user", ADMIN_USER, ADMIN_PASSWORD)
        first.ctl("set_user_tags", ADMIN_USER, "administrator")

    def running(self) -> PrivateRabbit:
        """A node whose AMQP port is open (to run ``rabbitmqctl`` against)."""
        for node in self.nodes:
            if port_open(node.port):
                return node
        raise AssertionError("no node of the private RabbitMQ cluster is running")

    def url(self, vhost: str) -> str:
        """A transport URL naming every node (oslo.messaging fails over between them)."""
        hosts = ",".join(f"{ADMIN_USER}:{ADMIN_PASSWORD}@127.0.0.1:{n.port}" for n in self.nodes)
        return f"rabbit://{hosts}/{vhost}"

    def queues(self, vhost: str) -> dict[str, dict[str, Any]]:
        """Each queue of ``vhost``: its type, members (a quorum queue's) and
        ``home``, the node of its leader (quorum) or the one it lives on (classic)."""
        out = self.running().ctl(
            "list_queues", "-p", vhost, "--formatter", "json", "name", "type", "leader", "members"
        )
        queues = {q["name"]: q for q in json.loads(out or "[]")}
        local = {
            node.node: {q["name"] for q in json.loads(listed or "[]")}
            for node in self.nodes
            if port_open(node.port)
            for listed in [
                node.ctl("list_queues", "-p", vhost, "--local", "--formatter", "json", "name")
            ]
        }
        for name, q in queues.items():
            q["home"] = q["leader"] or next((n for n, names in local.items() if name in names), "")
        return queues

    def connections(self, vhost: str) -> dict[str, int]:
        """How many client connections into ``vhost`` each node holds, as the
        broker lists them (cluster-wide), told apart by the port each was
        accepted on (every node listens on a port of its own)."""
        listed = self.running().ctl("list_connections", "--formatter", "json", "vhost", "port")
        ports = [c["port"] for c in json.loads(listed or "[]") if c["vhost"] == vhost]
        return {node.node: ports.count(node.port) for node in self.nodes}

    def node_named(self, name: str) -> PrivateRabbit:
        for node in self.nodes:
            if node.node == name:
                return node
        raise AssertionError(f"{name} is not a node of the private RabbitMQ cluster")

    def heal(self) -> None:
        """Start every stopped node again; it rejoins the cluster from its own
        data directory. (A virtual host holding quorum queues is slow to delete,
        tens of seconds, while one of their members is down.)"""
        stopped = [node for node in self.nodes if not port_open(node.port)]
        if stopped:
            with ThreadPoolExecutor(len(stopped)) as pool:
                list(pool.map(lambda node: node.start(), stopped))

    def destroy(self) -> None:
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.destroy(), self.nodes))


@pytest.fixture(scope="module")
def private_rabbit_cluster(certs: Certs) -> Iterator[PrivateRabbitCluster]:
    """A private 3-node RabbitMQ cluster, shared by a module's tests."""
    made = PrivateRabbitCluster(certs)
    try:
        made.start()
        yield made
    finally:
        made.destroy()


__all__ = [
    "Certs",
    "FaultCluster",
    "PrivateRabbit",
    "PrivateRabbitCluster",
    "PrivateRedis",
    "PrivateRedisCluster",
    "Process",
    "SentinelGroup",
    "free_port",
    "healthz",
    "port_open",
    "replica_online",
    "wait_until",
]


# --- a master, a replica and three sentinels ----------------------------------------------


def replica_online(master: PrivateRedis) -> bool:
    """The master counts a replica online (so WAIT can count it): with a
    diskless sync, only after the replica's first acknowledgement, a moment
    after the replica itself reports its link up."""
    import redis

    with redis.Redis(port=master.port, decode_responses=True, socket_timeout=2) as client:
        info = client.info("replication")
    return any(
        isinstance(v, dict) and v.get("state") == "online"
        for k, v in info.items()
        if k.startswith("slave")
    )


class SentinelGroup:
    """A private master, its replica and three ``redis-server --sentinel``
    watching them (quorum 2, the master down after 1 s), each on a port and
    directory of its own. ``url()`` is the ``redis+sentinel://`` store URL."""

    NAME = "ftest"
    REPL_USER, REPL_PASSWORD = "ftest-repl", "ftest-repl-pw"

    def __init__(self, make: Callable[..., PrivateRedis]) -> None:
        # Replication as a user of its own on both servers (either may be
        # master), so that the link can be cut: see cut_replica.
        replication = (
            "--repl-diskless-sync-delay",
            "0",
            "--user",
            f"{self.REPL_USER}",
            "on",
            f">{self.REPL_PASSWORD}",
            "~*",
            "&*",
            "+@all",
            "--user",
            "default",
            "on",
            "nopass",
            "~*",
            "&*",
            "+@all",
            "--masteruser",
            self.REPL_USER,
            "--masterauth",
            self.REPL_PASSWORD,
        )
        self.master = make(*replication)
        self.replica = make(*replication, "--replicaof", "127.0.0.1", str(self.master.port))
        self.sentinels: list[tuple[int, subprocess.Popen[bytes], Path]] = []
        for _ in range(3):
            port, path = free_port(), _private_dir("sched-sentinel-")
            (path / "sentinel.conf").write_text(
                f"port {port}\nbind 127.0.0.1\ndir {path}\n"
                f"logfile {path / 'sentinel.log'}\n"
                f"sentinel monitor {self.NAME} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {self.NAME} 1000\n"
                f"sentinel failover-timeout {self.NAME} 5000\n"
            )
            popen = subprocess.Popen(
                ["redis-server", str(path / "sentinel.conf"), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.sentinels.append((port, popen, path))
        wait_until(lambda: replica_online(self.master), 30, "the replica to be online")
        wait_until(self.watching, 30, "the sentinels to see the replica and each other")

    def sentinel(self, *command: str) -> Any:
        import redis

        port = self.sentinels[0][0]
        with redis.Redis(port=port, decode_responses=True, socket_timeout=2) as client:
            return client.execute_command(*command)

    def watching(self) -> bool:
        """Every sentinel sees the replica up and the two other sentinels."""
        import redis

        for port, _, _ in self.sentinels:
            try:
                with redis.Redis(port=port, decode_responses=True, socket_timeout=2) as c:
                    replicas = c.execute_command("SENTINEL", "REPLICAS", self.NAME)
                    others = c.execute_command("SENTINEL", "SENTINELS", self.NAME)
            except redis.RedisError:
                return False
            if len(others) != 2 or not any("s_down" not in str(r) for r in replicas):
                return False
        return True

    def cut_replica(self) -> None:
        """Cut the replica off the master: its replication user turned off and
        its link closed, so that it gets nothing more (a stopped replica would
        still find the stream in its socket's buffers on waking)."""
        import redis

        with redis.Redis(port=self.master.port, socket_timeout=2) as client:
            client.execute_command("ACL", "SETUSER", self.REPL_USER, "off")
            client.execute_command("CLIENT", "KILL", "USER", self.REPL_USER)

    def events(self, last: int = 60) -> str:
        """The events the sentinels logged (failovers, conversions, TILT mode),
        the ``last`` of them: what a wait on the sentinels that timed out
        says, the logs going with the group."""
        lines = []
        for port, _, path in self.sentinels:
            log = path / "sentinel.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            lines += [
                f"sentinel {port}: {line}"
                for line in text.splitlines()
                if " # " in line or " * +" in line
            ]
        return "\n".join(lines[-last:])

    def master_port(self) -> int:
        _, port = self.sentinel("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.NAME)
        return int(port)

    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port, _, _ in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.NAME}"

    def destroy(self) -> None:
        for _, popen, path in self.sentinels:
            if popen.poll() is None:
                popen.kill()
                popen.wait(10)
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sentinel_group(private_redis: Callable[..., PrivateRedis]) -> Iterator[SentinelGroup]:
    """A master + replica + three sentinels (the servers torn down by ``private_redis``)."""
    group = SentinelGroup(private_redis)
    yield group
    group.destroy()
