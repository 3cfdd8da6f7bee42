"""``conductor-stub``: the API + conductor role, cut to what drives the scheduler.

``conductor-stub serve`` owns instance records and receives build results
(run it as a daemon next to the workers). ``conductor-stub boot --count N
--flavor NAME --wait`` boots instances and prints what became of them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from oslo_config import cfg

from conductor_stub.flavors import load_catalog
from conductor_stub.manager import Booter, ConductorEndpoint
from conductor_stub.report import format_report
from scheduler import conf as conf_mod
from scheduler import log, rpc
from scheduler.cmd._daemon import wait_for_signal
from scheduler.exceptions import SchedulerError
from scheduler.service import ServiceResolver, make_store

LOG = log.get_logger("conductor_stub")


def _add_commands(subparsers) -> None:  # type: ignore[no-untyped-def]
    subparsers.add_parser("serve", help="Serve the conductor topic (a daemon).")
    boot = subparsers.add_parser("boot", help="Boot instances and report their fate.")
    boot.add_argument("--count", type=int, default=1, help="How many instances (default 1).")
    boot.add_argument("--flavor", default="m1.small",
                      help="Flavor name from the catalog (default m1.small).")
    boot.add_argument("--mode", choices=["run_instance", "select_destinations"],
                      default="run_instance",
                      help="run_instance: the scheduler casts the builds; select_destinations: "
                      "ask for destinations, then cast builds from here (Nova's modern flow).")
    boot.add_argument("--per-request", type=int, default=1,
                      help="Instances per scheduling request (all-or-nothing inside one).")
    boot.add_argument("--group-policy",
                      choices=["affinity", "anti-affinity", "soft-affinity",
                               "soft-anti-affinity"],
                      help="Put all instances in one new server group with this policy.")
    boot.add_argument("--availability-zone", help="Boot into this zone.")
    boot.add_argument("--wait", action="store_true",
                      help="Wait until every instance is ACTIVE or ERROR.")
    boot.add_argument("--timeout", type=float, default=300.0,
                      help="Seconds --wait waits at most (default 300).")
    boot.add_argument("--json", action="store_true",
                      help="Print one JSON object (summary and per-instance list).")


command_opt = cfg.SubCommandOpt("command", title="Commands", handler=_add_commands,
                                help="serve | boot")


def _serve(conf: cfg.ConfigOpts) -> None:
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    endpoint = ConductorEndpoint(store, rpc.ComputeClient(transport, ServiceResolver(store)))
    server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC, conf.host, [endpoint])
    server.start()
    LOG.info("conductor_started")

    def _stop() -> None:
        server.stop()
        server.wait()
        transport.cleanup()
        LOG.info("conductor_stopped")

    wait_for_signal(_stop)


def _boot(conf: cfg.ConfigOpts) -> int:
    args = conf.command
    if args.count < 1 or args.per_request < 1:
        print("conductor-stub boot: --count and --per-request must be at least 1",
              file=sys.stderr)
        return 2
    catalog = load_catalog(conf.conductor.flavors_file)
    if args.flavor not in catalog:
        print(f"conductor-stub boot: unknown flavor {args.flavor!r}; known: "
              f"{', '.join(sorted(catalog))}", file=sys.stderr)
        return 2
    transport = rpc.get_transport(conf)
    store = make_store(conf)
    booter = Booter(store, rpc.SchedulerClient(transport, conf.scheduler.topic),
                    rpc.ComputeClient(transport, ServiceResolver(store)))
    started = time.monotonic()
    ctxt = rpc.RequestContext(user_id="demo", project_id="demo")
    uuids = booter.boot(ctxt, catalog[args.flavor], args.count, per_request=args.per_request,
                        mode=args.mode, group_policy=args.group_policy,
                        availability_zone=args.availability_zone)
    if not args.wait:
        print(json.dumps({"instances": uuids}) if args.json else "\n".join(uuids))
        transport.cleanup()
        return 0
    report = booter.wait(uuids, args.timeout, started)
    print(json.dumps(report.to_primitive()) if args.json else format_report(report))
    transport.cleanup()
    return 1 if report.timed_out else 0


def main(argv: Sequence[str] | None = None) -> int:
    conf_mod.CONF.register_cli_opt(command_opt)
    conf = conf_mod.parse_args(sys.argv[1:] if argv is None else argv, prog="conductor-stub",
                               description=__doc__.split("\n")[0])
    log.setup(process=f"conductor-stub.{conf.command.name}",
              level="INFO" if conf.command.name == "serve" else "WARNING")
    try:
        if conf.command.name == "serve":
            _serve(conf)
            return 0
        return _boot(conf)
    except SchedulerError as exc:
        print(f"conductor-stub: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
