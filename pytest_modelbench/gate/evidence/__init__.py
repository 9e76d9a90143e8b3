"""The gate's evidence: paired statistics of a candidate against its baseline on the same documents.

significance.py  one-sided p-values against a margin (normal, Student's t, McNemar), Holm, the detectable regression
paired.py        the paired standard error (plain or cluster-robust) and the paired bootstrap
clusters.py      documents declared related (`modelbench.gate.cluster`): labels, counts, degrees of freedom, signs
paired_tests.py  one entry's oriented delta and standard error, from per-document values or a metric's own aggregate
pooling.py       a task's sufficient statistics for a suite's pooled entries, and the pooled documents
anytime.py       always-valid p-values and confidence bounds, for looks before a task is scored in full
"""
