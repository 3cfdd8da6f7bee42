"""``scheduler-notify-tail``: what it prints, which topic it reads, its --event filter."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import oslo_messaging
import pytest
from oslo_config import cfg

from scheduler import rpc
from scheduler.cmd import notify_tail
from scheduler.exceptions import NoValidHost
from scheduler.log import bind_request
from scheduler.notifications import SchedulingErrorPayload, SchedulingPayload
from scheduler.notifier import Notifier
from scheduler.objects import Flavor, RequestSpec

SPEC = RequestSpec(flavor=Flavor("m1.small", 1, 2048, 20), project_id="p", user_id="u")
UUID = "0c0c0c0c-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    "configured, asked, topic",
    [
        pytest.param("both", None, "notif-l", id="both-reads-legacy-by-default"),
        pytest.param("unversioned", None, "notif-l", id="unversioned"),
        pytest.param("versioned", None, "notif-v", id="only-versioned-published"),
        pytest.param("both", "versioned", "notif-v", id="asked-versioned"),
        pytest.param("versioned", "unversioned", "notif-l", id="asked-unversioned"),
    ],
)
def test_the_topic_it_reads(
    conf: cfg.ConfigOpts, configured: str, asked: str | None, topic: str
) -> None:
    conf.set_override("format", configured, "notifications")
    conf.set_override("topic", "notif-l", "notifications")
    conf.set_override("versioned_topic", "notif-v", "notifications")
    assert notify_tail.tail_topic(conf, asked) == topic


@pytest.mark.parametrize(
    "patterns, event_type, wanted",
    [
        pytest.param((), "scheduler.resize.end", True, id="no-filter"),
        pytest.param(("scheduler.resize.*",), "scheduler.resize.end", True, id="glob"),
        pytest.param(("scheduler.resize.*",), "scheduler.resize", False, id="glob-needs-a-dot"),
        pytest.param(("scheduler.resize*",), "scheduler.resize", True, id="legacy-error-too"),
        pytest.param(("*.error", "*.end"), "scheduler.run_instance.end", True, id="several"),
        pytest.param(("scheduler.run_instance.end",), "scheduler.run_instance.start", False),
    ],
)
def test_the_event_filter(patterns: tuple[str, ...], event_type: str, wanted: bool) -> None:
    assert notify_tail.NotificationCollector(print, patterns).wants(event_type) is wanted


def test_it_prints_timestamp_message_id_and_request_id_of_what_it_wants(
    conf: cfg.ConfigOpts,
) -> None:
    transport = oslo_messaging.get_notification_transport(conf, url="fake:/")
    seen: list[dict[str, Any]] = []
    got = threading.Event()

    def sink(note: dict[str, Any]) -> None:
        seen.append(note)
        if len(seen) == 3:
            got.set()

    listener = notify_tail.listen(
        transport, "versioned_notifications", sink, events=["scheduler.run_instance.*"]
    )
    notifier = Notifier(transport, "h1")
    ctxt = rpc.RequestContext(request_id="req-tail-1")
    try:
        with bind_request(request_id="req-tail-1"):
            with notifier.action(ctxt, "run_instance", SchedulingPayload.starting(SPEC, [UUID])):
                pass
            with notifier.action(
                ctxt, "select_destinations", SchedulingPayload.starting(SPEC, [UUID])
            ):
                pass
            notifier.error(
                ctxt, "scheduler.run_instance", SchedulingErrorPayload.of([UUID], NoValidHost())
            )
        notifier.stop()
        assert got.wait(10), seen
    finally:
        listener.stop()
        listener.wait()
        transport.cleanup()
    # (each priority has its queue: in order within one, not across them)
    assert sorted((n["priority"], n["event_type"]) for n in seen) == [
        ("ERROR", "scheduler.run_instance.error"),
        ("INFO", "scheduler.run_instance.end"),
        ("INFO", "scheduler.run_instance.start"),
    ]
    assert {n["request_id"] for n in seen} == {"req-tail-1"}
    assert len({n["message_id"] for n in seen}) == 3 and all(n["timestamp"] for n in seen)
    assert list(seen[0])[:3] == ["timestamp", "message_id", "request_id"]
    assert {n["payload"]["nova_object.name"] for n in seen} == {
        "SchedulingPayload",
        "SchedulingErrorPayload",
    }


def test_the_pool_policy_expires_a_fresh_pool_s_queue_only() -> None:
    args = notify_tail.pool_policy(60)
    assert args[:3] == ["--apply-to", "queues", notify_tail.POOL_POLICY_NAME]
    assert json.loads(args[4]) == {"expires": 60000}
    pattern = re.compile(args[3])
    assert pattern.fullmatch(notify_tail.fresh_pool())
    for name in ("tail-keep", "my-pool", "notifications.info", "tail-0123abcd.x"):
        assert not pattern.search(name), name
    with pytest.raises(ValueError, match="above 0"):
        notify_tail.pool_policy(0)


class ClosedOutput:
    """A standard output whose reader has gone."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_output_stops_the_tail_and_is_not_written_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = ClosedOutput()
    monkeypatch.setattr("sys.stdout", out)
    closed = threading.Event()
    sink = notify_tail.stdout_sink(closed)
    sink({"event_type": "scheduler.run_instance.end"})  # no BrokenPipeError out of it
    assert closed.is_set() and out.writes == 1
    sink({"event_type": "scheduler.run_instance.end"})
    assert out.writes == 1  # the next one is dropped, not tried again


def test_the_wait_ends_when_the_process_sets_its_stop() -> None:
    from scheduler.cmd._daemon import wait_for_signal

    stop = threading.Event()
    stopped: list[bool] = []
    stop.set()
    assert wait_for_signal(lambda: stopped.append(True), stop) == 0
    assert stopped == [True]
