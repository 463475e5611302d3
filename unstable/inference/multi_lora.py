"""Many LoRA adapters on one frozen model, each row of a batch with its own adapter, as data a
compiled decoding step can take without recompiling.

PEFT routes a mixed batch's rows to their adapters through forward hooks that it registers anew for
every ``generate`` call, and keeps each adapter in its own modules: a compiled step would recompile
for every call and every adapter. Here each nn.Linear an adapter targets is replaced by a
:class:`MultiLoraLinear`, and a batch is routed by :meth:`MultiLora.route` in one of two forms:

- eagerly (CPU, the dynamic cache, a prefill), each adapter's product is taken on its own rows only,
  from the adapter's own tensors, as PEFT does: ``y[rows_j] += s_j B_j A_j x[rows_j]``;
- for a compiled step (``route(..., dense=True)``: the static cache on CUDA), the batch's adapters are
  copied side by side into stacks, each padded to the largest rank ``r`` so far: ``A`` is
  ``[k * r, in]`` and ``B`` is ``[out, k * r]`` (adapter ``j`` owns columns ``j*r .. j*r+r-1``), and a
  mask ``[rows, k * r]`` is 1 on the columns of each row's adapter (all 0 for a row on the base
  weights), so that

      y_i = W x_i + B ((A x_i) * mask_i) = W x_i + s_j B_j A_j x_i

  for row ``i`` on adapter ``j``: PEFT's LoRA forward (``lora_B(lora_A(x)) * scaling``, dropout off)
  as one dense product. The stacks and the mask are rewritten *in place* (nothing is copied when the
  batch's adapters are those already there, as in mirror self-play), so the tensors a CUDA graph
  captured keep their addresses from one call to the next. ``k`` is the number of distinct adapters
  rounded up to a power of two, and ``0`` for a batch on the base weights (the layers then skip the
  LoRA product): a compiled step is specialised on ``k`` (a handful of variants), and a batch with one
  adapter pays one adapter's product. A batch with several pays ``k`` products on every row, the
  price of one dense product instead of per-adapter gathers, small next to the frozen weights at the
  ranks LoRA uses.

The scaling ``s_j`` (``lora_alpha / r``, or ``/ sqrt(r)`` with rsLoRA, per module where
``rank_pattern``/``alpha_pattern`` say so) is folded into ``B_j`` when the adapter is added.

Only plain LoRA on nn.Linear layers is supported (what the learner trains, and what vLLM serves):
DoRA, LoRA on embeddings or convolutions, trained biases and ``modules_to_save`` are refused with an
error that names what was found.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

PEFT_PREFIX = "base_model.model."  # PEFT's saved keys: base_model.model.<module path>.lora_A.weight


@dataclass(frozen=True, slots=True)
class LoraTensors:
    """One adapter, ready to stack: per module, ``A`` ``[r, in]`` and ``B`` ``[out, r]`` with the scaling folded in."""

    rank: int  # the largest rank of its modules
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]]


def lora_tensors(config: dict[str, Any], state_dict: dict[str, torch.Tensor], model: nn.Module,
                 source: str) -> LoraTensors:
    """The adapter saved by PEFT as ``config`` (adapter_config.json) and ``state_dict``, checked against
    ``model``'s layers, with each module's scaling folded into ``B`` (see the module docstring).

    The scaling is PEFT's (``peft.tuners.lora.layer.LoraLayer.update_layer``): ``lora_alpha / r``, or
    ``lora_alpha / sqrt(r)`` when ``use_rslora`` (Kalajdzievski 2023, "A Rank Stabilization Scaling Factor
    for Fine-Tuning with LoRA"), where ``r`` and ``lora_alpha`` are the module's own when ``rank_pattern`` or
    ``alpha_pattern`` name it."""
    _check_plain_lora(config, source)
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    foreign = []
    for key, tensor in state_dict.items():
        match = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", key)
        if match is None:
            foreign.append(key)
            continue
        pairs.setdefault(match.group(1), {})[match.group(2)] = tensor
    if foreign:
        raise ValueError(f"adapter {source!r} holds {len(foreign)} tensors that are not LoRA A/B weights "
                         f"(e.g. {foreign[0]!r}): only plain LoRA adapters are served by the transformers engine")
    if not pairs:
        raise ValueError(f"adapter {source!r} holds no LoRA weights")
    layers = dict(model.named_modules())
    unfit = [name for name in pairs if not isinstance(_unwrapped(layers.get(name)), nn.Linear)]
    if unfit:
        found = type(layers[unfit[0]]).__name__ if unfit[0] in layers else "nothing"
        raise ValueError(f"{len(unfit)} tensors of adapter {source!r} fit no layer of this model "
                         f"(e.g. {PEFT_PREFIX}{unfit[0]}.lora_A.weight: {found} there, not a Linear layer)")
    modules = {}
    for name, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise ValueError(f"adapter {source!r} has lora_{''.join(pair)} but not both A and B for {name!r}")
        linear = _unwrapped(layers[name])
        a, b = pair["A"], pair["B"]
        rank = _pattern_value(config.get("rank_pattern"), name, config.get("r", 8))
        if a.shape[0] != rank:
            raise ValueError(f"adapter {source!r} does not match its config: rank {rank} for {name}, but its "
                             f"lora_A has {a.shape[0]} rows")
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != linear.in_features or b.shape != (linear.out_features, rank):
            raise ValueError(f"adapter {source!r} was made for another model: {name} takes "
                             f"[{linear.out_features} x {linear.in_features}] weights, its LoRA has A "
                             f"{list(a.shape)} and B {list(b.shape)}")
        modules[name] = (a, b * _scaling(config, name, rank))
    return LoraTensors(max(a.shape[0] for a, _ in modules.values()), modules)


def _check_plain_lora(config: dict[str, Any], source: str) -> None:
    kind = config.get("peft_type", "LORA")
    unsupported = [
        (str(kind).upper() != "LORA", f"peft_type {kind!r}"),
        (bool(config.get("use_dora")), "DoRA (use_dora)"),
        (config.get("bias", "none") != "none", f"trained biases (bias={config.get('bias')!r})"),
        (bool(config.get("modules_to_save")), f"modules_to_save {config.get('modules_to_save')!r}"),
    ]
    found = [what for bad, what in unsupported if bad]
    if found:
        raise ValueError(f"adapter {source!r} uses {', '.join(found)}: the transformers engine serves plain LoRA "
                         "adapters on Linear layers (as vLLM does), which is what the learner trains")


def _pattern_value(patterns: dict[str, Any] | None, module: str, default: Any) -> Any:
    """PEFT's ``get_pattern_key``: a pattern names a module when it matches the end of its dotted name."""
    for pattern, value in (patterns or {}).items():
        if re.fullmatch(rf"(.*\.)?{pattern}", module):
            return value
    return default


def _scaling(config: dict[str, Any], module: str, rank: int) -> float:
    alpha = _pattern_value(config.get("alpha_pattern"), module, config.get("lora_alpha", 8))
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def _unwrapped(module: nn.Module | None) -> nn.Module | None:
    return module.base_layer if isinstance(module, MultiLoraLinear) else module


class _Routing:
    """What every :class:`MultiLoraLinear` of a model reads: each adapter's rows (eager passes); the
    stack's used part ``k`` and the rows' mask (compiled passes)."""

    def __init__(self) -> None:
        self.groups: list[tuple[LoraTensors, torch.Tensor | None]] = []  # each adapter and its rows (None: all)
        self.k = 0  # adapters stacked for this batch (a power of two), 0: none (base weights, or not dense)
        self.rank = 0  # columns per adapter in the stacks
        self.mask = torch.zeros(0, 0)  # [rows capacity, adapters capacity * rank]


class MultiLoraLinear(nn.Module):
    """An nn.Linear plus the LoRA products of the current batch's adapters (see the module docstring)."""

    def __init__(self, base_layer: nn.Linear, routing: _Routing, name: str) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.routing = routing
        self.name = name  # the module's path in the model: the key of its tensors in each adapter
        self.register_buffer("lora_a", base_layer.weight.new_zeros(0, base_layer.in_features), persistent=False)
        self.register_buffer("lora_b", base_layer.weight.new_zeros(base_layer.out_features, 0), persistent=False)

    def resize(self, width: int) -> None:
        """New zero stacks of ``width`` columns (adapters capacity times rank), for :class:`MultiLora`."""
        self.lora_a = self.lora_a.new_zeros(width, self.base_layer.in_features)
        self.lora_b = self.lora_b.new_zeros(self.base_layer.out_features, width)

    @property
    def weight(self) -> torch.Tensor:  # model code that reads a projection's weight still finds it
        return self.base_layer.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base_layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        if not torch.compiler.is_compiling():  # eager: each adapter on its own rows
            for tensors, rows in self.routing.groups:
                pair = tensors.modules.get(self.name)
                if pair is None:
                    continue
                if rows is None:  # every row of the batch
                    y = y + F.linear(F.linear(x.to(pair[0].dtype), pair[0]), pair[1]).to(y.dtype)
                else:
                    h = F.linear(F.linear(x[rows].to(pair[0].dtype), pair[0]), pair[1])
                    y = y.index_add(0, rows, h.to(y.dtype))
            return y
        width = self.routing.k * self.routing.rank
        if width == 0:
            return y
        mask = self.routing.mask[: x.shape[0], :width].view(x.shape[0], *([1] * (x.dim() - 2)), width)
        h = F.linear(x.to(self.lora_a.dtype), self.lora_a[:width]) * mask
        return y + F.linear(h, self.lora_b[:, :width]).to(y.dtype)


class MultiLora:
    """The adapters of one model: :meth:`add` and :meth:`remove` them by name, :meth:`route` a batch's rows."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.adapters: dict[str, LoraTensors] = {}
        self.routing = _Routing()
        self._layers: dict[str, MultiLoraLinear] = {}
        self._stacked: tuple[str, ...] = ()  # the adapters in the stacks now, in order
        self._capacity = 0  # adapters the stacks have room for
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype

    def add(self, name: str, config: dict[str, Any], state_dict: dict[str, torch.Tensor], source: str) -> None:
        """Check the adapter against the model and keep it on the model's device as ``name``. Nothing
        changes when it is refused; the layers it targets are wrapped when first needed."""
        tensors = lora_tensors(config, state_dict, self.model, source)
        tensors = LoraTensors(tensors.rank, {m: (a.to(self.device, self.dtype), b.to(self.device, self.dtype))
                                             for m, (a, b) in tensors.modules.items()})
        for module in tensors.modules:
            if module not in self._layers:
                self._wrap(module)
        self.adapters[name] = tensors

    def remove(self, name: str) -> None:
        self.adapters.pop(name, None)
        if name in self._stacked:
            self._stacked = ()  # its tensors are still in the stacks: copy afresh for the next batch

    def route(self, row_adapters: list[str | None], dense: bool = False) -> None:
        """Set up the next forward passes: row ``i`` on adapter ``row_adapters[i]`` (``None``: base
        weights); ``dense``: also the stacks and mask a compiled pass takes (see the module docstring)."""
        names = tuple(dict.fromkeys(n for n in row_adapters if n is not None))
        unknown = [n for n in names if n not in self.adapters]
        if unknown:
            raise KeyError(f"adapter {unknown[0]!r} is not loaded")
        rows: dict[str, list[int]] = {name: [] for name in names}
        for i, name in enumerate(row_adapters):
            if name is not None:
                rows[name].append(i)
        self.routing.groups = [(self.adapters[n], None if len(r) == len(row_adapters) else
                                torch.tensor(r, device=self.device)) for n, r in rows.items()]
        self.routing.k = 0
        if not dense or not names:
            return
        k = 1 << (len(names) - 1).bit_length()
        rank = max(self.routing.rank, *(self.adapters[n].rank for n in names))  # stacks only grow
        if k > self._capacity or rank > self.routing.rank or len(row_adapters) > self.routing.mask.shape[0]:
            self._allocate(max(k, self._capacity), rank, rows=len(row_adapters))
        if names != self._stacked[: len(names)]:
            self._stack(names)
        r = self.routing.rank
        mask = torch.zeros(self.routing.mask.shape)  # built here, copied in place: one transfer, same address
        for j, adapter_rows in enumerate(rows.values()):  # adapter j owns columns j*r .. j*r+r-1
            mask[adapter_rows, j * r: (j + 1) * r] = 1
        self.routing.mask.copy_(mask)
        self.routing.k = k

    def _stack(self, names: tuple[str, ...]) -> None:
        r = self.routing.rank
        for module, layer in self._layers.items():
            layer.lora_a.zero_()
            layer.lora_b.zero_()
            for j, name in enumerate(names):
                pair = self.adapters[name].modules.get(module)
                if pair is not None:
                    a, b = pair
                    layer.lora_a[j * r: j * r + a.shape[0]].copy_(a)
                    layer.lora_b[:, j * r: j * r + b.shape[1]].copy_(b)
        self._stacked = names

    def _wrap(self, module: str) -> None:
        parent_name, _, child = module.rpartition(".")
        parent = self.model.get_submodule(parent_name) if parent_name else self.model
        layer = MultiLoraLinear(getattr(parent, child), self.routing, module)
        layer.resize(self._capacity * self.routing.rank)
        setattr(parent, child, layer)
        self._layers[module] = layer
        self._stacked = ()

    def _allocate(self, capacity: int, rank: int, rows: int = 0) -> None:
        """New stacks (``capacity`` adapters of ``rank`` columns) and a new mask: shapes change, so a
        compiled step recompiles once; refilled by the next :meth:`route`."""
        rows = max(rows, self.routing.mask.shape[0], 1)
        rows = 1 << (rows - 1).bit_length()
        for layer in self._layers.values():
            layer.resize(capacity * rank)
        self.routing.mask = torch.zeros(rows, capacity * rank, device=self.device, dtype=self.dtype)
        self.routing.rank, self._capacity = rank, capacity
        self._stacked = ()
