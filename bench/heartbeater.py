"""The synthetic cloud's compute services heartbeating, as real ones would.

``python -m bench.heartbeater --url URL --prefix P --hosts-file F`` marks the
hosts named in ``F`` (one a line) alive every ``--interval`` seconds with the
store's ``heartbeat``, until it is terminated. It runs beside a Redis cloud
so that no measurement outlives ``service_down_time``; the hosts the plan
has "down" are left out, and stay down.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scheduler.store import open_store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--hosts-file", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=10.0)
    args = parser.parse_args()
    hosts = args.hosts_file.read_text().split()
    store = open_store(args.url, args.prefix)
    while True:
        for start in range(0, len(hosts), 20000):
            store.heartbeat(hosts[start : start + 20000], time.time())
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
