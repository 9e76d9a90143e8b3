"""`--backend MODULE:FACTORY`: a third-party backend, written against the seam (scoring/backend.py).

MODULE is imported from sys.path, then from the pytest rootdir; `FACTORY(model=..., model_args=..., device=...)` (the
--model, --model-args and --device values as given) returns the backend, which the runner wraps in the front
(scoring/front.py). Anything that fails on the way is a ModelLoadError naming the option and what failed.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_modelbench.errors import ModelLoadError

REQUIRED = ("loglikelihoods", "describe")


@dataclass(frozen=True)
class BackendFactory:
    spec: str  # MODULE:FACTORY
    rootdir: Path | None = None

    def build(self, *, model: str | None, model_args: str | None, device: str):
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
        return backend

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
