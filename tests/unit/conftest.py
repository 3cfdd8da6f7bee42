"""Fixtures every unit test module may ask for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from oslo_config import cfg

from tests.unit.factories import private_conf


@pytest.fixture
def conf() -> Iterator[cfg.ConfigOpts]:
    """A private ConfigOpts with our options and no config file."""
    c = private_conf()
    yield c
    c.reset()
