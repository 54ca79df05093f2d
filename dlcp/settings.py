"""Typed settings: the base of every settings model, and validation errors as one line.

Each layer declares its own settings with pydantic (`dlcp/wire/tagging.py` TaggingConfig,
`dlcp/transport/api.py` TransportSettings, `dlcp/comm/settings.py` CommSettings,
`dlcp/workloads/settings.py` TrainingSettings, `dlcp/network/switch_runtime.py`
SwitchSettings); the experiment config and the agent configs (`dlcp/experiment/`) are composed
from them. So a key, its type, default, bounds and meaning are written once, and the reference
table in docs/experiments.md is generated from the same classes.

Values that name an extension (a scheduler, a collective, a fill rule) come from a registry
(dlcp/registry.py): `registry_name(REGISTRY)` is the type of such a key, and a `SectionedSettings`
model holds one options section per registered entry that has options (`[comm.dear]`). Both look
the registry up when a value is validated, so an entry registered in its own module is accepted,
checked and documented without an edit here.

A bad value raises ConfigError with one line naming the key (`dlcp.loss_budget: 1.5 is not a
fraction in 0..1`): pydantic's ValidationError is translated here, its first error only.
"""

from __future__ import annotations

import ipaddress
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from dlcp.registry import Registry


class ConfigError(ValueError):
    """A config problem, as one line naming the key. `key` and `what`, when set, say the same in
    parts: the key relative to the model that found the problem (an enclosing model puts its own
    path in front) and what is wrong with it."""

    def __init__(self, line: str, key: str | None = None, what: str | None = None):
        super().__init__(line)
        self.key, self.what = key, what


class BadValue(ConfigError):
    """Raised inside a validator: `key` (dotted, relative to the model that raises) and what is wrong."""

    def __init__(self, key: str, what: str):
        super().__init__(f"{key}: {what}", key, what)


@dataclass(frozen=True)
class Named:
    """Annotated metadata: what the values of a bounded type are called, for error messages."""

    noun: str


@dataclass(frozen=True)
class RegistryValues:
    """Annotated metadata: the registry whose names a key takes (for errors and the docs)."""

    registry: Registry


def registry_name(registry: Registry) -> Any:
    """The type of a key whose value is one of `registry`'s names, looked up when a value is
    validated ("'x' is not one of a, b, c" otherwise)."""
    return Annotated[str, AfterValidator(registry.check), RegistryValues(registry)]


def _int_key(v):
    """Table keys arrive as strings from TOML and JSON ("3" = 3)."""
    return int(v) if isinstance(v, str) and v.isdigit() else v


def _ipv4(v: str) -> str:
    try:
        ipaddress.IPv4Address(v)
    except ValueError:
        raise ValueError(f"{v!r} is not an IPv4 address") from None
    return v


Fraction = Annotated[float, Field(ge=0, le=1), Named("a fraction")]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
Port = Annotated[int, Field(ge=1, le=65535), Named("a port number")]
IntKey = BeforeValidator(_int_key)


class Settings(BaseModel):
    """Strict (TOML's true is not 1, "1%" is not a number), unknown keys rejected, immutable,
    defaults checked like values. `section` prefixes the keys in errors of a direct construction
    (`TransportConfig(loss_budget=2)` -> `dlcp.loss_budget: ...`)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
    section: ClassVar[str] = ""

    def __init__(self, /, **data: Any):
        # pydantic validates nested models through this too (a custom __init__), so every level
        # translates its own errors and the enclosing level puts its path in front
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise config_error(e, type(self)) from None

    @classmethod
    def parse(cls, data: Any):
        """Validate a plain value (a dict from TOML or JSON); raises ConfigError."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise config_error(e, cls) from None

    @classmethod
    def known_keys(cls) -> list[str]:
        """The keys a value of this model may have (an unknown key's error lists them)."""
        return list(cls.model_fields)

    def replace(self, **changes: Any):
        """A copy with `changes`, validated like a new object."""
        current = {k: getattr(self, k) for k in type(self).model_fields}
        return type(self)(**{**current, **(self.__pydantic_extra__ or {}), **changes})

    def project(self, cls: type[Settings], **extra: Any):
        """A `cls` built from this object's fields of the same names, plus `extra` (a layer's
        settings out of a composed section)."""
        mine = type(self).model_fields
        return cls(**{**{k: getattr(self, k) for k in cls.model_fields if k in mine}, **extra})


