"""``compute-sim``: one process simulating N compute hosts.

Example: ``compute-sim --config-file etc/scheduler/scheduler.conf --hosts 1000
--fail-rate 0.1 --build-time 0.05``; ``--traits HW_CPU_X86_AVX512F --traits-on
100`` gives the first 100 hosts a trait, ``--vgpus-per-host 4`` each host a
GPU child provider, ``--aggregate gold:filter_tenant_id=p1`` an aggregate.
Hosts are named ``<prefix>-0000`` ...;
run several simulators side by side with different ``--name-prefix``.
Stopped gracefully (SIGTERM or SIGINT), a simulator marks its hosts down at
once (:meth:`Store.mark_down`) before it drains its builds, so no build is sent
there meanwhile; started again, it heartbeats and they are up.

``--driver`` says what runs the VMs: ``sim``, the simulator (VMs in memory;
``--build-time`` and the ``--fail-*`` options are its), or ``process``, each
VM a real OS process (:mod:`compute_sim.process`), killed when the compute
stops: a compute's VMs never outlive it, whichever the driver.

Every host of one simulator reports the same capabilities: ``--cpu-arch``,
``--hypervisor-type``, ``--hypervisor-version`` (one supported instance
triple ``[arch, type, hvm]`` from them), ``--numa-cells 8:32768,8:32768``
(CPUs:MB per cell), ``--pci-devices 8086:154d:4`` (vendor:product:count) and
``--capability key=value`` for anything else (``cpu_info:vendor=Intel``
nests; a JSON value such as ``["avx","sse"]`` is read as JSON). Run
simulators with different options for a mixed fleet.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

import oslo_messaging
from oslo_config import cfg

from compute_sim.driver import ComputeDriver
from compute_sim.hosts import AggregateSpec, HostShape, Topology
from compute_sim.manager import (
    DEFAULT_BUILD_RESULTS,
    DEFAULT_STATS_INTERVAL,
    ComputeManager,
    ComputeStore,
)
from compute_sim.ops.build import BUILD_RESULTS
from compute_sim.process import ProcessDriver
from compute_sim.simulator import SimulatedDriver
from scheduler import broker, health, log, rpc, steps
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.cmd._daemon import wait_for_signal
from scheduler.conf.unread import warn_unread
from scheduler.engine.capabilities import CapabilityReport
from scheduler.image_meta import version_to_int
from scheduler.store import make_store
from scheduler.store.services import ServiceResolver

LOG = log.get_logger("compute_sim")

#: What ``compute-sim --help`` says it does.
DESCRIPTION = (
    "Simulate compute hosts in one process (a daemon): each host registers its service "
    "and resource providers, heartbeats, and builds, resizes, live-migrates, shelves and "
    "deletes the instances the scheduler and the conductor send it, with VMs run by "
    "--driver (sim: in memory, --build-time and the --fail-* options; process: one OS "
    "process each). SIGTERM or Ctrl-C stops it, its hosts marked down first."
)

#: The drivers ``--driver`` chooses from.
SIM, PROCESS = "sim", "process"

cli_opts = _cli.with_defaults(
    [
        cfg.IntOpt("hosts", default=10, min=1, max=200000, help="How many hosts to simulate."),
        cfg.StrOpt(
            "driver",
            default=SIM,
            choices=[
                (SIM, "the simulator: VMs in memory, with --build-time and --fail-*"),
                (PROCESS, "each VM a real OS process, killed when the compute stops"),
            ],
            help="What runs the VMs: 'sim', the simulator (VMs in this process's memory; "
            "--build-time, --fail-*, --live-migration-fail-* and --seed are its options), "
            "or 'process', one real OS process per VM, tagged compute-sim-vm <host> <uuid> "
            "and killed when the compute stops (graceful or not: no VM outlives it).",
        ),
        cfg.StrOpt(
            "name-prefix",
            default="compute",
            help="Host names are <prefix>-0000, <prefix>-0001, ...",
        ),
        cfg.IntOpt("vcpus", default=16, min=1, help="Physical CPUs per host."),
        cfg.IntOpt("memory-mb", default=65536, min=1, help="Memory per host, MB."),
        cfg.IntOpt("disk-gb", default=1000, min=1, help="Disk per host, GB."),
        _cli.fraction_opt(
            "fail-rate",
            default=0.0,
            help="Probability that a build fails (then it is rescheduled).",
        ),
        cfg.ListOpt(
            "fail-hosts",
            default=[],
            help="Hosts on which every build fails (for tests and demos).",
        ),
        cfg.ListOpt(
            "fail-resize-hosts",
            default=[],
            help="Hosts on which every prep_resize fails (the resize is then retried "
            "on its alternates).",
        ),
        _cli.fraction_opt(
            "live-migration-fail-rate",
            default=0.0,
            help="Probability that a live migration's pre-check fails, drawn on the "
            "destination and again on the source (the next alternate is then tried).",
        ),
        cfg.ListOpt(
            "live-migration-fail-hosts",
            default=[],
            help="Hosts on which every live migration pre-check fails, as destination "
            "or as source (for tests and demos).",
        ),
        _cli.seconds_opt("build-time", default=0.05, help="Seconds a build takes."),
        _cli.seconds_opt(
            "stats-interval",
            default=DEFAULT_STATS_INTERVAL,
            help="Seconds the hosts' stats (builds in progress, image counts) may wait to "
            "be reported, every host's changes in that time in one store write; 0 reports "
            "each change at once.",
        ),
        cfg.StrOpt(
            "build-results",
            default=DEFAULT_BUILD_RESULTS,
            choices=BUILD_RESULTS,
            help="How a build's success reaches the conductor: 'store', the record made "
            "ACTIVE in the store by this process (the conductor's rule, no message), or "
            "'cast', a build_succeeded cast to the conductor (one more message per boot).",
        ),
        cfg.ListOpt(
            "availability-zones",
            default=[],
            help="Spread the hosts over these zones, round robin (one aggregate each).",
        ),
        cfg.IntOpt("seed", help="Seed of the failure draws, for a replayable run."),
        cfg.StrOpt("cpu-arch", default="x86_64", help="CPU architecture the hosts report."),
        cfg.StrOpt("hypervisor-type", default="kvm", help="Hypervisor type the hosts report."),
        cfg.StrOpt(
            "hypervisor-version",
            default="8.0.0",
            help="Hypervisor version the hosts report (major.minor.patch).",
        ),
        cfg.ListOpt(
            "numa-cells",
            default=[],
            help="NUMA cells per host as cpus:memory_mb, e.g. 8:32768,8:32768.",
        ),
        cfg.ListOpt(
            "pci-devices",
            default=[],
            help="Free PCI devices per host as vendor:product:count, e.g. 8086:154d:4.",
        ),
        cfg.MultiStrOpt(
            "capability",
            default=[],
            help="Another reported attribute as key=value (repeatable); a key with "
            "':' nests (cpu_info:vendor=Intel); a JSON value is read as JSON.",
        ),
        cfg.BoolOpt(
            "report-stats",
            default=True,
            help="Report builds in progress and image property counts as builds start "
            "and end (for the I/O ops and image properties filters and weighers).",
        ),
        cfg.ListOpt(
            "traits",
            default=[],
            help="Traits each host's root provider reports, e.g. HW_CPU_X86_AVX512F,"
            "COMPUTE_IMAGE_TYPE_QCOW2.",
        ),
        cfg.IntOpt(
            "traits-on",
            min=0,
            help="Only the first N hosts report --traits (default: all of them).",
        ),
        cfg.MultiStrOpt(
            "aggregate",
            default=[],
            help="An aggregate every host joins, as name or name:key=value,... "
            "(e.g. gold:filter_tenant_id=p1). Repeat for several.",
        ),
        cfg.IntOpt(
            "vgpus-per-host",
            default=0,
            min=0,
            help="VGPU inventory of each GPU child provider; 0 gives hosts no GPU child.",
        ),
        cfg.IntOpt(
            "gpus-per-host",
            default=1,
            min=1,
            help="GPU child providers per host (with --vgpus-per-host).",
        ),
        cfg.ListOpt(
            "gpu-traits", default=["CUSTOM_VGPU"], help="Traits of each GPU child provider."
        ),
    ]
)


def _nested(key: str, value: Any, into: dict[str, Any]) -> None:
    head, sep, rest = key.partition(":")
    if not sep:
        into[key] = value
        return
    inner = into.setdefault(head, {})
    if not isinstance(inner, dict):
        raise ValueError(f"--capability {key}: {head} is already a value")
    _nested(rest, value, inner)


def capability_report(conf: cfg.ConfigOpts) -> CapabilityReport:
    """What every host of this simulator reports, from its options.

    :raises ValueError: an option value that cannot be read.
    """
    extra: dict[str, Any] = {}
    for item in conf.capability:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--capability {item!r} is not key=value")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        _nested(key, value, extra)
    cells, pools = [], []
    for cell in conf.numa_cells:
        cpus, _, memory = cell.partition(":")
        try:
            cells.append({"cpus": int(cpus), "memory_mb": int(memory)})
        except ValueError:
            raise ValueError(f"--numa-cells {cell!r} is not cpus:memory_mb") from None
    for pool in conf.pci_devices:
        try:
            vendor, product, count = pool.split(":")
            pools.append({"vendor_id": vendor, "product_id": product, "count": int(count)})
        except ValueError:
            raise ValueError(f"--pci-devices {pool!r} is not vendor:product:count") from None
    return CapabilityReport.from_primitive(
        {
            **extra,
            "cpu_arch": conf.cpu_arch,
            "hypervisor_type": conf.hypervisor_type,
            "hypervisor_version": version_to_int(conf.hypervisor_version),
            "supported_instances": [[conf.cpu_arch, conf.hypervisor_type, "hvm"]],
            "numa_cells": cells,
            "pci_devices": pools,
        }
    )


def make_driver(conf: cfg.ConfigOpts) -> ComputeDriver:
    """The driver ``--driver`` names, with its options."""
    if conf.driver == PROCESS:
        return ProcessDriver()
    return SimulatedDriver(
        build_time=conf.build_time,
        fail_rate=conf.fail_rate,
        fail_hosts=conf.fail_hosts,
        fail_resize_hosts=conf.fail_resize_hosts,
        live_migration_fail_rate=conf.live_migration_fail_rate,
        live_migration_fail_hosts=conf.live_migration_fail_hosts,
        seed=conf.seed,
    )


def build_compute(
    conf: cfg.ConfigOpts,
    store: ComputeStore,
    transport: Any,
    server_name: str,
) -> ComputeManager:
    """The compute manager of this process, over the driver ``--driver`` names.

    :raises ValueError: an option value it cannot read.
    """
    c = conf.compute
    shape = HostShape(
        vcpus=conf.vcpus,
        memory_mb=conf.memory_mb,
        disk_gb=conf.disk_gb,
        cpu_allocation_ratio=c.cpu_allocation_ratio,
        ram_allocation_ratio=c.ram_allocation_ratio,
        disk_allocation_ratio=c.disk_allocation_ratio,
        reserved_host_memory_mb=c.reserved_host_memory_mb,
        reserved_host_disk_gb=c.reserved_host_disk_gb,
        reserved_host_cpus=c.reserved_host_cpus,
    )
    hosts = [f"{conf.name_prefix}-{i:04d}" for i in range(conf.hosts)]
    topology = Topology(
        traits=tuple(conf.traits),
        traits_on=conf.traits_on,
        aggregates=tuple(AggregateSpec.parse(a) for a in conf.aggregate),
        vgpus_per_gpu=conf.vgpus_per_host,
        gpus_per_host=conf.gpus_per_host,
        gpu_traits=tuple(conf.gpu_traits),
    )
    capabilities = capability_report(conf)
    driver = make_driver(conf)
    try:
        return ComputeManager(
            store,
            rpc.ConductorClient(transport, conf.conductor.topic),
            hosts,
            server_name,
            shape,
            driver,
            availability_zones=conf.availability_zones,
            compute=rpc.ComputeClient(
                transport,
                ServiceResolver(store),
                conf.compute.topic,
                version_cap=conf.upgrade_levels.compute,
            ),
            topology=topology,
            capabilities=capabilities,
            report_stats=conf.report_stats,
            service_down_time=float(conf.scheduler.service_down_time),
            # Remember a deleted instance as long as the store fences its claims.
            terminated_retention=float(conf.conductor.deleted_retention),
            running_deleted_instance_action=c.running_deleted_instance_action,
            build_results=conf.build_results,
            stats_interval=conf.stats_interval,
            report_max_age=float(conf.conductor.report_max_age),
        )
    except ValueError:
        driver.cleanup_host()
        raise


def _mark_down(store: ComputeStore, hosts: Sequence[str]) -> None:
    """A graceful stop: the hosts count as down at once, everywhere (workers stop
    picking them now, not ``service_down_time`` later); the next start's
    heartbeat brings them back up. A store that cannot be reached leaves them
    to go down by their heartbeat's age, as if the process had died."""
    try:
        store.mark_down(hosts)
    except Exception as exc:  # noqa: BLE001 - stopping anyway
        LOG.warning("hosts_not_marked_down", error=repr(exc))
        return
    LOG.info("hosts_marked_down", count=len(hosts))


