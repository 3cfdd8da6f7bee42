"""What every command and daemon does the same way at its edges.

* ``--version``, ``--debug`` and ``--log-file``: the oslo.config commands get
  them from :func:`scheduler.conf.parse_args`; an argparse command (the demo)
  from :func:`add_common_arguments`. Both land in :func:`apply_log_options`.
* A mistake is one line, ``<prog>: <what>``, and a non-zero exit status: a
  configuration that cannot be used (the option, its value and its file), a
  broker or store that cannot be reached, a topic nothing consumes. The
  traceback only with ``--debug``. Every such line is printed by :func:`say`,
  which escapes control characters (``\\n``, ``\\x1b``): what the user
  typed is quoted, never replayed to the terminal.
* What a command opens (its store, its transports) is closed when it ends,
  however it ends: its dispatcher runs it in :func:`closing`, and it opens
  them with :func:`opened`.
* Ctrl-C (SIGINT) exits quietly with status 130, whatever the command was doing.
* Output to a pipe whose reader has gone (``scheduler-admin hosts | head``)
  exits quietly with status 141 (128 + SIGPIPE, what a shell reports for a
  command killed by SIGPIPE, so ``set -o pipefail`` still tells it from
  success): the rest of the output is dropped, nothing is said.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import math
import os
import select
import signal
import sys
import traceback
import urllib.parse
import uuid as uuidlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from oslo_config import cfg, types

from scheduler import conf as conf_mod
from scheduler import log, rpc
from scheduler.cmd._commands import Arg, arg
from scheduler.exceptions import BrokerUnreachable, ConfigInvalid, NoConsumer, StoreUnavailable

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: The exit status of a command whose standard output was closed under it
#: (128 + SIGPIPE): see :func:`run`.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
#: The exit status of a configuration that cannot be used, or a service that
#: cannot be reached.
EXIT_FAILED = 1

#: Failures said in one line (with the traceback only under --debug).
ONE_LINE_ERRORS: tuple[type[BaseException], ...] = (
    ConfigInvalid,
    cfg.Error,
    BrokerUnreachable,
    NoConsumer,
    StoreUnavailable,
)


_T = TypeVar("_T")


class Opened:
    """What one command opened, each once (by key), closed when it ends: the
    last opened first."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._kept: dict[str, Any] = {}

    def keep(self, key: str, open_: Callable[[], _T], close: Callable[[_T], object]) -> _T:
        if key not in self._kept:
            thing = open_()
            self._stack.callback(close, thing)
            self._kept[key] = thing
        found: _T = self._kept[key]
        return found

    def close(self) -> None:
        self._kept.clear()
        self._stack.close()


_OPENED: contextvars.ContextVar[Opened | None] = contextvars.ContextVar("opened", default=None)


@contextlib.contextmanager
def closing() -> Iterator[Opened]:
    """The run of one command, in its dispatcher: what the command opens
    with :func:`opened` meanwhile is closed when the run ends, however it
    ends (done, refused, failed, interrupted)."""
    scope = Opened()
    token = _OPENED.set(scope)
    try:
        yield scope
    finally:
        _OPENED.reset(token)
        scope.close()


def opened(key: str, open_: Callable[[], _T], close: Callable[[_T], object]) -> _T:
    """``open_()``: what the command runs on (``key``: its store, a transport),
    opened once per run and closed (``close``) when the run of
    :func:`closing` ends. Outside such a run (a test calling a command
    itself) it is opened each time and left to the caller."""
    scope = _OPENED.get()
    return open_() if scope is None else scope.keep(key, open_, close)


