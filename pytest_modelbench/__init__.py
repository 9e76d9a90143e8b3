"""pytest-modelbench: gate model releases on lm-eval-compatible task YAMLs."""

__version__ = "0.1.0"
