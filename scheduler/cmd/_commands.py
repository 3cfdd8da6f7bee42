"""Commands declared once, and one output layer that prints what they return.

A command of ``scheduler-admin`` or ``conductor-stub`` is a :class:`Command`:
its name, a one-line help, a description that says what it does, its
arguments (:func:`arg`, their types from :mod:`scheduler.cmd._cli`'s
validators) and the function that runs it. :func:`add_commands` builds the
argparse sub-commands from those declarations (inside the CLI's
oslo.config ``SubCommandOpt``) and :func:`find` names the one asked for.

The function returns data, not text: an :class:`Output` (its exit status
with it), or a bare exit status when it prints nothing (a daemon, a page
server, a refusal already said). :func:`emit` prints an :class:`Output` in
the format asked for, as the OpenStack client does:

* ``-f table`` (the default): the human text, as the command lays it out;
* ``-f json``: one JSON document (``--json``, kept as a hidden alias);
* ``-f value``: bare values for scripts, one row per line, its cells
  separated by one space (an absent value written ``-``, a list joined by
  commas).

A command whose arguments already tell it how to print (``explain
--all-hosts`` needs JSON) reads the format from ``args.format``.

Why not cliff, which does all this: its import costs little (about 0.1 s of
CPU against about 1.0-1.4 s for ``scheduler-admin --help`` today), but it
brings its own application, command loader (stevedore) and shell (cmd2),
five more dependencies, while the commands here already ride oslo.config's
``SubCommandOpt`` (``--config-file``, every option group) and need only
this much of it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from oslo_config import cfg

from scheduler import render

#: The output formats every formatted command takes (``-f``), the default first.
FORMATS = ("table", "json", "value")
TABLE, JSON, VALUE = FORMATS


@dataclass(frozen=True)
class Arg:
    """One argument, as :meth:`argparse.ArgumentParser.add_argument` takes it."""

    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    """An argument of a :class:`Command`: the flags (or the positional name)
    and the options of :meth:`argparse.ArgumentParser.add_argument`."""
    return Arg(flags, options)


@dataclass(frozen=True)
class OneOf:
    """Arguments of which at most one may be given."""

    args: tuple[Arg, ...]


def one_of(*args: Arg) -> OneOf:
    return OneOf(args)


@dataclass(frozen=True)
class Output:
    """What a command returns: its data, shown in the format asked for.

    ``document`` is what ``-f json`` prints (``stream``, when given, the same
    document written a line at a time as it is produced, nothing kept),
    ``table`` the text of ``-f table`` (a string, or lines as they come),
    ``values`` the rows of ``-f value``; ``status`` the command's exit status.
    """

    document: Any = None
    table: str | Iterable[str] = ""
    values: Iterable[Sequence[Any]] = ()
    status: int = 0
    indent: int | None = None
    stream: Iterable[str] | None = None


#: What a command's function returns: an :class:`Output` to print, or only an
#: exit status (it printed what it had to, or nothing).
Result = Output | int


@dataclass(frozen=True)
class Command:
    """One command, declared once: what :func:`add_commands` builds its
    parser from and what :func:`find` runs.

    ``values`` says what ``-f value`` prints (one row per line); a command
    without it (``formatted=False``: a daemon, a page server) takes no ``-f``.
    A command with ``subcommands`` is a group (``host disable``, ...): its
    function is theirs, and its ``dest`` names the one given.
    """

    name: str
    help: str
    description: str
    arguments: Sequence[Arg | OneOf] = ()
    run: Callable[..., Result] | None = None
    values: str | None = None
    epilog: str | None = None
    raw: bool = False
    subcommands: Sequence[Command] = ()
    dest: str = "action"
    title: str = "actions"

    @property
    def formatted(self) -> bool:
        return self.values is not None


def choice(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse type: one of ``choices`` (any case), as the choice is
    spelled; anything else refused while parsing, with the choices listed."""
    by_case = {choice.casefold(): choice for choice in choices}

    def parse(given: str) -> str:
        found = by_case.get(given.casefold())
        if found is None:
            shown = given if len(given) <= 64 else given[:64] + "..."
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(choices)}, got {shown!r}"
            )
        return found

    return parse


