"""``python -m bench [--case NAME ...] [--quick] [--profile] [--out DIR]``.

Runs the chosen cases (all by default) and writes ``results.json``,
``results.md`` and PNG plots into ``--out`` (``bench/results``). Needs
RabbitMQ and Redis as the functional tests do (the same environment
variables point elsewhere: ``SCHEDULER_TEST_RABBIT_HOST``/``_PORT``,
``SCHEDULER_TEST_REDIS_URL``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import machine, report
from bench.cases import bootstorm, engine, hostview, memory, rabbit
from bench.runner import Bench
from scheduler import log

#: Case name -> its run(bench) function, in the order a full run takes them
#: (the in-process ones first, so the 100k-host cloud is built once and dropped
#: before the deployments of the later cases start).
CASES = {
    "engine": engine.run,
    "hostview": hostview.run,
    "memory": memory.run,
    "rabbit": rabbit.run,
    "bootstorm": bootstorm.run,
}
DEFAULT_OUT = Path(__file__).parent / "results"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--case",
        action="append",
        choices=list(CASES),
        help="run this case (repeatable; default: all)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: checks the suite runs, figures mean nothing",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also write profiles (cProfile of the engine, py-spy of the "
        "worker if installed) into OUT/profiles",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"where to write results (default {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--update-readme",
        type=Path,
        metavar="README",
        help="also put the summary between the bench markers of README "
        "(refused with --quick or --case: the README shows full runs)",
    )
    parser.add_argument(
        "--rebuild-report",
        action="store_true",
        help="run nothing: rewrite results.md, the plots (and README with "
        "--update-readme) from OUT/results.json",
    )
    args = parser.parse_args(argv)
    if args.update_readme and (args.quick or args.case) and not args.rebuild_report:
        parser.error("--update-readme needs a full run (no --quick, no --case)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    log.setup(level="WARNING")
    # 16 callers on one transport trip oslo.messaging's call-queue "leak" warning.
    logging.getLogger("oslo_messaging").setLevel(logging.ERROR)
    out: Path = args.out
    if args.rebuild_report:
        results = json.loads((out / "results.json").read_text())
        if args.update_readme and results["quick"]:
            raise SystemExit("--update-readme: the README shows full runs, not --quick ones")
        report.write(results, out, readme=args.update_readme)
        return 0
    chosen = [name for name in CASES if not args.case or name in args.case]
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bench = Bench(
        out, quick=args.quick, profile=args.profile, log=lambda line: print(line, flush=True)
    )
    results = {
        "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv),
        "quick": args.quick,
        "machine": machine.describe(bench.redis_url),
        "cases": {},
    }
    try:
        for name in chosen:
            case_started = time.perf_counter()
            results["cases"][name] = CASES[name](bench)
            results["cases"][name]["seconds"] = time.perf_counter() - case_started
            if name == "memory" or name == "hostview" and "memory" not in chosen:
                # The big clouds are needed by nothing after these: drop them.
                for hosts in (*bench.sizes.hostview_hosts, *bench.sizes.memory_hosts):
                    if hosts != bench.sizes.rabbit_hosts:
                        bench.drop_redis_cloud(hosts)
    finally:
        bench.close()
    results["machine"]["load_average_at_end"] = machine.load_average()
    results["seconds"] = time.perf_counter() - started
    report.write(results, out, log=bench.log, readme=args.update_readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
