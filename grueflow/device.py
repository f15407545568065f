"""Where a stage computes and in what precision (DESIGN.md, "Devices and precision").

Two settings with different standing:

- the **device** is an execution setting, like ``threads``: ``--device auto|cpu|cuda|cuda:N`` on a stage's
  command line, else ``$GRUEFLOW_DEVICE``, else ``auto`` (CUDA when PyTorch sees a GPU, else the CPU). It is
  recorded in ``stage.json`` and is never a rerun trigger;
- the **precision** is a param (the suite's ``precision: auto | fp32 | bf16``), because it changes results.
  ``auto`` is bf16 on CUDA and fp32 on the CPU. Under bf16, what trains keeps float32 master weights and
  optimiser state and runs its forward passes under bf16 autocast; frozen models (the KL reference, reward
  and metric models) are loaded in bf16; log-probs, KL, advantages and losses are float32 (logits are upcast
  before ``log_softmax``).

``$GRUEFLOW_FAST=0`` turns every fast path off (:mod:`grueflow.models.backend`): plain transformers on any
device. Everything here imports torch lazily, so validating params never pays for it.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional

from grueflow.config import ConfigError
from grueflow.io import ENGINE

if TYPE_CHECKING:
    import torch

DEVICE_ENV = "GRUEFLOW_DEVICE"
FAST_ENV = "GRUEFLOW_FAST"
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N"
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
Precision = Literal["fp32", "bf16"]
PrecisionSetting = Literal["auto", "fp32", "bf16"]
PRECISIONS = ("auto", "fp32", "bf16")
FAST_VALUES = {"1": True, "true": True, "on": True, "yes": True, "0": False, "false": False, "off": False, "no": False}


def device_setting(given: Optional[str] = None) -> tuple[str, str]:
    """The device asked for and where it came from: ``--device``, else ``$GRUEFLOW_DEVICE``, else ``auto``.

    Raises :class:`ConfigError` naming the setting and the valid choices for anything else.
    """
    value, source = ((given, "--device") if given else
                     (os.environ[DEVICE_ENV], DEVICE_ENV) if os.environ.get(DEVICE_ENV) else ("auto", "default"))
    if not DEVICE_PATTERN.fullmatch(value.strip()):
        raise ConfigError(f"{source} = {value!r} is not a device; valid: {DEVICE_CHOICES}")
    return value.strip(), source


def resolve_device(setting: str, source: str = "--device", local_rank: Optional[int] = None) -> "torch.device":
    """The ``torch.device`` for ``setting``; fails in seconds, before any model loads, where it cannot run.

    ``cuda`` without an index is the data-parallel process's own GPU (``LOCAL_RANK``) or GPU 0.
    """
    import torch

    if setting == "cpu" or (setting == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA"
        raise ConfigError(f"{source} = {setting!r} asks for a GPU, but CUDA is not available here (torch "
                          f"{torch.__version__}, built with {built}); " + _no_cuda_fix(source))
    count = torch.cuda.device_count()
    if setting in ("auto", "cuda"):
        rank = local_rank if local_rank is not None else int(os.environ.get("LOCAL_RANK", "0"))
        index = rank % count
    else:
        index = int(setting.split(":", 1)[1])
        if index >= count:
            raise ConfigError(f"{source} = {setting!r}: this machine has {count} CUDA device(s), "
                              f"cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", index)


def _no_cuda_fix(source: str) -> str:
    """How to fix a GPU asked for by ``source`` where there is none. A Snakemake job's ``--device`` is the rule's,
    not the user's: ``cuda`` where the suite's ``resources:`` give the stage's rule ``gpu: N``."""
    if source == DEVICE_ENV:
        return f"unset {DEVICE_ENV} or set it to cpu or auto"
    if os.environ.get(ENGINE) == "snakemake":
        return ("Snakemake passes --device cuda to a stage whose rule the suite's resources give gpu: N (or "
                "--set-resources <rule>:device=...): drop that gpu from the suite's resources: (or the "
                "--set-resources), or run where CUDA is")
    return "use --device cpu or auto"


def resolve_precision(precision: str, device: "torch.device") -> Precision:
    """``auto`` is bf16 on CUDA and fp32 elsewhere; fp32 and bf16 stand as they are."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision = {precision!r} is not a precision; valid: {', '.join(PRECISIONS)}")
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision  # type: ignore[return-value]


def fast_paths() -> bool:
    """Whether fast paths may run: ``$GRUEFLOW_FAST`` unset or on (1, true, on, yes); 0, false, off, no turn
    them all off."""
    value = os.environ.get(FAST_ENV, "1").strip().lower()
    if value not in FAST_VALUES:
        raise ConfigError(f"{FAST_ENV} = {value!r}; valid: {', '.join(FAST_VALUES)}")
    return FAST_VALUES[value]


@dataclass(frozen=True)
class Execution:
    """Where and how a stage computes: its device, its (resolved) precision, and whether fast paths may run."""

    device: "torch.device"
    precision: Precision = "fp32"
    fast: bool = True

    @property
    def fast_paths_run(self) -> bool:
        """Whether the fast paths run: allowed (:attr:`fast`) and where they apply, float32 on the CPU (the CPU
        kernels of :func:`grueflow.models.backend.select`); elsewhere the plain transformers backend runs."""
        return self.fast and self.device.type == "cpu" and self.precision == "fp32"

    @property
    def train_dtype(self) -> "torch.dtype":
        """The dtype of weights that train: always float32 (master weights; bf16 is autocast's)."""
        import torch

        return torch.float32

    @property
    def frozen_dtype(self) -> "torch.dtype":
        """The dtype of frozen models (reference, reward and metric models): bf16 under bf16, else float32."""
        import torch

        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    def autocast(self) -> Any:
        """A context for forward passes: bf16 autocast on this device under bf16, else nothing."""
        import torch

        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def record(self) -> dict[str, Any]:
        """What ``provenance.json`` says of it: ``fast_paths`` whether they ran (:attr:`fast_paths_run`), not only
        whether ``$GRUEFLOW_FAST`` allowed them; with the torch threads in effect (results may differ in the last
        bits with another count)."""
        import torch

        return {"device": str(self.device), "precision": self.precision, "fast_paths": self.fast_paths_run,
                "threads": torch.get_num_threads()}


def cpu_execution() -> Execution:
    """The CPU in float32, fast paths as ``$GRUEFLOW_FAST`` says: the library's default everywhere."""
    import torch

    return Execution(torch.device("cpu"), "fp32", fast_paths())


def or_cpu(execution: Optional[Execution]) -> Execution:
    """``execution``, or :func:`cpu_execution` where none was given (every library default)."""
    return execution if execution is not None else cpu_execution()


def execution(device: Optional[str], precision: str = "auto", local_rank: Optional[int] = None) -> Execution:
    """Resolve a stage's ``--device`` (or ``$GRUEFLOW_DEVICE``) and its ``precision`` param."""
    setting, source = device_setting(device)
    resolved = resolve_device(setting, source, local_rank)
    return Execution(resolved, resolve_precision(precision, resolved), fast_paths())
