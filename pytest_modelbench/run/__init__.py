"""Run (layer 5): one task end to end (prepare, score, measure), and which items a --shard runs."""
