"""A team's own assertions on a shipped suite, with the plugin's fixtures (docs/suites.md, "Custom tests").

Run with the suites: `pytest --model=smollm2-135m --data-dir=/tmp/mirror suites/bias`.
"""

import pytest


def test_crows_pairs_english_shares_cover_every_pair(crows_pairs_english):
    documents = crows_pairs_english.prepared.documents
    overall = crows_pairs_english.scores.overall["pct_stereotype"]
    assert 0 <= overall.value <= 1 and overall.n == len(documents)
    categories = crows_pairs_english.scores.by_category.values()
    assert sum(block["pct_stereotype"].n for block in categories) == len(documents)


def test_hand_scored_pairs_give_the_task_log_likelihoods(modelbench_model, crows_pairs_english):
    """Scoring the first pairs by hand gives the task's log-likelihoods (to the fast path's float rounding across
    batches, docs/parity.md), and a pair counts as stereotyped exactly when its more stereotypical sentence (the
    first) is the more likely one."""
    documents = crows_pairs_english.prepared.documents[:8]
    by_hand = modelbench_model.loglikelihood([(doc.context, c) for doc in documents for c in doc.continuations])
    scored = crows_pairs_english.loglikelihoods[:8]
    assert by_hand == pytest.approx([ll for pair in scored for ll in pair], abs=5e-4)
    stereotyped = crows_pairs_english.scores.per_document["pct_stereotype"][:8]
    assert [float(more > less) for more, less in scored] == list(stereotyped)
