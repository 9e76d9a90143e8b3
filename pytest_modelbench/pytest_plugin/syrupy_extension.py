"""A syrupy extension for baselines: serializer, storage, comparator (the gate itself) and reporter.

Storage: one JSON file per task, at ``<baselines dir>/<baseline name>/<suite folder>/<task>.json``. The path is
carried by `BaselineSite`, the stand-in for a task item that syrupy's `PyTestLocation` needs (syrupy itself
only knows Python test functions).

Comparator: `matches` takes the gate's own outcome for the two texts (`BaselineExtension.decided`, set by
gate_hooks.py, which also has the documents that aggregate metrics need), else parses both sides and
applies the gate (judge.gate_texts); so a candidate whose scores drift inside the band *matches* its baseline and `--snapshot-update` never rewrites it. It does not match (and so
`--snapshot-update` rewrites it) when the baseline is missing, corrupt, not comparable, or when an entry
regressed — and, under `--snapshot-update` only (`BaselineUpdateExtension`), when an entry improved, which
raises the bar. `matches` never raises: syrupy would record the exception and skip the write.

Discovery is per task file: syrupy's own unused-snapshot logic is written for test modules and would mark
the baselines of deselected tasks unused, so `discover_snapshots` returns only the file of the task being
asserted and unused baselines are found by `gate_hooks.py` (task YAMLs on disk) and reported in syrupy's
words.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from syrupy.data import Snapshot, SnapshotCollection, SnapshotCollections
from syrupy.extensions.base import AbstractSyrupyExtension

from pytest_modelbench.gate.baseline import BaselineRecord
from pytest_modelbench.gate.baseline_file import dumps, read_text
from pytest_modelbench.gate.judge import GateOutcome, gate_texts
from pytest_modelbench.outputs.failure_messages import LEGEND, comparison_table
from pytest_modelbench.gate.storage import write_baseline

if TYPE_CHECKING:
    from syrupy.location import PyTestLocation

_NO_SITE = "<not a modelbench baseline site>"


class _TaskObject:
    """What PyTestLocation reads from `item.obj`: a module and a name."""

    def __init__(self, name: str):
        self.__module__ = "pytest_modelbench.tasks"
        self.__name__ = name


class BaselineSite:
    """Stands in for a task item in syrupy's PyTestLocation; `baseline_path` is where its baseline lives."""

    def __init__(self, item: Any, baseline_path: Path):
        self.nodeid = item.nodeid
        self.name = item.name
        self.path = Path(item.path)
        self.obj = _TaskObject(item.name)
        self.stash = item.stash
        self.baseline_path = Path(baseline_path)


def _site_path(test_location: "PyTestLocation") -> Path | None:
    return getattr(test_location.item, "baseline_path", None)


class BaselineExtension(AbstractSyrupyExtension):
    file_extension = "json"
    write_immediately = True  # one file per task: write at once, never hold payloads until session end
    include_improvements = False  # whether an improvement makes the stored baseline "not match"
    # The gate's own outcome for (candidate text, stored text), set by gate_hooks.py before syrupy compares:
    # syrupy passes only the texts, and the aggregate metrics need the candidate's documents as well.
    decided: tuple[str, str, GateOutcome] | None = None
    # --noise-floor: every baseline is re-recorded with the noise floor just measured (set by gate_hooks.py)
    rerecord: bool = False

    def outcome(self, serialized_data: Any, snapshot_data: Any) -> GateOutcome:
        texts = (str(serialized_data), str(snapshot_data))
        if self.decided is not None and self.decided[:2] == texts:
            return self.decided[2]
        return gate_texts(*texts)

    # ------------------------------------------------------------------ serializer

    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None) -> str:
        if isinstance(data, BaselineRecord):
            return dumps(data)
        if isinstance(data, str):
            return data
        raise TypeError(f"{type(self).__name__} serializes BaselineRecord objects, got {type(data).__name__}")

    # ------------------------------------------------------------------ storage

    @classmethod
    def get_location(cls, *, test_location: "PyTestLocation", index: Any) -> str:
        path = _site_path(test_location)
        if path is None:
            raise TypeError(f"{cls.__name__} stores the baselines of modelbench task items only")
        return str(path)

    @classmethod
    def get_snapshot_name(cls, *, test_location: "PyTestLocation", index: Any = 0) -> str:
        path = _site_path(test_location)
        if path is None:
            return super().get_snapshot_name(test_location=test_location, index=index)
        return path.stem

    @classmethod
    def dirname(cls, *, test_location: "PyTestLocation") -> str:
        path = _site_path(test_location)
        return _NO_SITE if path is None else str(path.parent)

    @classmethod
    def discovery_dirname(cls, *, test_location: "PyTestLocation") -> str:
        # The file itself: unique per task, so syrupy discovers each task's baseline and nothing else.
        path = _site_path(test_location)
        return _NO_SITE if path is None else str(path)

    def discover_snapshots(
        self, *, test_location: "PyTestLocation", ignore_extensions: list[str] | None = None
    ) -> SnapshotCollections:
        discovered = SnapshotCollections()
        path = _site_path(test_location)
        if path is not None and path.is_file():
            discovered.add(self.read_snapshot_collection(snapshot_location=str(path)))
        return discovered

    @classmethod
    def matches_test_location(cls, *, test_location: "PyTestLocation", snapshot_location: str) -> bool:
        path = _site_path(test_location)
        return path is not None and str(path) == str(snapshot_location)

    def is_snapshot_location(self, *, location: str) -> bool:
        return location.endswith(".json")

    def read_snapshot_collection(self, *, snapshot_location: str) -> SnapshotCollection:
        collection = SnapshotCollection(location=snapshot_location)
        collection.add(Snapshot(name=Path(snapshot_location).stem))
        return collection

    def read_snapshot_data_from_location(
        self, *, snapshot_location: str, snapshot_name: str, session_id: str
    ) -> str | None:
        return read_text(Path(snapshot_location))

    @classmethod
    def write_snapshot_collection(
        cls, *, snapshot_collection: SnapshotCollection, name_order: dict[str, int] | None = None
    ) -> None:
        data = next(iter(snapshot_collection)).data
        if not isinstance(data, str):
            raise TypeError(f"{cls.__name__} writes serialized baselines (str), got {type(data).__name__}")
        write_baseline(Path(snapshot_collection.location), data)

    def delete_snapshots(self, *, snapshot_location: str, snapshot_names: set[str]) -> None:
        Path(snapshot_location).unlink(missing_ok=True)

    # ------------------------------------------------------------------ comparator

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        if self.rerecord and serialized_data != snapshot_data:
            return False
        try:
            outcome = self.outcome(serialized_data, snapshot_data)
        except Exception:  # a comparator that raises would make syrupy skip the --snapshot-update write
            return False
        return outcome.holds(include_improvements=self.include_improvements)

    # ------------------------------------------------------------------ reporter

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        outcome = self.outcome(serialized_data, snapshot_data)
        if outcome.comparison is None:
            yield str(outcome.problem)
            return
        yield from comparison_table(outcome.comparison.worst_first())
        yield LEGEND


class BaselineUpdateExtension(BaselineExtension):
    """Used under --snapshot-update: a significant improvement also rewrites the baseline (raising the bar)."""

    include_improvements = True
