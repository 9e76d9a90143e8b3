"""Sharded models (accelerate device_map, part of the model offloaded to disk) score as the unsharded one.

On one CPU the offloaded layers run the same kernels on the same values in the same order (accelerate only moves the
weights in from the disk store before each layer runs), so the log-likelihoods agree to float32 rounding; 1e-5 allows
for a different reduction order in multithreaded kernels, well below the differences a changed weight gives (> 1e-2
here)."""

from __future__ import annotations

import pytest
import torch

from pytest_modelbench.errors import ModelLoadError
from pytest_modelbench.scoring.causal import CausalLMScorer
from pytest_modelbench.scoring.loading import load_model, resolve_model_source
from pytest_modelbench.scoring.placement import (
    compute_devices,
    input_device,
    placement_description,
    placement_kwargs,
    placement_label,
)
from pytest_modelbench.scoring.score_cache import weights_digest

TOLERANCE = 1e-5
REQUESTS = [
    ("The quick brown fox", " jumps over the lazy dog"), ("The quick brown fox", " sleeps"),
    ("Question: What is the first step of the process? Answer:", " erosion of rocks"),
    ("He couldn't figure out the issue", " with the rope"), ("", "Many people live in Ethiopia."),
]


def split_map(offloaded: set[str]) -> str:
    """An explicit device_map for the tiny 2-layer Llama: `offloaded` modules on disk, the rest on cpu."""
    modules = ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "model.rotary_emb", "lm_head"]
    return ";".join(f"{m}:{'disk' if m in offloaded else 'cpu'}" for m in modules)


@pytest.fixture(scope="module")
def sharded(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("offload")
    args = f"device_map={split_map({'model.layers.0', 'model.norm', 'lm_head'})},offload_folder={folder}"
    return load_model(resolve_model_source(str(tiny_model), args), dtype="float32")


def test_the_split_is_real(sharded):
    assert set(sharded.model.hf_device_map.values()) == {"cpu", "disk"}
    on_meta = {name for name, p in sharded.model.named_parameters() if p.device.type == "meta"}
    assert "model.layers.0.self_attn.q_proj.weight" in on_meta and "lm_head.weight" in on_meta
    assert "model.layers.1.self_attn.q_proj.weight" not in on_meta
    assert compute_devices(sharded.model) == [torch.device("cpu")]
    assert input_device(sharded.model) == torch.device("cpu")
    assert placement_description(sharded.model) == "cpu+disk"  # baseline provenance


def test_unsharded_placement(tiny_loaded):
    assert placement_description(tiny_loaded.model) == "cpu"
    assert compute_devices(tiny_loaded.model) == [input_device(tiny_loaded.model)] == [torch.device("cpu")]


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast"])
def test_sharded_scores_equal_unsharded(tiny_loaded, sharded, fast):
    unsharded = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, fast=fast, batch_size=2)
    split = CausalLMScorer(sharded.model, sharded.tokenizer, fast=fast, batch_size=2)
    expected, got = unsharded.loglikelihood(REQUESTS), split.loglikelihood(REQUESTS)
    assert fast is False or split._runner is not None  # the fast path really ran on the sharded model
    assert got == pytest.approx(expected, abs=TOLERANCE)
    assert all(v < -1.0 for v in got)  # real scores, not zeros from skipped layers


def test_fingerprints_and_weight_digest_match_and_see_offloaded_weights(tiny_loaded, sharded, tiny_model):
    assert sharded.fingerprint == tiny_loaded.fingerprint  # the same checkpoint files
    assert weights_digest(sharded.model) == weights_digest(tiny_loaded.model)
    assert placement_label(sharded.model) == placement_label(tiny_loaded.model) == "cpu"
    store = sharded.model.model.layers[0].self_attn.q_proj._hf_hook.weights_map
    store.dataset.state_dict["model.layers.0.self_attn.q_proj.weight"] = store["weight"] + 1.0
    try:
        assert weights_digest(sharded.model) != weights_digest(tiny_loaded.model)  # an offloaded weight counts
    finally:
        del store.dataset.state_dict["model.layers.0.self_attn.q_proj.weight"]


def test_device_map_auto_with_memory_limit_offloads_and_scores_the_same(tiny_loaded, tiny_model, tmp_path):
    args = f"device_map=auto,max_memory=cpu:150KB,offload_folder={tmp_path / 'offload'}"
    loaded = load_model(resolve_model_source(str(tiny_model), args), dtype="float32")
    assert set(loaded.model.hf_device_map.values()) == {"cpu", "disk"}
    scorer = CausalLMScorer(loaded.model, loaded.tokenizer, fast=True, batch_size="auto")
    expected = CausalLMScorer(tiny_loaded.model, tiny_loaded.tokenizer, batch_size=1).loglikelihood(REQUESTS)
    assert scorer.loglikelihood(REQUESTS) == pytest.approx(expected, abs=TOLERANCE)


