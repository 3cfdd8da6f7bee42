"""``scheduler-demo``: the whole system in one process.

With no arguments: a scheduler worker, a compute simulator and a conductor
on oslo.messaging's in-process ``fake://`` transport and the in-memory store;
it boots a few hundred instances of mixed flavors on a few dozen hosts with
injected build failures and prints what happened. With a rabbit transport URL
and a redis store URL (``$SCHEDULER_DEMO_TRANSPORT_URL`` and
``$SCHEDULER_DEMO_REDIS_URL``, or ``--config-file``; a URL with a password is
not taken on the command line) the same runs over the real services (still
one process; run the daemons separately for a real deployment), on topics and
under a key prefix of its own (within the configured one), removed when it
ends. ``--seed N``
repeats a run exactly: the same placements.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import Any

from oslo_config import cfg

from compute_sim.hosts import HostShape
from compute_sim.manager import DEFAULT_BUILD_RESULTS, DEFAULT_STATS_INTERVAL
from compute_sim.simulator import ComputeSimulator
from conductor_stub.manager import ConductorEndpoint
from conductor_stub.report import format_fill, format_report
from conductor_stub.tasks.build import Booter, BootReport
from scheduler import broker, log, rpc, steps
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.flavors import load_catalog
from scheduler.log import mask_secrets
from scheduler.service import SchedulerService
from scheduler.store import open_store
from scheduler.store.services import ServiceResolver

#: Where the URLs come from when not on the command line (the environment is
#: not shown by ``ps``; a command line is).
TRANSPORT_ENV = "SCHEDULER_DEMO_TRANSPORT_URL"
STORE_ENV = "SCHEDULER_DEMO_REDIS_URL"


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _flavors(text: str) -> list[str]:
    known = load_catalog()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown flavor {', '.join(unknown) or repr(text)}; known: {', '.join(sorted(known))}"
        )
    return names


def _no_password(text: str) -> str:
    if mask_secrets(text) != text:
        raise argparse.ArgumentTypeError(
            "a URL with a password is not taken on the command line (ps shows it to "
            f"everyone): put it in ${TRANSPORT_ENV} / ${STORE_ENV} or in --config-file"
        )
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scheduler-demo",
        description=__doc__.split("\n")[0],
        epilog="Example: scheduler-demo --hosts 40 --instances 300 --fail-rate 0.1. "
        "On the real services: SCHEDULER_DEMO_TRANSPORT_URL=rabbit://user:pw@host:5672/ "
        "SCHEDULER_DEMO_REDIS_URL=redis://host:6379/0 scheduler-demo (or the same in "
        "--config-file's [DEFAULT] transport_url and [redis] url).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--transport-url",
        type=_no_password,
        help="oslo.messaging transport, without a password (default: "
        f"${TRANSPORT_ENV}, else --config-file's transport_url, else fake://, in-process).",
    )
    p.add_argument(
        "--redis-url",
        type=_no_password,
        help=f"Store URL, without a password (default: ${STORE_ENV}, else "
        "--config-file's [redis] url, else memory://, in-process).",
    )
    p.add_argument(
        "--config-file",
        metavar="PATH",
        help="Read transport_url and [redis] url (and the other options) from this file.",
    )
    p.add_argument("--hosts", type=_cli.whole(1), default=40, help="Simulated hosts.")
    p.add_argument("--instances", type=_cli.whole(1), default=300, help="Instances to boot.")
    p.add_argument(
        "--flavors",
        type=_flavors,
        default="m1.tiny,m1.small,m1.medium,m1.large",
        help="Flavors to cycle through (catalog names, comma-separated).",
    )
    p.add_argument(
        "--fail-rate",
        type=_fraction,
        default=0.1,
        help="Probability a build fails and is rescheduled (0 to 1).",
    )
    p.add_argument(
        "--build-time",
        type=_cli.seconds(0.0, inclusive=True),
        default=0.02,
        help="Seconds a simulated build takes.",
    )
    p.add_argument("--vcpus", type=_cli.whole(1), default=16, help="CPUs per host.")
    p.add_argument("--memory-mb", type=_cli.whole(1), default=49152, help="Memory per host, MB.")
    p.add_argument("--disk-gb", type=_cli.whole(1), default=500, help="Disk per host, GB.")
    p.add_argument(
        "--seed",
        type=int,
        help="Repeat a run: the failure draws, instance uuids and request ids come "
        "from this seed, and the instances are booted one after another (each once "
        "it is ACTIVE or ERROR), so the same seed gives the same placements. "
        "Without it the boots go out at once.",
    )
    p.add_argument(
        "--timeout",
        type=_cli.seconds(),
        default=120.0,
        help="Seconds to wait at most.",
    )
    p.add_argument("--verbose", action="store_true", help="Log every event to stderr.")
    _cli.add_common_arguments(p)
    return p


def _urls(args: argparse.Namespace) -> tuple[cfg.ConfigOpts, str, str]:
    """The configuration and the transport and store URLs: the command line,
    else the environment, else the config file, else the in-process ones."""
    files = [args.config_file] if args.config_file else []
    conf = conf_mod.parse_args(
        [arg for f in files for arg in ("--config-file", f)],
        prog="scheduler-demo",
        default_config_files=[],
    )
    from_file: dict[str, str] = {}
    if files:
        if conf.transport_url:
            from_file["transport"] = conf.transport_url
        where = conf.get_location("url", "redis")
        if where is not None and where.location == cfg.Locations.user:
            from_file["store"] = conf.redis.url
    transport = (
        args.transport_url
        or os.environ.get(TRANSPORT_ENV)
        or from_file.get("transport")
        or "fake://"
    )
    store = args.redis_url or os.environ.get(STORE_ENV) or from_file.get("store") or "memory://"
    return conf, transport, store


def _stop_all(stoppers: Sequence[Callable[[], None]]) -> None:
    """Stop the servers side by side: each waits for its executor to drain."""
    threads = [threading.Thread(target=stop, name="demo-stop") for stop in stoppers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _seeded_ids(seed: int) -> Callable[[], str]:
    rng = random.Random(seed)
    return lambda: str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


def boot_all(
    booter: Booter,
    ctxt: rpc.RequestContext,
    flavors: Sequence[Any],
    count: int,
    timeout: float,
    one_by_one: bool,
) -> BootReport:
    """Boot ``count`` instances cycling through ``flavors``; one by one (each
    waited for) when the run must repeat itself, else all at once."""
    started = time.monotonic()
    uuids: list[str] = []
    for flavor in itertools.islice(itertools.cycle(flavors), count):
        uuids.extend(booter.boot(ctxt, flavor, 1))
        if one_by_one:
            left = timeout - (time.monotonic() - started)
            if booter.wait(uuids[-1:], max(left, 0.0), started, poll=0.002).timed_out:
                break
    left = timeout - (time.monotonic() - started)
    return booter.wait(uuids, max(left, 0.0), started)


def run(args: argparse.Namespace) -> int:
    return 1 if play(args).timed_out else 0


def play(args: argparse.Namespace) -> BootReport:
    """The whole demo: start, boot, print what happened, stop; what became of
    each instance."""
    _cli.apply_log_options(args.debug, args.log_file)
    log.setup(level="INFO" if args.verbose else "WARNING", process="scheduler-demo")
    conf, transport_url, redis_url = _urls(args)
    run_id = f"demo-{uuidlib.uuid4().hex[:8]}"
    prefix = _private(conf, run_id)
    conf.set_override("host", "demo")
    catalog = load_catalog()
    flavors = [catalog[name] for name in args.flavors]

    transport = rpc.get_transport(conf, url=transport_url)
    store = open_store(redis_url, prefix)
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
        build_results=DEFAULT_BUILD_RESULTS,
        # Seeded, each stats change is written at once: a host's operations
        # then reach the worker's view before the next boot is decided, so
        # the weighing (and the run) repeats itself; batched, whether the
        # last build's end had landed was a race.
        stats_interval=0.0 if args.seed is not None else DEFAULT_STATS_INTERVAL,
    )
    sim.register()
    resolver = ServiceResolver(store)
    compute = rpc.ComputeClient(
        transport, resolver, conf.compute.topic, version_cap=conf.upgrade_levels.compute
    )
    scheduler = SchedulerService(conf, transport, None, store, server_name="demo")
    # The conductor asks the scheduler again when a reschedule's alternates
    # can no longer be claimed.
    conductor = ConductorEndpoint(
        store, compute, rpc.SchedulerClient(transport, conf.scheduler.topic)
    )
    servers = [
        rpc.get_server(
            transport, conf.compute.topic, "demo-sim", [sim], access_policy=steps.ACCESS_POLICY
        ),
        rpc.get_server(
            transport, conf.conductor.topic, "demo", [conductor], access_policy=steps.ACCESS_POLICY
        ),
    ]
    for server in servers:
        server.start()
    scheduler.start()
    print(
        f"scheduler-demo: {args.hosts} hosts, {args.instances} instances "
        f"({', '.join(f.name for f in flavors)}), fail rate {args.fail_rate:.0%}, "
        f"transport {mask_secrets(transport_url)}, store {mask_secrets(redis_url)}"
        + ("" if args.seed is None else f", seed {args.seed}")
    )
    if transport_url != "fake://" or redis_url != "memory://":
        print(
            f"scheduler-demo: its own topics ({conf.scheduler.topic}, ...) and key prefix "
            f"{prefix}, removed at the end"
        )
    booter = Booter(
        store,
        rpc.SchedulerClient(transport, conf.scheduler.topic),
        compute,
        new_id=None if args.seed is None else _seeded_ids(args.seed),
        priority_classes=conf_mod.priority_classes(conf),
    )
    ctxt = rpc.RequestContext(user_id="demo", project_id="demo")
    report = boot_all(
        booter, ctxt, flavors, args.instances, args.timeout, one_by_one=args.seed is not None
    )
    stats = scheduler.endpoint.stats
    print(format_report(report))
    print(
        f"decisions: {stats.decisions} ({stats.no_valid_host} no valid host), "
        f"{stats.per_second:,.0f} per second; builds ok {sim.builds_ok}, "
        f"failed {sim.builds_failed}"
    )
    print(format_fill(store.list_providers()))

    def _stop(server: Any) -> Callable[[], None]:
        def stop() -> None:
            server.stop()
            server.wait()

        return stop

    _stop_all([scheduler.stop, *(_stop(s) for s in servers)])
    sim.stop()
    transport.cleanup()
    store.wipe()
    store.close()
    broker.delete_queues(conf, _queues(conf), url=transport_url)
    return report


#: The RPC server name of each of the demo's servers, by topic option group.
_SERVERS = {"scheduler": "demo", "compute": "demo-sim", "conductor": "demo"}


def _private(conf: cfg.ConfigOpts, run_id: str) -> str:
    """Give this run topics and a key prefix of its own (returned), under the
    configured ones: nothing of a deployment sharing the vhost or the Redis
    (a worker on the ``scheduler`` topic, its keys) is touched, a prefix an ACL
    confines the demo to is kept, and what the run made can all be removed."""
    for group in _SERVERS:
        conf.set_override("topic", f"{conf[group].topic}-{run_id}", group=group)
    prefix = f"{conf.redis.key_prefix}-{run_id}"
    conf.set_override("key_prefix", prefix, group="redis")
    return prefix


def _queues(conf: cfg.ConfigOpts) -> list[str]:
    """The queues the run's servers declared and nothing else consumes: each
    topic's, and each server's own (the fanout and reply queues go by themselves)."""
    return [
        name
        for group, server in _SERVERS.items()
        for name in (conf[group].topic, f"{conf[group].topic}.{server}")
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    return _cli.run("scheduler-demo", lambda: run(args), argv)


if __name__ == "__main__":
    sys.exit(main())
