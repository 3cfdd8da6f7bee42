"""The errors an endpoint method expects, sent back to the caller typed and
without the worker's traceback."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from oslo_messaging.rpc.dispatcher import ExpectedException

from scheduler.log import masked

_Method = TypeVar("_Method", bound=Callable[..., Any])


def expected_exceptions(*exceptions: type[Exception]) -> Callable[[_Method], _Method]:
    """oslo.messaging's ``expected_exceptions`` for an endpoint method, without
    the traceback: an expected error reaches the caller as its type, message
    and arguments only.

    oslo.messaging replies with the ``exc_info`` that its ``ExpectedException``
    captured, formatted whole (``serialize_remote_exception``: every frame's
    file, line and source, and every chained exception's). Here that
    ``exc_info`` carries no traceback and the error no chained cause, so the
    reply's ``tb`` is the one line ``module.Class: message``; the caller still gets
    the error rebuilt as its own type (:data:`ALLOWED_EXMODS`). Anything else
    the method raises propagates as it is: the RPC server logs it with its
    traceback (and the endpoint's own error policy decides what it says).
    """

    def outer(method: _Method) -> _Method:
        @functools.wraps(method)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except exceptions as exc:
                raise _expected(exc) from None

        return inner  # type: ignore[return-value]

    return outer


def _expected(exc: Exception) -> ExpectedException:
    """``exc`` wrapped for the RPC server, stripped of its traceback and causes,
    and masked (:func:`scheduler.log.masked`: its arguments, message and the
    keyword arguments the caller rebuilds it from), so no secret a request or
    an error's text held goes back to the caller."""
    exc.args = masked(exc.args)
    for name in ("message", "kwargs"):
        if name in vars(exc):
            setattr(exc, name, masked(vars(exc)[name]))
    exc.__cause__ = exc.__context__ = None
    exc.__suppress_context__ = True
    wrapped = ExpectedException()
    wrapped.exc_info = (type(exc), exc.with_traceback(None), None)
    return wrapped
