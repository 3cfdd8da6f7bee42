"""Every Redis key the store uses, built from one configurable prefix.

The prefix is wrapped in a Redis Cluster hash tag (``{<prefix>}:providers``),
so all keys of one store hash to one slot: every Lua script may touch any of
them, and a cell can live on its own Redis or on one Redis Cluster slot. All
keys are fixed names (no key per provider, group or instance), so every
script declares every key it touches in ``KEYS``, as Redis requires.

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
``instances``       hash    instance uuid -> instance record
``changes``         stream  the change feed: fields ``k`` (kind), ``d`` (JSON
                            data) and, for services, ``hb`` (last heartbeat)
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
    instances: str
    changes: str

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