def _add_arguments(parser: Any, arguments: Sequence[Arg | OneOf]) -> None:
    for argument in arguments:
        if isinstance(argument, OneOf):
            group = parser.add_mutually_exclusive_group()
            for one in argument.args:
                group.add_argument(*one.flags, **one.options)
        else:
            parser.add_argument(*argument.flags, **argument.options)


def _add_format(parser: argparse.ArgumentParser, values: str) -> None:
    parser.add_argument(
        "-f",
        "--format",
        type=choice(FORMATS),
        default=TABLE,
        metavar="{table,json,value}",
        help="How to print the result: table (default), the text for people; json, one "
        f"JSON document; value, bare values for scripts: {values}.",
    )
    # Kept for the scripts and tests written before -f: the same as -f json.
    parser.add_argument(
        "--json", dest="format", action="store_const", const=JSON, help=argparse.SUPPRESS
    )


def add_commands(subparsers: Any, commands: Sequence[Command]) -> None:
    """Each of ``commands`` as a sub-command of ``subparsers`` (a group's
    own commands under it, required)."""
    for command in commands:
        parser = subparsers.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter
            if command.raw
            else argparse.HelpFormatter,
        )
        _add_arguments(parser, command.arguments)
        if command.values is not None:
            _add_format(parser, command.values)
        if command.subcommands:
            inner = parser.add_subparsers(
                dest=command.dest, title=command.title, metavar=command.dest.upper()
            )
            inner.required = True
            add_commands(inner, command.subcommands)


def command_opt(commands: Sequence[Command]) -> cfg.SubCommandOpt:
    """The oslo.config option of a CLI's ``commands`` (its ``conf.command``)."""
    return cfg.SubCommandOpt(
        "command",
        title="Commands",
        handler=lambda subparsers: add_commands(subparsers, commands),
        help=" | ".join(names(commands)),
    )


def find(commands: Sequence[Command], args: Any) -> Command:
    """The command ``args`` were parsed for (``args.name``, then a group's
    ``dest``)."""
    by_name = {c.name: c for c in commands}
    command = by_name[args.name]
    while command.subcommands:
        command = {c.name: c for c in command.subcommands}[getattr(args, command.dest)]
    return command


def call(commands: Sequence[Command], args: Any, *inputs: Any) -> Result:
    """Run the command ``args`` were parsed for (:func:`find`) on ``inputs``
    (the configuration, and what the CLI opened for it)."""
    command = find(commands, args)
    if command.run is None:  # a group: argparse requires one of its commands
        raise LookupError(f"{command.name}: a group of commands, not one")
    return command.run(*inputs)


def names(commands: Sequence[Command], prefix: str = "") -> Iterator[str]:
    """Every runnable command's full name (``host disable``), in order."""
    for command in commands:
        full = f"{prefix}{command.name}"
        if command.subcommands:
            yield from names(command.subcommands, full + " ")
        else:
            yield full


def cell(value: Any) -> str:
    """One value as ``-f value`` writes it: ``-`` for none, a list joined by commas."""
    if value is None or value == "":
        return "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def lines(output: Output, fmt: str) -> Iterator[str]:
    """The lines ``output`` prints in format ``fmt``."""
    if fmt == JSON:
        if output.stream is not None:
            yield from output.stream
        else:
            yield json.dumps(output.document, indent=output.indent)
    elif fmt == VALUE:
        for row in output.values:
            yield " ".join(cell(v) for v in row)
    elif isinstance(output.table, str):
        yield output.table
    else:
        yield from output.table


def emit(result: Result, fmt: str | None) -> int:
    """Print ``result`` in format ``fmt`` (None: the table) and return its exit status."""
    if not isinstance(result, Output):
        return result
    for line in lines(result, fmt or TABLE):
        print(line)
    return result.status


def fmt_of(args: Any) -> str:
    """The format a command was asked for (the table when it takes none)."""
    return getattr(args, "format", None) or TABLE


def instance_output(store: Any, uuid: str, admin: bool = True) -> Output:
    """One instance as ``scheduler-admin instance show`` and ``conductor-stub
    show`` return it: the view of :func:`scheduler.render.instance_of`; its
    value, the uuid, state and host."""
    view = render.instance_of(store, uuid, admin=admin)
    return Output(
        document=view,
        indent=2,
        table=render.format_instance(view),
        values=[(view.get("uuid"), view.get("state"), view.get("host"))],
    )
