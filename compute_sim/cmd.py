"""``compute-sim``: one process simulating N compute hosts.

Example: ``compute-sim --config-file etc/scheduler/scheduler.conf --hosts 1000
--fail-rate 0.1 --build-time 0.05``. Hosts are named ``<prefix>-0000`` ...;
run several simulators side by side with different ``--name-prefix``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

from oslo_config import cfg

from compute_sim.manager import ComputeSimulator, HostShape
from scheduler import conf as conf_mod
from scheduler import log, rpc
from scheduler.cmd._daemon import wait_for_signal
from scheduler.service import ServiceResolver, make_store

LOG = log.get_logger("compute_sim")

cli_opts = [
    cfg.IntOpt("hosts", default=10, min=1, max=200000, help="How many hosts to simulate."),
    cfg.StrOpt("name-prefix", default="compute",
               help="Host names are <prefix>-0000, <prefix>-0001, ..."),
    cfg.IntOpt("vcpus", default=16, min=1, help="Physical CPUs per host."),
    cfg.IntOpt("memory-mb", default=65536, min=1, help="Memory per host, MB."),
    cfg.IntOpt("disk-gb", default=1000, min=1, help="Disk per host, GB."),
    cfg.FloatOpt("fail-rate", default=0.0, min=0.0, max=1.0,
                 help="Probability that a build fails (then it is rescheduled)."),
    cfg.ListOpt("fail-hosts", default=[],
                help="Hosts on which every build fails (for tests and demos)."),
    cfg.ListOpt("fail-resize-hosts", default=[],
                help="Hosts on which every prep_resize fails (the resize is then retried "
                "on its alternates)."),
    cfg.FloatOpt("build-time", default=0.05, min=0.0, help="Seconds a build takes."),
    cfg.ListOpt("availability-zones", default=[],
                help="Spread the hosts over these zones, round robin (one aggregate each)."),
    cfg.IntOpt("seed", help="Seed of the failure draws, for a replayable run."),
]


def build_simulator(conf: cfg.ConfigOpts, store, transport, server_name: str  # type: ignore[no-untyped-def]
                    ) -> ComputeSimulator:
    c = conf.compute
    shape = HostShape(vcpus=conf.vcpus, memory_mb=conf.memory_mb, disk_gb=conf.disk_gb,
                      cpu_allocation_ratio=c.cpu_allocation_ratio,
                      ram_allocation_ratio=c.ram_allocation_ratio,
                      disk_allocation_ratio=c.disk_allocation_ratio,
                      reserved_host_memory_mb=c.reserved_host_memory_mb,
                      reserved_host_disk_gb=c.reserved_host_disk_gb,
                      reserved_host_cpus=c.reserved_host_cpus)
    hosts = [f"{conf.name_prefix}-{i:04d}" for i in range(conf.hosts)]
    return ComputeSimulator(store, rpc.ConductorClient(transport), hosts, server_name, shape,
                            build_time=conf.build_time, fail_rate=conf.fail_rate,
                            fail_hosts=conf.fail_hosts,
                            availability_zones=conf.availability_zones, seed=conf.seed,
                            compute=rpc.ComputeClient(transport, ServiceResolver(store)),
                            fail_resize_hosts=conf.fail_resize_hosts)


def main(argv: Sequence[str] | None = None) -> None:
    conf_mod.CONF.register_cli_opts(cli_opts)
    conf = conf_mod.parse_args(sys.argv[1:] if argv is None else argv, prog="compute-sim",
                               description=__doc__.split("\n")[0])
    log.setup(process="compute-sim")
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    server_name = f"sim-{conf.name_prefix}-{os.getpid()}"
    sim = build_simulator(conf, store, transport, server_name)
    sim.register()
    server = rpc.get_server(transport, rpc.COMPUTE_TOPIC, server_name, [sim])
    server.start()
    stop = threading.Event()

    def _beat() -> None:
        while not stop.wait(conf.compute.heartbeat_interval):
            try:
                sim.heartbeat()
            except Exception as exc:  # noqa: BLE001 - keep beating once the store is back
                LOG.warning("heartbeat_failed", error=repr(exc))

    threading.Thread(target=_beat, name="heartbeat", daemon=True).start()
    LOG.info("compute_sim_started", hosts=len(sim.hosts), rpc_server=server_name)

    def _stop() -> None:
        stop.set()
        server.stop()
        server.wait()
        sim.stop()
        transport.cleanup()
        LOG.info("compute_sim_stopped", builds_ok=sim.builds_ok, builds_failed=sim.builds_failed)

    wait_for_signal(_stop)


if __name__ == "__main__":
    main()
