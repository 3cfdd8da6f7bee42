"""``scheduler-demo``: the whole system in one process.

With no arguments: a scheduler worker, a compute simulator and a conductor
on oslo.messaging's in-process ``fake://`` transport and the in-memory store;
it boots a few hundred instances of mixed flavors on a few dozen hosts with
injected build failures and prints what happened. With ``--transport-url
rabbit://...`` and ``--redis-url redis://...`` the same runs over the real
services (still one process; run the daemons separately for a real
deployment).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import uuid as uuidlib
from collections.abc import Sequence

from compute_sim.manager import ComputeSimulator, HostShape
from conductor_stub.flavors import load_catalog
from conductor_stub.manager import Booter, ConductorEndpoint
from conductor_stub.report import format_fill, format_report
from scheduler import conf as conf_mod
from scheduler import log, rpc
from scheduler.log import mask_secrets
from scheduler.service import SchedulerService, ServiceResolver
from scheduler.store import open_store


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scheduler-demo",
        description=__doc__.split("\n")[0],
        epilog="Example: scheduler-demo --hosts 40 --instances 300 --fail-rate 0.1",
    )
    p.add_argument(
        "--transport-url",
        default="fake://",
        help="oslo.messaging transport (default fake://, in-process).",
    )
    p.add_argument(
        "--redis-url", default="memory://", help="Store URL (default memory://, in-process)."
    )
    p.add_argument("--hosts", type=int, default=40, help="Simulated hosts (default 40).")
    p.add_argument("--instances", type=int, default=300, help="Instances to boot (default 300).")
    p.add_argument(
        "--flavors",
        default="m1.tiny,m1.small,m1.medium,m1.large",
        help="Flavors to cycle through (default m1.tiny,m1.small,m1.medium,m1.large).",
    )
    p.add_argument(
        "--fail-rate",
        type=float,
        default=0.1,
        help="Probability a build fails and is rescheduled (default 0.1).",
    )
    p.add_argument(
        "--build-time",
        type=float,
        default=0.02,
        help="Seconds a simulated build takes (default 0.02).",
    )
    p.add_argument("--vcpus", type=int, default=16, help="CPUs per host (default 16).")
    p.add_argument("--memory-mb", type=int, default=49152, help="Memory per host (default 49152).")
    p.add_argument("--disk-gb", type=int, default=500, help="Disk per host (default 500).")
    p.add_argument("--seed", type=int, default=42, help="Seed of the failure draws.")
    p.add_argument("--timeout", type=float, default=120.0, help="Seconds to wait at most.")
    p.add_argument("--verbose", action="store_true", help="Log every event to stderr.")
    return p


def run(args: argparse.Namespace) -> int:
    log.setup(level="INFO" if args.verbose else "WARNING", process="scheduler-demo")
    conf = conf_mod.parse_args([], prog="scheduler-demo", default_config_files=[])
    prefix = f"demo-{uuidlib.uuid4().hex[:8]}"
    conf.set_override("key_prefix", prefix, group="redis")
    conf.set_override("host", "demo")
    catalog = load_catalog()
    flavors = [catalog[name] for name in args.flavors.split(",")]

    transport = rpc.get_transport(conf, url=args.transport_url)
    store = open_store(args.redis_url, prefix)
    shape = HostShape(vcpus=args.vcpus, memory_mb=args.memory_mb, disk_gb=args.disk_gb)
    hosts = [f"demo-{i:04d}" for i in range(args.hosts)]
    sim = ComputeSimulator(
        store,
        rpc.ConductorClient(transport, conf.conductor.topic),
        hosts,
        "demo-sim",
        shape,
        build_time=args.build_time,
        fail_rate=args.fail_rate,
        seed=args.seed,
    )
    sim.register()
    resolver = ServiceResolver(store)
    compute = rpc.ComputeClient(transport, resolver, conf.compute.topic)
    scheduler = SchedulerService(conf, transport, None, store, server_name="demo")
    # The conductor asks the scheduler again when a reschedule's alternates
    # can no longer be claimed.
    conductor = ConductorEndpoint(
        store, compute, rpc.SchedulerClient(transport, conf.scheduler.topic)
    )
    servers = [
        rpc.get_server(transport, conf.compute.topic, "demo-sim", [sim]),
        rpc.get_server(transport, conf.conductor.topic, "demo", [conductor]),
    ]
    for server in servers:
        server.start()
    scheduler.start()
    print(
        f"scheduler-demo: {args.hosts} hosts, {args.instances} instances "
        f"({', '.join(f.name for f in flavors)}), fail rate {args.fail_rate:.0%}, "
        f"transport {mask_secrets(args.transport_url)}, store {mask_secrets(args.redis_url)}"
    )
    booter = Booter(store, rpc.SchedulerClient(transport, conf.scheduler.topic), compute)
    ctxt = rpc.RequestContext(user_id="demo", project_id="demo")
    started = time.monotonic()
    uuids: list[str] = []
    for flavor in itertools.islice(itertools.cycle(flavors), args.instances):
        uuids.extend(booter.boot(ctxt, flavor, 1))
    report = booter.wait(uuids, args.timeout, started)
    stats = scheduler.endpoint.stats
    print(format_report(report))
    print(
        f"decisions: {stats.decisions} ({stats.no_valid_host} no valid host), "
        f"{stats.per_second:,.0f} per second; builds ok {sim.builds_ok}, "
        f"failed {sim.builds_failed}"
    )
    print(format_fill(store.list_providers()))

    scheduler.stop()
    for server in servers:
        server.stop()
        server.wait()
    sim.stop()
    transport.cleanup()
    store.wipe()
    store.close()
    return 1 if report.timed_out else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(_parser().parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
