"""``scheduler-worker``: the scheduler daemon.

Serves ``select_destinations``, ``run_instance`` and ``resize`` on the
``[scheduler] topic``. Any number of workers, on any number of machines, may
share the topic: they agree through the store. One Python process tops out
near 500 RPC calls per second, so the daemon runs ``[scheduler] workers``
worker processes, one or many the same way: a cotyledon ``ServiceManager``
(the master process, which serves nothing itself) forks each worker as a
:class:`WorkerService`. Worker ``n`` logs as ``scheduler-worker.n`` (with one
worker, ``scheduler-worker``) and, when ``[scheduler] health_port`` is set,
serves its health endpoint on ``health_port + n``; a replacement keeps its
slot's number.

Supervision, as cotyledon does it:

* **A worker that dies is started again** in its slot; the master logs
  ``worker_died`` with the pid, the exit code, the signal and ``restart_in``.
  A worker that had served a while is replaced at once. One that dies again
  within 30 s of starting waits before it starts: 1 s, then 2, 4, ... up to
  60 s (``worker_restart_delayed``; the wait is in the new worker, so other
  slots and a SIGTERM are not held up), until one serves 30 s. Under that,
  cotyledon bounds the fork rate itself: when more processes were forked in
  the last ``workers`` seconds than there are workers, its next fork waits
  5 s ("Forking too fast, sleeping").
* **SIGTERM stops gracefully**: every worker stops taking requests, finishes
  those it holds, publishes its notifications and closes its transports and
  store (``worker_stopping``, then ``scheduler_stopped``). A worker still at
  it after ``[scheduler] graceful_shutdown_timeout`` seconds is killed (it
  exits 1); the master is held to the same bound. **SIGINT** exits
  at once (status 130), without draining (cotyledon's fast exit, as in oslo.service's
  threading backend); what the workers held is re-driven by the conductor.
* **SIGHUP reloads**: the master re-reads the config files and, if they
  parse, restarts every worker, each a fresh fork that reads every option
  again (the filters and weighers and their settings, the store and broker
  URLs, the topic, the health port, notifications, log options). The new
  ``[scheduler] graceful_shutdown_timeout`` applies to the next stop. The
  number of workers is fixed at start (cotyledon cannot shrink a running
  pool safely): a changed ``[scheduler] workers`` is logged and waits for a
  restart. If the files do not parse, nothing changes and the workers serve
  on with what they have (``config_reload_failed``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cotyledon
import oslo_messaging
from oslo_config import cfg

from scheduler import broker, health, log, rpc
from scheduler import conf as conf_mod
from scheduler.cmd import _cli
from scheduler.conf.unread import warn_unread
from scheduler.engine.pipeline import build_plugins
from scheduler.exceptions import SchedulerError
from scheduler.service import SchedulerService, describe, engine_settings
from scheduler.store import make_store

LOG = log.get_logger("scheduler.worker")

#: Workers are forked: each inherits the parsed options and the shared tables.
_FORK = multiprocessing.get_context("fork")

#: A worker that served this long before it died is replaced at once.
STABLE_AFTER = 30.0
#: The longest wait before a crash-looping worker starts again.
MAX_RESTART_DELAY = 60.0


def restart_delay(quick_deaths: int) -> float:
    """Seconds a slot waits before it starts again, after this many deaths in a
    row each within :data:`STABLE_AFTER` of its start: none after the first."""
    return 0.0 if quick_deaths <= 1 else min(2.0 ** (quick_deaths - 2), MAX_RESTART_DELAY)


def server_name(host: str, worker_id: int) -> str:
    """The RPC server name of worker slot ``worker_id`` on ``host``: the same
    for its replacement, so a restart takes over its server queue
    (``<topic>.<host>.<n>``) instead of leaving one behind per process."""
    return f"{host}.{worker_id}"


def process_name(worker_id: int, workers: int) -> str:
    """The ``process`` key on every line worker ``worker_id`` logs."""
    return f"scheduler-worker.{worker_id}" if workers > 1 else "scheduler-worker"


@dataclass(frozen=True)
class Shared:
    """What the master and its workers share, in memory both can see.

    Per worker slot ``n``: ``pids[n]``, the pid it runs as, and
    ``started[n]``, when it began to start (``time.monotonic()``, 0 until
    then), both written by the worker (the master's dead-worker hook is told
    the slot and the exit code, nothing else); ``delays[n]``, how long its
    next process waits before it starts, written by the master.
    ``generation`` counts the master's successful reloads: a worker restarts
    on SIGHUP only if it is behind, so a SIGHUP whose files did not parse
    leaves it serving.
    """

    pids: Any  # multiprocessing RawArray of c_int
    started: Any  # multiprocessing RawArray of c_double
    delays: Any  # multiprocessing RawArray of c_double
    generation: Any  # multiprocessing RawValue of c_int

    @classmethod
    def create(cls, workers: int) -> Shared:
        return cls(
            pids=_FORK.RawArray("i", workers),
            started=_FORK.RawArray("d", workers),
            delays=_FORK.RawArray("d", workers),
            generation=_FORK.RawValue("i", 0),
        )


class WorkerService(cotyledon.Service):
    """One worker process: the RPC server on the topic, and what it needs.

    Built in ``__init__`` (cotyledon handles no signal before it returns, so
    nothing blocks there); :meth:`run` waits for the store and starts serving;
    :meth:`terminate` stops what was started.
    """

    name = "scheduler-worker"

    def __init__(self, worker_id: int, shared: Shared) -> None:
        super().__init__(worker_id)  # type: ignore[arg-type]  # cotyledon's WorkerId is an int
        conf = conf_mod.CONF
        self._shared = shared
        self._generation = shared.generation.value
        shared.pids[worker_id] = os.getpid()
        # Named by the pool as started: a reload does not change its size.
        log.setup(process=process_name(worker_id, len(shared.pids)))
        self._lock = threading.Lock()
        self._serving = False
        self._stopping = threading.Event()
        self._http: Any = None
        try:
            LOG.info("worker_starting", pid=os.getpid(), worker=worker_id, **describe(conf))
            self._transport = rpc.get_transport(conf)
            self._notification_transport = rpc.get_notification_transport(conf)
            self._store = make_store(conf)
            self._service = SchedulerService(
                conf,
                self._transport,
                self._notification_transport,
                self._store,
                server_name=server_name(conf.host, worker_id),
            )
        except Exception as exc:  # a bad option, an unknown plugin: say which, and exit
            LOG.exception("worker_start_failed", error=str(exc))
            raise SystemExit(1) from exc

    def run(self) -> None:
        delay = self._shared.delays[self.worker_id]
        if delay:
            LOG.warning("worker_restart_delayed", delay=delay)
            if self._stopping.wait(delay):
                return
        self._shared.started[self.worker_id] = time.monotonic()
        try:
            self._service.start()  # waits for the store first
            with self._lock:
                self._serving = True
                if not self._stopping.is_set():
                    self._http = self._serve_health()
        except Exception as exc:
            LOG.exception("worker_start_failed", error=str(exc))
            raise SystemExit(1) from exc

    def _serve_health(self) -> Any:
        conf = conf_mod.CONF
        if not conf.scheduler.health_port:
            return None
        monitor = health.HealthMonitor(
            {
                "broker": health.broker_probe(oslo_messaging.TransportURL.parse(conf)),
                "store": self._store.ping,
            }
        )
        monitor.start()
        engine = self._service.engine
        health.export_view(engine.fresh_view, engine.settings.service_down_time)
        return health.serve(
            monitor, conf.scheduler.health_listen, conf.scheduler.health_port + self.worker_id
        )

    def terminate(self) -> None:
        with self._lock:
            self._stopping.set()
            serving = self._serving
        LOG.info("worker_stopping", serving=serving)
        if self._http is not None:
            self._http.shutdown()
        # Not serving yet means run() still waits (its restart delay, or the
        # store) before the RPC server started: nothing taken off the queue.
        if serving:
            self._service.stop()
        self._transport.cleanup()
        self._notification_transport.cleanup()
        self._store.close()
        # Its own queue (the topic's stays, for the other workers and the next start).
        broker.delete_queues(
            conf_mod.CONF,
            [f"{conf_mod.CONF.scheduler.topic}.{server_name(conf_mod.CONF.host, self.worker_id)}"],
        )

    def reload(self) -> None:
        if self._shared.generation.value == self._generation:
            LOG.info("worker_reload_skipped", reason="the configuration was not reloaded")
            return
        LOG.info("worker_reloading")
        os.kill(os.getpid(), signal.SIGTERM)  # stop cleanly; the master forks a fresh one


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class _Manager(cotyledon.ServiceManager):
    """cotyledon's manager, but a Ctrl-C (SIGINT) ends the master with status
    130, as every command here does, instead of 1 (still at once, without
    draining: the workers get the SIGINT too and leave as fast)."""

    def _on_signal_received(self, sig: int) -> None:
        if sig != signal.SIGINT:
            super()._on_signal_received(sig)
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        LOG.info("supervisor_interrupted")
        os.killpg(0, signal.SIGINT)
        time.sleep(0.1)  # as cotyledon does: the workers end on the SIGINT, not a broken pipe
        _cli.interrupted()


class Supervisor:
    """The master's side: the manager, the worker slots, the hooks."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf
        self._workers = conf.scheduler.workers
        self.shared = Shared.create(self._workers)
        self._quick_deaths = [0] * self._workers
        self.manager = _Manager(
            graceful_shutdown_timeout=conf.scheduler.graceful_shutdown_timeout, mp_context=_FORK
        )
        self.manager.add(WorkerService, workers=self._workers, args=(self.shared,))
        self.manager.register_hooks(on_reload=self.on_reload, on_dead_worker=self.on_dead_worker)

    def run(self) -> None:
        LOG.info(
            "supervisor_started",
            pid=os.getpid(),
            workers=self._workers,
            graceful_shutdown_timeout=self._conf.scheduler.graceful_shutdown_timeout,
        )
        self.manager.run()

    def on_dead_worker(self, _service_id: object, worker_id: int, exit_code: int) -> None:
        """Runs in the master when worker ``worker_id`` has exited, before
        cotyledon forks its replacement."""
        pid = self.shared.pids[worker_id] or None  # 0: it died before it could say
        started = self.shared.started[worker_id]
        self.shared.pids[worker_id] = 0
        self.shared.started[worker_id] = 0.0
        if exit_code == 0:  # it stopped cleanly: a reload, or a SIGTERM sent to it alone
            self._quick_deaths[worker_id] = 0
            self.shared.delays[worker_id] = 0.0
            LOG.info("worker_exited", pid=pid, worker=worker_id, exit_code=exit_code)
            return
        quick = not started or time.monotonic() - started < STABLE_AFTER
        self._quick_deaths[worker_id] = self._quick_deaths[worker_id] + 1 if quick else 1
        delay = restart_delay(self._quick_deaths[worker_id])
        self.shared.delays[worker_id] = delay
        LOG.warning(
            "worker_died",
            pid=pid,
            worker=worker_id,
            exit_code=exit_code,
            signal=_signal_name(-exit_code) if exit_code < 0 else None,
            restart_in=delay,
        )

    def on_reload(self) -> None:
        """Runs in the master on SIGHUP, before cotyledon passes it to the workers."""
        if not self._conf.reload_config_files():
            LOG.error("config_reload_failed", config_files=list(self._conf.config_file))
            return
        try:
            workers = self._conf.scheduler.workers
            timeout = self._conf.scheduler.graceful_shutdown_timeout
        except (cfg.Error, ValueError) as exc:
            LOG.error("config_reload_failed", error=str(exc))
            return
        error = config_error(self._conf)
        if error is not None:
            LOG.error("config_reload_failed", error=error)
            return
        if workers != self._workers:
            LOG.warning("workers_change_needs_restart", workers=self._workers, configured=workers)
        # The attribute cotyledon's own oslo.config glue sets on a reload: the
        # master's bound, and what it hands every worker it forks from now on.
        self.manager._graceful_shutdown_timeout = timeout
        self.shared.generation.value += 1
        LOG.info(
            "config_reloaded",
            generation=self.shared.generation.value,
            graceful_shutdown_timeout=timeout,
        )