def test_masked_lm_sharded_scores_equal_unsharded(tmp_path):
    from pytest_modelbench.scoring.masked import MaskedLMScorer
    from tests.fixtures.tiny_bert import build_tiny_bert

    path = str(build_tiny_bert(tmp_path / "bert"))
    modules = ["bert.embeddings", "bert.encoder.layer.0", "bert.encoder.layer.1", "cls"]
    device_map = ";".join(f"{m}:{'disk' if m.endswith('layer.0') else 'cpu'}" for m in modules)
    args = f"device_map={device_map},offload_folder={tmp_path / 'offload'}"
    plain = load_model(resolve_model_source(path), dtype="float32", masked=True)
    split = load_model(resolve_model_source(path, args), dtype="float32", masked=True)
    assert "disk" in split.model.hf_device_map.values()
    sentences = [("", "the poor man was good at chess"), ("", "she is very thin")]
    expected = [MaskedLMScorer(plain.model, plain.tokenizer).pll(c, s) for c, s in sentences]
    got = [MaskedLMScorer(split.model, split.tokenizer).pll(c, s) for c, s in sentences]
    assert got == pytest.approx(expected, abs=TOLERANCE)
    assert weights_digest(split.model) == weights_digest(plain.model)


@pytest.mark.parametrize("args, expected", [
    ({"device_map": "auto"}, {"device_map": "auto"}),
    ({"device_map": "cuda:1"}, {"device_map": "cuda:1"}),
    ({"device_map": 0}, {"device_map": 0}),
    ({"device_map": "model.layers.0:disk;lm_head:cuda:1;model.norm:0", "max_memory": "0:1.5GiB;cpu:300MB"},
     {"device_map": {"model.layers.0": "disk", "lm_head": "cuda:1", "model.norm": 0},
      "max_memory": {0: 1610612736, "cpu": 300_000_000}}),
    ({"device_map": "sequential", "max_memory": "cpu:1000"}, {"device_map": "sequential", "max_memory": {"cpu": 1000}}),
])
def test_placement_arguments_are_parsed(args, expected):
    assert placement_kwargs(args) == expected


@pytest.mark.parametrize("args, message", [
    ({"device_map": "gpu"}, "device_map: unknown device 'gpu'"),
    ({"device_map": "disk"}, "device_map: unknown device 'disk'"),
    ({"device_map": "model.layers.0:tpu"}, "device_map: unknown device 'tpu'"),
    ({"device_map": "auto", "max_memory": "cpu:10kb"}, "max_memory: expected device:size"),
    ({"device_map": "auto", "max_memory": "20GiB"}, "max_memory: expected device:size"),
    ({"max_memory": "cpu:1GB"}, "max_memory only applies with device_map"),
    ({"offload_folder": "/tmp"}, "offload_folder only applies with device_map"),
])
def test_bad_placement_arguments_are_named(args, message):
    with pytest.raises(ModelLoadError, match=message):
        placement_kwargs(args)


def test_offload_folder_that_cannot_be_created_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ModelLoadError, match=r"offload_folder: cannot create .*file/sub"):
        resolve_model_source(str(tmp_path), f"device_map=auto,offload_folder={blocker / 'sub'}")


class MappedModel(torch.nn.Module):
    """Only what placement reads: a device map (no GPU needed to construct torch.device('cuda', n))."""

    def __init__(self, device_map: dict):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(4, 2)
        self.hf_device_map = device_map
        self.config = type("Config", (), {"vocab_size": 1000, "hidden_size": 8})()

    def get_input_embeddings(self):
        return self.model.embed_tokens


@pytest.mark.parametrize("device_map, devices, first", [
    ({"model.embed_tokens": "cpu", "model.layers": "disk"}, ["cpu"], "cpu"),
    ({"model.embed_tokens": 1, "model.layers.0": 0, "lm_head": "cuda:1"}, ["cuda:1", "cuda:0"], "cuda:1"),
    ({"model.embed_tokens": "disk", "model.layers.0": "cpu", "model.layers.1": 0}, ["cuda:0"], "cuda:0"),
    ({"model": "cpu", "lm_head": 2}, ["cuda:2"], "cuda:2"),
])
def test_offloaded_layers_run_on_the_main_device(device_map, devices, first):
    model = MappedModel(device_map)
    assert compute_devices(model) == [torch.device(d) for d in devices]
    assert input_device(model) == torch.device(first)


def test_auto_batch_size_fits_the_device_with_least_free_memory(monkeypatch):
    from pytest_modelbench.scoring import causal

    free = {torch.device("cuda", 0): 80 * 2**30, torch.device("cuda", 1): 16 * 2**20}
    monkeypatch.setattr(causal, "_free_memory_bytes", lambda device: free[device])
    row = 100 * (1000 + 16 * 8) * 4  # bytes per row of 100 tokens (auto_batch_size's estimate)
    both = MappedModel({"model.embed_tokens": 0, "lm_head": 1})
    assert causal.auto_batch_size(both, 100) == int(16 * 2**20 * 0.25 // row) == 9
    free[torch.device("cuda", 1)] = 2**40
    assert causal.auto_batch_size(both, 100) == causal.MAX_AUTO_BATCH


def test_a_device_map_that_leaves_out_modules_is_a_model_load_error(tiny_model):
    with pytest.raises(ModelLoadError, match=r"does not give any device .*model\.embed_tokens\.weight"):
        load_model(resolve_model_source(str(tiny_model), "device_map=model.layers.0:disk;lm_head:cpu"))
