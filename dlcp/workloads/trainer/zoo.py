"""Models to profile by name: ours, torchvision's, transformers', or the user's own `module:factory`.

`resolve_model(spec, ...)` gives a `ProfiledModel`: the module, a function making one batch of
inputs on a device, and the loss to run backward from. Random weights throughout (nothing is
downloaded: a profile times the architecture, not the weights).

- ours: `mlp`, `cnn`, `resnet` on `digits` or `synthetic` (dlcp/workloads/trainer/models.py);
- torchvision: any classification model `torchvision.models.list_models` knows (`resnet18`,
  `resnet50`, `vgg16`, `vit_b_16`, ...), ImageNet shape (299x299 for inception_v3), 1000 classes;
- transformers: `bert-base`, `bert-large` (BertForSequenceClassification), `gpt2`
  (GPT2LMHeadModel) with the sizes of the published models, or any class as `hf:ClassName`; its
  config's fields can be changed (`hf_config`, e.g. a tiny BERT: num_hidden_layers=2,
  hidden_size=64, ...); token ids of `seq_len` tokens, labels random;
- `module:factory`: `factory()` returns a module, or `(module, make_inputs)` with
  `make_inputs(batch_size, device)` returning the forward's positional arguments as a tuple; the
  loss is the output's mean (or the output's `loss`, if it has one).

torchvision and transformers come with the `models` extra (pyproject.toml). PyPI's torchvision
wheels for x86-64 are built against the CUDA torch: beside the CPU build of torch its C++ operators
(`torchvision::nms`, `roi_align`, `deform_conv2d`: detection models only) cannot load, and its
import then fails registering fake kernels for them. `import_torchvision` skips those two
registration modules in exactly that case, so the classification models (pure Python) work and
the C++ operators raise torchvision's own "Couldn't load custom C++ ops" if something calls them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

OURS = ("mlp", "cnn", "resnet")
# transformers models by the names of the bundled GPU profiles: (class, config overrides)
HF_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "bert-base": ("BertForSequenceClassification", {}),
    "bert-large": (
        "BertForSequenceClassification",
        {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
    ),
    "gpt2": ("GPT2LMHeadModel", {}),
}
IMAGE_SIDE = {"inception_v3": 299}  # torchvision's input size where it is not 224


class ModelUnavailable(ValueError):
    """The model cannot be had here (a missing extra, an unknown name): one line saying why."""


@dataclass
class ProfiledModel:
    name: str  # what the profile is called after (`resnet18`, `bert-base`, `mymod:make`)
    module: nn.Module
    make_inputs: Callable[[int, torch.device], tuple]  # (batch_size, device) -> one batch
    forward: Callable[[tuple], Any]  # one batch -> the module's output
    loss: Callable[[Any, tuple], torch.Tensor]  # (output, batch) -> scalar
    description: str  # for the profile's note
    dataset: str = ""  # ours only: the profile's name carries the dataset


def import_torchvision():
    """torchvision, importable beside the CPU build of torch (module docstring)."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise ModelUnavailable("torchvision is not installed (pip install -e '.[models]')")
    if not _torchvision_ops_load(Path(spec.origin).parent):
        for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
            sys.modules.setdefault(name, types.ModuleType(name))
    return importlib.import_module("torchvision")


def _torchvision_ops_load(package_dir: Path) -> bool:
    """Whether torchvision's C++ operator library loads into this torch (as torchvision loads it)."""
    libs = sorted(package_dir.glob("_C*.so")) + sorted(package_dir.glob("_C*.pyd"))
    if not libs:
        return False
    try:
        torch.ops.load_library(str(libs[0]))
    except (OSError, RuntimeError):
        return False
    return True


def torchvision_models() -> list[str]:
    tv = import_torchvision()
    return sorted(tv.models.list_models(module=tv.models))


def resolve_model(
    spec: str,
    *,
    dataset: str = "digits",
    seq_len: int = 128,
    hf_config: dict[str, Any] | None = None,
    seed: int = 1,
) -> ProfiledModel:
    """The model `spec` names (module docstring), built with random weights seeded by `seed`."""
    torch.manual_seed(seed)
    if spec in OURS:
        return _ours(spec, dataset, seed)
    if spec.startswith("hf:") or spec in HF_ALIASES:
        return _transformers(spec, seq_len, hf_config or {})
    if ":" in spec:
        return _user(spec)
    if hf_config:
        raise ModelUnavailable(f"--hf-config: only for transformers models, not {spec!r}")
    return _torchvision(spec)


def _cross_entropy(output, batch) -> torch.Tensor:
    logits = output[0] if isinstance(output, tuple) else getattr(output, "logits", output)
    return nn.functional.cross_entropy(logits.float(), batch[-1])


