"""``scheduler-worker``: the scheduler daemon.

Serves ``select_destinations``, ``run_instance`` and ``resize`` on the
``[scheduler] topic``. Any number of workers, on any number of machines, may
share the topic: they agree through the store. ``[scheduler] workers`` > 1
forks that many worker processes here, since one Python process tops out near
500 RPC calls per second; a child that dies is started again.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence

import oslo_messaging

from scheduler import conf as conf_mod
from scheduler import health, log, rpc
from scheduler.cmd._daemon import wait_for_signal
from scheduler.service import SchedulerService, describe, make_store

LOG = log.get_logger("scheduler.worker")


def _serve_one(index: int) -> None:
    conf = conf_mod.CONF
    log.setup(process=f"scheduler-worker.{index}" if conf.scheduler.workers > 1
              else "scheduler-worker")
    LOG.info("worker_starting", pid=os.getpid(), **describe(conf))
    transport = rpc.get_transport(conf)
    notification_transport = rpc.get_notification_transport(conf)
    store = make_store(conf)
    service = SchedulerService(conf, transport, notification_transport, store,
                               server_name=f"{conf.host}.{os.getpid()}")
    service.start()
    http = None
    if conf.scheduler.health_port:
        # One endpoint per worker process: the n-th forked worker listens on
        # health_port + n, so every process can be probed and scraped.
        monitor = health.HealthMonitor({
            "broker": health.broker_probe(oslo_messaging.TransportURL.parse(conf)),
            "store": store.ping,
        })
        monitor.start()
        http = health.serve(monitor, conf.scheduler.health_listen,
                            conf.scheduler.health_port + index)

    def _stop() -> None:
        LOG.info("worker_stopping")
        if http is not None:
            http.shutdown()
        service.stop()
        transport.cleanup()
        notification_transport.cleanup()
        store.close()

    wait_for_signal(_stop)


def _supervise(workers: int) -> None:
    children: dict[int, int] = {}

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                _serve_one(index)
            finally:
                os._exit(0)
        children[pid] = index

    for i in range(workers):
        spawn(i)
    stopping = False

    def _handler(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        index = children.pop(pid, None)
        if index is not None and not stopping:
            LOG.warning("worker_died", pid=pid, status=status, restarting=index)
            time.sleep(1.0)
            spawn(index)


def main(argv: Sequence[str] | None = None) -> None:
    conf = conf_mod.parse_args(sys.argv[1:] if argv is None else argv, prog="scheduler-worker",
                               description=__doc__.split("\n")[0])
    log.setup(process="scheduler-worker")
    if conf.scheduler.workers > 1:
        _supervise(conf.scheduler.workers)
    else:
        _serve_one(0)


if __name__ == "__main__":
    main()
