"""Notifications: ``scheduler.<event>.start`` / ``.end`` and failures at ERROR.

Published with oslo.messaging's Notifier (driver ``messagingv2``), publisher
id ``scheduler.<host>``. :meth:`Notifier.action` makes the pairing a
structural guarantee: the ``.end`` is sent in a ``finally``, so every
``.start`` has its ``.end`` even when the request fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import oslo_messaging

from scheduler.log import get_logger

LOG = get_logger(__name__)


class Notifier:
    def __init__(self, transport: oslo_messaging.Transport | None, host: str,
                 topic: str = "notifications", enabled: bool = True) -> None:
        self._notifier: oslo_messaging.Notifier | None = None
        if enabled and transport is not None:
            self._notifier = oslo_messaging.Notifier(
                transport, publisher_id=f"scheduler.{host}", driver="messagingv2",
                topics=[topic])

    def info(self, ctxt: Any, event_type: str, payload: Mapping[str, Any]) -> None:
        self._emit("info", ctxt, event_type, payload)

    def error(self, ctxt: Any, event_type: str, payload: Mapping[str, Any]) -> None:
        self._emit("error", ctxt, event_type, payload)

    def _emit(self, priority: str, ctxt: Any, event_type: str,
              payload: Mapping[str, Any]) -> None:
        if self._notifier is None:
            return
        # A notification that cannot be sent must not fail the request it
        # describes: the decision and the claim already happened.
        try:
            getattr(self._notifier, priority)(ctxt, event_type, dict(payload))
        except Exception as exc:  # noqa: BLE001 - logged, the request goes on
            LOG.warning("notification_failed", event_type=event_type, error=repr(exc))

    @contextmanager
    def action(self, ctxt: Any, name: str, payload: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """``<name>.start`` now, ``<name>.end`` on leaving the block, however it is left.

        The yielded dict is merged into the ``.end`` payload.
        """
        self.info(ctxt, f"scheduler.{name}.start", payload)
        extra: dict[str, Any] = {}
        try:
            yield extra
        finally:
            self.info(ctxt, f"scheduler.{name}.end", {**payload, **extra})
