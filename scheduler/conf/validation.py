"""Every option's value checked once, at start-up, and a value that cannot be
used named in one line: the option, its value (secrets masked) and its file."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from oslo_config import cfg

from scheduler.exceptions import ConfigInvalid


def _options(conf: cfg.ConfigOpts) -> Iterator[tuple[str | None, str]]:
    """(group, option) for every option registered on ``conf`` now."""
    for name in list(conf):
        try:
            value = conf[name]
        except cfg.NoSuchOptError:
            continue
        except ValueError:  # an option of [DEFAULT] whose value is bad
            yield None, name
            continue
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            for option in list(value):
                yield name, option
        else:
            yield None, name


_BAD_VALUE = re.compile(r"is not valid: (?P<reason>.*)$", re.S)


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files ``conf`` read, in the order read (a later one wins)."""
    files = list(conf.config_file or [])
    for directory in conf.config_dir or []:
        if os.path.isdir(directory):
            files.extend(
                os.path.join(directory, f)
                for f in sorted(os.listdir(directory))
                if f.endswith(".conf")
            )
    return files


def _raw(conf: cfg.ConfigOpts, group: str | None, name: str) -> tuple[str, str]:
    """The text an option was given in a config file, and that file (the last
    file that sets it wins, as oslo.config reads them)."""
    found = ("?", "the configuration")
    for path in config_files(conf):
        sections: dict[str, dict[str, list[str]]] = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue
        values = sections.get(group or "DEFAULT", {}).get(name)
        if values:
            found = (values[-1], path)
    return found


def config_invalid(
    conf: cfg.ConfigOpts, group: str | None, name: str, exc: Exception
) -> ConfigInvalid:
    """The one-line error for option ``[group] name`` whose value raised ``exc``."""
    from scheduler.log import mask_secrets

    text, source = _raw(conf, group, name)
    value = mask_secrets(text)
    match = _BAD_VALUE.search(str(exc))
    reason = mask_secrets((match.group("reason") if match else str(exc)).strip().splitlines()[0])
    return ConfigInvalid(
        option=f"[{group or 'DEFAULT'}] {name}", value=value, source=source, reason=reason
    )


def validate(conf: cfg.ConfigOpts) -> None:
    """Read every registered option once, so a value that cannot be used (not
    a number, out of its bounds, not one of its choices) stops the command
    before it serves or sends anything; then the URLs, which are only read when
    something connects.

    :raises ConfigInvalid: naming the option, its value and its file.
    """
    from scheduler.store import check_store_url

    for group, name in _options(conf):
        try:
            getattr(conf[group] if group else conf, name)
        except ValueError as exc:  # ConfigFileValueError is one
            raise config_invalid(conf, group, name, exc) from exc
    from scheduler.conf.priority import priority_classes

    priority_classes(conf)
    try:
        check_store_url(conf.redis.url)
    except ValueError as exc:
        raise config_invalid(conf, "redis", "url", exc) from exc
    import oslo_messaging

    try:
        oslo_messaging.TransportURL.parse(conf)  # registers transport_url, then reads it
    except oslo_messaging.InvalidTransportURL as exc:
        raise config_invalid(conf, None, "transport_url", exc) from exc
