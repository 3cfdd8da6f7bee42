"""The compute manager: many compute hosts in one process, speaking the protocol.

Each host registers as a root resource provider (and, if asked, GPU child
providers; :mod:`compute_sim.hosts`), heartbeats, and is reached over RPC on
topic ``compute`` through the one server name this process listens on (its
service records say so). :class:`ComputeManager` is that RPC endpoint: it
serves every method :class:`~scheduler.rpc.ComputeClient` sends, each a step
of an operation, each with its arguments typed and checked first
(:mod:`scheduler.arguments`: a bad message is refused, ``rpc_refused``), then
passing the step guard (:mod:`compute_sim.steps`:
a step is acted on only while the instance's record says that operation is
at that step on that host; a repeated, late, replayed or forged one is
refused and logged, ``step_refused``), and hands it to its operation
(:mod:`compute_sim.ops`: build, rebuild, resize, live migration, delete,
shelve, reap), which keeps its progress in the one step ledger
(:mod:`compute_sim.ledger`).

What runs is the driver's (:mod:`compute_sim.driver`, in the shape of
Nova's ``virt/driver.py``): the manager starts, stops and lists VMs only
through it and never asks what kind of driver it has. The simulator is one
driver (:mod:`compute_sim.simulator`: VMs in memory, builds with latency and
injected failures); :mod:`compute_sim.process` is another, each VM a real OS
process.

Every ``[compute] report_interval`` seconds (and once right after
registration) the process reports, in one store write for all its hosts
(:meth:`ComputeManager.report_instances`), what each host really runs (the
resource tracker's role; a host that runs nothing reports an empty list;
:mod:`compute_sim.vms`: an entry that cannot be reported is dropped, never
the report), and says whether its reports get through
(:mod:`compute_sim.health`). A process back from an outage destroys the VMs
evacuated meanwhile before it reports. The reconciler compares the reports
with the records and allocations, and casts ``reap_instance`` for a VM no
live record places on its host.

Each host reports its capabilities once at registration (architecture,
hypervisor type and version, supported instances, NUMA cells, PCI devices
and any other attribute, as ``capabilities`` describes) and its stats as
operations start and end (:mod:`compute_sim.stats`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

import oslo_messaging

from compute_sim import hosts as host_providers
from compute_sim import steps
from compute_sim.driver import ComputeDriver
from compute_sim.health import ReportFreshness
from compute_sim.hosts import HostShape, Topology
from compute_sim.ledger import StepLedger
from compute_sim.ops.base import Attempt
from compute_sim.ops.build import BUILD_RESULTS, RESULTS_BY_CAST, RESULTS_IN_STORE, Build
from compute_sim.ops.destroy import LOG_ONLY, REAP, Destroy
from compute_sim.ops.live import LiveMigration, LiveMove
from compute_sim.ops.rebuild import Rebuild
from compute_sim.ops.resize import Resize
from compute_sim.stats import HostStats
from compute_sim.vms import RunningVMs, reportable
from scheduler.arguments import (
    Builds,
    Flag,
    FlavorPrimitive,
    Host,
    LocalHost,
    Name,
    SelectionPrimitive,
    Selections,
    SpecPrimitive,
    Text,
    Uuid,
)
from scheduler.engine.capabilities import CapabilityReport
from scheduler.exceptions import StoreError
from scheduler.log import get_logger
from scheduler.objects import RequestSpec, Selection
from scheduler.rpc import ComputeClient, ConductorClient
from scheduler.steps import StepGuard, guarded
from scheduler.store import (
    InstanceReport,
    InstanceStore,
    PlacementStore,
    Service,
    ServiceReport,
    ServiceStore,
)

LOG = get_logger(__name__)


class ComputeStore(PlacementStore, ServiceStore, InstanceStore, Protocol):
    """What a compute uses: its providers and the claims on them, its
    service records (registration, reports, heartbeats, build results), and
    the instance records it reads when it comes back from an outage (to
    find the VMs evacuated from it)."""


#: The defaults of ``--build-results`` and ``--stats-interval`` (the demo's
#: too). The class's own defaults are a cast per result and each stats change
#: reported at once: one message or write per step, which unit tests step through.
DEFAULT_BUILD_RESULTS = RESULTS_IN_STORE
DEFAULT_STATS_INTERVAL = 0.1


class ComputeManager:
    """The hosts of one compute process and their RPC endpoint, over ``driver``.

    It serves compute RPC 1.9 (``build_and_run_instances`` is the newest
    method; the history is :class:`~scheduler.rpc.ComputeClient`'s). ``compute`` casts a
    move's next step to whichever process serves its host.
    """

    target = oslo_messaging.Target(version="1.9")

    def __init__(
        self,
        store: ComputeStore,
        conductor: ConductorClient,
        hosts: Sequence[str],
        rpc_server: str,
        shape: HostShape,
        driver: ComputeDriver,
        availability_zones: Sequence[str] = (),
        compute: ComputeClient | None = None,
        topology: Topology = Topology(),
        capabilities: CapabilityReport | None = None,
        report_stats: bool = True,
        service_down_time: float = 60.0,
        terminated_retention: float = 86400.0,
        running_deleted_instance_action: str = REAP,
        build_results: str = RESULTS_BY_CAST,
        stats_interval: float = 0.0,
        report_max_age: float = 60.0,
    ) -> None:
        if build_results not in BUILD_RESULTS:
            raise ValueError(
                f"build_results must be one of {', '.join(BUILD_RESULTS)}, got {build_results!r}"
            )
        if running_deleted_instance_action not in (REAP, LOG_ONLY):
            raise ValueError(
                f"running_deleted_instance_action must be {REAP} or {LOG_ONLY}, "
                f"got {running_deleted_instance_action!r}"
            )
        self.build_results = build_results
        self.running_deleted_instance_action = running_deleted_instance_action
        self.store = store
        self.conductor = conductor
        self.compute = compute
        self.hosts = list(hosts)
        self.guard = StepGuard(store, set(self.hosts))
        self.rpc_server = rpc_server
        self.shape = shape
        self.availability_zones = list(availability_zones)
        self.topology = topology
        self.capabilities = capabilities
        self.driver = driver
        lock = threading.RLock()  # the ledger's and the VMs': a check and its start as one
        # Instances a delete reached are remembered as long as the store's
        # fence against their claims lasts (``terminated_retention``).
        self.ledger = StepLedger(terminated_retention, lock)
        self.vms = RunningVMs(driver, lock)
        self.build = Build(self)
        self.destroy = Destroy(self)
        self.rebuild = Rebuild(self)
        self.resize = Resize(self)
        self.live = LiveMigration(self)
        # Stats changed since the last report are written together, at most
        # ``stats_interval`` seconds late (0: each change at once).
        self.stats = HostStats(store, self.hosts, report_stats, stats_interval)
        # A heartbeat later than this after the last one: the hosts were down.
        self.service_down_time = service_down_time
        self._last_beat: float | None = None
        self._last_reported: tuple[int, int] | None = None  # (hosts, VMs) last reported
        # Whether the reports get through (its health endpoint and metrics).
        self.freshness = ReportFreshness(report_max_age)

    @property
    def builds_ok(self) -> int:
        return self.build.ok

    @property
    def builds_failed(self) -> int:
        return self.build.failed

    # --- the service ------------------------------------------------------------------

    def register(self) -> None:
        """Create (or find again) each host's providers; report inventory,
        traits, zone and aggregates; then the services, their capabilities
        and stats."""
        host_providers.register_providers(
            self.store, self.hosts, self.shape, self.topology, self.availability_zones
        )
        # Heartbeat first: the service records fed next carry it, so every
        # worker's view counts the hosts up at once (a record fed with no
        # heartbeat reads as down until the view re-reads heartbeats).
        self.heartbeat()
        self.store.register_services(
            Service(host=h, rpc_server=self.rpc_server, last_seen=time.time()) for h in self.hosts
        )
        capabilities = self.capabilities.to_primitive() if self.capabilities is not None else None
        report = self.stats.report
        self.store.report_services(
            ServiceReport(h, capabilities=capabilities, stats=self.stats.of(h) if report else None)
            for h in self.hosts
        )
        LOG.info("hosts_registered", count=len(self.hosts), rpc_server=self.rpc_server)

    def heartbeat(self) -> None:
        """Say the hosts are alive. After a gap longer than ``service_down_time``
        (the process was stopped, or could not reach the store) they counted as
        down meanwhile and their instances may have been evacuated: destroy
        those VMs first (:meth:`destroy_evacuated`), so that nothing runs twice
        once the hosts count as up again."""
        now = time.time()
        if self._last_beat is not None and now - self._last_beat > self.service_down_time:
            LOG.warning("heartbeat_gap", seconds=round(now - self._last_beat, 1))
            self.destroy_evacuated()
        self.store.heartbeat(self.hosts, now)
        self._last_beat = now

    def destroy_evacuated(self) -> list[tuple[str, str]]:
        """Destroy every VM of this process that its instance record no longer
        places here; the (instance, host) pairs destroyed."""
        return self.destroy.evacuated()

    def running_instances(self) -> list[InstanceReport]:
        """What each host of this process runs now, one report per host, with
        the tombstones of what it destroyed for deletes and shelves (a VM a
        resize took off its source and whose move is gone runs there again
        first: :meth:`Resize.restore_abandoned`)."""
        try:
            self.resize.restore_abandoned()
        except StoreError as exc:  # what the store cannot say now, the next report will
            LOG.warning("abandoned_resizes_not_read", error=exc.message)
        return [
            replace(
                report, ended=tuple(reportable(self.ledger.ended_on(report.host), report.host))
            )
            for report in self.vms.reports(self.hosts, self.store)
        ]

    def report_instances(self) -> None:
        """Write what every host runs (:meth:`running_instances`), in one store
        write. Logged at info when the counts change, else at debug."""
        if self._last_beat is not None and time.time() - self._last_beat > self.service_down_time:
            # Back from an outage: destroy the evacuated VMs before saying what runs.
            self.heartbeat()
        reports = self.running_instances()
        self.store.report_instances(reports)
        self.freshness.reported()
        counts = (len(reports), sum(len(r.instances) for r in reports))
        log = LOG.info if counts != self._last_reported else LOG.debug
        log("instances_reported", hosts=counts[0], vms=counts[1])
        self._last_reported = counts

    def hosts_running(self, instance_uuid: str) -> list[str]:
        """The hosts of this process that run the instance's VM."""
        return self.vms.hosts_of(instance_uuid)

    def stop(self) -> None:
        """Nothing more is started; the driver says what becomes of the VMs."""
        self.stats.stop()
        self.driver.cleanup_host()

    # --- RPC endpoint: builds -------------------------------------------------------

    @guarded(steps.build)
    def build_and_run_instance(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        request_spec: SpecPrimitive,
        selection: SelectionPrimitive,
        host_list: Selections,
    ) -> None:
        """Build the instance on ``selection``'s host (:mod:`compute_sim.ops.build`)."""
        attempt = Attempt.read(instance_uuid, request_spec, selection, host_list)
        self.build.start(ctxt, attempt)

    @guarded(None)
    def build_and_run_instances(
        self, ctxt: Any, request_spec: SpecPrimitive, builds: Builds
    ) -> None:
        """(1.9) The builds of one request on hosts of this process, each
        guarded as :meth:`build_and_run_instance` is (all of them read in one
        store round trip) and built as it would be (:meth:`Build.start_many`)."""
        spec = RequestSpec.from_primitive(request_spec)
        self.build.start_many(
            ctxt,
            [
                Attempt(
                    b["instance_uuid"],
                    Selection.from_primitive(b["selection"]),
                    spec,
                    [Selection.from_primitive(s) for s in b["host_list"]],
                )
                for b in builds
            ],
        )

    @guarded(steps.rebuild)
    def rebuild_instance(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        request_spec: SpecPrimitive,
        selection: SelectionPrimitive,
        host_list: Selections,
    ) -> None:
        """(1.6) Rebuild an evacuated instance here (:mod:`compute_sim.ops.rebuild`)."""
        attempt = Attempt.read(instance_uuid, request_spec, selection, host_list, migration_uuid)
        self.rebuild.start(ctxt, attempt)

    # --- RPC endpoint: resize (:mod:`compute_sim.ops.resize`) -------------------------

    @guarded(steps.prep_resize)
    def prep_resize(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        new_flavor: FlavorPrimitive,
        request_spec: SpecPrimitive,
        selection: SelectionPrimitive,
        host_list: Selections,
    ) -> None:
        """On the destination: check in, then hand over to the source (or fail)."""
        attempt = Attempt.read(instance_uuid, request_spec, selection, host_list, migration_uuid)
        self.resize.prep(ctxt, attempt, new_flavor)

    @guarded(steps.resize_instance)
    def resize_instance(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        dest_host: Host,
        dest_node: Name,
    ) -> None:
        """On the source: the VM off here, its disk to the destination."""
        self.resize.migrate(ctxt, instance_uuid, migration_uuid, dest_host, dest_node)

    @guarded(steps.finish_resize)
    def finish_resize(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        dest_host: LocalHost,
        dest_node: Name,
    ) -> None:
        """On the destination: the instance runs here now; tell the conductor."""
        self.resize.finish(ctxt, instance_uuid, migration_uuid, dest_host, dest_node)

    @guarded(steps.confirm_resize)
    def confirm_resize(self, ctxt: Any, instance_uuid: Uuid, migration_uuid: Uuid) -> None:
        """On the source: drop the source's allocation (the migration's)."""
        self.resize.confirm(ctxt, instance_uuid, migration_uuid)

    @guarded(steps.revert_resize)
    def revert_resize(self, ctxt: Any, instance_uuid: Uuid, migration_uuid: Uuid) -> None:
        """On the destination: the allocations back, the VM off here, then the
        source finishes."""
        self.resize.revert(ctxt, instance_uuid, migration_uuid)

    @guarded(steps.finish_revert_resize)
    def finish_revert_resize(
        self, ctxt: Any, instance_uuid: Uuid, migration_uuid: Uuid, source_host: LocalHost
    ) -> None:
        """On the source: run the instance here again; tell the conductor."""
        self.resize.finish_revert(ctxt, instance_uuid, migration_uuid, source_host)

    # --- RPC endpoint: live migration (:mod:`compute_sim.ops.live`) -------------------

    @guarded(steps.check_destination)
    def check_can_live_migrate_destination(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        request_spec: SpecPrimitive,
        selection: SelectionPrimitive,
        host_list: Selections,
        source_host: Host,
        block_migration: Flag = False,
    ) -> None:
        """On the destination: check it can take the instance, then have the
        source checked (or hand the migration back)."""
        move = LiveMove.read(
            instance_uuid,
            migration_uuid,
            request_spec,
            selection,
            host_list,
            source_host,
            block_migration,
        )
        self.live.check_destination(ctxt, move)

    @guarded(steps.check_source)
    def check_can_live_migrate_source(
        self,
        ctxt: Any,
        instance_uuid: Uuid,
        migration_uuid: Uuid,
        request_spec: SpecPrimitive,
        selection: SelectionPrimitive,
        host_list: Selections,
        source_host: LocalHost,
        block_migration: Flag = False,
    ) -> None:
        """On the source: check it can let the instance go, then migrate it to
        ``selection``'s host (or hand the migration back)."""
        move = LiveMove.read(
            instance_uuid,
            migration_uuid,
            request_spec,
            selection,
            host_list,
            source_host,
            block_migration,
        )
        self.live.check_source(ctxt, move)

    @guarded(steps.post_live_migration)
    def post_live_migration_at_destination(
        self, ctxt: Any, instance_uuid: Uuid, migration_uuid: Uuid, selection: SelectionPrimitive
    ) -> None:
        """On the destination: the instance runs here now; tell the conductor."""
        move = LiveMove(instance_uuid, migration_uuid, Selection.from_primitive(selection))
        self.live.post(ctxt, move)

    # --- RPC endpoint: delete, shelve, reap (:mod:`compute_sim.ops.destroy`) ----------

    @guarded(steps.terminate)
    def terminate_instance(self, ctxt: Any, instance_uuid: Uuid, host: LocalHost) -> None:
        """Destroy the instance's VM on ``host`` and cancel whatever is in
        flight for it here; then tell the conductor."""
        self.destroy.terminate(ctxt, instance_uuid, host)

    @guarded(steps.shelve_offload)
    def shelve_offload_instance(self, ctxt: Any, instance_uuid: Uuid, host: LocalHost) -> None:
        """Destroy the VM of an instance being shelved; tell the conductor."""
        self.destroy.shelve_offload(ctxt, instance_uuid, host)

    @guarded(steps.reap)
    def reap_instance(self, ctxt: Any, instance_uuid: Uuid, host: LocalHost, reason: Text) -> None:
        """(1.8) Destroy (or only log) a VM the reconciler found running on
        ``host`` with no live record placing it there."""
        self.destroy.reap(ctxt, instance_uuid, host, reason)
