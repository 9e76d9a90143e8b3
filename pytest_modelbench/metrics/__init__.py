"""Metrics (layer 3): responses → per-document values → scores per category, and the evidence the gate pairs."""
