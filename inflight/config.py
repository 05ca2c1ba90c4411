"""Flags, environment and defaults → one validated settings object per binary.

Each subcommand (``emulator``, ``router``, ``scaler``, ``up``) declares one pydantic-settings
model (a subclass of :class:`Settings`) whose fields are its flags: field ``slots_per_endpoint``
is flag ``--slots-per-endpoint`` and variable ``INFLIGHT_ROUTER_SLOTS_PER_ENDPOINT``. This
module turns such a model into argparse flags, reads the environment, validates once, and
says where every value came from:

* precedence: a flag given on the command line beats ``INFLIGHT_<SUBCOMMAND>_<FLAG>``, which
  beats the field's default;
* every value, flag or variable, goes through the model's pydantic validation (argparse only
  converts a flag's text with the same pydantic type, so ``--port x`` and ``…_PORT=x`` fail
  alike), and every error, from argparse or pydantic, reads
  ``inflight router: error: --slots-per-endpoint (or INFLIGHT_ROUTER_SLOTS_PER_ENDPOINT):
  must be an integer ≥ 1, got "x"`` (exit code 2), naming the variable first when the bad
  value came from the environment; a group of exclusive flags that argparse requires (the
  router's endpoint source) is required there only while none of its variables is set;
* environment syntax: booleans take true/false/1/0 (pydantic also reads yes/no/on/off);
  every list (a multi-value or repeatable flag, or a URL list such as ``--endpoints``)
  takes a comma-separated list or a JSON array (:func:`split_list`); an empty value is a
  value (``INFLIGHT_ROUTER_ENDPOINTS=`` is zero endpoints, like ``--endpoints=``);
* a variable with the subcommand's prefix that names no flag is an error, not a warning: a
  misspelt ConfigMap key would otherwise leave the default silently in force, and these
  binaries run under supervisors where a warning on stderr is read by nobody. Kubernetes
  also writes ``<SERVICE>_PORT=tcp://…`` variables for every Service (service links), and
  Service ``inflight-router`` yields ``INFLIGHT_ROUTER_PORT``: the manifests turn
  service links off (``enableServiceLinks: false``), and the error says so when it sees one.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import pydantic
from pydantic import TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

#: Namespace attribute holding the dests of the flags given on the command line.
GIVEN = "_inflight_flags_given"
PRINT_CONFIG = "print_config"

S = TypeVar("S", bound="Settings")

_SERVICE_LINK = "a Kubernetes service link? set enableServiceLinks: false in the pod spec"


class ConfigError(ValueError):
    """A bad flag, variable or combination; the message names the flag and its variable."""


class FieldError(ValueError):
    """Raised by a model's validators: ``field`` is at fault (named by the formatter);
    None when the problem is a combination the message names itself."""

    def __init__(self, field: str | None, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Cli:
    """How a field appears on the command line, beyond its name, type and default."""

    help: str
    metavar: str | None = None
    nargs: str | None = None  # "+": several values after one flag (a list field)
    repeat: bool = False  # a list field given as a repeatable flag (argparse "append")
    group: str | None = None  # fields in one group are mutually exclusive flags


class Settings(BaseSettings):
    """Base of the per-binary models: frozen, case-insensitive env names, no extras."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", case_sensitive=False)

    #: The subcommand: prefix ``INFLIGHT_<SUBCOMMAND>_`` and the error prefix.
    SUBCOMMAND: ClassVar[str]
    #: Mutually exclusive groups that must have one member set (flag or env).
    REQUIRED_GROUPS: ClassVar[tuple[str, ...]] = ()

    _sources: dict[str, str] = pydantic.PrivateAttr(default_factory=dict)

    @classmethod
    def env_prefix(cls) -> str:
        return f"INFLIGHT_{cls.SUBCOMMAND.upper()}_"

    @classmethod
    def env_var(cls, field: str) -> str:
        return cls.env_prefix() + field.upper()

    @classmethod
    def flag(cls, field: str) -> str:
        return "--" + field.replace("_", "-")

    @classmethod
    def named(cls, field: str) -> str:
        """``--flag (or VAR)``: how messages name a field wherever its value came from."""
        return f"{cls.flag(field)} (or {cls.env_var(field)})"

    @property
    def sources(self) -> Mapping[str, str]:
        """Where each field's value came from: ``flag --x``, ``env VAR`` or ``default``."""
        return dict(self._sources)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # The env prefix follows from SUBCOMMAND (one place to name it); pydantic-settings
        # reads model_config when it builds an instance, so setting it here is enough.
        super().__pydantic_init_subclass__(**kwargs)
        if "SUBCOMMAND" in cls.__dict__:
            cls.model_config = {**cls.model_config, "env_prefix": cls.env_prefix()}


# --- the command line --------------------------------------------------------------------


def _mark(namespace: argparse.Namespace, dest: str) -> None:
    given = getattr(namespace, GIVEN, None)
    if given is None:
        given = set()
        setattr(namespace, GIVEN, given)
    given.add(dest)


