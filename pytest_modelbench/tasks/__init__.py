"""Task engine (layer 1, docs/architecture.md): lm-eval YAML → TaskConfig → documents → requests; no model, no metric."""
