"""`--backend MODULE:FACTORY`: a third-party backend, written against the seam (scoring/backend.py).

MODULE is imported from sys.path, then from the pytest rootdir; `FACTORY(model=..., model_args=..., device=...)` (the
--model, --model-args and --device values as given) returns the backend, which the runner wraps in the front
(scoring/front.py). Anything that fails on the way is a ModelLoadError naming the option and what failed.

The backend is kept behind `CheckedBackend`: its identity methods (describe, cache_namespace,
generation_cache_namespace) are checked on every call (a raise or a value the seam does not promise is a
ModelLoadError naming the backend and the method), and its cache namespaces are qualified by its full identity (the
MODULE:FACTORY, the module's file and what describe() says), so two backends that reuse one namespace string never
share scores. The values it returns are checked by the front, as every backend's are.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_modelbench.errors import ModelLoadError
from pytest_modelbench.scoring.backend import BackendInfo

REQUIRED = ("loglikelihoods", "describe")


@dataclass(frozen=True)
class BackendFactory:
    spec: str  # MODULE:FACTORY
    rootdir: Path | None = None

    def build(self, *, model: str | None, model_args: str | None, device: str) -> "CheckedBackend":
        factory = self._factory()
        where = f"--backend {self.spec}"
        try:
            backend = factory(model=model, model_args=model_args, device=device)
        except Exception as exc:
            raise ModelLoadError(f"{where}: {self.spec} raised {type(exc).__name__}: {exc}") from exc
        missing = [method for method in REQUIRED if not callable(getattr(backend, method, None))]
        if missing:
            raise ModelLoadError(f"{where}: it returned a {type(backend).__name__}, which has no {missing[0]}(); a "
                                 "backend has loglikelihoods(requests, on_batch) and describe() (scoring/backend.py)")
        checked = CheckedBackend(backend, self.spec, getattr(sys.modules.get(type(backend).__module__), "__file__", ""))
        checked.describe()  # a backend that cannot say what it is fails before any task is scored
        return checked

    def _factory(self):
        where = f"--backend {self.spec}"
        module_name, _, factory_name = self.spec.partition(":")
        if not module_name or not factory_name:
            raise ModelLoadError(f"{where}: expected MODULE:FACTORY, e.g. --backend mybackend:make")
        if self.rootdir is not None and str(self.rootdir) not in sys.path:
            sys.path.append(str(self.rootdir))
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise ModelLoadError(f"{where}: importing {module_name} failed: {exc}") from exc
            raise ModelLoadError(f"{where}: no module named '{module_name}' on sys.path or in the rootdir "
                                 f"{self.rootdir}") from exc
        except Exception as exc:
            raise ModelLoadError(f"{where}: importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
        factory = getattr(module, factory_name, None)
        if not callable(factory):
            raise ModelLoadError(f"{where}: module {module_name} ({getattr(module, '__file__', '?')}) has no callable "
                                 f"'{factory_name}'")
        return factory


INFO_TEXT_FIELDS = ("name", "fingerprint", "model_type", "dtype", "device")
MODEL_TYPES = ("causal", "masked")


class CheckedBackend:
    """A third-party backend whose identity methods are checked (module docstring); every other attribute is the
    backend's own, so the front sees the optional methods it has and only those."""

    def __init__(self, backend: Any, spec: str, module_file: str):
        self.backend, self.spec, self.module_file = backend, spec, module_file
        self.kind = type(backend).__name__  # how messages name the backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def describe(self) -> BackendInfo:
        info = self._call("describe")
        if not isinstance(info, BackendInfo):
            raise self._error("describe", f"returned {type(info).__name__} {info!r:.80}, not a BackendInfo")
        for name in INFO_TEXT_FIELDS:
            value = getattr(info, name)
            if not isinstance(value, str):
                raise self._error("describe", f"returned a BackendInfo whose {name} is {value!r:.80}, not a string")
        if info.model_type not in MODEL_TYPES:
            raise self._error("describe", f"returned model_type {info.model_type!r:.40}; it is one of "
                                          f"{', '.join(MODEL_TYPES)}")
        if not isinstance(info.scorer_kwargs, dict):
            raise self._error("describe", f"returned scorer_kwargs {info.scorer_kwargs!r:.80}, not a dict")
        return info

    def cache_namespace(self, shared_tokens: bool) -> str | None:
        return self._qualified("cache_namespace", shared_tokens)

    def generation_cache_namespace(self) -> str | None:
        return self._qualified("generation_cache_namespace")

    def _qualified(self, method: str, *args: Any) -> str | None:
        """The backend's own namespace within its full identity; None (nothing cached) without one."""
        if not callable(getattr(self.backend, method, None)):
            return None
        namespace = self._call(method, *args)
        if namespace is None:
            return None
        if not isinstance(namespace, str):
            raise self._error(method, f"returned {type(namespace).__name__} {namespace!r:.80}, not a string or None")
        identity = {"backend": self.spec, "module_file": self.module_file,
                    "describe": dataclasses.asdict(self.describe()), "namespace": namespace}
        return json.dumps(identity, sort_keys=True, default=repr)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.backend, method)(*args)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise self._error(method, f"raised {type(exc).__name__}: {exc}") from None

    def _error(self, method: str, problem: str) -> ModelLoadError:
        return ModelLoadError(f"--backend {self.spec}: {self.kind}.{method}() {problem} (scoring/backend.py says what "
                              "it returns)")
