"""Named extension points: a registry maps a name users write (a config value, a CLI choice) to the
entry that implements it, declared in the entry's own module (as aioquic's
`register_congestion_control` or ns-3's TypeId).

    SCHEDULERS: Registry[SchedulerEntry] = Registry("scheduler", discover="dlcp.comm.schedulers")
    SCHEDULERS.register(SchedulerEntry("wfbp", "each tensor's all-reduce as soon as it is ready", ...))

An entry has a name, a one-line description and, optionally, an options model (a settings model,
dlcp/settings.py: the keys of its own config section, e.g. `[comm.dear]`); a registry's entry type
adds what the framework needs of that kind (a scheduler's class, a collective's plan). Everything
users see is derived from the registry: the config's allowed values (`registry_name` and
`SectionedSettings` in dlcp/settings.py), CLI choices (`choices()`), the key reference in
docs/experiments.md. A registry with `discover` imports every module of that package before its
first lookup, so a new entry is one new module in the package; an entry can also be registered from
anywhere else before it is looked up.

Unknown names and duplicates raise one-line errors that list the known names.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

NAME = re.compile(r"[a-z][a-z0-9_]*")


class RegistryError(ValueError):
    """A registration or lookup that cannot be done, as one line."""


class UnknownName(RegistryError):
    """A name no entry of the registry has."""


@dataclass(frozen=True)
class Entry:
    """What every registered thing has: the name users write, what it is in one line, and the
    settings model of its options (None: it has none)."""

    name: str
    description: str
    options: Any = None  # a dlcp.settings.Settings subclass, or None


E = TypeVar("E", bound=Entry)


class Registry(Generic[E]):
    """Entries of one kind by name, in registration order (see the module docstring). `kind` names
    them in errors ("scheduler 'x' is not one of ...")."""

    def __init__(self, kind: str, discover: str | None = None):
        self.kind = kind
        self._entries: dict[str, E] = {}
        self._discover = discover
        self._discovered = discover is None
        self._discovering = False
        self._lock = threading.RLock()

    def register(self, entry: E) -> E:
        """Add `entry`; a name is registered once (unregister it first to replace it)."""
        if not isinstance(entry.name, str) or not NAME.fullmatch(entry.name):
            raise RegistryError(
                f"{self.kind} name {entry.name!r}: use lower-case letters, digits and '_', starting with a letter"
            )
        if entry.name in self._entries:
            raise RegistryError(f"{self.kind} {entry.name!r} is registered twice")
        if not entry.description or "\n" in entry.description:
            raise RegistryError(f"{self.kind} {entry.name!r}: the description must be one non-empty line")
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> E:
        """Remove and return entry `name` (a test's temporary entry, a plugin replacing one)."""
        self.get(name)
        return self._entries.pop(name)

    def get(self, name: str) -> E:
        self._discover_once()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownName(self.unknown(name)) from None

    __getitem__ = get

    def check(self, name: str) -> str:
        """`name` if an entry has it, else ValueError with `unknown`'s line without the kind (a
        config validator: the key already says what it is)."""
        if name not in self:
            raise ValueError(f"{name!r} is not one of {', '.join(self.choices())}")
        return name

    def unknown(self, name: object) -> str:
        return f"{self.kind} {name!r} is not one of {', '.join(self.choices())}"

    def names(self) -> tuple[str, ...]:
        """Every name, in registration order (a discovered package's modules in name order)."""
        self._discover_once()
        return tuple(self._entries)

    def choices(self) -> tuple[str, ...]:
        """The names sorted, for CLI choices and documentation."""
        return tuple(sorted(self.names()))

    def entries(self) -> tuple[E, ...]:
        self._discover_once()
        return tuple(self._entries.values())

    def __contains__(self, name: object) -> bool:
        self._discover_once()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def _discover_once(self) -> None:
        if self._discovered:
            return
        with self._lock:  # another thread's first lookup waits for the whole package
            if self._discovered or self._discovering:
                return  # done meanwhile, or a module being imported looks the registry up
            self._discovering = True
            try:
                package = importlib.import_module(self._discover)  # type: ignore[arg-type]
                for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
                    importlib.import_module(f"{package.__name__}.{module}")
            finally:
                self._discovering = False
            self._discovered = True  # not after a failed import: the next lookup raises it again
