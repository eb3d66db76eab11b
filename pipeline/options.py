"""Stage options declared once: type, default, help, flag name and whether a field shapes output.

Every stage's options are one dataclass (or pydantic model) in `pipeline/`. A field the user may
set carries an `Opt` in its `Annotated` type; everything else about it is read from that one
declaration: the command-line flag (skillsft/options_cli.py), the Luigi parameter (the whole
object as JSON, tasks/options_param.py), the fingerprint (`shaping_values`: only fields that
shape the output) and the manifest (`declared_values`). Adding an option is adding a field.

A field whose type is itself an options class is walked into (DistillOptions.render ->
RenderOptions.history), so a flag shared by two stages (`--history`) is declared once.

This module knows neither argparse nor Luigi: `Opt.kind` names a value check the CLI applies.
"""

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from pydantic import BaseModel


@dataclass(frozen=True)
class Opt:
    """What the outside world sees of one option field."""

    help: str
    name: str = ""  # the flag and fingerprint name (`--top-k-skills`); default: the field's
    shaping: bool = True  # changes the stage's output: in the fingerprint
    kind: str = ""  # a value check the CLI applies ("positive_int", "share", ...); "" = by type
    choices: tuple[str, ...] = ()
    metavar: str = ""
    # The flag's own spelling when it is not the name's: a repeatable flag named in the
    # singular (`--source-range`), an opt-out switch of a True default (`--actions-only-history`).
    flag: str = ""
    # An option added after work dirs existed: while it holds its default it is left out of
    # the fingerprint and the task id, so those of existing work dirs stay what they were (a
    # re-run recomputes nothing); any other value counts like every shaping field's.
    omit_at_default: bool = False


@dataclass(frozen=True)
class Nested:
    """On a field holding another options class: which of its fields are *this* stage's own
    (offered as its flags, in its fingerprint); the others shaped an upstream stage's output
    and reach this one through it. Empty: all of them."""

    only: tuple[str, ...] = ()


@dataclass(frozen=True)
class Declared:
    """One user-settable field, found by walking an options class."""

    path: tuple[str, ...]  # attribute path from the root options object
    opt: Opt
    type: Any
    default: Any
    shaping: bool  # the field's own `shaping`, and the stage's own (see `Nested`)
    own: bool = True  # offered as a flag of the stage (see `Nested`)

    @property
    def name(self) -> str:
        return self.opt.name or self.path[-1]