class _Store(argparse._StoreAction):
    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        _mark(namespace, self.dest)


class _Append(argparse._AppendAction):
    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        _mark(namespace, self.dest)


class _StoreTrue(argparse._StoreTrueAction):
    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        super().__call__(parser, namespace, values, option)
        _mark(namespace, self.dest)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """``(T, optional)`` for ``T | None``; T as is otherwise."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def describe(info: FieldInfo) -> str:
    """What a field accepts, in words: ``an integer ≥ 1``, ``one of a|b``."""
    base, _optional = _unwrap(info.annotation)
    if typing.get_origin(base) is Literal:
        return "one of " + "|".join(str(a) for a in typing.get_args(base))
    words = {int: "an integer", float: "a number", bool: "true/false/1/0", Path: "a path"}
    text = words.get(base, "a list" if typing.get_origin(base) is list else "text")
    bounds = []
    for meta in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                bounds.append(
                    f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}"
                )
    if bounds:
        text += " " + " and ".join(bounds)
    return text


def _converter(info: FieldInfo) -> Any:
    """argparse ``type=``: the field's own pydantic type, without its bounds (those are
    checked with everything else in the model, so the error can name the variable too)."""
    base, _optional = _unwrap(info.annotation)
    if typing.get_origin(base) is list:
        base = typing.get_args(base)[0]
    if base is str or typing.get_origin(base) is Literal:
        return None  # argparse's choices= handles Literal
    adapter: TypeAdapter[Any] = TypeAdapter(base)
    kind = describe(FieldInfo(annotation=base))

    def convert(text: str) -> Any:
        try:
            return adapter.validate_python(text)
        except pydantic.ValidationError:
            raise argparse.ArgumentTypeError(f"must be {kind}, got {json.dumps(text)}") from None

    convert.__name__ = kind  # argparse names the type in some messages
    return convert


def add_flags(parser: argparse.ArgumentParser, model: type[Settings]) -> None:
    """One flag per field of ``model`` (defaults shown by the model), plus
    ``--print-config``; argparse errors are reworded in this module's style."""
    groups: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        cli = next((m for m in info.metadata if isinstance(m, Cli)), None)
        if cli is None:
            continue
        target: Any = parser
        if cli.group is not None:
            if cli.group not in groups:
                # Required on the command line only while no variable of the group is set.
                required = cli.group in model.REQUIRED_GROUPS and not any(
                    model.env_var(n) in {v.upper() for v in os.environ}
                    for n, i in model.model_fields.items()
                    if _cli(i, "group") == cli.group
                )
                groups[cli.group] = parser.add_mutually_exclusive_group(required=required)
            target = groups[cli.group]
        base, _optional = _unwrap(info.annotation)
        default = info.get_default(call_default_factory=True)
        kwargs: dict[str, Any] = {"dest": name, "default": default, "help": cli.help}
        if base is bool:
            target.add_argument(model.flag(name), action=_StoreTrue, **kwargs)
            continue
        if typing.get_origin(base) is Literal:
            kwargs["choices"] = typing.get_args(base)
        if cli.metavar is not None:
            kwargs["metavar"] = cli.metavar
        if cli.nargs is not None:
            kwargs["nargs"] = cli.nargs
        action = _Append if cli.repeat else _Store
        target.add_argument(model.flag(name), action=action, type=_converter(info), **kwargs)
    parser.add_argument(
        "--print-config",
        dest=PRINT_CONFIG,
        action="store_true",
        help="print the effective configuration and where each value came from "
        f"(flag, {model.env_prefix()}* variable or default), then exit",
    )
    parser.error = types.MethodType(_argparse_error(model), parser)  # type: ignore[method-assign]


def _argparse_error(model: type[Settings]) -> Any:
    """argparse's ``error``, with ``argument --x: problem`` written as ``--x (or VAR): problem``
    (an instance override: subparsers are made by ``add_parser``, not by a class we pick)."""
    flags = {model.flag(name): name for name in model.model_fields}

    def error(parser: argparse.ArgumentParser, message: str) -> typing.NoReturn:
        if message.startswith("one of the arguments "):  # a required group
            flagged = message[len("one of the arguments ") :].split(" is required")[0]
            names = [flags[f] for f in flagged.split() if f in flags]
            message = "give one of " + ", ".join(model.named(n) for n in names)
        elif message.startswith("argument "):
            head, _, problem = message[len("argument ") :].partition(": ")
            names = [flags[f] for f in head.split("/") if f in flags]
            if len(names) == 1:
                message = f"{model.named(names[0])}: {problem}"
        parser.print_usage(sys.stderr)
        parser.exit(2, f"inflight {model.SUBCOMMAND}: error: {message}\n")

    return error


# --- flags + environment → the model --------------------------------------------------------


def given_flags(args: argparse.Namespace) -> set[str]:
    """The dests of the flags given on the command line (not defaults)."""
    return set(getattr(args, GIVEN, ()))


