"""``python -m bench [--case NAME ...] [--quick] [--profile] [--out DIR]``.

``--churn-hosts`` and ``--churn-operations`` resize the churn case;
``--cell-rdb PATH`` lets the cell case start from a populated cell it saved;
``--merge`` keeps the cases of ``OUT/results.json`` that this run does not
take (to add one case's results to a full run's).

Runs the chosen cases (all by default) and writes ``results.json``,
``results.md`` and PNG plots into ``--out`` (``bench/results``). Needs
RabbitMQ and Redis as the functional tests do (the same environment
variables point elsewhere: ``SCHEDULER_TEST_RABBIT_HOST``/``_PORT``,
``SCHEDULER_TEST_REDIS_URL``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import machine, report
from bench.cases import (
    bootstorm,
    cell,
    churn,
    e2e,
    engine,
    fill,
    hostview,
    lifetimes,
    memory,
    nova,
    preempt,
    rabbit,
    replicas,
    sweep,
    workers,
)
from bench.runner import Bench
from scheduler import log

#: Case name -> its run(bench) function, in the order a full run takes them
#: (the in-process ones first, so the 100k-host cloud is built once and dropped
#: before the deployments of the later cases start).
CASES = {
    "engine": engine.run,
    "hostview": hostview.run,
    "memory": memory.run,
    "preempt": preempt.run,
    "rabbit": rabbit.run,
    "bootstorm": bootstorm.run,
    "workers": workers.run,
    "e2e": e2e.run,
    "churn": churn.run,
    "sweep": sweep.run,
    "fill": fill.run,
    "lifetimes": lifetimes.run,
    "cell": cell.run,
    "replicas": replicas.run,
    "nova": nova.run,
}
DEFAULT_OUT = Path(__file__).parent / "results"
#: The file doc/source/performance.rst includes: what --update-docs is given.
DOCS_PAGE = "doc/source/performance-latest.inc"


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
        "--update-docs",
        type=Path,
        metavar="PAGE",
        help="also write the summary (targets, headline tables, plots) to PAGE, the "
        "reStructuredText the documentation's performance page includes, "
        f"{DOCS_PAGE} (refused with --quick or --case: the documentation shows full runs)",
    )
    parser.add_argument(
        "--rebuild-report",
        action="store_true",
        help="run nothing: rewrite results.md, the plots (and PAGE with "
        "--update-docs) from OUT/results.json",
    )
    parser.add_argument(
        "--churn-hosts",
        type=_sizes,
        metavar="N[,N...]",
        help="churn: the cloud sizes (default 1000,10000; --quick: 20)",
    )
    parser.add_argument(
        "--churn-operations",
        type=int,
        metavar="N",
        help="churn: steps per utilisation, each a boot and a delete (default 20000)",
    )
    parser.add_argument(
        "--cell-rdb",
        type=Path,
        metavar="PATH",
        help="cell: start from the populated cell saved at PATH (an RDB file a run "
        "with the same sizes wrote), or save it there once populated",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the cases of OUT/results.json this run does not take (their "
        "figures, and the run's machine and date, stay as they were), and in a "
        "case the rows of cloud sizes not run now; each row run now records its run",
    )
    args = parser.parse_args(argv)
    if args.churn_operations is not None and args.churn_operations < 1:
        parser.error("--churn-operations must be at least 1")
    if args.merge and args.quick:
        parser.error("--merge keeps full runs' results: not with --quick")
    full = not args.quick and (not args.case or args.merge)
    if args.update_docs and not full and not args.rebuild_report:
        parser.error("--update-docs needs a full run (no --quick, no --case without --merge)")
    return args


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of counts: {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"counts must be at least 1: {text!r}")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    log.setup(level="WARNING")
    # 16 callers on one transport trip oslo.messaging's call-queue "leak" warning.
    logging.getLogger("oslo_messaging").setLevel(logging.ERROR)
    out: Path = args.out
    if args.rebuild_report:
        results = json.loads((out / "results.json").read_text())
        if args.update_docs and results["quick"]:
            raise SystemExit("--update-docs: the documentation shows full runs, not --quick ones")
        report.write(results, out, docs=args.update_docs)
        return 0
    chosen = [name for name in CASES if not args.case or name in args.case]
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bench = Bench(
        out, quick=args.quick, profile=args.profile, log=lambda line: print(line, flush=True)
    )
    bench.cell_rdb = args.cell_rdb
    if args.churn_hosts or args.churn_operations:
        bench.sizes = dataclasses.replace(
            bench.sizes,
            churn_hosts=args.churn_hosts or bench.sizes.churn_hosts,
            churn_operations=args.churn_operations or bench.sizes.churn_operations,
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
    if args.merge:
        results = _merged(out / "results.json", results)
    report.write(results, out, log=bench.log, docs=args.update_docs)
    return 0


def _merged(path: Path, new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s cases into the results at ``path``: each row taken now keeps
    the run it came from (date, command, machine, seconds) with it, and a
    case's rows of cloud sizes not run now (``hosts``) stay."""
    if not path.exists():
        return new
    old = json.loads(path.read_text())
    for name, case in new["cases"].items():
        run = {key: new[key] for key in ("started_at", "command", "machine", "seconds")}
        for row in case.get("rows", []):
            row.setdefault("run", run)
        kept = old["cases"].get(name, {}).get("rows", [])
        for row in kept:  # rows merged before runs were kept per row
            row.setdefault("run", old["cases"][name].get("run"))
        sizes = {row.get("hosts") for row in case.get("rows", [])}
        if kept and None not in sizes:  # the rows of cloud sizes not run now stay
            case["rows"] = sorted(
                [row for row in kept if row.get("hosts") not in sizes] + case["rows"],
                key=lambda row: row["hosts"],
            )
        old["cases"][name] = case
    return old


if __name__ == "__main__":
    sys.exit(main())
