"""Gate core (layer 4): evidence vs baseline → entries → verdicts → one session decision. No torch, pytest or
rendering: tests/unit/test_layers.py imports it with those blocked."""
