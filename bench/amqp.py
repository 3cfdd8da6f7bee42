"""How many AMQP messages the broker took in: a case's messages per boot.

RabbitMQ (3.9 and later) keeps global counters in its core, with no plugin:
``messages_received_total`` counts every message published to the broker over
AMQP 0-9-1, from any vhost. :func:`messages_received` reads it through
``rabbitmqctl eval``; a case reads it before and after a run and divides the
difference by what the run did. The counter is the whole broker's, so the
figure is a run's own only while nothing else publishes to that broker: the
bench's own daemons are alone on it when it runs by itself, as it should.
"""

from __future__ import annotations

import re
import subprocess

_RECEIVED = re.compile(r"messages_received_total\s*=>\s*(\d+)")


def messages_received() -> int | None:
    """The broker's count of messages received over AMQP 0-9-1 so far, or
    None where it cannot be read (no ``rabbitmqctl`` here, a broker older
    than 3.9, or no right to ask it)."""
    out = broker_eval("rabbit_global_counters:overview().")
    # The first map is the protocol's own (amqp091, every queue type); the
    # per-queue-type maps that follow carry no received count.
    found = _RECEIVED.search(out or "")
    return int(found.group(1)) if found else None


def broker_eval(expression: str) -> str | None:
    """What the broker ``rabbitmqctl`` talks to says to an Erlang
    ``expression``, or None where it cannot be asked."""
    try:
        return subprocess.run(
            ["rabbitmqctl", "-q", "eval", expression],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
