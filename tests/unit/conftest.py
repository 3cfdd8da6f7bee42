"""Fixtures every unit test module may ask for."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog
from oslo_config import cfg

from tests.unit.factories import private_conf


@pytest.fixture
def conf() -> Iterator[cfg.ConfigOpts]:
    """A private ConfigOpts with our options and no config file."""
    c = private_conf()
    yield c
    c.reset()


@pytest.fixture(autouse=True)
def logging_as_found(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test leaves logging as it found it, whatever it runs in-process (a
    command's ``main``, ``log.setup``): structlog's configuration and the root
    logger's handlers and level are put back after it, and loggers are not
    cached meanwhile. A cached logger keeps the processors of the setup it was
    first used under, so a later test's ``capture_logs`` would hear nothing
    from it; which test ran before which on a pytest-xdist worker would then
    decide whether a log assertion passes."""
    configure = structlog.configure

    def uncached(**settings: object) -> None:
        settings["cache_logger_on_first_use"] = False
        configure(**settings)  # type: ignore[arg-type]

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.setattr(structlog, "configure", uncached)
    yield
    configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
