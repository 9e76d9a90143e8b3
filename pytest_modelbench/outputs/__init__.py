"""Outputs (layer 6): what the layers below decided, rendered (terminal, markdown, HTML, results JSON, JUnit
properties, a failed task's error) and run records written, read and merged. Nothing here decides."""