def _annotations(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _fields(cls: type) -> list[tuple[str, Any]]:
    """(name, default) of a dataclass or pydantic model, in declaration order."""
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return [(name, info.get_default(call_default_factory=True))
                for name, info in cls.model_fields.items()]
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out.append((f.name, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            out.append((f.name, f.default_factory()))
        else:
            out.append((f.name, dataclasses.MISSING))
    return out


def _split(annotation: Any) -> tuple[Any, list[Any]]:
    """The bare type and the metadata of an `Annotated[...]` annotation."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *extras = typing.get_args(annotation)
        return base, list(extras)
    return annotation, []


def _optional_inner(tp: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def is_options_class(tp: Any) -> bool:
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, BaseModel))


def declared(cls: type) -> list[Declared]:
    """Every user-settable field of an options class, nested classes walked into."""
    return list(_declared(cls, (), None))


# A class's fields do not change while the process runs, and Luigi serialises an options
# object (for task ids, reprs, the scheduler) thousands of times per build: walk each once.
@functools.cache
def _declared(cls: type, _path: tuple[str, ...], _only: tuple[str, ...] | None
              ) -> tuple[Declared, ...]:
    hints = _annotations(cls)
    found: list[Declared] = []
    for name, default in _fields(cls):
        base, extras = _split(hints.get(name, Any))
        opt = next((e for e in extras if isinstance(e, Opt)), None)
        nested = next((e for e in extras if isinstance(e, Nested)), None)
        inner = _optional_inner(base)
        if opt is not None:
            own = _only is None or (opt.name or name) in _only
            found.append(Declared((*_path, name), opt, inner, default, opt.shaping and own, own))
        elif is_options_class(inner):
            narrowed = nested.only if nested and nested.only else _only
            found.extend(_declared(inner, (*_path, name), narrowed))
    return tuple(found)


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = getattr(obj, part) if obj is not None else None
    return obj


def _active(obj: Any, path: tuple[str, ...]) -> bool:
    """False when an enclosing nested object says its fields do not count (`shapes_output`)."""
    for depth in range(1, len(path)):
        holder = _get(obj, path[:depth])
        check = getattr(holder, "shapes_output", None)
        if callable(check) and not check():
            return False
    return True


def as_text(value: Any) -> str:
    """A value as the fingerprint spells it (Luigi's own serialisation of the old parameters,
    so default fingerprints did not move when the options became typed)."""
    if isinstance(value, bool | int | float | str):
        return str(value)
    if isinstance(value, tuple | list):  # items with a text form (`parse`) as that text
        return json.dumps([str(v) if hasattr(v, "parse") else to_jsonable(v) for v in value])
    return str(value)


def _omitted(obj: Any, d: Declared) -> bool:
    return d.opt.omit_at_default and _get(obj, d.path) == d.default


def shaping_values(obj: Any) -> dict[str, str]:
    """The shaping fields of an options object, by option name, for a fingerprint."""
    return {d.name: as_text(_get(obj, d.path)) for d in declared(type(obj))
            if d.shaping and _active(obj, d.path) and not _omitted(obj, d)}


def identity_jsonable(obj: Any) -> Any:
    """`to_jsonable(obj)` without the `omit_at_default` fields that hold their default: the
    form an options object takes in a task id (read back, they take the default again)."""
    data = to_jsonable(obj)
    for d in declared(type(obj)):
        if _omitted(obj, d):
            holder = data
            for part in d.path[:-1]:
                holder = holder.get(part) if isinstance(holder, dict) else None
            if isinstance(holder, dict):
                holder.pop(d.path[-1], None)
    return data


def declared_values(obj: Any) -> dict[str, Any]:
    """Every user-settable field of an options object, by option name, for a manifest."""
    return {d.name: to_jsonable(_get(obj, d.path)) for d in declared(type(obj))}


def from_values(cls: type, values: Mapping[str, Any], base: Any = None) -> Any:
    """An options object from `{option name: value}` (flags); what is not given keeps `base`'s
    value (or the default). A string given for a class with `parse` (CountRange) is parsed."""
    return _build(cls, values, base, ())


def _build(cls: type, values: Mapping[str, Any], base: Any, path: tuple[str, ...]) -> Any:
    hints = _annotations(cls)
    kwargs: dict[str, Any] = {}
    for name, default in _fields(cls):
        current = getattr(base, name) if base is not None else default
        tp, extras = _split(hints.get(name, Any))
        inner = _optional_inner(tp)
        opt = next((e for e in extras if isinstance(e, Opt)), None)
        if opt is not None:
            key = opt.name or name
            if key in values and values[key] is not None:
                current = _coerce(inner, values[key])
        elif is_options_class(inner):
            current = _build(inner, values, current, (*path, name))
        if current is not dataclasses.MISSING:
            kwargs[name] = current
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    if isinstance(value, str) and tp is not str and hasattr(tp, "parse"):
        return tp.parse(value)
    if typing.get_origin(tp) is tuple and isinstance(value, list):
        return tuple(value)
    return value


# -- JSON, for the Luigi parameter that carries an options object -------------------------------
def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def from_jsonable(tp: Any, data: Any) -> Any:
    """The inverse of `to_jsonable` for a value of type `tp`."""
    tp, _ = _split(tp)
    if data is None:
        return None
    tp = _optional_inner(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.model_validate(data)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _annotations(tp)
        return tp(**{k: from_jsonable(hints.get(k, Any), v) for k, v in data.items()})
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return tuple(from_jsonable(item, v) for v in data)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [from_jsonable(item, v) for v in data]
    if origin is dict:
        _, item = typing.get_args(tp) or (Any, Any)
        return {k: from_jsonable(item, v) for k, v in data.items()}
    if tp is float and isinstance(data, int):
        return float(data)
    return data

