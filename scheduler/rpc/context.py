"""The request context every message carries, and the serializer that carries it
(oslo.context's context, as a dict on the wire)."""

from __future__ import annotations

from typing import Any

import oslo_messaging
from oslo_context import context as oslo_context


class RequestContext(oslo_context.RequestContext):
    """oslo.context's request context; the fields every message carries."""

    @classmethod
    def admin(cls, **kwargs: Any) -> RequestContext:
        kwargs.setdefault("roles", ["admin"])
        return cls(is_admin=True, **kwargs)


class ContextSerializer(oslo_messaging.NoOpSerializer):
    """Carries the request context with every message; entities pass as they are
    (the clients and endpoints convert typed objects themselves)."""

    def serialize_context(self, ctxt: Any) -> dict[str, Any]:
        if isinstance(ctxt, oslo_context.RequestContext):
            return ctxt.to_dict()
        return dict(ctxt or {})

    def deserialize_context(self, ctxt: dict[str, Any]) -> RequestContext:
        return RequestContext.from_dict(ctxt)
