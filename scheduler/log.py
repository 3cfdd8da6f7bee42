"""Logging: structlog for our events, the stdlib's records routed through it.

Daemons write JSON lines when stderr is not a terminal and readable
``key=value`` lines when it is. Every line passes :func:`masked`, so no
secret reaches a log, whoever logged it (our code, oslo.messaging, kombu,
redis-py): not the password of a transport or store URL, nor the value of any
key OpenStack treats as secret (oslo.utils' list: ``password``, ``admin_pass``,
``token``, ``private_key``, ``secret_uuid``, ``configdrive``...), in free text
(``k=v``, ``k: v``, ``"k": "v"``, ``<k>v</k>``, ``--k v``), in mappings or in
lists. This module is masking's one home: the errors returned to callers
(:mod:`scheduler.rpc`), the instance faults (:mod:`conductor_stub.records`)
and the notifications (:mod:`scheduler.notifier`) are masked here too.

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

import functools
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog
from oslo_utils import strutils

# scheme://user:password@host[,user2:password2@host2]  ->  scheme://user:***@host...
_URL_PASSWORD = re.compile(r"(?P<scheme>://|,)(?P<user>[^:/@\s,]*):(?P<pw>[^@\s]+)@")
# A key and what separates it from its value in free text: ``k=v``, ``k: v``,
# ``"k": "v"`` (a quoted key may hold anything: ``"db admin_pass (old)": ...``),
# ``k 'v'`` (a quoted value), ``--k v``. A bare key starts a word (so the scan
# stays linear); whether a key names a secret is :func:`is_secret_key`'s to say,
# and only then is its value read (:data:`_VALUE`), masked and stepped over.
_KEY = re.compile(
    r"""(?P<kq>["'])(?P<quoted_key>(?:\\.|(?!(?P=kq))[^\\\n])*)(?P=kq)\s*[:=]\s*"""
    r"""|(?<![\w.-])(?P<key>(?P<dashes>--)?[A-Za-z_][\w.-]*)"""
    r"""(?P<sep>["']?\s*[:=]\s*|["']?\s+(?=[bBuU]?["'])|(?(dashes)\s+|(?!)))"""
)
# A value: quoted (to its closing quote, backslash escapes inside; to the end of the
# text if it was cut before the quote closed), else bare, up to the next space or
# quote, as oslo.utils reads ``k=v``. (A bracketed value, ``[...]``, ``{...}``,
# ``(...)``, is read by :func:`_bracketed_end`.)
_VALUE = re.compile(
    r"""(?P<open>[bBuU]?(?P<q>["']))(?:\\.|(?!(?P=q))[^\\])*(?P<close>(?P=q))?"""
    r"""|(?P<bare>[^\s"']+)"""
)
_QUOTED = re.compile(r"""(?P<q>["'])(?:\\.|(?!(?P=q))[^\\])*(?P=q)?""")
_BRACKETS = {"[": "]", "{": "}", "(": ")"}
# <key>value</key>
_XML = re.compile(r"<(?P<key>[A-Za-z_][\w.:-]*)(?:\s[^<>]*)?>(?P<value>[^<]*)</(?P=key)>")

MASK = "***"

#: Keys masked beside oslo.utils' list (which has ``sys_pswd`` but not this spelling).
_MORE_SECRET_KEYS = ("passwd",)

#: A quick test that a text may hold a secret key at all (most log text does not):
#: one of the names, in the lowered text. The names are oslo.utils' list as
#: ``mask_password`` reads it (``strutils._SANITIZE_KEYS``); were it ever gone,
#: every text is scanned. Whether a key is secret stays :func:`is_secret_key`'s.
_NAMES = getattr(strutils, "_SANITIZE_KEYS", None)
_ANY_NAME = (
    re.compile("|".join(re.escape(name) for name in (*_NAMES, *_MORE_SECRET_KEYS)))
    if _NAMES
    else None
)

#: How deep :func:`masked` walks nested lists and mappings; deeper, a value is
#: masked as its text.
_MAX_DEPTH = 32


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether the value under ``key`` (a mapping key, a field name, the key of a
    ``key=value`` pair) is a secret.

    The list and the matching are oslo.utils' (``strutils.mask_dict_password``:
    the key holds one of the names OpenStack treats as secret, ``password``,
    ``admin_pass``, ``token``, ``private_key``, ``secret_uuid``, ``configdrive``...,
    whatever the case), plus ``passwd``.
    """
    lowered = key.lower()
    if any(name in lowered for name in _MORE_SECRET_KEYS):
        return True
    return strutils.mask_dict_password({key: ""}, secret=MASK)[key] == MASK


def _bracketed_end(text: str, pos: int) -> int:
    """Where the bracketed value that opens at ``pos`` closes (past its closing
    bracket; the end of the text if it never does), brackets inside quotes
    not counted."""
    closers: list[str] = []
    while pos < len(text):
        char = text[pos]
        if char in "\"'":
            quoted = _QUOTED.match(text, pos)
            assert quoted is not None  # a quote always opens one
            pos = quoted.end()
            continue
        if char in _BRACKETS:
            closers.append(_BRACKETS[char])
        elif closers and char == closers[-1]:
            closers.pop()
            if not closers:
                return pos + 1
        pos += 1
    return pos


def _mask_pairs(text: str) -> str:
    """``text`` with the value of every secret key masked (see :data:`_KEY`)."""
    out: list[str] = []
    done = 0  # text[:done] is in out
    for key in _KEY.finditer(text):
        name = key["key"] if key["quoted_key"] is None else key["quoted_key"]
        if key.start() < done or not is_secret_key(name):
            continue
        start = key.end()
        if text[start : start + 1] in _BRACKETS:
            out += (text[done:start], MASK)
            done = _bracketed_end(text, start)
            continue
        value = _VALUE.match(text, start)
        if value is None:
            continue
        if value["bare"] is not None:
            out += (text[done:start], MASK)
        else:
            out += (text[done:start], value["open"], MASK, value["close"] or "")
        done = value.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _mask_xml(match: re.Match[str]) -> str:
    if not is_secret_key(match["key"]):
        return match[0]
    return f"{match[0][: match.start('value') - match.start()]}{MASK}</{match['key']}>"


def _may_pair(text: str) -> bool:
    """Whether ``text`` has what every form of a pair needs: a ``=``, ``:``,
    quote, ``<`` or ``--`` (most log text, a host name or a uuid, has none)."""
    return "=" in text or ":" in text or '"' in text or "'" in text or "<" in text or "--" in text


def mask_secrets(text: str) -> str:
    """``text`` with every secret in it replaced by ``***``: the one home of masking.

    Masked are the password of every URL (``scheme://user:***@host``, each host
    of a multi-host URL), and the value of every key oslo.utils treats as
    secret (see :func:`is_secret_key`) as ``k=v``, ``k: v``, ``"k": "v"``,
    ``'k': 'v'``, ``k "v"``, ``--k v``, ``<k>v</k>``, or with a bracketed value
    (``k: [...]``, ``{...}``, ``(...)``, masked whole). oslo.utils'
    ``mask_password`` reads the same forms but is not used for them: past a
    masked value it also takes the values that follow (``{'password': 'a',
    'user': 'b'}`` loses ``'b'``), and a value holding the other quote
    survives in part. Structured values go through :func:`masked`.
    """
    if "@" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    if _may_pair(text) and (_ANY_NAME is None or _ANY_NAME.search(text.lower())):
        text = _mask_pairs(text)
        if "<" in text:
            text = _XML.sub(_mask_xml, text)
    return text


#: What :func:`masked` returns as it is (a tuple of types: checked faster than a union).
_PLAIN = (bool, int, float)


def masked(value: Any, _depth: int = 0) -> Any:
    """``value`` with every secret in it masked: strings as :func:`mask_secrets`
    says, lists, tuples, sets and mappings walked (a mapping's value under a
    secret key masked whole, whatever it is), an exception as its masked repr,
    any other object as its masked repr if that masks something (else as it
    is). What holds no secret comes back equal to what went in.

    Every log line, error returned to a caller, instance fault and notification
    passes here.
    """
    if isinstance(value, str):
        return mask_secrets(value)
    if value is None or isinstance(value, _PLAIN):
        return value
    if isinstance(value, BaseException):
        return mask_secrets(repr(value))
    if _depth < _MAX_DEPTH:
        # A dict by its exact type first: the ABC's check costs more than the rest.
        if type(value) is dict or isinstance(value, Mapping):
            return {
                k: MASK if isinstance(k, str) and is_secret_key(k) else masked(v, _depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [masked(v, _depth + 1) for v in value]
        if isinstance(value, tuple):
            return tuple(masked(v, _depth + 1) for v in value)
        if isinstance(value, set | frozenset):
            items = [masked(v, _depth + 1) for v in value]
            try:
                return type(value)(items)
            except TypeError:  # a masked item is no longer hashable
                return items
    text = repr(value)
    safe = mask_secrets(text)
    return value if safe == text else safe


def _mask_processor(
    _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        event_dict[key] = MASK if is_secret_key(key) else masked(value)
    return event_dict


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
    amqp_logger = logging.getLogger("amqp")
    if _benign_close_notice not in amqp_logger.filters:
        amqp_logger.addFilter(_benign_close_notice)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


#: What py-amqp says, at WARNING, when the broker tells a consumer of its
#: cancel (basic.cancel, method (60, 30)) while the channel is closing: the
#: rabbit driver closes its channel on every clean stop, so every daemon said
#: it each time it stopped. It is ignored, rightly, so it is DEBUG here.
_CLOSING_CHANNEL_NOTICE = "Received method %s during closing channel %s."


def _benign_close_notice(record: logging.LogRecord) -> bool:
    """Lower py-amqp's "method received during closing channel" to DEBUG (kept
    only where the amqp logger shows DEBUG); every other record passes unchanged."""
    if not (isinstance(record.msg, str) and record.msg.startswith(_CLOSING_CHANNEL_NOTICE)):
        return True
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


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