class SectionedSettings(Settings):
    """A settings model that also holds one options section per entry of its `section_registries`
    that declares options: `[comm.dear]` for the scheduler `dear`, validated with that entry's
    options model and filled with its defaults when absent. The entries are looked up at
    validation, so a newly registered entry brings its section along. A section reads like a field
    (`setup.dear.threshold_bytes`, `setup.options_of("dear")`) and is dumped like one."""

    model_config = ConfigDict(extra="allow")  # the registered sections; anything else is refused below
    section_registries: ClassVar[tuple[Registry, ...]] = ()

    if TYPE_CHECKING:  # a registered section, as pydantic's __getattr__ returns it

        def __getattr__(self, name: str) -> Any: ...

    @classmethod
    def section_models(cls) -> dict[str, type[Settings]]:
        """Section name -> options model, registry by registry, in registration order."""
        out: dict[str, type[Settings]] = {}
        for registry in cls.section_registries:
            for entry in registry.entries():
                if entry.options is None:
                    continue
                if entry.name in out or entry.name in cls.model_fields:
                    raise TypeError(f"{cls.__name__}: two sections named {entry.name!r}")
                out[entry.name] = entry.options
        return out

    @classmethod
    def known_keys(cls) -> list[str]:
        return [*cls.model_fields, *cls.section_models()]

    def options_of(self, name: str) -> Settings | None:
        """The options of registered entry `name` (None when it declares none)."""
        return (self.__pydantic_extra__ or {}).get(name)

    @model_validator(mode="after")
    def _registered_sections(self):
        given = self.__pydantic_extra__
        assert given is not None  # extra="allow" keeps a dict
        models = self.section_models()
        for key in given:
            if key not in models:
                raise BadValue(key, f"unknown key (known: {', '.join(self.known_keys())})")
        sections = {}
        for name, model in models.items():
            raw = given.get(name, {})
            try:
                sections[name] = raw if isinstance(raw, model) else model.parse(raw)
            except ConfigError as e:
                raise BadValue(_join(name, e.key or ""), e.what or str(e)) from None
        given.clear()  # registration order, whatever order the keys came in
        given.update(sections)
        return self


_ARGUMENT_MODELS: dict = {}


def check_argument(name: str, ann, value, section: str = ""):
    """`value` checked as a settings type `ann` (Fraction, a Literal...) for a function that takes it
    as an argument rather than in a settings object; raises ConfigError naming `section.name`."""
    key = (name, ann, section)
    if key not in _ARGUMENT_MODELS:
        # typed Any: mypy matches an unpacked dict[str, tuple] against create_model's own options too
        field: dict[str, Any] = {name: (ann, ...)}
        model = create_model(f"Argument_{name}", __base__=Settings, **field)
        model.section = section
        _ARGUMENT_MODELS[key] = model
    return getattr(_ARGUMENT_MODELS[key](**{name: value}), name)


# --- one line per validation error ---------------------------------------------------------------

TYPE_NOUNS = {
    "int_type": "integer",
    "int_parsing": "integer",
    "float_type": "number",
    "float_parsing": "number",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "string_type": "string",
    "list_type": "list",
}
TABLE_ERRORS = ("dict_type", "model_type", "model_attributes_type")


def _flat_metadata(items) -> list:
    out = []
    for m in items:
        out.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return out


def unwrap(ann) -> tuple[Any, list]:
    """(the bare type, its metadata) of an annotation: Annotated and Optional removed."""
    meta = []
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann, *more = get_args(ann)
            meta += _flat_metadata(more)
        elif origin in (Union, types.UnionType) and type(None) in get_args(ann) and len(get_args(ann)) == 2:
            ann = next(a for a in get_args(ann) if a is not type(None))
        else:
            return ann, meta