def _ours(name: str, dataset: str, seed: int) -> ProfiledModel:
    from dlcp.workloads.trainer.data import BatchSchedule, load_dataset
    from dlcp.workloads.trainer.models import build_model

    data = load_dataset(dataset)
    model = build_model(name, data.in_shape, data.n_classes, seed)
    schedules: dict[int, BatchSchedule] = {}
    counter = iter(range(1 << 62))

    def make_inputs(batch_size: int, device: torch.device) -> tuple:
        """The training batches of one worker, in the order a run would train them."""
        schedule = schedules.setdefault(batch_size, BatchSchedule(data.n_train, batch_size, seed))
        x, y = data.train_batch(schedule.shard(next(counter), 0, 1))
        return (x.to(device), y.to(device))

    return ProfiledModel(
        name, model, make_inputs, lambda batch: model(batch[0]), _cross_entropy, f"our {name} on {dataset}", dataset
    )


def _torchvision(name: str) -> ProfiledModel:
    tv = import_torchvision()
    known = torchvision_models()
    if name not in known:
        raise ModelUnavailable(
            f"model {name!r}: not ours ({', '.join(OURS)}), not a transformers model "
            f"({', '.join(HF_ALIASES)} or hf:ClassName), not module:factory, and not a torchvision "
            f"classification model (e.g. {', '.join(k for k in known if k.startswith('resnet'))})"
        )
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("inception_v3", "googlenet") else {}
    model = tv.models.get_model(name, weights=None, num_classes=1000, **kwargs)
    side = IMAGE_SIDE.get(name, 224)

    def make_inputs(batch_size: int, device: torch.device) -> tuple:
        x = torch.randn(batch_size, 3, side, side, device=device)
        y = torch.randint(0, 1000, (batch_size,), device=device)
        return (x, y)

    return ProfiledModel(
        name,
        model,
        make_inputs,
        lambda batch: model(batch[0]),
        _cross_entropy,
        f"torchvision {tv.__version__} {name}, ImageNet shape {side}x{side}, 1000 classes",
    )


def _transformers(spec: str, seq_len: int, overrides: dict[str, Any]) -> ProfiledModel:
    try:
        import_torchvision()  # transformers imports torchvision when it is there: same arrangement
    except ModelUnavailable:
        pass
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise ModelUnavailable("transformers is not installed (pip install -e '.[models]')") from None
    cls_name, preset = HF_ALIASES.get(spec, (spec.removeprefix("hf:"), {}))
    cls = getattr(transformers, cls_name, None)
    if cls is None or not hasattr(cls, "config_class"):
        raise ModelUnavailable(
            f"model {spec!r}: transformers {transformers.__version__} has no model class {cls_name!r}"
        )
    fields = cls.config_class().to_dict()  # a config takes unknown keys silently: check first
    for key in overrides:
        if key not in fields:
            raise ModelUnavailable(f"--hf-config {key}: not a field of {cls.config_class.__name__}")
    config = cls.config_class(**{**preset, **overrides})
    max_pos = getattr(config, "max_position_embeddings", getattr(config, "n_positions", None))
    if max_pos is not None and seq_len > max_pos:
        raise ModelUnavailable(f"--seq-len {seq_len}: the model takes at most {max_pos} positions")
    model = cls(config)
    vocab = config.vocab_size
    lm = "LMHead" in cls_name or "CausalLM" in cls_name
    n_labels = getattr(config, "num_labels", 2)

    def make_inputs(batch_size: int, device: torch.device) -> tuple:
        ids = torch.randint(0, vocab, (batch_size, seq_len), device=device)
        labels = ids if lm else torch.randint(0, n_labels, (batch_size,), device=device)
        return (ids, labels)

    changed = ", ".join(f"{k}={v}" for k, v in {**preset, **overrides}.items())
    return ProfiledModel(
        spec,
        model,
        make_inputs,
        lambda batch: model(input_ids=batch[0], labels=batch[1]),
        lambda output, batch: output.loss,
        f"transformers {transformers.__version__} {cls_name} ({type(config).__name__} defaults"
        + (f" with {changed}" if changed else "")
        + f"), sequence {seq_len}",
    )


def _user(spec: str) -> ProfiledModel:
    module_name, _, attr = spec.partition(":")
    try:  # the user's module may import torchvision itself: the same arrangement first
        import_torchvision()
    except ModelUnavailable:
        pass
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ImportError as e:
        raise ModelUnavailable(f"model {spec!r}: cannot import {module_name!r} ({e})") from None
    except AttributeError:
        raise ModelUnavailable(f"model {spec!r}: module {module_name!r} has no {attr!r}") from None
    made = factory()
    if isinstance(made, nn.Module):
        raise ModelUnavailable(
            f"model {spec!r}: the factory returned a module without inputs; return (module, "
            "make_inputs) with make_inputs(batch_size, device) -> tuple of forward arguments"
        )
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module) and callable(made[1])):
        raise ModelUnavailable(f"model {spec!r}: the factory must return (module, make_inputs)")
    model, make = made

    def loss(output, inputs):
        out = getattr(output, "loss", None)
        if out is None:
            out = (output[0] if isinstance(output, tuple) else output).float().mean()
        return out

    def make_inputs(batch_size: int, device: torch.device) -> tuple:
        got = make(batch_size, device)
        return got if isinstance(got, tuple) else (got,)

    return ProfiledModel(spec, model, make_inputs, lambda batch: model(*batch), loss, f"{spec} (the user's factory)")
