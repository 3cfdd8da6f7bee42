"""A small cloud on the in-memory store, and instance records in each state."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from scheduler.objects import (
    ACTIVE,
    RESIZE_PREP,
    RESIZING,
    AllocationRequest,
    Flavor,
    InstanceRecord,
    RequestSpec,
    Selection,
    migration_uuid_for,
)
from scheduler.store import MemoryStore
from tests.unit.factories import NOW, host, populate, spec, uuid_of

SPEC = spec(vcpus=1, ram=1024, disk=10)
BIG = Flavor(name="big", vcpus=2, memory_mb=2048, root_gb=20)
REQUEST_ID = "req-1"


def cloud(*names: str, ram: int = 4096) -> MemoryStore:
    """Hosts ``names``, each with ``ram`` MB (room for four of SPEC)."""
    store = MemoryStore()
    populate(store, [host(name, ram=ram) for name in names])
    return store


def ask(name: str, request: RequestSpec = SPEC) -> AllocationRequest:
    return AllocationRequest({uuid_of(name): request.resources}, "project", "user")


def selection(
    name: str, request: RequestSpec = SPEC, availability_zone: str | None = None
) -> Selection:
    return Selection(
        host=name,
        node=name,
        provider_uuid=uuid_of(name),
        allocation_request=ask(name, request),
        weight=0.0,
        availability_zone=availability_zone,
    )


def fill(store: MemoryStore, name: str) -> None:
    """Another tenant takes all the memory left on ``name``."""
    free = store.get_provider(uuid_of(name)).free("MEMORY_MB")
    store.claim(
        str(uuidlib.uuid4()),
        AllocationRequest({uuid_of(name): {"MEMORY_MB": free}}, "other", "other"),
    )


def holder(store: MemoryStore, consumer: str) -> str | None:
    """The host whose provider the consumer's allocation is on."""
    held = store.get_consumer(consumer)
    if held is None:
        return None
    return store.get_provider(next(iter(held.allocations))).name


def building(store: MemoryStore, name: str = "i1", **fields: Any) -> str:
    """An instance record (BUILDING unless ``fields`` say otherwise)."""
    uuid = uuid_of(name)
    fields.setdefault("deadline", NOW + 60)
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid,
                request_spec=SPEC.to_primitive(),
                request_id=REQUEST_ID,
                created_at=NOW,
                **fields,
            )
        ]
    )
    return uuid


def active_on(store: MemoryStore, where: str, name: str = "i1") -> str:
    uuid = building(store, name)
    store.claim(uuid, ask(where))
    store.update_instance(
        uuid, state=ACTIVE, task_state=None, host=where, node=where, deadline=None
    )
    return uuid


def resizing(
    store: MemoryStore, source: str, dest: str | None, name: str = "i1", **fields: Any
) -> tuple[str, str]:
    """An instance ACTIVE on ``source`` being resized to BIG: its allocation parked
    on the migration, and (if ``dest``) BIG claimed for it on ``dest``."""
    uuid = active_on(store, source, name)
    migration = migration_uuid_for(uuid, REQUEST_ID)
    store.update_instance(
        uuid,
        state=RESIZING,
        task_state=RESIZE_PREP,
        migration_uuid=migration,
        new_flavor=BIG.to_primitive(),
        source_host=source,
        source_node=source,
        deadline=NOW + 60,
        **fields,
    )
    assert store.move_allocations(uuid, migration)
    if dest is not None:
        store.claim(uuid, ask(dest, SPEC.replace(flavor=BIG)))
    return uuid, migration
