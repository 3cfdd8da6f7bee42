"""The commands as an operator meets them: a broker that is down or silent, a
topic no worker consumes, Ctrl-C, and the queues a process leaves behind."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import oslo_messaging
import pytest

from bench.nodes import wait_until
from scheduler import broker, rpc
from scheduler import conf as conf_mod
from scheduler.cmd import notify_tail
from scheduler.exceptions import BrokerUnreachable
from tests.cli import run_commands
from tests.functional.conftest import Cluster, Process

pytestmark = pytest.mark.timeout(300)


def queues(cluster: Cluster) -> set[str]:
    return set(cluster.queues())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def silent_broker() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


def config_with_broker(cluster: Cluster, tmp_path: Path, port: int) -> Path:
    path = tmp_path / f"broker-{port}.conf"
    text = cluster.config_file.read_text().replace(
        cluster.transport_url, f"rabbit://guest:guest@127.0.0.1:{port}/{cluster.vhost}"
    )
    assert text != cluster.config_file.read_text()
    path.write_text(text)
    return path


def test_commands_with_the_broker_down_say_so_in_one_line_and_record_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    port = closed_port()
    conf = str(config_with_broker(cluster, tmp_path, port))
    runs = run_commands(
        [
            ["conductor_stub.cmd", "--config-file", conf, "boot", "--wait", "--timeout", "5"],
            ["conductor_stub.cmd", "--config-file", conf, "delete", "--all", "--timeout", "5"],
            ["scheduler.cmd.admin", "--config-file", conf, "explain", "--flavor", "m1.small",
             "--timeout", "5"],
            ["scheduler.cmd.notify_tail", "--config-file", conf],
        ]
    )  # fmt: skip
    url = f"rabbit://guest:***@127.0.0.1:{port}/{cluster.vhost}"
    for run, status in zip(runs, (1, 1, 2, 1), strict=True):
        prog = run.stderr.split(":", 1)[0]
        assert (run.returncode, run.stderr) == (
            status,
            f"{prog}: cannot reach the message broker at {url}: [Errno 111] Connection refused\n",
        ), run.args
    # Nothing was recorded that a conductor could boot later.
    assert list(cluster.store.scan_instances()) == []


def test_a_silent_broker_is_given_up_on_within_the_timeout(
    cluster: Cluster, tmp_path: Path
) -> None:
    with silent_broker() as port:
        conf = str(config_with_broker(cluster, tmp_path, port))
        (boot,) = run_commands(
            [["conductor_stub.cmd", "--config-file", conf, "boot", "--wait", "--timeout", "3"]]
        )
        assert boot.returncode == 1
        assert boot.stderr.endswith(": timed out\n") and len(boot.stderr.splitlines()) == 1

        conf_mod.parse_args(["--config-file", conf], prog="test", default_config_files=[])
        started = time.monotonic()
        with pytest.raises(BrokerUnreachable):
            broker.reach(conf_mod.CONF, 2.0)
        assert time.monotonic() - started < 2.0 + 1.0
    assert list(cluster.store.scan_instances()) == []


def test_explain_with_no_worker_says_so_at_once(cluster: Cluster) -> None:
    started = time.monotonic()
    (run,) = run_commands(
        [["scheduler.cmd.admin", "--config-file", str(cluster.config_file), "explain",
          "--flavor", "m1.small"]]
    )  # fmt: skip
    took = time.monotonic() - started
    assert (run.returncode, run.stderr) == (
        2,
        "scheduler-admin: no scheduler worker consumes topic 'scheduler' on "
        f"rabbit://guest:***@127.0.0.1:5672/{cluster.vhost} (is one running?)\n",
    )
    # Not the 30 s of --timeout, nor the 60 s rpc_response_timeout it used to wait.
    assert took < 30


def test_a_boot_with_no_worker_or_conductor_says_so_and_is_not_lost(cluster: Cluster) -> None:
    """``boot --wait`` waited its whole timeout without a word when nothing
    consumed the scheduler topic; it now says so at once, for the worker and
    the conductor. The instance is not lost: once they run, the conductor
    re-drives it past its build timeout and it is placed."""
    url = f"rabbit://guest:***@127.0.0.1:5672/{cluster.vhost}"
    cluster.write_config(conductor={"build_timeout": 2, "sweep_interval": 0.5})
    code, _, stderr = cluster.conductor_stub("boot", "--count", "1", "--wait", "--timeout", "3")
    assert code == 1
    assert stderr.splitlines()[:2] == [
        f"conductor-stub boot: warning: no {what} consumes topic '{topic}' on {url} "
        "(is one running?); the instances stay BUILDING until one does (the conductor "
        "re-drives them past [conductor] build_timeout)"
        for what, topic in (
            ("scheduler-worker", "scheduler"),
            ("conductor-stub serve", "conductor"),
        )
    ]
    # The worker serving before the conductor starts: the conductor re-drives
    # the overdue boot at once, and gives up after max_redrives build
    # timeouts (2 s each here) that a worker still starting on a loaded
    # machine could outlast.
    cluster.start_compute(1)
    cluster.start_worker()
    cluster.start_conductor()
    wait_until(
        lambda: {i.state for i in cluster.store.list_instances()} == {"ACTIVE"},
        60,
        "the boot re-driven and placed",
    )


def interrupt(proc: Process) -> int:
    proc.popen.send_signal(signal.SIGINT)
    return proc.popen.wait(timeout=60)


def sigint_as_from_a_terminal() -> None:
    """SIGINT at its default in the child, whatever this run inherited (a run
    started in the background has it ignored, and so would the command)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_without_a_traceback(cluster: Cluster) -> None:
    # A boot waiting for instances no worker will place.
    boot = subprocess.Popen(
        [sys.executable, "-m", "conductor_stub.cmd", "--config-file", str(cluster.config_file),
         "boot", "--wait", "--timeout", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_from_a_terminal,
    )  # fmt: skip
    wait_until(lambda: bool(list(cluster.store.scan_instances())), 60, "the boot's record")
    time.sleep(0.5)  # into its wait
    boot.send_signal(signal.SIGINT)
    try:
        out, err = boot.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say where it is stuck
        spy = Path(sys.executable).with_name("py-spy")
        stacks = subprocess.run(
            [str(spy), "dump", "--pid", str(boot.pid)], capture_output=True, text=True
        )
        boot.kill()
        pytest.fail(f"boot did not leave on Ctrl-C; its threads:\n{stacks.stdout}{stacks.stderr}")
    # Nothing said but the boot's warnings that no worker and no conductor run.
    assert (boot.returncode, out) == (130, ""), err
    assert [line.split(" consumes ")[0] for line in err.splitlines()] == [
        "conductor-stub boot: warning: no scheduler-worker",
        "conductor-stub boot: warning: no conductor-stub serve",
    ]

    compute = cluster.start_compute(2)
    worker = cluster.start_worker()
    conductor = cluster.start_conductor()
    for daemon in (compute, worker, conductor):
        assert interrupt(daemon) == 130, daemon.name
        assert "Traceback" not in daemon.log_path.read_text(), daemon.name


def test_the_queues_a_process_owns_go_away_with_it(cluster: Cluster) -> None:
    worker = cluster.start_worker()
    compute = cluster.start_compute(1)
    tail = cluster.start("tail", "scheduler.cmd.notify_tail")
    wait_until(lambda: any(q.startswith("tail-") for q in queues(cluster)), 60, "the tail's pool")
    server_queues = {f"scheduler.node-{cluster.ident}.0", "compute.sim-compute"}
    before = queues(cluster)
    assert server_queues | {"scheduler", "compute"} <= before, before

    worker.stop()
    compute.stop()
    assert interrupt(tail) == 130
    after = queues(cluster)
    assert not server_queues & after, after
    assert not [q for q in after if q.startswith("tail-")], after
    # The topics' queues stay: what is cast meanwhile waits for the next worker.
    assert {"scheduler", "compute"} <= after

    # A simulator killed cannot delete its queue; the next one takes it over.
    again = cluster.start_compute(1, name="compute")
    assert again.popen.pid
    again.popen.send_signal(signal.SIGKILL)
    again.popen.wait(timeout=30)
    assert "compute.sim-compute" in queues(cluster)
    last = cluster.start_compute(1, name="compute")
    assert [q for q in queues(cluster) if q.startswith("compute.sim-")] == ["compute.sim-compute"]
    last.stop()
    assert "compute.sim-compute" not in queues(cluster)

    # A tail killed cannot delete its pool's queue: the policy the admin guide gives
    # expires it once it has had no consumer for a while.
    subprocess.run(
        ["rabbitmqctl", "-q", "set_policy", "-p", cluster.vhost, *notify_tail.pool_policy(2)],
        check=True,
        timeout=60,
    )
    killed = cluster.start("tail-killed", "scheduler.cmd.notify_tail")
    wait_until(lambda: any(q.startswith("tail-") for q in queues(cluster)), 60, "the tail's pool")
    killed.stop(signal.SIGKILL)
    wait_until(
        lambda: not any(q.startswith("tail-") for q in queues(cluster)),
        30,
        "the killed tail's queue to expire",
    )


def test_the_tail_stops_once_its_output_is_closed(cluster: Cluster) -> None:
    """``scheduler-notify-tail | head -1``: once head has gone, the next
    notification stops the tail (exit status 141, as any command whose output
    is closed under it), with nothing said and its pool's queue deleted; it
    used to listen on, a traceback logged per notification."""
    tail = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cmd.notify_tail", "--config-file",
         str(cluster.config_file), "--format", "unversioned"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert tail.stdout is not None
    tail.stdout.close()  # head has read its line
    try:
        wait_until(
            lambda: any(q.startswith("tail-") for q in queues(cluster)), 60, "the tail's pool"
        )
        conf_mod.set_defaults()
        conf_mod.CONF([], project="scheduler", default_config_files=[])
        notifying = rpc.get_notification_transport(conf_mod.CONF, url=cluster.transport_url)
        try:
            notifier = oslo_messaging.Notifier(
                notifying, "test", driver="messagingv2", topics=["notifications"]
            )
            for n in range(3):
                notifier.info({}, "test.closed_output", {"n": n})
            status = tail.wait(timeout=30)
        finally:
            notifying.cleanup()
        _, err = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert status == 141
    # Nothing of its own to say; the broker's deliveries cut short by the stop
    # may draw a warning from amqp (kept, as the project keeps the library's
    # warnings), never an error or a traceback.
    assert "Traceback" not in err, err
    assert {json.loads(line)["level"] for line in err.splitlines()} <= {"warning"}, err
    assert not [q for q in queues(cluster) if q.startswith("tail-")]


def test_every_daemon_says_a_misspelled_or_nova_only_option_at_start(cluster: Cluster) -> None:
    """oslo.config ignores options it does not know: each daemon (the worker,
    a compute-sim, the conductor) says so, one line each, naming the option
    it meant or where Nova's equivalent lives."""
    cluster.write_config(DEFAULT={"cpu_allocation_ratio": 16.0}, scheduler={"max_atempts": 5})
    daemons = [cluster.start_worker(), cluster.start_compute(1), cluster.start_conductor()]
    for daemon in daemons:
        wait_until(
            lambda d=daemon: d.count("option_not_read") == 2, 30, f"{daemon.name}'s warnings"
        )
        said = sorted(
            e["detail"] for e in daemon.log_events() if e.get("event") == "option_not_read"
        )
        assert said[0].startswith("[DEFAULT] cpu_allocation_ratio") and "[compute]" in said[0]
        assert said[1].endswith("did you mean [scheduler] max_attempts?")
