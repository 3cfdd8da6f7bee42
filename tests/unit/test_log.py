"""Logging: secrets never reach a log line, and request keys are bound."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import log


@pytest.mark.parametrize(
    "text, secret",
    [
        pytest.param("rabbit://guest:s3cr3t@127.0.0.1:5672//", "s3cr3t", id="amqp-url"),
        pytest.param("redis://:hunter2@localhost:6379/0", "hunter2", id="redis-url-no-user"),
        pytest.param("rediss://app:p%40ss@cache:6380", "p%40ss", id="rediss-url-escaped"),
        pytest.param("urls rabbit://a:pw1@h1,b:pw2@h2", "pw2", id="several-hosts"),
        pytest.param("rabbit://a:pw1@h1 and redis://b:pw9@h2", "pw9", id="several-urls"),
        pytest.param("connect with password=letmein now", "letmein", id="password-pair"),
        pytest.param('{"password": "abc123"}', "abc123", id="json-password"),
        pytest.param("admin_pass=hunter2", "hunter2", id="admin-pass"),
        pytest.param("private_key=abc", "abc", id="private-key"),
        pytest.param("metadata secret_uuid: 5d1e", "5d1e", id="colon-pair"),
        pytest.param("<configdrive>Q0Q=</configdrive>", "Q0Q=", id="xml"),
    ],
)
def test_mask_secrets(text: str, secret: str) -> None:
    masked = log.mask_secrets(text)
    assert secret not in masked
    assert log.MASK in masked


def test_mask_keeps_plain_text() -> None:
    assert log.mask_secrets("rabbit://127.0.0.1:5672//") == "rabbit://127.0.0.1:5672//"


def test_json_lines_are_masked_and_carry_request_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    log.setup(json_lines=True, level="INFO")
    with log.bind_request(request_id="req-1", instance_uuid="i-1"):
        log.get_logger("test").info("connecting", url="rabbit://u:topsecret@h//")
        logging.getLogger("kombu.fake").warning("lost rabbit://u:topsecret@h// again")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["connecting", "lost rabbit://u:***@h// again"]
    assert all(line["request_id"] == "req-1" for line in lines)
    assert all(line["instance_uuid"] == "i-1" for line in lines)
    assert "topsecret" not in stream.getvalue()


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_the_close_notice_of_every_clean_stop_is_debug_not_a_warning(
    monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    """py-amqp warns "Received method (60, 30) during closing channel" on every
    daemon's clean stop (the broker's consumer cancel meeting the channel's
    close): nothing is wrong, so it is a DEBUG line, which py-amqp's logger
    never shows (its per-message debug is cut, --debug or not); py-amqp's other
    warnings stay warnings."""
    from amqp.abstract_channel import AMQP_LOGGER, IGNORED_METHOD_DURING_CHANNEL_CLOSE

    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    log.setup(json_lines=True, level=level)
    try:
        AMQP_LOGGER.warning(IGNORED_METHOD_DURING_CHANNEL_CLOSE, (60, 30), 1)
        AMQP_LOGGER.warning("heartbeat missed")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        log.setup(json_lines=True, level="INFO")
    assert [(line["level"], line["event"]) for line in lines] == [("warning", "heartbeat missed")]


def test_secrets_inside_lists_and_mappings_are_masked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    log.setup(json_lines=True, level="INFO")
    log.get_logger("test").info(
        "urls",
        urls=["rabbit://u:topsecret@h//"],
        conf={"redis": {"url": "redis://:topsecret@h:6379"}},
    )
    assert "topsecret" not in stream.getvalue()
    [line] = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["urls"] == ["rabbit://u:***@h//"]


def test_request_spec_fields_and_metadata_are_masked_when_logged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Extra specs, image properties, scheduler hints and aggregate metadata under
    a secret key, logged as fields or inside a library's message: masked, the
    rest as it was."""
    from tests.unit.factories import spec

    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    log.setup(json_lines=True, level="INFO")
    request = spec(
        extra_specs={"quota:cpu_shares": "1024", "admin_pass": "flavorPW"},
        image_properties={"hw_disk_bus": "virtio", "img_private_key": "imagePK"},
        scheduler_hints={"same_host": ("h1",), "secret_uuid": ("hintSECRET",)},
    ).to_primitive()
    metadata = {"ssd": "true", "chapsecret": "aggSECRET"}
    log.get_logger("test").info("request_read", request_spec=request, metadata=metadata)
    logging.getLogger("kombu.fake").warning("read %s and %s", request, metadata)
    text = stream.getvalue()
    for secret in ("flavorPW", "imagePK", "hintSECRET", "aggSECRET"):
        assert secret not in text
    first, second = (json.loads(x) for x in text.splitlines())
    assert first["request_spec"]["flavor"]["extra_specs"] == {
        "quota:cpu_shares": "1024",
        "admin_pass": log.MASK,
    }
    assert first["request_spec"]["scheduler_hints"] == {"same_host": ["h1"], "secret_uuid": "***"}
    assert first["metadata"] == {"ssd": "true", "chapsecret": log.MASK}
    assert (
        "'img_private_key': '***'" in second["event"]
        and "'hw_disk_bus': 'virtio'" in second["event"]
    )


