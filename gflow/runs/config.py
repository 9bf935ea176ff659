"""Configurations of runs: frozen dataclasses that validate themselves, carry their
command-line options in field metadata, and read and write JSON by field type.

Every command's configuration is a subclass of ``AbstractConfig`` (Equinox's
abstract/final pattern: the base says what a configuration can do, each command's
class is final). A field made with ``setting(default, help)`` is an option of the
command line; the command line builds its options from ``options()`` and never
lists them by hand. ``from_json`` reads what ``to_json`` wrote (a run's
``config.json``), checking every key and JSON type first, and a bad value anywhere
raises ``ConfigError``, which the command line prints as one line with exit
status 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import types
import typing
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any, ClassVar, TypeVar

C = TypeVar("C", bound="AbstractConfig")


class ConfigError(ValueError):
    """A bad setting: the message names the setting and the fix."""


def bad(name: str, why: str) -> typing.NoReturn:
    """Raise ``ConfigError("name: why")``: the one form of a validation error."""
    raise ConfigError(f"{name}: {why}")


def setting(
    default: Any,
    help: str | None = None,
    *,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    nested: tuple[str, ...] = (),
    choices: tuple[str, ...] | None = None,
) -> Any:
    """A configuration field, and (with ``help``) an option of its command.

    Args:
        default: the field's default (a frozen value: tuples, numbers, strings,
            None, another configuration).
        help: the option's help text; None: no option (the field is set from a
            file, by ``--resume`` or by the class's ``complete``).
        flag: the option's name (default ``--`` + the field name with dashes); for
            a bool field giving the flag sets the opposite of the default.
        aliases: further names of the same option (old spellings).
        nested: for a field that is itself a configuration, the names of its
            fields that are options of this command too.
        choices: the option's values, refused by the parser itself (else the
            configuration's ``check`` refuses a bad value).
    """
    metadata = {
        "help": help,
        "flag": flag,
        "aliases": aliases,
        "nested": nested,
        "choices": choices,
    }
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Option:
    """One command-line option of a configuration field (``AbstractConfig.options``).

    ``path`` is the field's name, dotted for a field of a nested configuration
    (``flow.seed``); ``parse`` turns the option's text into the field's value.
    """

    path: str
    flags: tuple[str, ...]
    help: str
    default: Any
    parse: Callable[[str], Any] | None  # None: a flag that sets ``const``
    const: Any = None
    #: The type of the field: ``float``, ``int``, ``str``, ``tuple[float]``,
    #: ``tuple[int]``, ``tuple[str]`` or ``bool``.
    kind: Any = None
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return self.flags[0]


def _numbers(kind):
    def parse(text: str):
        try:
            return tuple(kind(x) for x in text.split(","))
        except ValueError:
            what = "numbers" if kind is float else "integers"
            raise ValueError(f"expected comma-separated {what}, got {text!r}") from None

    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def _strings(text: str) -> tuple[str, ...]:
    return tuple(t for t in text.split(",") if t)


def _kind(hint):
    """An option's value type: ``hint`` less None, a tuple as ``tuple[item]``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _kind(inner)
    if origin is tuple:
        return tuple[args[0]]
    if hint in (int, float, str, bool):
        return hint
    raise TypeError(f"no command-line type for {hint!r}")


def _parser(kind) -> Callable[[str], Any]:
    """The function that reads an option's text as a value of ``kind``."""
    if typing.get_origin(kind) is tuple:
        (item,) = typing.get_args(kind)
        return _strings if item is str else _numbers(item)
    return kind


_KINDS = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
_LISTS = {
    float: "a list of numbers",
    int: "a list of integers",
    str: "a list of strings",
}


def _json_mismatch(value, hint) -> str | None:
    """None if ``value`` (from JSON) fits the annotation ``hint``, else what would."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        whats = [_json_mismatch(value, a) for a in args if a is not type(None)]
        return None if None in whats else " or ".join(whats)
    if origin is tuple:
        what = _LISTS.get(args[0], "a list")
        if not isinstance(value, (list, tuple)):
            return what
        ok = all(_json_mismatch(v, args[0]) is None for v in value)
        return None if ok else what
    if isinstance(hint, type) and issubclass(hint, AbstractConfig):
        return None if isinstance(value, dict) else "a JSON object of settings"
    if hint is bool:
        return None if isinstance(value, bool) else _KINDS[bool]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else _KINDS[int]
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else _KINDS[float]
    if hint is str:
        return None if isinstance(value, str) else _KINDS[str]
    return None  # a type this check does not know: the configuration validates it


def _from_json_value(value, hint):
    """A JSON value as the field type ``hint`` wants it (lists as tuples, nested
    configurations built)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and value is not None:
        (inner,) = [a for a in args if a is not type(None)]
        return _from_json_value(value, inner)
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if isinstance(hint, type) and issubclass(hint, AbstractConfig):
        return hint.from_json(value)
    return value


