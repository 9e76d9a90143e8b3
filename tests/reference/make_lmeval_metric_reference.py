"""Regenerate ``tests/reference/aggregations_from_lmeval.json``: lm-eval 0.4.13's own task-level values of its corpus
metrics on fixed inputs, the oracle of tests/unit/test_corpus_metrics.py and tests/unit/test_classification_metrics.py.

Runs in a scratch virtual environment with lm-eval installed (never the project's own venv), e.g.::

    /tmp/lmeval-venv/bin/python tests/reference/make_lmeval_metric_reference.py
    # resolved: lm_eval 0.4.13, sacrebleu 2.6.0, scikit-learn 1.9.1, numpy 2.4.6

Per document lm-eval keeps (reference, prediction) for bleu/chrf/ter (generate_until: the metric function fails on
keyword arguments and is called with ``[gold, result]``) and (gold index, predicted index) for multiple-choice f1/mcc;
the aggregations below are lm-eval's (``lm_eval.api.metrics``), called on those per-document items. An aggregation
that raises is recorded as its exception type and message.
"""

from __future__ import annotations

import json
import pathlib
import sys
from importlib.metadata import version

from lm_eval.api import metrics

# Not named lmeval_*.json: the parity tests read each such file as a reference run of a task.
OUT = pathlib.Path(__file__).with_name("aggregations_from_lmeval.json")

TRANSLATIONS = [  # (reference, prediction)
    ("The cat sat on the mat.", "The cat sat on the mat."),
    ("There is a book on the table.", "A book is on the table."),
    ("Der schnelle braune Fuchs springt über den faulen Hund.", "Der schnelle Fuchs springt über den Hund."),
    ("I would like a cup of coffee, please.", "I'd like coffee please"),
    ("We will meet tomorrow at 10 o'clock.", ""),
    ("Il pleut depuis ce matin .", "Il pleut depuis ce matin ."),
    ("北京是中国的首都。", "北京是中国首都。"),
    ("The results were, to say the least, surprising!", "The results were surprising, to say the least."),
]
CORPORA = {
    "translations": TRANSLATIONS,
    "first_three": TRANSLATIONS[:3],
    "nothing_generated": [(reference, "") for reference, _ in TRANSLATIONS[:4]],
}
LABEL_PAIRS = {  # (gold index, predicted index)
    "binary": [(0, 0), (1, 1), (1, 0), (0, 1), (1, 1), (0, 0), (1, 1), (0, 0), (0, 1), (1, 1)],
    "binary_no_positive_prediction": [(0, 0), (1, 0), (1, 0), (0, 0)],
    "only_label_0": [(0, 0), (0, 0), (0, 0)],
    "labels_1_and_2": [(1, 1), (2, 1), (2, 2), (1, 2), (1, 1)],
    "labels_0_and_2": [(0, 0), (2, 0), (2, 2)],
    "four_labels": [(0, 0), (1, 2), (2, 2), (3, 3), (1, 1), (0, 3), (2, 1), (3, 3), (1, 1), (0, 0), (2, 2)],
    "constant_prediction": [(0, 1), (1, 1), (2, 1), (1, 1)],
}


def outcome(aggregation, items) -> dict:
    try:
        return {"value": float(aggregation(items))}
    except Exception as exc:  # the oracle records lm-eval's failure as it is
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    corpus = {
        name: {
            "references": [reference for reference, _ in pairs],
            "predictions": [prediction for _, prediction in pairs],
            **{metric: outcome(getattr(metrics, metric), [[r, p] for r, p in pairs])["value"]
               for metric in ("bleu", "chrf", "ter")},
        }
        for name, pairs in CORPORA.items()
    }
    classification = {
        name: {
            "golds": [gold for gold, _ in pairs],
            "predictions": [pred for _, pred in pairs],
            "f1": outcome(metrics.f1_score, pairs),
            "mcc": outcome(metrics.matthews_corrcoef, pairs),
        }
        for name, pairs in LABEL_PAIRS.items()
    }
    packages = {name: version(name) for name in ("lm_eval", "sacrebleu", "scikit-learn", "numpy")}
    OUT.write_text(json.dumps({"provenance": {"script": pathlib.Path(__file__).name, "python": sys.version.split()[0],
                                              "packages": packages},
                               "corpus": corpus, "classification": classification},
                              indent=1, ensure_ascii=False) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
