"""The pytest layer: every module that imports pytest or syrupy. plugin.py is the entry point (pyproject's pytest11);
the other modules are called from it and never import it (what they share with it is in stash_keys.py)."""
