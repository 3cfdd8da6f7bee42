"""The process harness of the benchmark suite and the functional tiers: one
isolated deployment per Cluster.

A :class:`Cluster` is a RabbitMQ virtual host, a Redis key prefix and a config
file; :meth:`Cluster.start` runs a daemon as a real process whose JSON log
lines :class:`Process` reads. Used by the benchmark suite and by the
functional tests (through the fixtures in their ``conftest.py``); it lives
here, not under ``tests/``, so that the benchmarks import nothing of the
tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_stub.findings import MOVE_STATES
from scheduler.objects import (
    ACTIVE,
    DELETED,
    FINAL_STATES,
    MIGRATING,
    PENDING,
    SHELVED_OFFLOADED,
    InstanceRecord,
    RequestSpec,
)
from scheduler.store import Store, open_store

RABBIT_HOST = os.environ.get("SCHEDULER_TEST_RABBIT_HOST", "127.0.0.1")
RABBIT_PORT = int(os.environ.get("SCHEDULER_TEST_RABBIT_PORT", "5672"))
REDIS_URL = os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


def add_vhost(vhost: str, user: str, ctl: Callable[..., object] = rabbitmqctl) -> None:
    """Make ``vhost``, ``user`` given every permission in it, with one
    ``rabbitmqctl`` call (``import_definitions``), not two (``add_vhost``,
    ``set_permissions``): each call starts an Erlang VM, about a second of
    every test's setup. ``ctl`` runs rabbitmqctl against the broker meant."""
    definitions = {
        "vhosts": [{"name": vhost}],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
        ],
    }
    fd, path = tempfile.mkstemp(prefix="sched-vhost-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(definitions, out)
        os.chmod(path, 0o644)  # Debian's rabbitmqctl runs as the rabbitmq user
        ctl("import_definitions", path)
    finally:
        os.unlink(path)


#: The vhost deletions :meth:`Cluster.close` left going on (``wait=False``).
_deleting: list[tuple[str, subprocess.Popen[bytes]]] = []
_reaping = threading.Lock()


def delete_vhost_later(vhost: str, *ctl_args: str, env: dict[str, str] | None = None) -> None:
    """Start ``rabbitmqctl [ctl_args] delete_vhost vhost`` in the background
    (collected by :func:`reap_vhost_deletions`)."""
    popen = subprocess.Popen(
        ["rabbitmqctl", "-q", *ctl_args, "delete_vhost", vhost],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _deleting.append((vhost, popen))


def reap_vhost_deletions(block: bool = True) -> None:
    """Collect the vhost deletions going on in the background (all of them, or
    with ``block=False`` those that have ended); fail naming any that failed."""
    failed = []
    with _reaping:  # the nodes of a private cluster are destroyed from threads
        for vhost, popen in list(_deleting):
            if not block and popen.poll() is None:
                continue
            _, err = popen.communicate(timeout=60)
            _deleting.remove((vhost, popen))
            if popen.returncode:
                failed.append(f"{vhost}: {err.decode(errors='replace')[-500:]}")
    assert not failed, f"rabbitmqctl delete_vhost failed: {failed}"


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a child not yet reaped counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    #: Stopped with SIGSTOP (:meth:`pause`): its hosts are down, and the VMs it
    #: runs count as running nowhere until :meth:`resume`.
    paused: bool = False
    #: When it was started (seconds since the epoch).
    started_at: float = field(default_factory=time.time)

    def pause(self) -> None:
        """SIGSTOP the process: it heartbeats and serves nothing (a host that died,
        as its peers see it), keeping what it had in memory."""
        self.popen.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT: the process carries on where it stopped."""
        self.popen.send_signal(signal.SIGCONT)
        self.paused = False

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events

    def count(self, event: str) -> int:
        return sum(1 for e in self.log_events() if e.get("event") == event)

    def refused(self, step: str) -> int:
        """How many ``step`` messages the step guard refused here."""
        return sum(
            1
            for e in self.log_events()
            if e.get("event") == "step_refused" and e.get("step") == step
        )

    def wait_for(self, event: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(event):
                return
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.popen.returncode}) before "
                    f"{event}:\n{self.log_path.read_text()[-4000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(
            f"{self.name} did not log {event} within {timeout}s:\n"
            f"{self.log_path.read_text()[-4000:]}"
        )

    # A ``scheduler-worker`` is a supervisor: ``popen`` is its cotyledon
    # master, which serves nothing and replaces a worker that dies. Its
    # worker processes are known by the ``worker_starting`` line each logs.

    def worker_starts(self) -> list[dict[str, Any]]:
        """Every ``worker_starting`` line, in order: one per worker process started."""
        return [e for e in self.log_events() if e.get("event") == "worker_starting"]

    def serving_pids(self) -> dict[str, int]:
        """The pid each worker slot (its ``process`` name) last started with."""
        return {e["process"]: e["pid"] for e in self.worker_starts()}

    def serving_pid(self) -> int:
        """The pid of the one worker process of a ``scheduler-worker`` (``workers = 1``)."""
        [pid] = self.serving_pids().values()
        return pid

    def assert_kept_serving(self) -> None:
        """Every worker of this ``scheduler-worker`` served throughout: the master
        is up, no worker died or exited, and each slot still runs the one process
        it started with. (``popen`` alive says only that the master is.)"""
        assert self.popen.poll() is None, f"{self.name}: the master exited"
        events = self.log_events()
        ended = [e for e in events if e.get("event") in ("worker_died", "worker_exited")]
        assert not ended, f"{self.name}: a worker stopped serving: {ended}"
        starts = [e for e in events if e.get("event") == "worker_starting"]
        slots = {e["process"] for e in starts}
        assert starts and len(starts) == len(slots), f"{self.name}: a slot restarted: {starts}"
        gone = [e["pid"] for e in starts if not alive(e["pid"])]
        assert not gone, f"{self.name}: worker process(es) {gone} gone"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            # A stopped process would never see the signal, but SIGKILL, which
            # must land before the process runs again.
            if self.paused and sig != signal.SIGKILL:
                self.resume()
            self.popen.send_signal(sig)
            self.paused = False
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class Cluster:
    """One isolated deployment: a vhost, a key prefix, a config file, processes."""

    tmp: Path
    ident: str = field(default_factory=lambda: uuidlib.uuid4().hex[:10])
    processes: list[Process] = field(default_factory=list)
    extra_conf: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Another Cluster's vhost to join (two deployments on one vhost, told apart
    #: by key prefix and topics alone); that Cluster creates and deletes it.
    shared_vhost: str | None = None

    def __post_init__(self) -> None:
        self.vhost = self.shared_vhost or f"test-{self.ident}"
        self.prefix = f"test-{self.ident}"
        self.transport_url = f"rabbit://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{self.vhost}"
        if self.shared_vhost is None:
            add_vhost(self.vhost, "guest")
        self.store: Store = open_store(REDIS_URL, self.prefix)
        self.write_config()

    def open_transport(self) -> Any:
        """An oslo.messaging transport into this deployment's vhost, for the
        test itself (the caller cleans it up). Options live on the global
        ``CONF``, parsed here with no files."""
        from scheduler import conf as conf_mod
        from scheduler import rpc

        conf_mod.set_defaults()
        conf_mod.CONF([], project="scheduler", default_config_files=[])
        return rpc.get_transport(conf_mod.CONF, url=self.transport_url)

    @property
    def config_file(self) -> Path:
        return self.tmp / "scheduler.conf"

    def queues(self) -> dict[str, int]:
        """The queues of this deployment's vhost, each with its consumer count."""
        listed = subprocess.run(
            ["rabbitmqctl", "-q", "list_queues", "-p", self.vhost, "name", "consumers"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        rows = (line.split() for line in listed.splitlines()[1:])
        return {name: int(consumers) for name, consumers in rows}

    def write_config(self, **groups: dict[str, Any]) -> None:
        for group, values in groups.items():
            self.extra_conf.setdefault(group, {}).update(values)
        conf: dict[str, dict[str, Any]] = {
            "DEFAULT": {
                "transport_url": self.transport_url,
                "host": f"node-{self.ident}",
                "rpc_response_timeout": 30,
            },
            "redis": {"url": REDIS_URL, "key_prefix": self.prefix},
            "compute": {"heartbeat_interval": 2, "report_interval": 1},
        }
        for group, values in self.extra_conf.items():
            conf.setdefault(group, {}).update(values)
        lines = []
        for group, values in conf.items():
            lines.append(f"[{group}]")
            lines += [f"{k} = {v}" for k, v in values.items()]
        self.config_file.write_text("\n".join(lines) + "\n")

    def start(self, name: str, module: str, *args: str, ready: str | None = None) -> Process:
        log_path = self.tmp / f"{name}.log"
        popen = subprocess.Popen(
            [sys.executable, "-m", module, "--config-file", str(self.config_file), *args],
            stdout=subprocess.DEVNULL,
            stderr=log_path.open("wb"),
        )
        proc = Process(name, popen, log_path)
        self.processes.append(proc)
        if ready:
            proc.wait_for(ready, timeout=60)
        return proc

    def start_compute(self, hosts: int, *args: str, name: str = "compute") -> Process:
        return self.start(
            name,
            "compute_sim.cmd",
            "--hosts",
            str(hosts),
            "--name-prefix",
            name,
            *args,
            ready="compute_sim_started",
        )

    def start_conductor(self) -> Process:
        return self.start("conductor", "conductor_stub.cmd", "serve", ready="conductor_started")

    def start_worker(self, name: str = "worker") -> Process:
        return self.start(name, "scheduler.cmd.worker", ready="scheduler_started")

    def boot(self, *args: str, timeout: float = 120.0) -> dict[str, Any]:
        """``conductor-stub boot ... --wait --json``, as an operator would run it."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "conductor_stub.cmd",
                "--config-file",
                str(self.config_file),
                "boot",
                "--wait",
                "--json",
                "--timeout",
                str(timeout),
                *args,
            ],
            capture_output=True,
            timeout=timeout + 60,
        )
        stderr = out.stderr.decode()
        # 1 is a boot whose instances did not all become ACTIVE (it still
        # prints its report); anything else failed before reporting.
        assert out.returncode in (0, 1) and out.stdout, (out.returncode, stderr[-4000:])
        report: dict[str, Any] = json.loads(out.stdout)
        # The exit status says whether every instance ended ACTIVE; if not, one
        # line says how many did not.
        summary = report["summary"]
        all_active = summary["states"] == {"ACTIVE": len(report["instances"])}
        assert out.returncode == (0 if all_active and not summary["timed_out"] else 1), stderr
        if out.returncode:
            assert "instance(s) did not become ACTIVE" in stderr.splitlines()[-1], stderr
        return report

    def conductor_stub(
        self, *args: str, timeout: float = 120.0, config_files: tuple[Path, ...] = ()
    ) -> tuple[int, str, str]:
        """Run ``conductor-stub`` (extra config files read after the cluster's)."""
        files = [arg for f in config_files for arg in ("--config-file", str(f))]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "conductor_stub.cmd",
                "--config-file",
                str(self.config_file),
                *files,
                *args,
            ],
            capture_output=True,
            timeout=timeout,
        )
        return out.returncode, out.stdout.decode(), out.stderr.decode()

    def resize(
        self, uuid: str, *args: str, timeout: float = 60.0, command: str = "resize"
    ) -> dict[str, Any]:
        """``conductor-stub resize UUID ... --json`` (or ``migrate``: ``command``);
        the instance as it ended."""
        code, stdout, stderr = self.conductor_stub(
            command, uuid, "--json", "--timeout", str(timeout), *args, timeout=timeout + 60
        )
        assert code in (0, 1), stderr[-4000:]
        return {"exit_code": code, **json.loads(stdout)}

    def check_accounting(self) -> None:
        """The invariants every functional and fault test leaves standing (run
        after each one; the one checker of them):

        * on every provider, usage equals the sum of its live allocations and
          never exceeds capacity;
        * every server group's members per host are exactly those of its live
          allocations (so strict policies hold as claimed, and an instance
          that holds nothing is no member);
        * no VM runs on two hosts, from what the live simulators logged
          (``vm_started`` / ``vm_stopped``; a simulator that was stopped or
          killed took its VMs with it, and one paused with SIGSTOP runs none
          of its VMs while it is paused: its hosts are down, its VMs may have
          been evacuated; once resumed it must have destroyed those, and
          every VM it logged counts again);
        * a migration consumer holds an allocation only while its instance is
          moving (RESIZING, RESIZED, REBUILDING an evacuation, MIGRATING a live
          migration) under that migration; while MIGRATING, the migration holds
          the source's allocation and the instance at most one claim, elsewhere;
        * a DELETED, SHELVED_OFFLOADED or PENDING (waiting for capacity)
          instance holds no allocation (nor does its migration), is no group's
          member and runs on no compute;
        * an ACTIVE instance with nothing in flight holds exactly its flavor's
          resources, under its host, no migration of it holds anything, and its
          VM runs nowhere else; one a live migration reached (a simulator logged
          its destination's pre-check) runs there if that host's simulator runs;
        * from the computes' reports, where they exist (:meth:`_check_reports`):
          every VM reported has a live record placing it on that host and an
          allocation there, no allocation is without a record (or a move), and
          nothing is reported on two hosts outside a move.
        """
        consumers = self.store.list_consumers()
        summed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        members: dict[str, Counter[str]] = defaultdict(Counter)
        for consumer in consumers:
            for rp, resources in consumer.allocations.items():
                for rc, amount in resources.items():
                    summed[rp][rc] += amount
            if consumer.group_uuid is not None and consumer.host is not None:
                members[consumer.group_uuid][consumer.host] += 1
        for provider in self.store.list_providers():
            for rc, inv in provider.inventories.items():
                used = provider.usages.get(rc, 0)
                assert used == summed[provider.uuid].get(rc, 0), (provider.name, rc)
                assert used <= inv.capacity, (provider.name, rc, used, inv.capacity)
        running = self.running_vms()
        two = {uuid: hosts for uuid, hosts in running.items() if len(hosts) > 1}
        assert not two, f"VMs running on two hosts: {two}"
        held = {c.uuid: c for c in consumers}
        scanned = {r.uuid: r for r in self.store.scan_instances()}
        moving = [r for r in scanned.values() if r.migration_uuid in held]
        for record in moving:
            assert record.state in MOVE_STATES, (
                f"migration {record.migration_uuid} of {record.state} {record.uuid} holds "
                "an allocation"
            )
        candidates = (
            set(held)
            | set(running)
            | self._logged_instances("instance_terminated")
            | self._logged_instances("instance_offloaded")
        )
        live_migrated = self._logged_instances("check_can_live_migrate_destination")
        records = self.store.list_instances(sorted(candidates | live_migrated))
        live_sims = {p.name for p in self.processes if p.popen.poll() is None and not p.paused}
        for record in records:
            where = (record.uuid, record.state, record.host, record.source_host)
            if record.state == MIGRATING:
                assert self._hosts_of(held, record.migration_uuid) == {record.source_host}, where
                claimed = self._hosts_of(held, record.uuid)
                assert len(claimed) <= 1 and record.source_host not in claimed, (where, claimed)
            if record.state == ACTIVE and record.task_state is None:
                self._check_holds_its_flavor(record, held)
                assert running.get(record.uuid, set()) <= {record.host}, (where, running)
                if (
                    record.uuid in live_migrated
                    and (record.host or "").rsplit("-", 1)[0] in live_sims
                ):
                    assert running.get(record.uuid) == {record.host}, (where, running)
            if record.state not in (DELETED, SHELVED_OFFLOADED, PENDING):
                continue
            what = f"{record.state} {record.uuid}"
            assert record.uuid not in held, f"allocation of {what}"
            assert record.migration_uuid not in held, f"migration of {what}"
            assert not running.get(record.uuid), f"{what} runs on {running}"
            group = (record.request_spec or {}).get("group") or {}
            if group.get("uuid"):
                members.setdefault(group["uuid"], Counter())
        for group_uuid, hosts in members.items():
            assert self.store.group_hosts(group_uuid) == {h: n for h, n in hosts.items() if n}, (
                group_uuid,
                hosts,
            )
        self._check_reports(held, {**scanned, **{r.uuid: r for r in records}}, running)

    def _check_reports(
        self,
        held: dict[str, Any],
        records: dict[str, InstanceRecord],
        running: dict[str, set[str]],
    ) -> None:
        """The invariants the computes' reports of what they run give, where
        reports exist (a report of a live, unpaused simulator, for a VM its log
        says still runs there: a report lags what it reports by up to an
        interval):

        * every VM a compute reports has a live record placing it on that host
          and an allocation there (a record changed since the report, or in a
          non-final state, is in flight and not judged);
        * no allocation without a record (or a move in flight holding it as its
          migration);
        * nothing reported on two hosts outside a move;
        * nothing ACTIVE runs nowhere: an ACTIVE record with nothing in flight,
          written while its host's simulator ran and not changed since that
          host's last report, is in that report.
        """
        live = [p for p in self.processes if p.popen.poll() is None and not p.paused]
        live_sims = {p.name for p in live}
        started = {p.name: p.started_at for p in live}
        migrations = {r.migration_uuid for r in records.values() if r.state in MOVE_STATES}
        unknown = sorted(set(held) - set(records) - migrations)
        tombs = {r.uuid for r in self.store.list_instances(unknown)}
        orphans = [u for u in unknown if u not in tombs]
        assert not orphans, f"allocations with no record: {orphans}"
        reported: dict[str, set[str]] = defaultdict(set)
        for report in self.store.instance_reports():
            if report.host.rsplit("-", 1)[0] not in live_sims:
                continue
            # A simulator started after the record was last written (a compute
            # restarted: a host crash, to the simulator) lost its VMs: the
            # reconciler's lost_vm, after its grace, not an invariant.
            since = started[report.host.rsplit("-", 1)[0]]
            shown = {vm.uuid for vm in report.instances}
            nowhere = [
                r.uuid
                for r in records.values()
                if r.state == ACTIVE
                and r.task_state is None
                and r.host == report.host
                and since < r.updated_at < report.reported_at
                and r.uuid not in shown
            ]
            assert not nowhere, f"ACTIVE on {report.host}, which does not run them: {nowhere}"
            for vm in report.instances:
                if report.host not in running.get(vm.uuid, set()):
                    continue  # gone since the report
                record = records.get(vm.uuid)
                if record is not None and record.updated_at >= report.reported_at:
                    continue  # changed since the report
                if vm.migration_uuid is None:
                    reported[vm.uuid].add(report.host)
                where = (vm.uuid, report.host)
                assert record is not None, f"VM runs with no record: {where}"
                if record.state not in FINAL_STATES:
                    continue
                assert record.state == ACTIVE and record.host == report.host, (
                    f"VM runs where no live record keeps it: {where}, record "
                    f"{record.state} on {record.host}"
                )
                assert report.host in self._hosts_of(held, vm.uuid), (
                    f"VM runs with no allocation there: {where}"
                )
        two = {uuid: hosts for uuid, hosts in reported.items() if len(hosts) > 1}
        assert not two, f"VMs reported on two hosts outside a move: {two}"

    def _hosts_of(self, held: dict[str, Any], consumer_uuid: str | None) -> set[str]:
        """The hosts (provider tree roots) a consumer's allocation is on."""
        consumer = held.get(consumer_uuid or "")
        if consumer is None:
            return set()
        hosts = set()
        for rp in consumer.allocations:
            provider = self.store.get_provider(rp)
            root = self.store.get_provider(provider.root_uuid) if provider.root_uuid else provider
            hosts.add(root.name)
        return hosts

    def _check_holds_its_flavor(self, record: InstanceRecord, held: dict[str, Any]) -> None:
        """An ACTIVE instance, settled: its flavor's resources, all under its host."""
        consumer = held.get(record.uuid)
        assert consumer is not None, f"ACTIVE {record.uuid} holds no allocation"
        totals: Counter[str] = Counter()
        for rp, resources in consumer.allocations.items():
            provider = self.store.get_provider(rp)
            root = self.store.get_provider(provider.root_uuid) if provider.root_uuid else provider
            assert root.name == record.host, (record, consumer)
            totals.update(resources)
        if record.request_spec:  # (a record a test wrote without one says no flavor)
            wanted = RequestSpec.from_primitive(dict(record.request_spec)).resources
            assert dict(totals) == wanted, (record.uuid, dict(totals), wanted)
        assert record.migration_uuid is None or record.migration_uuid not in held, record.uuid

    def _live_events(self, *names: str) -> list[dict[str, Any]]:
        """The lines named ``names`` of every process still running (and not
        paused), oldest first."""
        events = [
            e
            for proc in self.processes
            if proc.popen.poll() is None and not proc.paused
            for e in proc.log_events()
            if e.get("event") in names
        ]
        return sorted(events, key=lambda e: str(e.get("timestamp", "")))

    def running_vms(self) -> dict[str, set[str]]:
        """instance uuid -> the hosts its VM runs on, as the live simulators logged."""
        running: dict[str, set[str]] = defaultdict(set)
        for e in self._live_events("vm_started", "vm_stopped"):
            hosts = running[e["instance_uuid"]]
            (hosts.add if e["event"] == "vm_started" else hosts.discard)(e["host"])
        return {uuid: hosts for uuid, hosts in running.items() if hosts}

    def _logged_instances(self, event: str) -> set[str]:
        return {
            e["instance_uuid"]
            for proc in self.processes
            for e in proc.log_events()
            if e.get("event") == event and "instance_uuid" in e
        }

    def close(self, wait: bool = True) -> None:
        """Stop the processes, wipe the keys, delete the vhost. ``wait=False``:
        the vhost's deletion (a second's ``rabbitmqctl``) goes on in the
        background, nothing using it any more; :func:`reap_vhost_deletions`
        waits for it and fails if it failed."""
        for proc in self.processes:  # all at once: each takes a second or two to drain
            if proc.popen.poll() is None:
                if proc.paused:
                    proc.resume()
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self.processes:
            proc.stop()
        self.store.wipe()
        self.store.close()
        if self.shared_vhost is None:
            if wait:
                rabbitmqctl("delete_vhost", self.vhost)
            else:
                delete_vhost_later(self.vhost)
