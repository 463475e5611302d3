"""Data-parallel learning: N copies of a learner take each optimiser step together (``torch.distributed``).

Rank 0 is the run's learner: it pulls batches, writes checkpoints and ``trainer_state.pt``. Ranks
1..N-1 (:meth:`~unstable.learners.BaseLearner.follow`) receive each batch from rank 0 and train on
their shard of it. Per update:

1. rank 0 broadcasts the batch, its version (and, the first time, its trainable weights and optimiser
   states, so a resumed or warm-started rank 0 is what everyone starts from);
2. every rank computes the advantages on the whole batch (GRPO's groups, A2C's GAE and per-env
   normalisation need all of it; the no-grad forwards behind them are sharded and gathered), then
   runs forward and backward on its shard of each optimiser step's part. Each shard's loss is
   normalised by the *part's* sequence and token counts, so it is that shard's share of the
   single-learner loss;
3. before each optimiser step the gradients are summed over the ranks (:meth:`DataParallel.sum_gradients`,
   one all-reduce of a flat buffer). A sum of shares is the single learner's gradient on the whole part;
4. every rank clips and steps its own AdamW on the same gradient, so the weights stay equal.

This is DDP (Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB) with gradient accumulation under ``no_sync`` and one reduction per step, summing instead
of averaging because the normalisation is already global (``torch.nn.parallel.DistributedDataParallel``
averages per-rank means, which differs from the single-learner step when shards hold different
token counts). It is written by hand rather than with the DDP wrapper because the learners switch
PEFT adapters on one model (A2C's critic) and keep parameters outside it (the value head), which
DDP's per-backward hooks do not follow; LoRA gradients are small, so one reduction per step costs
little next to the forward and backward.

Gloo on CPU, NCCL on CUDA for the gradients; the Python objects (batches, metrics, log-probs) go
over a gloo group in both cases. Only the maths is here; ``unstable.run.wiring`` starts the workers.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from unstable.records import Step, TrainBatch

DEFAULT_TIMEOUT_S = 1800.0  # a reduction within an update waiting longer than this raises (a rank hangs)
# ranks 1..N-1 wait for rank 0's next batch as long as rank 0 waits for the buffer (its wait_timeout_s,
# reset whenever a game arrives, or forever): the batch broadcast gets a week
IDLE_TIMEOUT_S = 7 * 24 * 3600.0


def free_port() -> int:
    """A TCP port free on this machine now (for rank 0's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def backend_for(device: torch.device) -> str:
    """``"nccl"`` for CUDA devices, ``"gloo"`` otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass
class DataParallel:
    """This process's place among the learner workers: its rank, their number, the groups to talk over."""

    rank: int
    world_size: int
    device: torch.device
    objects: Any = None  # the gloo group for Python objects (batches, metrics, log-probs)

    @classmethod
    def join(cls, rank: int, world_size: int, address: str, port: int, device: torch.device,
             timeout_s: float = DEFAULT_TIMEOUT_S) -> DataParallel:
        """Join (or create, as rank 0) the process group at ``tcp://address:port``; blocks until all
        ``world_size`` ranks have joined."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        backend = backend_for(device)
        if device.type == "cuda" and device.index is not None:
            torch.cuda.set_device(device)
        dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank,
                                world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s))
        objects = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=max(timeout_s, IDLE_TIMEOUT_S)))
        return cls(rank, world_size, device, objects)

    def leave(self) -> None:
        """Destroy the process group (the learner can then join another)."""
        if dist.is_initialized():
            dist.destroy_process_group()

    # ------------------------------------------------------------------------------ objects
    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (the others pass anything, e.g. ``None``)."""
        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self.objects)
        return box[0]

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.objects)
        return out

    # ---------------------------------------------------------------------------- gradients
    def sum_gradients(self, params: Sequence[nn.Parameter], flag: float = 0.0) -> float:
        """Replace each parameter's gradient by its sum over the ranks (a missing one counts as
        zeros: a rank whose shard of a part was empty), in one all-reduce; also sum ``flag`` (a
        rank's "my loss was not finite") and return it."""
        sizes = [p.numel() for p in params]
        flat = torch.zeros(sum(sizes) + 1, dtype=torch.float32, device=self.device)
        offset = 0
        for p, n in zip(params, sizes, strict=True):
            if p.grad is not None:
                flat[offset : offset + n] = p.grad.detach().reshape(-1).float()
            offset += n
        flat[-1] = flag
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p, n in zip(params, sizes, strict=True):
            summed = flat[offset : offset + n].view_as(p).to(p.dtype)
            if p.grad is None:
                p.grad = summed.clone()
            else:
                p.grad.copy_(summed)
            offset += n
        return float(flat[-1])


def shard_rows(rows: Sequence[int], lengths: Sequence[int], rank: int, world_size: int) -> list[int]:
    """This rank's rows of ``rows`` (indices into ``lengths``, each row's token count), balanced by tokens.

    Longest first, each row goes to the rank with the fewest tokens so far (ties: the lower rank):
    the ranks wait for the slowest at every reduction, so balancing tokens, not rows, is what counts.
    Deterministic, so every rank computes the same split. Returned in the order of ``rows``.
    """
    load = [0] * world_size
    owner: dict[int, int] = {}
    for row in sorted(rows, key=lambda r: (-lengths[r], r)):
        target = min(range(world_size), key=lambda k: (load[k], k))
        owner[row] = target
        load[target] += lengths[row]
    return [row for row in rows if owner[row] == rank]