def is_model(ann) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def union_variants(ann) -> tuple:
    """The models of a (discriminated) union of models, else ()."""
    if get_origin(ann) in (Union, types.UnionType):
        args = tuple(a for a in get_args(ann) if a is not type(None))
        if args and all(is_model(a) for a in args):
            return args
    return ()


def variant_tag(variant: type[BaseModel]) -> tuple[str, tuple]:
    """(discriminator field, its values) of a union variant: its first Literal field."""
    for name, f in variant.model_fields.items():
        if get_origin(f.annotation) is Literal:
            return name, get_args(f.annotation)
    raise TypeError(f"{variant.__name__} has no Literal field to discriminate it")


def _join(path: str, item) -> str:
    if item == "":
        return path
    return f"{path}.{item}" if path else str(item)


def _locate(root: type[BaseModel], loc: tuple):
    """(dotted key, annotation, metadata, model holding the last key) of an error location."""
    ann: Any  # the root model first, then the annotation of each key on the way (None once unknown)
    meta: list
    path, ann, meta, owner = "", root, [], root
    for item in loc:
        ann, more = unwrap(ann)
        meta = meta + more
        if is_model(ann):
            owner = ann
            path = _join(path, item)
            f = ann.model_fields.get(item) if isinstance(item, str) else None
            ann, meta = (f.annotation, list(f.metadata)) if f else (None, [])
        elif get_origin(ann) is list:
            path += f"[{item}]"
            ann, meta = get_args(ann)[0], []
        elif get_origin(ann) is dict:
            path = _join(path, item)
            ann, meta = get_args(ann)[1], []
        elif item == "[key]":  # the key just passed is wrong, not its value
            return path, None, [], owner
        elif union_variants(ann):  # a discriminated union puts the tag into the location
            ann = next((v for v in union_variants(ann) if item in variant_tag(v)[1]), None)
            meta = []
        else:
            path, ann, meta = _join(path, item), None, []
    ann, more = unwrap(ann)
    return path, ann, meta + more, owner


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _bounds(meta: list) -> tuple:
    lo = next((m.ge for m in meta if isinstance(m, Ge)), None)
    hi = next((m.le for m in meta if isinstance(m, Le)), None)
    return lo, hi


def _what(e: ErrorDetails, path: str, ann, meta: list, owner) -> tuple[str, str]:
    """(key, what is wrong) of one pydantic error dict."""
    kind, v, ctx = e["type"], e.get("input"), e.get("ctx") or {}
    if kind in ("value_error", "assertion_error"):
        err = ctx.get("error")
        if isinstance(err, ConfigError) and err.key is not None and err.what is not None:
            return _join(path, err.key), err.what
        return path, str(err)
    if kind == "missing":
        return path, "required"
    if kind == "extra_forbidden":
        known = owner.known_keys() if issubclass(owner, Settings) else list(owner.model_fields)
        return path, f"unknown key (known: {', '.join(known)})"
    if kind == "literal_error":
        choices = get_args(ann) if get_origin(ann) is Literal else (ctx.get("expected", ""),)
        return path, f"{v!r} is not one of {', '.join(map(str, choices))}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        disc = ctx.get("discriminator", "").strip("'")
        if kind == "union_tag_not_found":
            return _join(path, disc), "required"
        tags = ", ".join(t.strip("'") for t in ctx.get("expected_tags", "").split(", "))
        return _join(path, disc), f"{v.get(disc)!r} is not one of {tags}"
    if kind == "list_type" and is_model(unwrap(get_args(ann)[0] if get_args(ann) else None)[0]):
        return path, f"expected a list of tables ([[{path}]]), got {type(v).__name__}"
    if kind in TABLE_ERRORS:
        return path, f"expected a table, got {type(v).__name__}"
    if kind in TYPE_NOUNS:
        return path, f"expected {TYPE_NOUNS[kind]}, got {type(v).__name__} {v!r}"
    if kind in ("greater_than_equal", "less_than_equal"):
        named = next((m for m in meta if isinstance(m, Named)), None)
        if named:
            lo, hi = _bounds(meta)
            return path, f"{_num(v)} is not {named.noun} in {_num(lo)}..{_num(hi)}"
        if kind == "greater_than_equal":
            return path, f"{_num(v)} is below the minimum {_num(ctx['ge'])}"
        return path, f"{_num(v)} is above the maximum {_num(ctx['le'])}"
    if kind == "greater_than":
        return path, f"{_num(v)} must be above {_num(ctx['gt'])}"
    if kind == "less_than":
        return path, f"{_num(v)} must be below {_num(ctx['lt'])}"
    if kind == "finite_number":
        return path, f"{v} is not a finite number"
    if kind in ("too_short", "too_long"):
        bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        return path, f"{ctx.get('actual_length')} entries, {'at least' if kind == 'too_short' else 'at most'} {bound}"
    return path, e["msg"]


