"""Another worker's writes: claims at a steady rate, for the catch-up measurement.

``python -m bench.claim_writer --url URL --prefix P --rate 1000 --seconds 6``
reads the providers, prints ``ready`` once, then claims a small allocation on
a random host ``rate`` times per second (the store's ``claim``, one atomic
step each) for ``seconds``, releases everything it claimed, and prints one
JSON line: claims made and the rate achieved while claiming.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid as uuidlib

from scheduler.exceptions import ClaimFailed
from scheduler.objects import AllocationRequest
from scheduler.store import open_store

AMOUNTS = {"VCPU": 1, "MEMORY_MB": 256}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    store = open_store(args.url, args.prefix)
    hosts = [p.uuid for p in store.list_providers()]
    rng = random.Random(11)
    print("ready", flush=True)
    claimed: list[str] = []
    refused = 0
    started = time.perf_counter()
    interval = 1.0 / args.rate
    while (now := time.perf_counter()) - started < args.seconds:
        due = started + len(claimed) * interval
        if now < due:
            time.sleep(due - now)
        consumer = str(uuidlib.uuid4())
        try:
            store.claim(
                consumer, AllocationRequest({rng.choice(hosts): AMOUNTS}, "writer", "writer")
            )
        except ClaimFailed:
            refused += 1
        claimed.append(consumer)
    elapsed = time.perf_counter() - started
    for consumer in claimed:
        store.release(consumer)
    print(
        json.dumps(
            {
                "claims": len(claimed),
                "refused": refused,
                "seconds": elapsed,
                "rate": len(claimed) / elapsed,
            }
        ),
        flush=True,
    )
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
