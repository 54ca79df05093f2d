"""The experiment's `[switch]` section: the queue discipline of every switch port and its options,
composed from the registry: `queueing` takes the registered names, and each discipline's options
appear as `<discipline>_<option>` (`wrr_weights`), with their types, bounds, defaults and meaning
written once, in the discipline's own options model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, create_model

from dlcp.queueing.registry import DISCIPLINES, QueueingConfig, names
from dlcp.settings import BadValue, Settings


class QueueingSection(Settings):
    """What every section built by `_section` has; the options fields are added from the registry."""

    section: ClassVar[str] = "switch"
    queueing: str = "strict"

    def config(self) -> QueueingConfig:
        """The chosen discipline with its options (those of the other disciplines are ignored)."""
        d = DISCIPLINES[self.queueing]
        prefix = f"{d.name}_"
        own = {k[len(prefix) :]: getattr(self, k) for k in type(self).model_fields if k.startswith(prefix)}
        return QueueingConfig(d, d.options(**own))

    def check_target(self, target: str, key: str = "queueing") -> None:
        """BadValue naming `key` when the switches of `target` cannot run the discipline."""
        why = DISCIPLINES[self.queueing].refused_on.get(target)
        if why:
            raise BadValue(key, f"{self.queueing!r} cannot run on {target}: {why}")


def _section() -> type[QueueingSection]:
    doc = "; ".join(f"{d.name}: {d.doc}" for d in DISCIPLINES.values())
    fields: dict[str, Any] = {
        "queueing": (Literal[names()], Field("strict", description=f"which queue of a switch port sends next ({doc})")),
    }
    for d in DISCIPLINES.values():
        for option, info in d.options.model_fields.items():
            fields[f"{d.name}_{option}"] = (info.annotation, info)
    return create_model("QueueingSettings", __base__=QueueingSection, **fields)


if TYPE_CHECKING:
    QueueingSettings = QueueingSection
else:
    QueueingSettings = _section()
