"""A host view that outlives a store gone back in time (a failover to a replica
that lacked the last writes) with its cursor still one of the feed's entries:
what the view holds beyond its cursor, and never sees confirmed, is reloaded.

``HookedStore.lost`` takes the store back to where it was before the writes
inside it, their feed entries with them, as such a failover does; the
cursor a view read before them is still an entry of the feed afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest
from structlog.testing import capture_logs

from scheduler.engine.hostview import HostView
from scheduler.exceptions import NoValidHost
from scheduler.objects import MEMORY_MB
from tests.unit.factories import NOW, HookedStore, engine, host, settings, spec, uuid_of


def free_ram(view: HostView) -> list[int]:
    return view.free(MEMORY_MB, np.arange(view.size)).tolist()


def store_free_ram(store: HookedStore) -> list[int]:
    return [
        p.inventories[MEMORY_MB].capacity - p.usages.get(MEMORY_MB, 0)
        for p in sorted(store.list_providers(), key=lambda p: p.name)
    ]


def events(logs: list[dict[str, object]], name: str) -> list[dict[str, object]]:
    return [e for e in logs if e["event"] == name]


def test_a_lost_claim_the_view_consumed_is_noticed_and_its_host_free_again() -> None:
    store = HookedStore([host("h1", ram=2048), host("h2", ram=2048)])
    eng = engine(store)
    eng.select("warm", spec(ram=1024, disk=1), [uuid_of("warm")])
    # Two claims the store acknowledges, then loses: the view consumed them,
    # its cursor is from before them and still an entry of the feed after.
    with store.lost():
        eng.select("lost", spec(ram=1024, disk=1, num_instances=2), [uuid_of("a"), uuid_of("b")])
    assert sum(free_ram(eng.view)) == 1024  # one slot left, as the view has it
    assert sum(store_free_ram(store)) == 3072  # three, as the store has it
    with capture_logs() as logs:
        # Exactly what the store has free lands (a view keeping the lost
        # claims would find no host for it).
        eng.select(
            "fill",
            spec(ram=1024, disk=1, num_instances=3),
            [uuid_of(f"fill{n}") for n in range(3)],
        )
    [lost] = events(logs, "host_view_write_lost")
    assert lost["consumed"] and set(lost["consumed"]) <= {uuid_of("h1"), uuid_of("h2")}  # type: ignore[arg-type]
    assert len(events(logs, "host_view_loaded")) == 1
    assert store_free_ram(store) == [0, 0]
    with pytest.raises(NoValidHost):
        eng.select("over", spec(ram=1024, disk=1), [uuid_of("over")])


def test_claims_the_feed_confirms_and_dry_runs_never_reload() -> None:
    store = HookedStore([host("h1", ram=8192), host("h2", ram=8192)])
    eng = engine(store)
    eng.select("warm", spec(ram=1024, disk=1), [uuid_of("warm")])
    with capture_logs() as logs:
        for n in range(6):
            eng.select(
                f"r{n}",
                spec(ram=1024, disk=1, num_instances=2),
                [uuid_of(f"i{n}a"), uuid_of(f"i{n}b")],
            )
            eng.explain(f"x{n}", spec(ram=1024, disk=1), [uuid_of(f"x{n}")])
            store.use("h1", {MEMORY_MB: 1})  # another worker's claim, fed
        with pytest.raises(NoValidHost):  # released again: nothing of it to confirm
            eng.select(
                "big", spec(ram=4096, disk=1, num_instances=2), [uuid_of("b0"), uuid_of("b1")]
            )
        eng.view.refresh(NOW)
    assert not events(logs, "host_view_write_lost")
    assert not events(logs, "host_view_loaded")
    assert free_ram(eng.view) == store_free_ram(store)


def test_a_lost_reread_ahead_of_the_feed_is_noticed() -> None:
    store = HookedStore([host("h1"), host("h2")])
    view = HostView(store, settings())  # type: ignore[arg-type]
    view.refresh(NOW)
    with store.lost():
        store.use("h1", {MEMORY_MB: 1024})
        store.use("h1", {MEMORY_MB: 1024})
        view.refresh_provider(uuid_of("h1"))  # ahead of the feed: generation 3
    # The store, back at generation 1, writes h1 again: generation 2, which a
    # view holding 3 would skip as older, keeping the lost usage.
    store.use("h1", {MEMORY_MB: 512})
    with capture_logs() as logs:
        view.refresh(NOW)
    [lost] = events(logs, "host_view_write_lost")
    assert lost["read_ahead"] == [uuid_of("h1")]
    assert free_ram(view) == [32768 - 512, 32768]
    h1 = view.index_of("h1")
    assert h1 is not None
    assert view.generation[h1] == store.get_provider(uuid_of("h1")).generation == 2