def _report_loop(sim: ComputeManager, interval: float, stop: threading.Event) -> None:
    """Report what the hosts run at once, then every ``interval`` seconds; a
    failed report is logged and counted (:class:`ReportFreshness`) and the next
    interval reports again."""
    while True:
        try:
            sim.report_instances()
        except Exception as exc:  # noqa: BLE001 - report again once the store is back
            sim.freshness.failed(exc)
        if stop.wait(interval):
            return


def _health(conf: cfg.ConfigOpts, store: Any, sim: ComputeManager) -> Any:
    """The compute's /healthz (broker, store, and whether its reports are
    fresh) and /metrics, as the conductor serves its own."""
    sim.freshness.export()
    monitor = health.HealthMonitor(
        {
            "broker": health.broker_probe(oslo_messaging.TransportURL.parse(conf)),
            "store": store.ping,
            "reports": sim.freshness.fresh,
        }
    )
    monitor.start()
    return health.serve(monitor, conf.scheduler.health_listen, conf.compute.health_port)


def _main(argv: Sequence[str] | None) -> int:
    conf_mod.CONF.register_cli_opts(cli_opts)
    conf = _cli.parse(argv, prog="compute-sim", description=DESCRIPTION)
    log.setup(process="compute-sim")
    warn_unread(conf)
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    # One name per simulator (its hosts are its prefix's): a restarted one takes
    # over its server queue instead of leaving one behind per process.
    server_name = f"sim-{conf.name_prefix}"
    try:
        sim = build_compute(conf, store, transport, server_name)
    except ValueError as exc:  # an option value it cannot read, named by the error
        _cli.say("compute-sim", str(exc))
        return 2
    sim.register()
    server = rpc.get_server(
        transport, conf.compute.topic, server_name, [sim], access_policy=steps.ACCESS_POLICY
    )
    server.start()
    stop = threading.Event()

    def _beat() -> None:
        while not stop.wait(conf.compute.heartbeat_interval):
            try:
                sim.heartbeat()
            except Exception as exc:  # noqa: BLE001 - keep beating once the store is back
                LOG.warning("heartbeat_failed", error=repr(exc))

    beating = threading.Thread(target=_beat, name="heartbeat", daemon=True)
    beating.start()
    reporting = threading.Thread(
        target=_report_loop,
        args=(sim, conf.compute.report_interval, stop),
        name="instance-reports",
        daemon=True,
    )
    reporting.start()
    if conf.compute.health_port:
        _health(conf, store, sim)
    LOG.info(
        "compute_sim_started", hosts=len(sim.hosts), rpc_server=server_name, driver=conf.driver
    )

    def _stop() -> None:
        stop.set()
        beating.join(timeout=10)  # no heartbeat after the hosts are marked down
        reporting.join(timeout=10)  # (a report after an outage heartbeats first)
        _mark_down(store, sim.hosts)
        server.stop()
        server.wait()
        sim.stop()
        transport.cleanup()
        broker.delete_queues(conf, [f"{conf.compute.topic}.{server_name}"])
        LOG.info("compute_sim_stopped", builds_ok=sim.builds_ok, builds_failed=sim.builds_failed)

    return _cli.exit_status(wait_for_signal(_stop))


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("compute-sim", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
