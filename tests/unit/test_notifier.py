"""The notifier: published off the request's thread, in order, none dropped; in
the legacy format, the versioned one or both."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from typing import Any

import pytest
import structlog

from scheduler import notifier as notifier_module
from scheduler.exceptions import NoValidHost
from scheduler.log import bind_request, masked
from scheduler.notifications import (
    EventPayload,
    SchedulingErrorPayload,
    SchedulingPayload,
    SelectionPayload,
)
from scheduler.notifier import Notifier
from scheduler.notify_transport import Outgoing
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import RequestContext

SPEC = RequestSpec(flavor=Flavor("m1.small", 1, 2048, 20), project_id="p", user_id="u")
UUIDS = ["0c0c0c0c-0000-4000-8000-000000000001"]


def starting(n: int = 0) -> SchedulingPayload:
    return SchedulingPayload.starting(SPEC.replace(num_instances=n + 1), UUIDS * (n + 1))


def failure() -> SchedulingErrorPayload:
    return SchedulingErrorPayload.of(UUIDS, NoValidHost())


class FakeOsloNotifier:
    """Stands in for oslo_messaging.Notifier: records what is published, where
    and with which request id bound; ``gate`` holds publishing until set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs
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
        fakes.append(FakeOsloNotifier(*args, **kwargs))
        return fakes[-1]

    monkeypatch.setattr(notifier_module.oslo_messaging, "Notifier", make)
    return fakes


def events(fake: FakeOsloNotifier) -> list[str]:
    return [event_type for _, event_type, _ in fake.published]


def test_published_off_the_request_thread_in_order_and_flushed_by_stop(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(object(), "h1", notification_format="unversioned")  # type: ignore[arg-type]
    fake = made[0]
    fake.gate.clear()  # the publisher is slow: everything queues
    for n in range(3):
        with notifier.action(None, "select_destinations", starting(n)) as end:
            end["selections"] = (SelectionPayload(UUIDS[0], f"host-{n}", "n", 1.0, ()),)
    notifier.error(None, "scheduler.run_instance", failure())
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
        {"request_spec": SPEC.to_primitive(), "instance_uuids": UUIDS, "hosts": ["host-0"]},
    )
    assert set(fake.threads) == {"notifier"}


