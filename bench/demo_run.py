"""``python -m bench.demo_run OUT [--in-process] DEMO-ARGS...``: the demo, its boot metered.

Runs :func:`allinone.demo.main` with ``DEMO-ARGS`` as it is, in this
process, with the demo's boot (:func:`allinone.demo.boot_all`: every request
sent, then waited for until every instance is final) wrapped in a
:class:`~bench.procstat.CpuMeter` of this process (every thread of the demo:
its worker, conductor, compute simulator and booting client, the last also
apart: the CPU of the thread that boots and waits) and of the broker and
Redis, and in the broker's count of AMQP messages; what it read is
written to ``OUT`` as JSON. Start-up (imports, connections) and the demo's
stop are left out, as they are from a storm of the separate daemons. With
``--in-process`` (the demo on its in-process transport and store) neither
the broker nor Redis is metered or asked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from allinone import demo
from bench import amqp
from bench.procstat import CpuMeter

#: What the demo's in-process CPU is called in ``OUT``, and the part of it its
#: booting client (the thread that boots and waits) used.
PROCESS = "all-in-one"
CLIENT = "its booting client"
#: The option that says the demo runs on its in-process transport and store.
IN_PROCESS = "--in-process"


def main(argv: Sequence[str]) -> int:
    out, *args = argv
    services = args[:1] != [IN_PROCESS]
    args = args if services else args[1:]
    measured: dict[str, Any] = {}
    boot_all = demo.boot_all

    def metered(*a: Any, **kw: Any) -> Any:
        received = amqp.messages_received() if services else None
        meter = CpuMeter({PROCESS: [os.getpid()]}, include_services=services).start()
        client = time.thread_time()
        report = boot_all(*a, **kw)
        # This thread is the booting client: its requests, then its wait,
        # which reads every record every 0.1 s until all are final.
        measured[CLIENT] = time.thread_time() - client
        measured.update(meter.stop())
        after = amqp.messages_received() if services else None
        measured["amqp_messages"] = (
            after - received if received is not None and after is not None else None
        )
        measured["boot_seconds"] = report.seconds
        measured["states"] = dict(report.by_state)
        measured["rescheduled"] = report.rescheduled
        return report

    demo.boot_all = metered  # play() looks it up in the module when it boots
    code = demo.main(args)
    Path(out).write_text(json.dumps(measured))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