def _env_for(model: type[Settings], environ: Mapping[str, str]) -> dict[str, str]:
    """``{field: VAR}`` for the model's variables that are set; ConfigError on an unknown
    ``INFLIGHT_<SUBCOMMAND>_*`` variable (see the module docstring for why)."""
    prefix = model.env_prefix()
    found: dict[str, str] = {}
    for var in environ:
        if not var.upper().startswith(prefix):
            continue
        field = var[len(prefix) :].lower()
        if field in model.model_fields:
            found[field] = var
            continue
        hint = ""
        if "_SERVICE_" in var.upper() or "_PORT_" in var.upper():
            hint = f" ({_SERVICE_LINK})"
        close = difflib.get_close_matches(
            var.upper(), [model.env_var(f) for f in model.model_fields], 1
        )
        if close:
            hint += f"; did you mean {close[0]}?"
        raise ConfigError(
            f"{var}: no such setting{hint} (`inflight {model.SUBCOMMAND} --print-config` "
            "lists them: every flag, as a variable)"
        )
    return found


def _value_problem(model: type[Settings], error: Mapping[str, Any]) -> tuple[str | None, str]:
    """``(field, problem)`` of one pydantic error."""
    loc = error.get("loc") or ()
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, FieldError):
        return cause.field, cause.problem
    field = str(loc[0]) if loc and str(loc[0]) in model.model_fields else None
    if error.get("type") == "value_error":
        message = str(cause) if cause is not None else str(error.get("msg"))
        return field, message
    if field is None:
        return None, str(error.get("msg"))
    got = error.get("input")
    shown = json.dumps(got) if isinstance(got, str) else repr(got)
    problem = f"must be {describe(model.model_fields[field])}, got {shown}"
    if isinstance(got, str) and got.startswith("tcp://"):
        problem += f" ({_SERVICE_LINK})"
    return field, problem


def _format(model: type[Settings], field: str | None, problem: str, sources: dict[str, str]) -> str:
    if field is None:
        return problem
    source = sources.get(field, "default")
    if source.startswith("env "):
        return f"{model.env_var(field)} (or {model.flag(field)}): {problem}"
    return f"{model.named(field)}: {problem}"


def load(model: type[S], args: argparse.Namespace) -> S:
    """The model from the flags given in ``args`` and the ``INFLIGHT_<SUB>_*`` variables of
    the process environment (read by pydantic-settings; tests set them with monkeypatch).

    Raises ConfigError naming the flag and variable at fault.
    """
    given = given_flags(args)
    flags = {name: getattr(args, name) for name in model.model_fields if name in given}
    env_vars = _env_for(model, os.environ)
    sources = {name: "default" for name in model.model_fields}
    sources.update({name: f"env {var}" for name, var in env_vars.items()})
    sources.update({name: f"flag {model.flag(name)}" for name in flags})
    for group in model.REQUIRED_GROUPS:
        members = [n for n, i in model.model_fields.items() if _cli(i, "group") == group]
        if not any(sources[n] != "default" for n in members):
            raise ConfigError("give one of " + ", ".join(model.named(n) for n in members))
    try:
        settings = model(**flags)
    except pydantic.ValidationError as exc:
        problems = [_value_problem(model, e) for e in exc.errors()]
        raise ConfigError(
            "; ".join(_format(model, field, problem, sources) for field, problem in problems)
        ) from None
    except SettingsError as exc:  # a variable pydantic-settings could not decode
        raise ConfigError(str(exc)) from None
    settings._sources = sources
    return settings


def _cli(info: FieldInfo, attr: str) -> Any:
    cli = next((m for m in info.metadata if isinstance(m, Cli)), None)
    return None if cli is None else getattr(cli, attr)


def split_list(value: Any) -> Any:
    """An env list: a JSON array (``["a", "b"]``) or comma-separated text (``a,b``)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not a JSON array ({exc}), got {value!r}") from None
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


# --- --print-config ---------------------------------------------------------------------------


def wants_print(args: argparse.Namespace) -> bool:
    return bool(getattr(args, PRINT_CONFIG, False))


def render(settings: Settings) -> str:
    """One line a field: ``--flag value  # flag --flag | env VAR | default``."""
    rows = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        shown = json.dumps(str(value) if isinstance(value, Path) else value)
        rows.append((type(settings).flag(name), shown, settings.sources.get(name, "default")))
    width = max(len(flag) + len(shown) for flag, shown, _s in rows) + 2
    lines = [f"# inflight {settings.SUBCOMMAND}: effective configuration (flag > env > default)"]
    lines += [f"{flag} {shown}".ljust(width) + f"  # {source}" for flag, shown, source in rows]
    return "\n".join(lines)


def print_config(settings: Settings) -> int:
    print(render(settings), flush=True)
    return 0


def report(model: type[Settings], exc: ConfigError) -> int:
    """Print the error as every subcommand does and return argparse's exit code, 2."""
    print(f"inflight {model.SUBCOMMAND}: error: {exc}", file=sys.stderr)
    return 2
