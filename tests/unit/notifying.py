"""Recording notifiers' common step: a notification checked in both formats."""

from __future__ import annotations

import json
from typing import Any

from scheduler.notifications import EVENTS, EventPayload, check
from scheduler.notifier import versioned_event_type
from tests import notification_samples

#: The committed samples, per versioned event type.
SAMPLES = notification_samples.load()


def legacy_checked(priority: str, event_type: str, payload: EventPayload) -> dict[str, Any]:
    """The legacy payload of a notification, once its versioned form was checked:
    the event is one of :data:`EVENTS`, at its priority, and its payload is
    that event's object, every field of its declared type, JSON as sent, and
    as its event's sample in doc/notification_samples/ shows it."""
    versioned = versioned_event_type(priority, event_type)
    assert versioned in EVENTS, f"{versioned} is not a documented event"
    expected_priority, cls = EVENTS[versioned]
    assert (expected_priority.lower(), type(payload)) == (priority, cls), versioned
    primitive = json.loads(json.dumps(payload.to_primitive()))
    check(primitive, cls)
    note = {"priority": expected_priority, "event_type": versioned, "payload": primitive}
    notification_samples.check_against_sample(note, SAMPLES[versioned])
    return payload.legacy()