def test_a_full_queue_makes_the_request_wait_and_drops_nothing(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(
        object(),  # type: ignore[arg-type]
        "h1",
        queue_size=1,
        notification_format="unversioned",
    )
    fake = made[0]
    fake.gate.clear()
    sender = threading.Thread(
        target=lambda: [notifier.info(None, f"e{n}", starting()) for n in range(4)]
    )
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
    notifier.info(None, "before", starting())
    notifier.stop()
    notifier.info(None, "after", starting())
    for fake in made:  # each format
        assert events(fake) == ["before", "after"]
        assert fake.threads == ["notifier", threading.current_thread().name]


def test_a_failed_publish_is_logged_with_its_request_and_the_rest_go_out(
    made: list[FakeOsloNotifier],
) -> None:
    notifier = Notifier(object(), "h1")  # type: ignore[arg-type]
    legacy, versioned = made
    legacy.fail_on = {"lost"}
    with structlog.testing.capture_logs() as logs:
        with bind_request(request_id="req-1"):
            notifier.info(None, "lost", starting())
        with bind_request(request_id="req-2"):
            notifier.info(None, "sent", starting())
        notifier.stop()
    assert events(legacy) == ["sent"]
    assert legacy.request_ids == ["req-2"]
    # The legacy publish that failed kept neither the other format nor the next one back.
    assert events(versioned) == ["lost", "sent"]
    assert versioned.request_ids == ["req-1", "req-2"]
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
    notifier.info(None, "ignored", starting())
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


def test_queue_policy_covers_the_legacy_and_the_versioned_topic() -> None:
    pattern = re.compile(notifier_module.queue_policy(["notif.b", "versioned_n"], 5)[3])
    for queue_name in ("notif.b.info", "notif.b.error", "versioned_n.info", "versioned_n.error"):
        assert pattern.match(queue_name), queue_name
    for queue_name in ("notif.bX.info", "versioned_nXinfo", "tail-1234", "xversioned_n.info"):
        assert not pattern.match(queue_name), queue_name
    with pytest.raises(ValueError, match="name at least one topic"):
        notifier_module.queue_policy([], 5)


@pytest.mark.parametrize(
    "notification_format, topics",
    [
        pytest.param("unversioned", [["notif-l"]], id="unversioned"),
        pytest.param("versioned", [["notif-v"]], id="versioned"),
        pytest.param("both", [["notif-l"], ["notif-v"]], id="both"),
    ],
)
def test_each_format_on_its_topic_with_its_publisher_and_names(
    made: list[FakeOsloNotifier], notification_format: str, topics: list[list[str]]
) -> None:
    notifier = Notifier(
        object(),  # type: ignore[arg-type]
        "h1",
        topic="notif-l",
        versioned_topic="notif-v",
        notification_format=notification_format,
    )
    assert [fake.kwargs["topics"] for fake in made] == topics
    payload = starting()
    with pytest.raises(RuntimeError), notifier.action(None, "run_instance", payload):
        raise RuntimeError("the request failed")
    notifier.error(None, "scheduler.run_instance", failure())
    notifier.stop()
    for fake in made:
        versioned = fake.kwargs["topics"] == ["notif-v"]
        assert fake.kwargs["publisher_id"] == (
            "scheduler-worker:h1" if versioned else "scheduler.h1"
        )
        assert events(fake) == [
            "scheduler.run_instance.start",
            "scheduler.run_instance.end",
            "scheduler.run_instance.error" if versioned else "scheduler.run_instance",
        ]
        start, end, error = (p for _, _, p in fake.published)
        if versioned:
            assert start == payload.to_primitive()
            assert start["nova_object.data"]["state"] == "scheduling"
            assert end["nova_object.data"]["state"] == "error"  # the block raised
            assert error["nova_object.name"] == "SchedulingErrorPayload"
        else:
            assert start == payload.legacy() and end == {**start, "state": "error"}
            assert error["reason"] == NoValidHost.USER_MESSAGE


def test_one_payload_object_is_queued_per_notification_whatever_the_format(
    made: list[FakeOsloNotifier],
) -> None:
    """The request only queues the object; the formats are made on the notifier's thread."""
    made_on: list[str] = []

    class Watched(SchedulingPayload):
        def legacy(self) -> dict[str, Any]:
            made_on.append(threading.current_thread().name)
            return super().legacy()

        def to_primitive(self) -> dict[str, Any]:
            made_on.append(threading.current_thread().name)
            return super().to_primitive()

    payload: EventPayload = Watched(
        **{
            k: getattr(starting(), k)
            for k in (
                "request_spec",
                "instance_uuids",
                "instance_uuids_omitted",
                "migration_uuid",
                "state",
                "selections",
            )
        }
    )
    notifier = Notifier(object(), "h1")  # type: ignore[arg-type]
    notifier.info(None, "scheduler.run_instance.start", payload)
    notifier.stop()
    assert made_on == ["notifier", "notifier"]  # one legacy, one versioned


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="notification format must be one of"):
        Notifier(None, "h1", notification_format="json")


