"""Match-action tables of the DLCP pipeline, built from runtime entries.

Each table keeps its entries in the order they were installed, a direct counter per entry (packets,
bytes) and its default action. Lookups return `(entry_index, action, params)`; entry_index is -1
for the default action, which a direct counter does not count (as in bmv2). The entries come checked
(dlcp/network/runtime_file.py: no duplicates, values fit their keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from dlcp.network import pipeline_names as P
from dlcp.network.runtime_file import Entry

Hit = tuple[int, str, Mapping[str, int]]  # (entry index or -1 for the default action, action, params)


class Table:
    def __init__(self, name: str):
        self.name = name
        spec = P.TABLES[name]
        self.default: Hit = (-1, spec.default_action, dict(spec.default_params))
        self.entries: list[Entry] = []
        self.hits: list[list[int]] = []  # direct counter: [packets, bytes] per entry

    def set_default(self, e: Entry) -> None:
        self.default = (-1, e.action, e.params)

    def add(self, e: Entry) -> None:
        self.entries.append(e)
        self.hits.append([0, 0])

    def count(self, index: int, nbytes: int) -> None:
        if index >= 0:
            h = self.hits[index]
            h[0] += 1
            h[1] += nbytes

    def hit_totals(self) -> dict:
        return {"pkts": sum(h[0] for h in self.hits), "bytes": sum(h[1] for h in self.hits)}


class LpmTable(Table):
    """Longest prefix match on one 32-bit key."""

    def __init__(self, name: str, key: str):
        super().__init__(name)
        self.key = key
        self.by_len: dict[int, dict[int, int]] = {}  # prefix length -> {masked value: entry index}
        self.lengths: list[int] = []

    def add(self, e: Entry) -> None:
        value, plen = e.match[self.key]
        self.by_len.setdefault(plen, {})[value] = len(self.entries)
        super().add(e)
        self.lengths = sorted(self.by_len, reverse=True)

    def lookup(self, value: int) -> Hit:
        for plen in self.lengths:
            i = self.by_len[plen].get(value & (0xFFFFFFFF ^ ((1 << (32 - plen)) - 1)))
            if i is not None:
                e = self.entries[i]
                return i, e.action, e.params
        return self.default


class ExactTable(Table):
    def __init__(self, name: str, keys: list[str]):
        super().__init__(name)
        self.keys = keys
        self.index: dict[tuple, int] = {}

    def add(self, e: Entry) -> None:
        self.index[tuple(e.match[key] for key in self.keys)] = len(self.entries)
        super().add(e)

    def lookup(self, *values: int) -> Hit:
        i = self.index.get(values)
        if i is None:
            return self.default
        e = self.entries[i]
        return i, e.action, e.params


class TernaryTable(Table):
    """Exact and ternary keys; the highest priority entry wins, the first installed on a tie."""

    def __init__(self, name: str, keys: list[tuple[str, str]]):
        super().__init__(name)
        self.keys = keys  # (name, match kind)
        self.order: list[int] = []

    def add(self, e: Entry) -> None:
        super().add(e)
        self.order = sorted(range(len(self.entries)), key=lambda i: -self.entries[i].priority)

    def lookup(self, **values: int) -> Hit:
        for i in self.order:
            e = self.entries[i]
            for key, kind in self.keys:
                m = e.match.get(key)
                if m is None:
                    continue
                if kind == "exact":
                    if values[key] != m:
                        break
                elif values[key] & m[1] != m[0]:
                    break
            else:
                return i, e.action, e.params
        return self.default


T = TypeVar("T", bound=Table)


def table_of(tables: Mapping[str, Table], name: str, kind: type[T]) -> T:
    """tables[name], which build_tables made a `kind` (its match kinds say which)."""
    t = tables[name]
    assert isinstance(t, kind), f"{name} is a {type(t).__name__}"
    return t


def build_tables(entries) -> dict[str, Table]:
    tables: dict[str, Table] = {}
    for name, spec in P.TABLES.items():
        kinds = [k.match for k in spec.keys]
        if not kinds:
            tables[name] = Table(name)
        elif kinds == ["lpm"]:
            tables[name] = LpmTable(name, spec.keys[0].name)
        elif set(kinds) == {"exact"}:
            tables[name] = ExactTable(name, [k.name for k in spec.keys])
        else:
            tables[name] = TernaryTable(name, [(k.name, k.match) for k in spec.keys])
    for e in entries:
        t = tables[e.table]
        if e.default:
            t.set_default(e)
        else:
            t.add(e)
    return tables