def cpu_copy(value: Any) -> Any:
    """``value`` with every tensor in it (nested dicts, lists, tuples) copied to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: cpu_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(cpu_copy(v) for v in value)
    return value


class DataParallelLearner:
    """The learner's side of data parallelism, mixed into :class:`~unstable.learners.BaseLearner`.

    A learner whose ``_update`` shards its work (:meth:`_my_rows`, :meth:`_sharded`) sets
    ``supports_data_parallel = True``; the policy-gradient learners do. Without a process group
    (``data_parallel is None``, one learner worker) every method here is a no-op or the identity.
    """

    supports_data_parallel: ClassVar[bool] = False
    data_parallel: DataParallel | None = None
    _nonfinite: str | None = None  # a rank's first non-finite loss of this step, reported at the reduction
    _start_sent: bool = False

    def join_data_parallel(self, rank: int, world_size: int, address: str, port: int) -> None:
        """Become learner worker ``rank`` of ``world_size`` (rendezvous at ``address:port``, rank 0's)."""
        if not type(self).supports_data_parallel:
            raise ValueError(f"{type(self).__name__} does not shard its update (supports_data_parallel is False): "
                             "train it with num_learner_workers=1")
        self.use_data_parallel(DataParallel.join(rank, world_size, address, port, self.device))

    def use_data_parallel(self, data_parallel: DataParallel) -> None:
        """Train as one rank of ``data_parallel`` (an already joined group)."""
        self.data_parallel = data_parallel
        self._start_sent = False
        # a non-finite loss may not stop one rank alone (the others would wait for it at the next
        # reduction): it is remembered, and all ranks skip together at the reduction
        self._backward = self._backward_deferred

    def _backward_deferred(self, loss: Tensor, what: str) -> None:
        if not torch.isfinite(loss):
            self._nonfinite = self._nonfinite or f"{what} is {float(loss.detach())}"
            return
        loss.backward()

    # ----------------------------------------------------------------------- batches, ranks 1..N-1
    def follow(self) -> int:
        """Ranks 1..N-1: take part in each update rank 0 makes, on the batch it broadcasts, until
        rank 0 calls :meth:`release_followers` (its ``train`` does, when it returns). Returns the
        number of updates taken part in; call it again for the next ``train``."""
        dp = self.data_parallel
        if dp is None or dp.rank == 0:
            raise RuntimeError("follow() is for learner workers of rank >= 1; call join_data_parallel first")
        updates = 0
        while (message := dp.broadcast(None)) is not None:
            if message["start"] is not None:
                self._load_start_state(message["start"])
            self.version, self.last_version = message["version"], message["last_version"]
            self.update(message["batch"])
            updates += 1
        return updates

    def release_followers(self) -> None:
        """Rank 0: end the other ranks' :meth:`follow` (``train`` does, when it returns)."""
        if self.data_parallel is not None and self.data_parallel.rank == 0:
            self.data_parallel.broadcast(None)

    def _share_batch(self, batch: TrainBatch) -> None:
        """Rank 0, at the start of each update: send the batch and the version (and the first time,
        the weights and optimiser states) to the other ranks."""
        dp = self.data_parallel
        if dp is None or dp.rank != 0:
            return
        start = None if self._start_sent else self._start_state()
        dp.broadcast({"batch": batch, "version": self.version, "last_version": self.last_version, "start": start})
        self._start_sent = True

    def _start_state(self) -> dict[str, Any]:
        groups = self._param_groups()
        return {"params": {name: [cpu_copy(p) for p in params] for name, (_, params) in groups.items()},
                "optimizers": {name: cpu_copy(opt.state_dict()) for name, (opt, _) in groups.items()}}

    def _load_start_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for name, (optimizer, params) in self._param_groups().items():
                for param, value in zip(params, state["params"][name], strict=True):
                    param.copy_(value)
                optimizer.load_state_dict(state["optimizers"][name])

    # ---------------------------------------------------------------------------- the shards
    def _my_rows(self, steps: Sequence[Step], rows: Sequence[int]) -> list[int]:
        """This rank's share of ``rows`` (indices into ``steps``), balanced by tokens; all of them alone."""
        dp = self.data_parallel
        if dp is None:
            return list(rows)
        cut = self.config.max_train_len
        lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in steps]
        lengths = [min(n, cut) if cut is not None else n for n in lengths]
        return shard_rows(rows, lengths, dp.rank, dp.world_size)

    def _sharded(self, steps: Sequence[Step], compute: Any) -> list[Any]:
        """``compute(steps)`` (a list with one CPU value per step) with each rank computing its share
        and all of them gathered: the no-grad forwards every rank needs for the whole batch."""
        dp = self.data_parallel
        if dp is None:
            return list(compute(steps))
        mine = self._my_rows(steps, range(len(steps)))
        values = list(compute([steps[i] for i in mine])) if mine else []
        out: list[Any] = [None] * len(steps)
        for rows, shard in dp.all_gather((mine, cpu_copy(values))):
            for i, value in zip(rows, shard, strict=True):
                out[i] = value
        return out

    def _sum_gradients(self) -> int:
        """Sum the gradients over the ranks; returns how many ranks met a non-finite loss this step."""
        params = [p for _, params in self._param_groups().values() for p in params]
        return round(self.data_parallel.sum_gradients(params, float(self._nonfinite is not None)))
