"""Where a model's layers live and run: one device (`--device`), or spread by accelerate
(`--model-args device_map=...`, with `max_memory` and `offload_folder`) over GPUs, CPU memory and disk.

accelerate's rule (dispatch_model): layers mapped to a GPU run there; layers mapped to "cpu" or "disk" are offloaded
and run on the main device (the first GPU in the map) when the map has a GPU, else on the CPU. An offloaded layer's
parameters are on the 'meta' device; their values live in its hook's weights map (CPU memory or files on disk).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from pytest_modelbench.errors import ModelLoadError

if TYPE_CHECKING:  # torch is imported when a model is loaded: resolving --model-args stays light for collection
    import torch

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
OFFLOAD = ("cpu", "disk")
SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMG]i?B)?")
PLACEMENT_ARGS = ("device_map", "max_memory", "offload_folder")  # --model-args that say where layers live
UNITS = {None: 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def placement_kwargs(args: dict[str, Any]) -> dict[str, Any]:
    """from_pretrained's device_map / max_memory / offload_folder from the --model-args values (strings as typed).

    device_map: a strategy (auto, balanced, balanced_low_0, sequential), one device (cpu, cuda, cuda:N, N), or a
    map `module:device;module:device` (devices as before, or disk). max_memory: `device:size;...` with device a GPU
    index or cpu and size in bytes or with a unit (KB, MB, GB, KiB, MiB, GiB: 200MB, 20GiB). offload_folder: a
    folder for disk-offloaded weights, created if missing."""
    if "device_map" not in args:
        extra = [key for key in ("max_memory", "offload_folder") if key in args]
        if extra:
            raise ModelLoadError(f"--model-args {extra[0]} only applies with device_map (e.g. device_map=auto)")
        return {}
    kwargs: dict[str, Any] = {"device_map": _device_map(args["device_map"])}
    if "max_memory" in args:
        kwargs["max_memory"] = _max_memory(args["max_memory"])
    if "offload_folder" in args:
        kwargs["offload_folder"] = _offload_folder(args["offload_folder"])
    return kwargs


def _device_map(value: Any) -> str | int | dict[str, str | int]:
    text = str(value).strip()
    if text in STRATEGIES:
        return text
    if ";" not in text and ":" not in text.replace("cuda:", ""):
        return _device(text, "device_map", allow_offload=False)
    mapping: dict[str, str | int] = {}
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        module, sep, device = entry.partition(":")
        if not sep or not module.strip():
            raise ModelLoadError(
                f"--model-args device_map: expected module:device, got {entry!r} "
                f"(or one of {', '.join(STRATEGIES)}, or one device)"
            )
        mapping[module.strip()] = _device(device.strip(), "device_map", allow_offload=True)
    return mapping


def _device(text: str, option: str, *, allow_offload: bool) -> str | int:
    if text.isdigit():
        return int(text)
    if text == "cpu" or (allow_offload and text == "disk"):
        return text
    kind, _, index = text.partition(":")
    if kind == "cuda" and (index == "" or index.isdigit()):
        return text
    allowed = "cpu, disk, cuda, cuda:N or a GPU index N" if allow_offload else "cpu, cuda, cuda:N or a GPU index N"
    raise ModelLoadError(f"--model-args {option}: unknown device {text!r} (expected {allowed})")


def _max_memory(value: Any) -> dict[str | int, int]:
    limits: dict[str | int, int] = {}
    for entry in filter(None, (part.strip() for part in str(value).split(";"))):
        device, sep, size = entry.partition(":")
        match = SIZE.fullmatch(size.strip())
        if not sep or not match:
            raise ModelLoadError(
                f"--model-args max_memory: expected device:size entries separated by ';' (e.g. 0:20GiB;cpu:30GiB), "
                f"got {entry!r}"
            )
        limits[_device(device.strip(), "max_memory", allow_offload=False)] = int(float(match[1]) * UNITS[match[2]])
    if not limits:
        raise ModelLoadError("--model-args max_memory: no device:size entry (e.g. 0:20GiB;cpu:30GiB)")
    return limits


def _offload_folder(value: Any) -> str:
    folder = Path(str(value)).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelLoadError(f"--model-args offload_folder: cannot create {folder} ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ModelLoadError(f"--model-args offload_folder: {folder} is not writable; choose a writable folder")
    return str(folder)


# --- a loaded model ---------------------------------------------------------------------------------------------


def compute_devices(model) -> list[torch.device]:
    """The devices the model's layers run on, main device first (see the module docstring)."""
    import torch

    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return [next(model.parameters()).device]
    devices: list[torch.device] = []
    for value in device_map.values():
        if value not in OFFLOAD:
            device = _torch_device(value)
            if device not in devices:
                devices.append(device)
    return devices or [torch.device("cpu")]


def input_device(model) -> torch.device:
    """Where input ids go: the device the input embedding runs on."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return next(model.parameters()).device
    embedding = model.get_input_embeddings()
    name = next(n for n, module in model.named_modules() if module is embedding)
    owner = max((key for key in device_map if key == "" or name == key or name.startswith(key + ".")), key=len)
    value = device_map[owner]
    return compute_devices(model)[0] if value in OFFLOAD else _torch_device(value)


def _torch_device(value: str | int) -> torch.device:
    """A device map's value: a device name, or an int for a GPU index."""
    import torch

    return torch.device("cuda", value) if isinstance(value, int) else torch.device(value)


def placement_label(model) -> str:
    """The kinds of device the model runs on ('cpu', 'cuda', 'cpu+cuda'): the score cache keeps them apart."""
    return "+".join(sorted({device.type for device in compute_devices(model)}))


def placement_description(model) -> str:
    """Where the weights are, for baseline provenance: a device ('cpu', 'cuda:0') or a device map's ('0+1+cpu+disk')."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return str(next(model.parameters()).device)
    return "+".join(sorted({str(value) for value in device_map.values()}))


def named_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer with its value: an offloaded one (on 'meta') read from its hook's weights map."""
    stores: dict[str, Any] = {}
    for module_name, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        for part in getattr(hook, "hooks", [hook]):
            if getattr(part, "offload", False) and getattr(part, "weights_map", None) is not None:
                stores[module_name] = part.weights_map
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.device.type == "meta":
            tensor = _offloaded_value(name, stores)
        yield name, tensor


def _offloaded_value(name: str, stores: dict[str, Any]) -> torch.Tensor:
    owner, local = name, ""
    while owner:
        owner, _, head = owner.rpartition(".")
        local = f"{head}.{local}" if local else head
        if owner in stores:
            return stores[owner][local]
    raise ModelLoadError(f"weight {name} is on the meta device and no offload store holds it (accelerate device_map)")
