"""Row rules declared in a task's `modelbench:` block, applied to every split as it is loaded (a process_docs step).

    modelbench:
      category_field: bias_type
      categories: [race-color, gender, ...]    # the expected values; another value is an error naming the row,
                                               # and an expected value without rows is reported as an empty category
      required_fields: [sent_more, sent_less]  # present, not null, not "" (dotted names reach into nested fields;
                                               # for a list value every element must be non-empty)
      exclude:                                 # rows dropped on purpose: known-bad rows of a public dataset
        sent_more: ["..."]                     # (field -> values; say why in a YAML comment)

Rows are checked in split order before any `process_docs` of the YAML runs, so "row i" is the i-th row (from 0) of the
split as the dataset stores it. Excluded rows are dropped first and never checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pytest_modelbench.errors import DocumentError

_MISSING = object()


def field_value(row: Mapping[str, Any], dotted: str) -> Any:
    """`row["a"]["b"]` for "a.b"; _MISSING when any step is absent."""
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _is_empty(value: Any) -> bool:
    if value is _MISSING or value is None:
        return True
    if isinstance(value, str):
        return value.strip() == ""
    if isinstance(value, (list, tuple)):
        return len(value) == 0 or any(_is_empty(item) for item in value)
    return False


@dataclass(frozen=True)
class DocumentRules:
    """Callable like lm-eval's process_docs: takes a split (a datasets.Dataset or a list of rows), returns kept rows."""

    where: str  # "<task yaml>: task '<name>'"
    required_fields: tuple[str, ...] = ()
    category_field: str | None = None
    categories: tuple[str, ...] | None = None
    exclude: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    then: Callable[[Any], Any] | None = None  # the YAML's own process_docs, applied to the kept rows

    def __call__(self, dataset: Any) -> Any:
        split = getattr(dataset, "split", None)
        split_text = f" of split '{split}'" if split is not None else ""
        keep = []
        for i, row in enumerate(dataset):
            if self.is_excluded(row):
                continue
            self.check_row(row, f"{self.where}, row {i}{split_text}")
            keep.append(i)
        if len(keep) != len(dataset):
            dataset = dataset.select(keep) if hasattr(dataset, "select") else [dataset[i] for i in keep]
        return self.then(dataset) if self.then is not None else dataset

    def is_excluded(self, row: Mapping[str, Any]) -> bool:
        return any(field_value(row, name) in values for name, values in self.exclude.items())

    def check_row(self, row: Mapping[str, Any], where: str) -> None:
        for name in self.required_fields:
            value = field_value(row, name)
            if _is_empty(value):
                state = "missing" if value is _MISSING else f"empty ({value!r})"
                raise DocumentError(f"{where}: required field '{name}' is {state}")
        if self.categories is not None and self.category_field is not None:
            value = field_value(row, self.category_field)
            if _is_empty(value):
                raise DocumentError(f"{where}: category field '{self.category_field}' is missing or empty")
            if str(value) not in self.categories:
                raise DocumentError(
                    f"{where}: unknown category {value!r} in field '{self.category_field}' "
                    f"(modelbench.categories: {', '.join(self.categories)})"
                )