@dataclasses.dataclass(frozen=True)
class AbstractConfig:
    """The configuration of a command: every setting, validated at construction.

    Subclasses are frozen dataclasses whose fields are made with ``setting``;
    ``__post_init__`` calls ``check``, which raises ``ConfigError`` (via ``bad``)
    naming the field and the fix.
    """

    #: Fields whose value does not change what a run computes (where a file was
    #: read from, permissions): left out of ``fingerprint`` and of the comparison
    #: of a resumed run with its options.
    not_results: ClassVar[tuple[str, ...]] = ()
    #: (config.json key, field) of a configuration whose fields are themselves
    #: configurations, each written under its own key; empty: the settings are
    #: ``"config"``.
    sections: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The one compatibility rule of saved checkpoints: setting -> the value that
    #: runs saved before the setting existed (or before its default changed)
    #: computed with. A setting at that value is left out of a checkpoint's
    #: fingerprint (``gflow.runs.checkpoint.config_fingerprint``), so that such a
    #: run's pieces still resume.
    hashed_defaults: ClassVar[dict[str, Any]] = {}

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Raise ``ConfigError`` for a bad setting (a subclass's rules)."""

    @classmethod
    def complete(cls, settings: dict) -> None:
        """Set, in ``settings``, those derived from the others before construction
        (default: none)."""

    @classmethod
    def check_given(cls, given: AbstractSet[str]) -> None:
        """ConfigError for options that make no sense together (``given``: the
        dotted paths of the settings the user gave); default: none."""

    def document(self) -> Iterator[tuple[str, Any]]:
        """What config.json holds of the configuration, (key, JSON value) pairs:
        ``"config"`` and the settings, or one key per ``sections`` entry."""
        if not self.sections:
            yield "config", self.to_json()
        for key, name in self.sections:
            yield key, getattr(self, name).to_json()

    @classmethod
    def document_settings(cls, doc: dict) -> Any:
        """The settings in a config.json document: ``doc["config"]``, or the
        ``sections`` gathered (``"config"`` as it is, any other absent one at its
        defaults: a gflow before that section wrote none)."""
        if not cls.sections:
            return doc.get("config")
        return {
            name: doc.get(key) if key == "config" else doc.get(key) or {}
            for key, name in cls.sections
        }

    @classmethod
    def check_json(cls, data, source: str, prefix: str = "") -> None:
        """ConfigError naming the first unknown setting of ``data`` (a JSON object)
        or setting of the wrong JSON type; ``source`` says where it came from."""
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source} must hold a JSON object of settings, got "
                f"{json.dumps(data)[:40]}"
            )
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(
                f"{source} has unknown settings "
                f"{', '.join(prefix + k for k in unknown)}; known: "
                f"{', '.join(sorted(names))}"
            )
        for name, value in data.items():
            what = _json_mismatch(value, hints[name])
            if what is not None:
                raise ConfigError(
                    f"{source}: setting {prefix}{name} must be {what}, got "
                    f"{json.dumps(value)[:60]}"
                )
            hint = hints[name]
            if isinstance(hint, type) and issubclass(hint, AbstractConfig):
                hint.check_json(value, source, prefix=f"{prefix}{name}.")

    @classmethod
    def from_json(cls: type[C], data: Any, source: str = "config") -> C:
        """The configuration that ``to_json`` wrote as ``data`` (missing settings
        at their defaults); ConfigError for unknown keys, wrong JSON types and bad
        values."""
        cls.check_json(data, source)
        hints = typing.get_type_hints(cls)
        values = {k: _from_json_value(v, hints[k]) for k, v in data.items()}
        return cls.build(values)

    @classmethod
    def build(cls: type[C], settings: dict) -> C:
        """``cls(**settings)`` once ``complete`` has derived what it derives, every
        failure a ConfigError."""
        try:
            settings = dict(settings)
            cls.complete(settings)
            return cls(**settings)
        except ConfigError:
            raise
        except (TypeError, ValueError) as e:
            raise ConfigError(str(e)) from None

    def to_json(self) -> dict:
        """The settings as a JSON object (nested configurations as objects)."""
        return dataclasses.asdict(self)

    def results_text(self) -> str:
        """``to_json`` less the ``not_results`` settings, as sorted JSON text: what
        two runs must share to compute the same thing."""
        data = {k: v for k, v in self.to_json().items() if k not in self.not_results}
        return json.dumps(data, sort_keys=True, default=str)

    def fingerprint(self) -> str:
        """A hash of the settings that determine the results (``results_text``)."""
        return hashlib.sha256(self.results_text().encode()).hexdigest()[:16]

    def differences(self, other: AbstractConfig) -> list[str]:
        """The dotted names of the result settings in which ``other`` differs."""
        mine = dict(_leaves(json.loads(self.results_text())))
        theirs = dict(_leaves(json.loads(other.results_text())))
        return sorted(
            k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)
        )

    @classmethod
    def options(cls, prefix: str = "") -> list[Option]:
        """The command-line options of the fields made with a ``help``, nested
        configurations' chosen fields included."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            meta = f.metadata
            hint = hints[f.name]
            if meta.get("nested"):  # "*": every option of the nested configuration
                for opt in hint.options(prefix=f"{prefix}{f.name}."):
                    name = opt.path.rsplit(".", 1)[-1]
                    if name in meta["nested"] or "*" in meta["nested"]:
                        out.append(opt)
                continue
            if not meta.get("help"):
                continue
            flag = meta.get("flag") or "--" + f.name.replace("_", "-")
            flags = (flag, *meta.get("aliases", ()))
            path = prefix + f.name
            kind = _kind(hint)
            const = not f.default if kind is bool else None
            parse = None if kind is bool else _parser(kind)
            choices = meta.get("choices")
            out.append(
                Option(
                    path, flags, meta["help"], f.default, parse, const, kind, choices
                )
            )
        return out

    @classmethod
    def with_options(cls: type[C], base: dict, given: dict[str, Any]) -> C:
        """The configuration of ``base`` (JSON-like settings) with the ``given``
        option values (dotted path -> value) set on top."""
        settings = json.loads(json.dumps(base, default=list))
        for path, value in given.items():
            *outer, name = path.split(".")
            place = settings
            for part in outer:
                place = place.setdefault(part, {})
            place[name] = list(value) if isinstance(value, tuple) else value
        return cls.from_json(settings)

    def setting_at(self, path: str):
        """The value of the setting at the dotted ``path`` (not ``value``: a
        configuration may have a setting of that name)."""
        out = self
        for part in path.split("."):
            out = getattr(out, part)
        return out


def _leaves(data: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every value in nested JSON objects."""
    for k, v in data.items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield prefix + k, v


