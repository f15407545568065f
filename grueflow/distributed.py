"""Data-parallel training inside one stage: N processes started by ``accelerate launch``.

Each process holds a full replica of the trained model, takes its shard of every batch (warm start) or
rollout (RL), and averages its gradients with the others' before the optimiser step, so every replica
takes the same step and the replicas stay identical; only the main process writes outputs. The process
group is the one ``accelerate launch`` sets up (``WORLD_SIZE``, ``RANK``, ...), through accelerate's
``PartialState``: NCCL when the stage runs on CUDA (one GPU per process, ``cuda:LOCAL_RANK``), gloo on the CPU.
Every tensor a collective reduces is made on the stage's device.

A stage whose params ask for ``processes: N`` re-runs itself under ``accelerate launch`` (see
:func:`grueflow.stage.relaunch_data_parallel`), so Snakemake and DVC call the same command line.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence, TypeVar

import torch

from grueflow.config import ConfigError

T = TypeVar("T")
SHARDING_LAUNCHES = ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED")  # what accelerate launch sets for them
LAUNCHER_VARIABLES = ("RANK", "MASTER_ADDR", "MASTER_PORT")  # what torchrun (under accelerate launch) sets beside it
CPU = torch.device("cpu")


@dataclass(frozen=True)
class DataParallel:
    """This process's place among ``world_size`` data-parallel replicas (``rank`` 0 is the main one)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = CPU

    @classmethod
    def from_env(cls, device: torch.device = CPU) -> "DataParallel":
        """The process group ``accelerate launch`` started this process in (NCCL for a CUDA ``device``, gloo
        for the CPU), or a lone process."""
        sharded = [name for name in SHARDING_LAUNCHES if os.environ.get(name, "").lower() in ("1", "true")]
        if sharded:
            raise ConfigError(f"this stage was launched to shard its model ({sharded[0]} is set by the accelerate "
                              "config); grueflow's stages train whole replicas data-parallel and shard nothing: "
                              "launch with distributed_type: MULTI_GPU (or the stage's own processes: N), and use "
                              "lora: for a model whose full fine-tuning does not fit one GPU")
        world = os.environ.get("WORLD_SIZE", "1")
        if not world.strip().isdigit():
            raise ConfigError(f"WORLD_SIZE = {world!r} is not a process count; unset it, or start the stage under "
                              f"accelerate launch (which sets it), or give the method's processes: N")
        if int(world) <= 1:
            return cls(device=device)
        unset = [name for name in LAUNCHER_VARIABLES if name not in os.environ]
        if unset:
            raise ConfigError(f"WORLD_SIZE = {world} is set, but no launcher started this process ({unset[0]} is "
                              f"unset); unset WORLD_SIZE, or start the stage under accelerate launch, or give the "
                              f"method's processes: N")
        from accelerate import PartialState

        state = PartialState(cpu=device.type == "cpu")
        return cls(state.process_index, state.num_processes, device)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def threads(self, threads: int) -> int:
        """Torch threads of this process when the job has ``threads`` cores: an equal share, at least one."""
        return max(1, threads // self.world_size)

    def shard(self, items: Sequence[T], group: int = 1) -> list[T]:
        """This process's share of ``items``: whole groups of ``group`` consecutive items, dealt round-robin.

        ``len(items)`` must be a multiple of ``group``; shards differ in size by at most one group.
        """
        groups = [list(items[i:i + group]) for i in range(0, len(items), group)]
        return [item for g in groups[self.rank::self.world_size] for item in g]

    def sum(self, values: Iterable[float]) -> list[float]:
        """Element-wise sums of ``values`` over every process (float64)."""
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        if self.enabled:
            torch.distributed.all_reduce(tensor)
        return tensor.tolist()

    def mean(self, values: Iterable[float]) -> list[float]:
        """Element-wise means of ``values`` over every process."""
        return [v / self.world_size for v in self.sum(values)]

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by its mean over the processes (one flat all-reduce).

        A parameter without a gradient here counts as a zero gradient, so every process reduces the same
        flat buffer even when a shard was empty.
        """
        if not self.enabled:
            return
        params = [p for p in params if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch.distributed.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n

    def broadcast_parameters(self, modules: Iterable[torch.nn.Module]) -> None:
        """Copy the main process's weights into every replica (identical starting points)."""
        if not self.enabled:
            return
        for module in modules:
            for tensor in [*module.parameters(), *module.buffers()]:
                torch.distributed.broadcast(tensor.data, src=0)

    def gather(self, value: Any) -> list[Any]:
        """``value`` of every process, in rank order (any picklable object)."""
        if not self.enabled:
            return [value]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, value)
        return out

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()


def state_hash(modules: Iterable[torch.nn.Module]) -> str:
    """SHA-256 of the modules' parameters and buffers (names, dtypes, shapes and bytes), for comparing replicas."""
    digest = hashlib.sha256()
    for module in modules:
        for name, tensor in sorted(module.state_dict().items()):
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                          if tensor.numel() else b"")
    return digest.hexdigest()


def check_replicas(parallel: DataParallel, modules: Sequence[torch.nn.Module]) -> list[str]:
    """Every process's :func:`state_hash`; raises if the replicas drifted apart (they must stay identical)."""
    hashes = parallel.gather(state_hash(modules))
    if len(set(hashes)) > 1:
        raise RuntimeError(f"data-parallel replicas differ after training: state hashes by rank {hashes}")
    return hashes