class FakeChannel:
    """Stands in for the notification channel: records each batch published
    (routing key and the notification the body carries) and the request id
    bound meanwhile; ``gate`` holds publishing until set."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, dict[str, Any]]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False
        self.closed = 0

    def publish(self, batch: list[Outgoing]) -> None:
        self.gate.wait(5)
        if self.fail:
            raise ConnectionError("broker gone")
        self.batches.append(
            [(out.routing_key, json.loads(out.body["oslo.message"])) for out in batch]
        )

    def close(self) -> None:
        self.closed += 1

    def sent(self) -> list[tuple[str, str, str]]:
        """(routing key, publisher id, event type) of everything published, in order."""
        return [(key, m["publisher_id"], m["event_type"]) for b in self.batches for key, m in b]


def test_on_the_channel_what_queued_meanwhile_goes_out_in_one_batch_in_order() -> None:
    channel = FakeChannel()
    notifier = Notifier(
        object(),  # type: ignore[arg-type]
        "h1",
        topic="notif-l",
        versioned_topic="notif-v",
        channel=channel,  # type: ignore[arg-type]
    )
    channel.gate.clear()  # the first batch is slow: the rest queues
    notifier.info(None, "first", starting())
    for n in range(3):
        with notifier.action(None, "select_destinations", starting(n)):
            pass
    notifier.error(None, "scheduler.run_instance", failure())
    channel.gate.set()
    notifier.stop()
    assert channel.closed == 1
    # Both formats of 8 notifications, in at most two batches: what the first
    # took when it woke, then all that queued while it was held.
    assert sum(len(b) for b in channel.batches) == 16
    assert len(channel.batches) <= 2
    assert channel.sent()[:2] == [
        ("notif-l.info", "scheduler.h1", "first"),
        ("notif-v.info", "scheduler-worker:h1", "first"),
    ]
    assert channel.sent()[-2:] == [
        ("notif-l.error", "scheduler.h1", "scheduler.run_instance"),
        ("notif-v.error", "scheduler-worker:h1", "scheduler.run_instance.error"),
    ]
    legacy = [m for b in channel.batches for key, m in b if key.startswith("notif-l")]
    assert [m["event_type"] for m in legacy[1:3]] == [
        "scheduler.select_destinations.start",
        "scheduler.select_destinations.end",
    ]
    assert legacy[1]["payload"] == starting(0).legacy()
    assert legacy[1]["priority"] == "INFO"


def test_on_the_channel_a_failed_batch_is_logged_per_notification_with_its_request() -> None:
    channel = FakeChannel()
    channel.fail = True
    notifier = Notifier(object(), "h1", channel=channel)  # type: ignore[arg-type]
    channel.gate.clear()
    merged = [structlog.contextvars.merge_contextvars]
    with structlog.testing.capture_logs(processors=merged) as logs:
        with bind_request(request_id="req-1"):
            notifier.info(None, "lost-1", starting())
        with bind_request(request_id="req-2"):
            notifier.info(None, "lost-2", starting())
        channel.gate.set()
        notifier.stop()
    failed = [(e["event_type"], e.get("request_id")) for e in logs]
    assert sorted(failed) == [("lost-1", "req-1"), ("lost-2", "req-2")]


def test_on_the_channel_payloads_are_masked() -> None:
    channel = FakeChannel()
    notifier = Notifier(
        object(),  # type: ignore[arg-type]
        "h1",
        notification_format="unversioned",
        channel=channel,  # type: ignore[arg-type]
    )
    spec = SPEC.replace(flavor=Flavor("m1.secret", 1, 2048, 20, {"admin_password": "hunter2"}))
    notifier.info(None, "e", SchedulingPayload.starting(spec, UUIDS))
    notifier.stop()
    ((_, sent),) = channel.batches[0]
    assert "hunter2" not in json.dumps(sent)


def test_on_the_channel_notifications_of_one_batch_are_each_whole_and_masked() -> None:
    """A request's .start and .end share its context and request spec: made
    once for the batch, each message carries them whole, masked."""
    channel = FakeChannel()
    notifier = Notifier(
        object(),  # type: ignore[arg-type]
        "h1",
        versioned_topic="notif-v",
        channel=channel,  # type: ignore[arg-type]
    )
    spec = SPEC.replace(flavor=Flavor("m1.secret", 1, 2048, 20, {"admin_password": "hunter2"}))
    ctxt = RequestContext(user_id="u", project_id="p", request_id="req-1")
    start = SchedulingPayload.starting(spec, UUIDS)
    end = replace(start, state="scheduled")
    channel.gate.clear()  # the first batch is held: the request's two queue behind it
    notifier.info(None, "first", starting())
    notifier.info(ctxt, "scheduler.select_destinations.start", start)
    notifier.info(ctxt, "scheduler.select_destinations.end", end)
    channel.gate.set()
    notifier.stop()
    versioned = [m for b in channel.batches for key, m in b if key.startswith("notif-v")]
    assert [m["payload"] for m in versioned[1:]] == [
        masked(start.to_primitive()),
        masked(end.to_primitive()),
    ]
    assert [m.get("_context_request_id") for m in versioned] == [None, "req-1", "req-1"]
    assert "hunter2" not in json.dumps(channel.batches)
    assert "admin_password" in json.dumps(versioned[2]["payload"])