def positive(name: str, value: float) -> None:
    """ConfigError unless ``value`` is finite and > 0."""
    if not (value > 0 and math.isfinite(value)):
        bad(name, f"must be > 0 and finite, got {value}")


def non_negative(name: str, value: float) -> None:
    """ConfigError unless ``value`` is finite and >= 0."""
    if not (value >= 0 and math.isfinite(value)):
        bad(name, f"must be >= 0 and finite, got {value}")


def at_least(name: str, value: int, low: int) -> None:
    """ConfigError unless ``value`` >= ``low``."""
    if value < low:
        bad(name, f"must be >= {low}, got {value}")


#: solvers a flow cannot use: its steps are adaptive and these have no embedded
#: error estimate (Diffrax's Euler raises inside the solve)
NO_ERROR_ESTIMATE = frozenset({"euler"})


def check_flow_solver(name: str) -> None:
    """ConfigError for a solver whose steps cannot adapt (``NO_ERROR_ESTIMATE``)."""
    if name in NO_ERROR_ESTIMATE:
        bad(
            "solver",
            f"{name} has no error estimate, which the flow's adaptive steps need; "
            "use heun (Euler with an error estimate), tsit5 or the default auto",
        )


def check_seed(seed: int) -> None:
    """ConfigError unless ``seed`` is a PRNG seed every run can use: [0, 2**32)."""
    if not 0 <= seed < 2**32:
        bad("seed", f"must be an integer in [0, 2**32), got {seed}")
