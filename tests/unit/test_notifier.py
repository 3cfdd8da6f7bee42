"""The notifier: published off the request's thread, in order, none dropped."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest
import structlog

from scheduler import notifier as notifier_module
from scheduler.log import bind_request
from scheduler.notifier import Notifier


class FakeOsloNotifier:
    """Stands in for oslo_messaging.Notifier: records what is published, where
    and with which request id bound; ``gate`` holds publishing until set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.published: list[tuple[str, str, dict[str, Any]]] = []
        self.threads: list[str] = []
        self.request_ids: list[str | None] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_on: set[str] = set()

    def _record(self, priority: str, event_type: str, payload: dict[str, Any]) -> None:
        self.gate.wait(5)
        if event_type in self.fail_on:
            raise ConnectionError("broker gone")
        self.published.append((priority, event_type, payload))
        self.threads.append(threading.current_thread().name)
        self.request_ids.append(structlog.contextvars.get_contextvars().get("request_id"))

    def info(self, ctxt: Any, event_type: str, payload: dict[str, Any]) -> None:
        self._record("info", event_type, payload)

    def error(self, ctxt: Any, event_type: str, payload: dict[str, Any]) -> None:
        self._record("error", event_type, payload)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[FakeOsloNotifier]:
    fakes: list[FakeOsloNotifier] = []

    def make(*args: Any, **kwargs: Any) -> FakeOsloNotifier:
        fakes.append(FakeOsloNotifier())
        return fakes[-1]

    monkeypatch.setattr(notifier_module.oslo_messaging, "Notifier", make)
    return fakes


def events(fake: FakeOsloNotifier) -> list[str]:
    return [event_type for _, event_type, _ in fake.published]


def test_published_off_the_request_thread_in_order_and_flushed_by_stop(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(object(), "h1")  # type: ignore[arg-type]
    fake = made[0]
    fake.gate.clear()  # the publisher is slow: everything queues
    for n in range(3):
        with notifier.action(None, "select_destinations", {"n": n}) as end:
            end["hosts"] = [f"host-{n}"]
    notifier.error(None, "scheduler.run_instance", {"reason": "No valid host was found."})
    assert fake.published == []  # the requests did not wait for the broker
    fake.gate.set()
    notifier.stop()
    assert events(fake) == [
        "scheduler.select_destinations.start",
        "scheduler.select_destinations.end",
    ] * 3 + ["scheduler.run_instance"]
    assert fake.published[1] == (
        "info",
        "scheduler.select_destinations.end",
        {"n": 0, "hosts": ["host-0"]},
    )
    assert set(fake.threads) == {"notifier"}


def test_a_full_queue_makes_the_request_wait_and_drops_nothing(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(object(), "h1", queue_size=1)  # type: ignore[arg-type]
    fake = made[0]
    fake.gate.clear()
    sender = threading.Thread(target=lambda: [notifier.info(None, f"e{n}", {}) for n in range(4)])
    sender.start()
    sender.join(0.3)
    assert sender.is_alive()  # one being published, one queued, the third waits
    fake.gate.set()
    sender.join(5)
    notifier.stop()
    assert events(fake) == ["e0", "e1", "e2", "e3"]


def test_after_stop_notifications_go_out_on_the_callers_thread(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(object(), "h1")  # type: ignore[arg-type]
    notifier.info(None, "before", {})
    notifier.stop()
    notifier.info(None, "after", {})
    assert events(made[0]) == ["before", "after"]
    assert made[0].threads == ["notifier", threading.current_thread().name]


def test_a_failed_publish_is_logged_with_its_request_and_the_rest_go_out(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(object(), "h1")  # type: ignore[arg-type]
    made[0].fail_on = {"lost"}
    with structlog.testing.capture_logs() as logs:
        with bind_request(request_id="req-1"):
            notifier.info(None, "lost", {})
        with bind_request(request_id="req-2"):
            notifier.info(None, "sent", {})
        notifier.stop()
    assert events(made[0]) == ["sent"]
    assert made[0].request_ids == ["req-2"]
    assert [(e["event"], e["event_type"]) for e in logs] == [("notification_failed", "lost")]


@pytest.mark.parametrize(
    "transport, enabled",
    [
        pytest.param(None, True, id="no-transport"),
        pytest.param(object(), False, id="disabled"),
    ],
)
def test_a_notifier_that_is_off_sends_nothing_and_starts_no_thread(
    made: list[FakeOsloNotifier], transport: Any, enabled: bool
) -> None:
    notifier = Notifier(transport, "h1", enabled=enabled)
    notifier.info(None, "ignored", {})
    notifier.stop()
    assert made == []
    assert not any(t.name == "notifier" for t in threading.enumerate())


def test_queue_policy_matches_the_topics_priority_queues_only() -> None:
    args = notifier_module.queue_policy("notif.b", 500)
    assert args[:3] == ["--apply-to", "queues", notifier_module.POLICY_NAME]
    pattern = re.compile(args[3])
    assert pattern.match("notif.b.info") and pattern.match("notif.b.error")
    assert not pattern.match("notifXb.info") and not pattern.match("tail-1234")
    assert not pattern.match("scheduler") and not pattern.match("notif.b.info.x")
    assert json.loads(args[4]) == {"max-length": 500, "overflow": "drop-head"}
    with pytest.raises(ValueError, match="max_length must be at least 1, not 0"):
        notifier_module.queue_policy("notifications", 0)
