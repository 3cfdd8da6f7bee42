"""``scheduler-demo`` on the real services: a seed repeats the in-process run
exactly, and the run leaves nothing behind in a vhost or a Redis it shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import redis

from bench.nodes import wait_until
from tests.functional.conftest import REDIS_URL, Cluster

#: Runs the demo and prints what became of each instance (its own process: the
#: demo configures logging for the process it runs in).
_PLAY = """
import json, sys
from allinone import demo
args = demo._parser().parse_args(sys.argv[1:])
report = demo.play(args)
assert not report.timed_out
print(json.dumps(sorted([r.uuid, r.host, r.state, r.attempts] for r in report.instances)))
"""

ARGS = ("--hosts", "6", "--instances", "24", "--fail-rate", "0.3", "--seed", "11")


def play(env: dict[str, str], *args: str) -> tuple[list[Any], str]:
    out = subprocess.run(
        [sys.executable, "-c", _PLAY, *ARGS, *args],
        capture_output=True,
        text=True,
        timeout=150,
        check=True,
        env={**os.environ, **env},
    )
    *said, last = out.stdout.splitlines()
    return json.loads(last), "\n".join(said)


def test_a_seed_repeats_the_in_process_run_on_the_real_services_and_leaves_nothing(
    cluster: Cluster,
) -> None:
    """The seed gives the same placements over RabbitMQ and Redis as in one
    process; the run's topics and keys are its own (under the configured key
    prefix, which is kept) and are gone when it ends."""
    in_process, _ = play({})
    cluster.write_config()
    real, said = play(
        {
            "SCHEDULER_DEMO_TRANSPORT_URL": cluster.transport_url,
            "SCHEDULER_DEMO_REDIS_URL": REDIS_URL,
        },
        "--config-file",
        str(cluster.config_file),
    )

    assert real == in_process
    assert f"key prefix {cluster.prefix}-demo-" in said
    wait_until(lambda: not cluster.queues(), 30, f"no queue left, still {cluster.queues()}")
    client = redis.Redis.from_url(REDIS_URL)
    assert not list(client.scan_iter(f"{cluster.prefix}*", count=1000))