def test_every_line_names_its_process_whichever_thread_logs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    log.setup(json_lines=True, level="INFO", process="scheduler-worker.2")
    worker = threading.Thread(target=lambda: log.get_logger("test").info("from_a_thread"))
    worker.start()
    worker.join()
    log.get_logger("test").info("from_main")
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert [(x["event"], x["process"]) for x in lines] == [
        ("from_a_thread", "scheduler-worker.2"),
        ("from_main", "scheduler-worker.2"),
    ]


_LIBRARY_USE = """
import logging, sys
from scheduler.exceptions import NoValidHost
from scheduler.store.memory import MemoryStore
from scheduler import log
from tests.unit.factories import engine, host, populate, spec, uuid_of

store = MemoryStore()
populate(store, [host("h0", vcpus=1, ram=512)])
try:
    engine(store).select("req-1", spec(vcpus=4, ram=4096, disk=1), [uuid_of("i1")])
except NoValidHost:
    pass
else:
    sys.exit("expected NoValidHost")
log.get_logger("scheduler.test").warning("odd_thing", url="redis://u:pw@h")
if sys.argv[1:] == ["configured"]:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    log.get_logger("scheduler.test").info("now_heard", url="rabbit://u:hunter2@h")
"""


def _library_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _LIBRARY_USE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
        check=True,
    )


def test_library_use_without_setup_is_quiet_but_for_warnings() -> None:
    """An engine in a program that never called ``log.setup`` prints nothing on
    stdout and no INFO event (a refused request logs one); a warning still reaches
    stderr, masked."""
    run = _library_run()
    assert run.stdout == ""
    assert "odd_thing" in run.stderr
    assert "u:***@h" in run.stderr and "pw@" not in run.stderr
    assert "no_valid_host" not in run.stderr and "info" not in run.stderr.lower()


def test_library_events_follow_the_programs_own_logging_config() -> None:
    """Once the embedding program configures the stdlib, our events go through its
    handlers, under our logger names, still masked."""
    run = _library_run("configured")
    assert "scheduler.test event='now_heard' url='rabbit://u:***@h'" in run.stdout
    assert "hunter2" not in run.stdout


class _Lines:
    """A logger that keeps what it is asked to log."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, object]]] = []

    def __getattr__(self, level: str) -> object:
        return lambda event, **fields: self.lines.append((level, event, fields))


@pytest.mark.parametrize(
    "sent, written",
    [
        pytest.param(
            [(0, "refused", "a")] * 4,
            [("refused", {}), ("refused", {})],
            id="the-same-event-past-its-burst",
        ),
        pytest.param(
            [(0, "refused", "a"), (0, "refused", "b"), (0, "refused", "a"), (0, "refused", "b")],
            [("refused", {})] * 4,
            id="other-fields-are-another-event",
        ),
        pytest.param(
            [(0, "refused", "a")] * 5 + [(61, "refused", "a")],
            [("refused", {}), ("refused", {}), ("refused", {"suppressed": 3})],
            id="the-next-period-says-how-many-were-held",
        ),
        pytest.param(
            [(0, "refused", "a"), (0, "failed", "a"), (0, "refused", "a"), (0, "failed", "a")],
            [("refused", {}), ("failed", {}), ("refused", {}), ("failed", {})],
            id="each-event-its-own-budget",
        ),
    ],
)
def test_repeat_limiter_writes_identical_events_a_few_times_a_period(
    sent: list[tuple[float, str, str]], written: list[tuple[str, dict[str, object]]]
) -> None:
    now = [0.0]
    limiter = log.RepeatLimiter(burst=2, period=60.0, clock=lambda: now[0])
    out = _Lines()
    for at, event, reason in sent:
        now[0] = at
        limiter.log(out, "warning", event, reason=reason)
    assert [(e, {k: v for k, v in f.items() if k != "reason"}) for _, e, f in out.lines] == (
        written
    )
    assert {level for level, _, _ in out.lines} == {"warning"}


def test_repeat_limiter_compares_by_key_when_given_and_remembers_few_events() -> None:
    limiter = log.RepeatLimiter(burst=1, period=60.0, max_keys=2, clock=lambda: 0.0)
    out = _Lines()
    # The same key, different fields (a thousand instances, one refusal): one line.
    assert limiter.log(out, "warning", "refused", key="too big", instance_uuids=["u1"])
    assert not limiter.log(out, "warning", "refused", key="too big", instance_uuids=["u2"])
    # Past max_keys the oldest event is forgotten (and may be written again).
    limiter.log(out, "warning", "refused", key="other")
    limiter.log(out, "warning", "refused", key="third")
    assert limiter.log(out, "warning", "refused", key="too big", instance_uuids=["u3"])
    assert [f.get("instance_uuids") for _, _, f in out.lines] == [["u1"], None, None, ["u3"]]
