"""Every Redis key the store uses, built from one configurable prefix.

The prefix is wrapped in a Redis Cluster hash tag (``{<prefix>}:providers``),
so all keys of one store hash to one slot: every Lua script may touch any of
them, and a cell can live on its own Redis or on one Redis Cluster slot. All
keys but one kind are fixed names (no key per provider, group or instance),
so every script declares every key it touches in ``KEYS``, as Redis
requires. The exception is ``deleted:<uuid>``, one string per instance being
deleted, so that Redis itself expires a deleted record (a hash field cannot
expire on Redis 7.0); only a caller that knows the uuid touches it, and it
names it in ``KEYS`` (:meth:`Keys.deleted_record`).

Layout (values are JSON unless said otherwise):

==================  ======  =====================================================
key                 type    content
==================  ======  =====================================================
``providers``       hash    provider uuid -> the whole provider (inventories,
                            usages, traits, aggregates, generation, consumers)
``provider_names``  hash    provider name -> uuid (names are unique)
``aggregates``      hash    aggregate uuid -> name and metadata
``consumers``       hash    consumer uuid -> allocations, project, user,
                            generation, server group and host
``groups``          hash    server group uuid -> ``{host: members}``
``services``        hash    host -> rpc_server, disabled state, failed builds
``heartbeats``      hash    host -> last heartbeat (a float, as text)
``reports``         hash    host -> what its compute last reported it runs
                            (time and instances, see ``InstanceReport``)
``instances``       hash    instance uuid -> instance record
``deadlines``       zset    instance uuid scored by its record's ``deadline``,
                            for every live record that has one (what the
                            conductor's sweep reads: only what is due), and
                            the member ``*indexed*`` at ``+inf`` once the
                            records written before the index existed were
                            indexed
``pending``         zset    the requests waiting for capacity, every member at
                            score 0 so that they sort by their text:
                            ``pending_member`` (priority, age, uuid), the
                            order the conductor retries them in
``pending_members`` hash    instance uuid -> its member of ``pending``
``changes``         stream  the change feed: fields ``k`` (kind), ``d`` (JSON
                            data) and, for services, ``hb`` (last heartbeat)
``refusals``        list    the last NoValidHosts, newest first, at most
                            ``REFUSALS_KEPT`` (``Refusal``)
``preemptions``     list    the last preemptions, newest first, at most
                            ``PREEMPTIONS_KEPT`` (``PreemptionEntry``),
                            each pushed by its preempting claim's script
``deleted:<uuid>``  string  the instance's delete fence: ``deleting`` while it
                            is DELETING (its record still in ``instances``),
                            then the DELETED record, expiring after the
                            retention (a claim for the uuid is refused while
                            the key exists)
==================  ======  =====================================================
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """The key names of one store."""

    providers: str
    provider_names: str
    aggregates: str
    consumers: str
    groups: str
    services: str
    heartbeats: str
    reports: str
    instances: str
    deadlines: str
    pending: str
    pending_members: str
    changes: str
    refusals: str
    preemptions: str
    deleted: str  # the prefix of the ``deleted:<uuid>`` keys

    def deleted_record(self, instance_uuid: str) -> str:
        """The key of one instance's delete fence and, once DELETED, its record."""
        return f"{self.deleted}:{instance_uuid}"

    @classmethod
    def for_prefix(cls, prefix: str) -> Keys:
        """Keys under ``{prefix}``; the prefix must be non-empty and brace-free.

        An empty hash tag (``{}``) does not pin a slot, and a brace inside the
        prefix would end the tag early; both would scatter the keys.
        """
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"key prefix must be non-empty and free of braces: {prefix!r}")
        tag = "{" + prefix + "}"
        return cls(**{name: f"{tag}:{name}" for name in cls.__dataclass_fields__})

    def all(self) -> tuple[str, ...]:
        """Every key, e.g. to drop a store's data."""
        return tuple(getattr(self, name) for name in self.__dataclass_fields__)