def config_error(conf: cfg.ConfigOpts) -> str | None:
    """Why no worker could start with this configuration (an unknown filter or
    weigher, a plugin option out of its bounds or malformed), in one line; None
    when the engine can be built. Asked before any worker is forked, and on a
    reload, so a bad value is refused once instead of crash-looping workers."""
    try:
        build_plugins(engine_settings(conf))
    except (SchedulerError, ValueError) as exc:
        return str(exc)
    return topic_clash(conf)


def topic_clash(conf: cfg.ConfigOpts) -> str | None:
    """Why the native and the Nova-compatible servers cannot both serve: the
    broker names a queue by its topic alone, whatever the exchange, so with
    one topic Nova's calls would reach the native server (and be refused as
    an unknown version); and, alike, Nova's notifications would share a
    queue with the scheduler's own."""
    nova = conf.nova_compat
    if nova.enabled and nova.topic == conf.scheduler.topic:
        return (
            f"[nova_compat] topic and [scheduler] topic are both {nova.topic!r}: queues are "
            "named by topic alone, so Nova's calls would reach the native server; give "
            "[scheduler] topic another name (and the conductors' configuration with it)"
        )
    if nova.enabled and nova.notifications and conf.notifications.enabled:
        ours = conf.notifications
        published = {
            "topic": ours.topic if ours.format != "versioned" else None,
            "versioned_topic": ours.versioned_topic if ours.format != "unversioned" else None,
        }
        for name, topic in published.items():
            if topic == nova.notifications_topic:
                return (
                    f"[nova_compat] notifications_topic and [notifications] {name} are both "
                    f"{topic!r}: queues are named by topic alone, so Nova's consumers would "
                    f"read the scheduler's own notifications too; give [notifications] {name} "
                    "another name"
                )
    return None


def _main(argv: Sequence[str] | None) -> int:
    conf = _cli.parse(argv, prog="scheduler-worker", description=__doc__.split("\n")[0])
    error = config_error(conf)
    if error is not None:
        _cli.say("scheduler-worker", error)
        return 1
    log.setup(process="scheduler-worker.master")
    warn_unread(conf)
    Supervisor(conf).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run("scheduler-worker", lambda: _main(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
