"""``scheduler-admin pending`` and ``scheduler-admin preemptions``, on a MemoryStore."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.cmd import _commands, admin, admin_queue
from scheduler.objects import ACTIVE, BUILDING, PENDING, InstanceRecord
from scheduler.store import Eviction, Inventory, MemoryStore, Store, Victim
from tests.fixtures.store import ask

T0 = 1_700_000_000.0


def run(store: Store, capsys: pytest.CaptureFixture[str], *argv: str, **kwargs: Any) -> str:
    parser = argparse.ArgumentParser(prog="scheduler-admin")
    admin._add_commands(parser.add_subparsers(dest="name"))
    command = parser.parse_args(list(argv))
    conf = SimpleNamespace(command=command)
    if argv[0] == "pending":
        result = admin_queue._pending(conf, store, clock=lambda: T0 + 90)  # type: ignore[arg-type]
    else:
        result = admin_queue._preemptions(conf, store)  # type: ignore[arg-type]
    assert _commands.emit(result, _commands.fmt_of(command)) == 0
    return capsys.readouterr().out


def waiting(store: Store, uuid: str, priority: int, since: float, **fields: Any) -> None:
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid,
                state=PENDING,
                priority_class="batch" if priority else None,
                priority=priority,
                max_wait=600.0,
                waiting_since=since,
                deadline=since + 600.0,
                created_at=since,
                fault_details="no host: 3 insufficient VCPU, 1 disabled",
                **fields,
            )
        ]
    )
    store.add_pending(uuid, priority, since)


def test_pending_lists_the_queue_in_retry_order_skipping_stale_entries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    assert run(store, capsys, "pending").strip() == (
        "no request waits for capacity (0 in the pending index)"
    )
    waiting(store, "old-low", 0, T0)
    waiting(store, "young-high", 500, T0 + 30)
    waiting(store, "old-high", 500, T0 + 10)
    # An entry whose record moved on (retried: BUILDING) is not shown.
    store.create_instances([InstanceRecord(uuid="retried", state=BUILDING)])
    store.add_pending("retried", 900, T0)
    lines = run(store, capsys, "pending").splitlines()
    assert lines[0].split()[:3] == ["instance", "class", "(priority)"]
    assert lines[1].split() == [
        "old-high", "batch", "(500)", "2023-11-14", "22:13:30", "1m20s",
        "2023-11-14", "22:23:30", "no", "host:", "3", "insufficient", "VCPU,", "1", "disabled",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[2:4]] == ["young-high", "old-low"]
    assert lines[3].split()[1:3] == ["-", "(0)"]
    assert lines[4] == "3 shown, 4 in the pending index"
    assert run(store, capsys, "pending", "--limit", "1", "-f", "value").splitlines() == [
        f"old-high batch 500 {T0 + 10} {T0 + 610}"
    ]
    document = json.loads(run(store, capsys, "pending", "-f", "json"))
    assert document["indexed"] == 4
    first = document["pending"][0]
    assert (first["uuid"], first["waited"], first["max_wait"]) == ("old-high", 80.0, 600.0)
    assert first["last_refusal"] == "no host: 3 insufficient VCPU, 1 disabled"


def test_pending_reads_the_index_a_page_at_a_time() -> None:
    store = MemoryStore()
    for n in range(7):
        waiting(store, f"i-{n}", 0, T0 + n)
    store.create_instances([InstanceRecord(uuid="gone", state=ACTIVE)])
    store.add_pending("gone", 0, T0 + 2.5)
    calls: list[tuple[int, int]] = []
    list_pending = store.list_pending

    def spy(limit: int = 1000, offset: int = 0) -> list[str]:
        calls.append((limit, offset))
        return list_pending(limit, offset)

    store.list_pending = spy  # type: ignore[method-assign]
    found = admin_queue.read_pending(store, 5, page=3)
    assert [r.uuid for r in found] == ["i-0", "i-1", "i-2", "i-3", "i-4"]
    assert calls == [(3, 0), (3, 3)]  # the stale entry read but not counted
    calls.clear()
    assert len(admin_queue.read_pending(store, 100, page=3)) == 7
    assert calls == [(3, 0), (3, 3), (3, 6), (3, 8)]  # 8 entries, then none


def test_preemptions_lists_the_last_evictions_newest_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    assert run(store, capsys, "preemptions").strip() == "no preemption kept"
    store.create_provider("h1", "h1")
    store.set_inventory("h1", 0, {"VCPU": Inventory(total=4)})
    victims = []
    for n, (name, priority) in enumerate([("spot", 10), (None, 0)]):
        uuid = f"victim-{n}"
        store.create_instances(
            [
                InstanceRecord(
                    uuid=uuid,
                    state=ACTIVE,
                    task_state=None,
                    host="h1",
                    priority_class=name,
                    priority=priority,
                    preemptible=True,
                    updated_at=T0,
                )
            ]
        )
        store.claim(uuid, ask({"h1": {"VCPU": 2}}))
        at = store.get_instance(uuid).updated_at
        victims.append(Victim(uuid, {"h1": {"VCPU": 2}}, "h1", at, name, priority))
    store.create_instances([InstanceRecord(uuid="boot", state=BUILDING)])
    eviction = Eviction("req-1", T0 + 5, "h1", "h1", None, "gold", 1000)
    assert store.claim_preempting(
        "boot", ask({"h1": {"VCPU": 4}}), victims, 1000, eviction=eviction
    )
    lines = run(store, capsys, "preemptions").splitlines()
    assert lines[0].split()[:4] == ["time", "(UTC)", "preemptor", "host"]
    assert lines[1].split() == [
        "2023-11-14", "22:13:25", "boot", "h1", "gold", "(1000)",
        "victim-0", "spot", "(10),", "victim-1", "-", "(0)",
    ]  # fmt: skip
    assert run(store, capsys, "preemptions", "-f", "value").splitlines() == [
        "2023-11-14 22:13:25 boot h1 victim-0,victim-1"
    ]
    (entry,) = json.loads(run(store, capsys, "preemptions", "-f", "json"))["preemptions"]
    assert entry["victims"][0] == {"uuid": "victim-0", "priority_class": "spot", "priority": 10}
    assert entry["request_id"] == "req-1"