def first_error(error: ValidationError, root: type[BaseModel], prefer: str | None = None) -> tuple[str, str]:
    """(dotted key relative to `root`, what is wrong) of the first error of a validation of `root`
    (the first under the field `prefer`, when there is one)."""
    errors = error.errors(include_url=False)
    e = next((x for x in errors if prefer and x["loc"] and x["loc"][0] == prefer), errors[0])
    loc = tuple(e["loc"])
    path, ann, meta, owner = _locate(root, loc)
    key, what = _what(e, path, ann, meta, owner)
    if loc and loc[-1] == "[key]":
        return key.rsplit(".", 1)[0], f"key {loc[-2]!r}: {what}"
    return key, what


def config_error(error: ValidationError, root: type[Settings], prefer: str | None = None) -> ConfigError:
    """The one-line ConfigError of a failed validation of `root` (`first_error`)."""
    key, what = first_error(error, root, prefer)
    shown = _join(root.section, key) if key else (root.section or "the config")
    return ConfigError(f"{shown}: {what}", key, what)


# --- reference documentation -----------------------------------------------------------------------


def type_name(ann) -> str:
    ann, _ = unwrap(ann)
    if get_origin(ann) is Literal:
        return type_name(type(get_args(ann)[0]))
    if get_origin(ann) is list:
        return f"list of {type_name(get_args(ann)[0])}"
    if get_origin(ann) is dict:
        return f"table of {type_name(get_args(ann)[1])}"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(
        ann, getattr(ann, "__name__", str(ann))
    )


def _limits(meta: list) -> str:
    lo = [f">= {_num(m.ge)}" for m in meta if isinstance(m, Ge)] + [
        f"> {_num(m.gt)}" for m in meta if isinstance(m, Gt)
    ]
    hi = [f"<= {_num(m.le)}" for m in meta if isinstance(m, Le)] + [
        f"< {_num(m.lt)}" for m in meta if isinstance(m, Lt)
    ]
    ge, le = _bounds(meta)
    if ge is not None and le is not None:
        return f"{_num(ge)}..{_num(le)}"
    return ", ".join(lo + hi)


def reference_rows(model: type[BaseModel], prefix: str, show_value, note: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) for every key of `model` and its sections; `show_value`
    renders a default. Meaning = description; choices; bounds. Union sections (topology kinds)
    list the discriminator, then each variant's keys with its tag in front of the meaning."""
    rows = []
    for name, f in model.model_fields.items():
        key = f"{prefix}{name}"
        ann, meta = unwrap(f.annotation)
        meta = list(f.metadata) + meta
        variants = union_variants(ann)
        if variants:
            disc, _ = variant_tag(variants[0])
            tags = [variant_tag(v)[1][0] for v in variants]
            default = f.get_default(call_default_factory=True)
            rows.append(
                (
                    f"{key}.{disc}",
                    "string",
                    f"`{show_value(getattr(default, disc))}`",
                    "; ".join(x for x in (f.description, " / ".join(f"`{t}`" for t in tags)) if x),
                )
            )
            for v, tag in zip(variants, tags):
                rows += [
                    r for r in reference_rows(v, f"{key}.", show_value, note=f"{tag}: ") if r[0] != f"{key}.{disc}"
                ]
            continue
        if is_model(ann) and getattr(ann, "reference_row", None):  # a section given as a whole (a job's)
            rows.append((key, "table", "the experiment's", note + ann.reference_row))
            continue
        if is_model(ann):
            rows += reference_rows(ann, f"{key}.", show_value)
            continue
        if get_origin(ann) is list and is_model(unwrap(get_args(ann)[0])[0]):
            rows += reference_rows(unwrap(get_args(ann)[0])[0], f"{key}[].", show_value)
            continue
        choices = " / ".join(f"`{c}`" for c in _choices(ann, meta))
        default = "required" if f.is_required() else f"`{show_value(f.get_default(call_default_factory=True))}`"
        what = "; ".join(x for x in (f.description, choices, _limits(meta)) if x)
        rows.append((key, type_name(f.annotation), default, note + what))
    if isinstance(model, type) and issubclass(model, SectionedSettings):
        for name, options in model.section_models().items():
            rows += reference_rows(options, f"{prefix}{name}.", show_value)
    return rows


