"""A bare oslo.messaging RPC server: the transport's own cost, for comparison.

``python -m bench.echo_server --config-file F --response-file R`` serves topic
``bench-echo`` with one method, ``select_destinations``, taking the same
arguments as the scheduler's and returning the same-sized answer (a response
captured from a real worker, read from ``R``) without doing anything else.
It is built exactly like the worker's server (same config, transport,
serializer and executor), so a call to it costs what a call to the worker
would cost if scheduling were free.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import oslo_messaging
from oslo_config import cfg

from scheduler import conf as conf_mod
from scheduler import log, rpc
from scheduler.cmd._daemon import wait_for_signal

TOPIC = "bench-echo"
LOG = log.get_logger("bench.echo_server")


class EchoEndpoint:
    # The scheduler client's version: a client is served at once, as by a
    # worker (an older version would refuse it first, and the client ask again).
    target = oslo_messaging.Target(version=rpc.SchedulerClient.VERSION)

    def __init__(self, response: Any) -> None:
        self.response = response

    def select_destinations(self, ctxt: Any, **arguments: Any) -> Any:
        """Whatever the scheduler's takes (request_spec, instance_uuids, ...)."""
        return self.response


def main(argv: Sequence[str] | None = None) -> None:
    conf_mod.CONF.register_cli_opts([cfg.StrOpt("response-file", required=True)])
    conf = conf_mod.parse_args(sys.argv[1:] if argv is None else argv, prog="bench-echo")
    log.setup(process="bench-echo")
    response = json.loads(Path(conf.response_file).read_text())
    transport = rpc.get_transport(conf)
    server = rpc.get_server(transport, TOPIC, conf.host, [EchoEndpoint(response)])
    server.start()
    LOG.info("echo_started", topic=TOPIC)

    def _stop() -> None:
        server.stop()
        server.wait()
        transport.cleanup()

    wait_for_signal(_stop)


if __name__ == "__main__":
    main()