def printable(text: str) -> str:
    """``text`` with every character that is not printable (newlines, tabs,
    escape sequences, bidirectional overrides, ...) written as ``repr`` writes
    it (``\\n``, ``\\x1b``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(prog: str, message: str) -> None:
    """Print ``prog: message`` on standard error: the one place a command's
    errors (and warnings) are printed, in one line, control characters
    escaped (:func:`printable`)."""
    print(f"{prog}: {printable(message)}", file=sys.stderr)


def apply_log_options(debug: bool, log_file: str | None) -> None:
    """``--debug`` and ``--log-file`` for every later :func:`scheduler.log.setup`."""
    log.set_cli_options(debug=debug, log_file=log_file)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """``--version``, ``--debug`` and ``--log-file`` on an argparse command, with
    the help the oslo.config commands give them."""
    debug, log_file = conf_mod.common_cli_opts
    parser.add_argument("--version", action="version", version=conf_mod.version())
    parser.add_argument("--debug", action="store_true", help=debug.help)
    parser.add_argument("--log-file", metavar="PATH", help=log_file.help)


def whole(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    return parse


def seconds(least: float = 0.0, inclusive: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, more than ``least`` (or
    ``least`` itself too when ``inclusive``). Every timeout, wait and interval a
    command takes is read with it: ``nan``, ``inf`` and a negative number are
    refused while parsing (exit status 2), never handed to a wait."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}")
        if not (value >= least if inclusive else value > least):
            bound = "at least" if inclusive else "more than"
            raise argparse.ArgumentTypeError(f"must be {bound} {least:g}, got {text}")
        return value

    return parse


def text(most: int) -> Callable[[str], str]:
    """An argparse type: free text (a reason, a note) of at most ``most``
    characters, on one line (no control characters): what a table prints."""

    def parse(given: str) -> str:
        if len(given) > most:
            raise argparse.ArgumentTypeError(f"at most {most} characters, got {len(given)}")
        if not given.isprintable():
            raise argparse.ArgumentTypeError(f"no control characters, got {given!r}")
        return given

    return parse


def http_url(text: str) -> str:
    """An argparse type: an ``http://`` or ``https://`` URL naming a host
    (what a ``/metrics`` is read from); ``file://`` and any other scheme, or
    none, refused (said with its password masked)."""
    try:
        parts = urllib.parse.urlsplit(text)
        web = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # (an IPv6 address's [ left open, a port that is no number)
        web = False
    if not web:
        raise argparse.ArgumentTypeError(
            f"expected an http:// or https:// URL, got {log.mask_secrets(text)!r}"
        )
    return text


#: The most characters a name a command is given may have (a project, a user,
#: a zone, a request id, a flavor, a provider): as long as a host's.
NAME_MAX = 255

#: An argparse type: a name (a project, a zone, a request id, ...) of at most
#: :data:`NAME_MAX` characters, no control characters.
name = text(NAME_MAX)


def uuid(given: str) -> str:
    """An argparse type: a UUID (an instance's, a group's), in its canonical
    form; anything else refused while parsing (exit status 2), quoted."""
    try:
        return str(uuidlib.UUID(given))
    except ValueError:
        shown = given if len(given) <= 64 else given[:64] + "..."
        raise argparse.ArgumentTypeError(f"expected a UUID, got {shown!r}") from None


def port(given: str) -> int:
    """An argparse type: a TCP port to listen on, 0 (any free one) to 65535."""
    value = whole(0)(given)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be at most 65535, got {value}")
    return value


class Finite(types.Float):
    """An oslo.config option type (a daemon's command-line option): a number
    between ``least`` and ``most``, finite (``nan`` and ``inf``, which
    oslo.config's bounds let through, refused while parsing: exit status 2)."""

    def __init__(self, least: float, most: float | None = None, type_name: str = "number"):
        super().__init__(min=least, max=most, type_name=type_name)

    def __call__(self, value: Any) -> float:
        number = super().__call__(value)
        if number is None or not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return float(number)


def seconds_opt(name: str, default: float, help: str, least: float = 0.0) -> cfg.Opt:
    """A daemon's option of seconds (a build time, an interval), at least
    ``least``: read as :func:`seconds` reads a command's."""
    return cfg.Opt(name, type=Finite(least, type_name="seconds"), default=default, help=help)


def fraction_opt(name: str, default: float, help: str) -> cfg.Opt:
    """A daemon's option of a probability, 0 to 1."""
    return cfg.Opt(
        name, type=Finite(0.0, 1.0, type_name="probability"), default=default, help=help
    )


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a pair (the value may itself hold ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def spec_arguments() -> list[Arg]:
    """``--extra-spec`` and ``--image-property``: what ``explain`` and
    ``conductor-stub boot`` add to a request (pairs, in ``extra_spec`` and
    ``image_property``)."""
    return [
        arg(
            option,
            metavar="KEY=VALUE",
            type=key_value,
            nargs="+",
            action="extend",
            default=[],
            help=what,
        )
        for option, what in (
            (
                "--extra-spec",
                "Add flavor extra specs, e.g. trait:HW_CPU_X86_AVX512F=required, "
                "resources:VCPU=4 or aggregate_instance_extra_specs:ssd=true (repeatable).",
            ),
            (
                "--image-property",
                "Image properties, e.g. hw_architecture=x86_64 or "
                "trait:CUSTOM_X=required (repeatable).",
            ),
        )
    ]


def with_defaults(opts: list[cfg.Opt]) -> list[cfg.Opt]:
    """Command-line options whose --help says their default (oslo.config's
    help shows only the text): ``(default: X)`` appended to each that has one."""
    for opt in opts:
        default = opt.default
        if default is None or default == [] or opt.help is None or "(default" in opt.help:
            continue
        shown = ",".join(map(str, default)) if isinstance(default, list) else default
        opt.help = f"{opt.help} (default: {shown})"
    return opts


def interrupted() -> int:
    """Leave at once, quietly, with :data:`EXIT_INTERRUPTED`: no traceback, and no
    wait for the threads a transport or a store left running."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_INTERRUPTED)


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (and not a
    socket of the command's that broke, which is a failure to show)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poll.poll(0))


def stdout_gone() -> int:
    """Standard output was closed under the command: point it at ``/dev/null``
    (what is left in its buffer goes nowhere) and return :data:`EXIT_BROKEN_PIPE`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind it (a test's capture)
        pass
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def run(
    prog: str,
    body: Callable[[], int | None],
    argv: Sequence[str] | None = None,
    failed: int = EXIT_FAILED,
) -> int:
    """Run a command's ``body`` and return its exit status, saying a known
    failure in one line (``prog: message``) and leaving quietly on Ctrl-C.

    Every console script's ``main`` is this. When standard output is closed
    under the command (``| head`` has read enough), it stops there and returns
    :data:`EXIT_BROKEN_PIPE` (141) without a word: Python's recipe
    (https://docs.python.org/3/library/signal.html#note-on-sigpipe), standard
    output pointed at ``/dev/null`` so that the interpreter's last flush of
    what is left in its buffer fails no more.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status = body() or 0
        sys.stdout.flush()  # the end of the output, written while we can still say so
        return status
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:
        if not stdout_closed():  # some other pipe or socket: not ours to hide
            raise
        return stdout_gone()
    except rpc.SEND_FAILURES as exc:  # a client given retries, whose broker went away
        if "--debug" in args or _debug():
            traceback.print_exc()
        reason = " ".join(str(exc).split()) or type(exc).__name__
        say(prog, f"the message broker stopped answering: {reason}")
        return failed
    except ONE_LINE_ERRORS as exc:
        if "--debug" in args or _debug():
            traceback.print_exc()
        message = getattr(exc, "message", None) or str(exc)
        say(prog, message.strip().splitlines()[0])
        return failed


def _debug() -> bool:
    try:
        return bool(conf_mod.CONF.debug)
    except (cfg.Error, ValueError):
        return False


def parse(
    argv: Sequence[str] | None, prog: str, description: str, **kwargs: Any
) -> cfg.ConfigOpts:
    """:func:`scheduler.conf.parse_args`, the log options it carries, and the
    transport driver's options checked as well as ours."""
    conf = conf_mod.parse_args(
        list(sys.argv[1:] if argv is None else argv), prog=prog, description=description, **kwargs
    )
    apply_log_options(conf.debug, conf.log_file)
    # The driver registers its options ([oslo_messaging_rabbit]) when a transport
    # is built (it connects only when used): build one, then check those too.
    rpc.get_transport(conf).cleanup()
    conf_mod.validate(conf)
    return conf


def exit_status(signum: int) -> int:
    """A daemon's exit status once stopped by ``signum``: 130 for Ctrl-C, 0 for SIGTERM."""
    return EXIT_INTERRUPTED if signum == signal.SIGINT else 0