def _choices(ann, meta: list) -> tuple:
    """The values a key takes: a Literal's, or a registry's names."""
    if get_origin(ann) is Literal:
        return get_args(ann)
    registry = next((m.registry for m in meta if isinstance(m, RegistryValues)), None)
    return registry.choices() if registry is not None else ()


def registered_value_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, value, description) for every value of every key of `model` (and its sections) whose
    values come from a registry: each entry's one-line description."""
    rows = []
    for name, f in model.model_fields.items():
        ann, meta = unwrap(f.annotation)
        meta = list(f.metadata) + meta
        registry = next((m.registry for m in meta if isinstance(m, RegistryValues)), None)
        if registry is not None:
            rows += [(f"{prefix}{name}", value, registry.get(value).description) for value in registry.choices()]
        elif is_model(ann):
            rows += registered_value_rows(ann, f"{prefix}{name}.")
    return rows


# --- command-line flags ----------------------------------------------------------------------------


def boolean(text: str) -> bool:
    """A command-line boolean: true or false."""
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return text.lower() == "true"


def _flag_type(ann) -> dict:
    ann, _ = unwrap(ann)
    if get_origin(ann) is Literal:
        return {"choices": [str(c) for c in get_args(ann)]}
    if ann is bool:
        return {"type": boolean, "metavar": "true|false"}
    return {"type": ann if ann in (int, float) else str}


def add_option_flags(parser, registry: Registry, defaults: dict | None = None) -> None:
    """One `--KEY` flag per option key of `registry`'s entries, so a newly registered entry's
    options are settable without an edit to the command. A key two entries share is one flag; it
    sets the key of whichever entry the command runs. `defaults`: the command's own defaults for
    some keys (else the entry's)."""
    fields: dict[str, FieldInfo] = {}
    helps: dict[str, list[str]] = {}
    for entry in registry.entries():
        for key, f in entry.options.model_fields.items() if entry.options is not None else ():
            fields.setdefault(key, f)
            helps.setdefault(key, []).append(f.description or f"{entry.name}: {key}")
    for key, f in fields.items():
        default = (defaults or {}).get(key)
        parser.add_argument(
            f"--{key.replace('_', '-')}",
            dest=key,
            default=default,
            help="; ".join(helps[key]) + (f" (default here: {default})" if default is not None else ""),
            **_flag_type(f.annotation),
        )


def flag_values(args, registry: Registry) -> dict:
    """The option keys of `registry`'s entries that `args` sets (flags from `add_option_flags`)."""
    keys = dict.fromkeys(k for e in registry.entries() if e.options is not None for k in e.options.model_fields)
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def options_from_flags(args, entry) -> Any:
    """The validated options of `entry` from the flags `add_option_flags` added (flags not given:
    the entry's defaults); a bad value raises ConfigError naming the flag."""
    if entry.options is None:
        return None
    given = {k: getattr(args, k) for k in entry.options.model_fields if getattr(args, k, None) is not None}
    try:
        return entry.options.parse(given)
    except ConfigError as e:
        flag = f"--{e.key.replace('_', '-')}" if e.key else entry.name
        raise ConfigError(f"{flag}: {e.what}", e.key, e.what) from None
