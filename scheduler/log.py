"""Logging: structlog for our events, the stdlib's records routed through it.

Daemons write JSON lines when stderr is not a terminal and readable
``key=value`` lines when it is. Every line passes :func:`mask_secrets`, so a
password inside a transport or store URL never reaches a log, whoever logged
it (our code, oslo.messaging, kombu, redis-py).

Events have stable snake_case names; request-scoped keys (``request_id``,
``instance_uuid``, ``host``) are bound with :func:`bind_request` (contextvars),
so every line logged while handling a request carries them.

Where one cause can repeat a line without end (a client sending the same bad
request again and again, a store that is down while requests keep coming),
the line goes through a :class:`RepeatLimiter`: identical events pass at most
a few times a minute, and the next one let through says how many were held
back (``suppressed``).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog

# scheme://user:password@host[,user2:password2@host2]  ->  scheme://user:***@host...
_URL_PASSWORD = re.compile(r"(?P<scheme>://|,)(?P<user>[^:/@\s,]*):(?P<pw>[^@\s]+)@")
# password=..., "password": "..." and the like, in free text
_KV_PASSWORD = re.compile(
    r"(?P<key>(?:password|passwd|secret|token)[\"']?\s*[:=]\s*[\"']?)(?P<val>[^\"'\s,;}&]+)",
    re.IGNORECASE,
)

MASK = "***"


def mask_secrets(text: str) -> str:
    """Replace passwords in URLs and ``password=`` pairs with ``***``."""
    if "@" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    if any(w in text.lower() for w in ("password", "passwd", "secret", "token")):
        text = _KV_PASSWORD.sub(lambda m: f"{m['key']}{MASK}", text)
    return text


def _mask_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        event_dict[key] = _masked(value)
    return event_dict


def _masked(value: Any, depth: int = 0) -> Any:
    """``value`` with every string in it masked (lists and dicts too, a few levels
    deep; an exception as its masked repr)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, BaseException):
        return mask_secrets(repr(value))
    if depth < 4 and isinstance(value, list | tuple):
        return [_masked(v, depth + 1) for v in value]
    if depth < 4 and isinstance(value, dict):
        return {k: _masked(v, depth + 1) for k, v in value.items()}
    return value


def _add_process(process: str) -> Any:
    def processor(
        _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event_dict["process"] = process
        return event_dict

    return processor


def _drop_noise(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event_dict.pop("_record", None)
    event_dict.pop("_from_structlog", None)
    return event_dict


#: What the command line asked of every later :func:`setup` in this process
#: (and in the processes it forks): ``--debug`` and ``--log-file``.
_cli: dict[str, Any] = {"debug": False, "log_file": None}


def set_cli_options(*, debug: bool = False, log_file: str | None = None) -> None:
    """``--debug`` (DEBUG level) and ``--log-file`` (the lines go to that file,
    in the same format, instead of stderr) for every later :func:`setup`."""
    _cli.update(debug=debug, log_file=log_file)


def setup(
    *, json_lines: bool | None = None, level: str = "INFO", process: str | None = None
) -> None:
    """Configure structlog and the stdlib root logger once per process."""
    if _cli["debug"]:
        level = "DEBUG"
    stream: Any = sys.stderr
    if _cli["log_file"]:
        stream = open(_cli["log_file"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    if json_lines is None:
        json_lines = not stream.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            # The process name on every line, whichever thread logs it (context
            # variables do not follow the RPC server's threads), set here in the
            # formatter: loggers a parent used before it forked a worker keep
            # the parent's processors, never its formatter.
            *([_add_process(process)] if process else []),
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _mask_processor,
            _drop_noise,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Chatty libraries: keep their warnings, drop per-message debug lines.
    quiet = max(logging.getLevelNamesMapping().get(level.upper(), logging.INFO), logging.INFO)
    for name in ("oslo_messaging", "kombu", "amqp", "stevedore"):
        logging.getLogger(name).setLevel(quiet)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _library_defaults() -> None:
    """Until a daemon calls :func:`setup`, events go to the stdlib logger of
    their name, rendered and masked, and nothing else is configured.

    A program that uses the engine as a library and never configured logging
    hears only warnings, through Python's last-resort handler on stderr (never
    stdout), as from any well-behaved library; one that configured the stdlib
    itself gets our events through its own handlers. Loggers are not cached,
    so the first :func:`setup` applies to loggers already handed out.
    """
    if structlog.is_configured():  # the embedding program configured structlog
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            _mask_processor,
            structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


_library_defaults()


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)


@contextmanager
def bind_request(**keys: Any) -> Iterator[None]:
    """Bind request-scoped keys to every log line inside the block."""
    tokens = structlog.contextvars.bind_contextvars(
        **{k: v for k, v in keys.items() if v is not None}
    )
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


class RepeatLimiter:
    """At most ``burst`` lines per ``period`` seconds of each identical event.

    Events are identical when they have the same level, name and ``key``;
    without a ``key``, the same fields (bound request keys are not compared:
    the same failure for a thousand instances is one repetition). Past the
    budget, lines are counted, not written; the first line written after some
    were held back carries ``suppressed`` (how many). A count still held when
    no such event comes again is never written; the rate alone is the signal.
    The limiter remembers at most ``max_keys`` distinct events (the oldest are
    forgotten first), so it stays small whatever the variety of its input.
    """

    def __init__(
        self,
        burst: int = 5,
        period: float = 60.0,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.period = period
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [window start, lines written in it, lines held back since the last written]
        self._seen: dict[Hashable, list[float]] = {}

    def log(
        self,
        logger: Any,
        level: str,
        event: str,
        *,
        key: Hashable | None = None,
        **fields: Any,
    ) -> bool:
        """Log ``event`` at ``level`` with ``fields`` unless over budget; return
        whether it was written."""
        ident = (level, event, repr(sorted(fields.items())) if key is None else key)
        suppressed = self._admit(ident)
        if suppressed is None:
            return False
        if suppressed:
            fields["suppressed"] = suppressed
        getattr(logger, level)(event, **fields)
        return True

    def _admit(self, ident: Hashable) -> int | None:
        """None to hold the line back; else how many were held back before it."""
        now = self._clock()
        with self._lock:
            state = self._seen.pop(ident, None)  # re-inserted last: the newest
            if state is None or now - state[0] >= self.period:
                state = [now, 0.0, state[2] if state else 0.0]
            self._seen[ident] = state
            while len(self._seen) > self.max_keys:
                del self._seen[next(iter(self._seen))]
            if state[1] >= self.burst:
                state[2] += 1
                return None
            state[1] += 1
            held, state[2] = int(state[2]), 0.0
            return held
