"""The match stage on a cluster (`cluster.parts`), its faults against a stand-in for Ray: a
part whose task is lost past its retries is matched in the driver, and the answer is the
same; Ctrl-C cancels the tasks in flight. (On a real head: `test_ray_engine.py`.)"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer.cluster import ClusterError
from fr_analyzer.cluster import parts as parts_mod
from fr_analyzer.load import Directory
from fr_analyzer.match import PartRunner, cutting, match, partitions
from fr_analyzer.model.groups import build_groups, grouped
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, load
from tests.match.test_partitions import assert_same_match

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
# the module: the package's own `connect` is the function
connect_mod = importlib.import_module("fr_analyzer.cluster.connect")


class _Lost(Exception):
    """Ray's error for a task whose worker died past its retries."""


class FakeRay:
    """Ray's calls `cluster.parts` makes, run here: each task's result is computed when put;
    the tasks named in `lose` (by their order) fail as a lost worker's do."""

    class exceptions:
        RayTaskError = _Lost
        RayError = _Lost

    def __init__(
        self, lose: frozenset[int] = frozenset(), interrupt_after: int | None = None
    ) -> None:
        self.lose, self.interrupt_after = lose, interrupt_after
        self.tasks = 0
        self.cancelled: list[object] = []
        self.store: dict[int, Any] = {}

    def is_initialized(self) -> bool:
        return True

    def put(self, value: Any) -> int:
        self.store[id(value)] = value
        return id(value)

    def remote(self, **_: Any) -> Any:
        ray = self

        def wrap(fn: Any) -> Any:
            class Task:
                @staticmethod
                def remote(*refs: int) -> tuple[str, int, tuple[int, ...]]:
                    ray.tasks += 1
                    if ray.interrupt_after is not None and ray.tasks > ray.interrupt_after:
                        raise KeyboardInterrupt
                    return ("task", ray.tasks - 1, refs)

            del fn
            return Task

        return wrap

    def wait(
        self, refs: list[Any], num_returns: int, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]:
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: Any) -> Any:
        if isinstance(ref, list):
            return [self.get(one) for one in ref]
        if isinstance(ref, tuple):
            _, number, stored = ref
            if number in self.lose:
                raise _Lost("the worker died")
            return partitions.match_columns(*(self.store[r] for r in stored))
        return self.store[ref]

    def cancel(self, ref: object, force: bool) -> None:
        self.cancelled.append(ref)


def _job(name: str) -> Iterator[Any]:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    retired = got.table.retired.copy()
    whole = match(got.dumps, got.table, groups)
    got.table.retired[:] = retired
    yield got, groups, whole


def test_a_part_lost_past_its_retries_is_matched_in_the_driver_and_the_answer_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeRay(lose=frozenset({0, 2}))
    monkeypatch.setattr(parts_mod, "import_ray", lambda: fake)
    for got, groups, whole in _job("nccl3d_skip_world"):

        def runner(cut: Any) -> Any:
            return parts_mod.match_parts(cut, window=2, retries=0)

        on_ray = match(got.dumps, got.table, groups, PartRunner(runner))
        lost = [n for n in on_ray.notes if "failed" in n]
        assert_same_match(replace(on_ray, notes=on_ray.notes[: len(whole.notes)]), whole)
    assert fake.tasks == 4
    assert len(lost) == 2
    assert all("were matched in this process instead" in n for n in lost)


def test_ctrl_c_while_matching_cancels_every_task_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeRay(interrupt_after=2)
    monkeypatch.setattr(parts_mod, "import_ray", lambda: fake)
    for got, groups, _ in _job("nccl3d_skip_world"):

        def runner(cut: Any) -> Any:
            return parts_mod.match_parts(cut, window=4, retries=0)

        with pytest.raises(KeyboardInterrupt):
            match(got.dumps, got.table, groups, PartRunner(runner))
    assert len(fake.cancelled) == 2


def test_a_task_lost_in_a_later_round_of_questions_is_matched_in_the_driver_with_its_questions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # parts of one group each: the data-parallel pair that ties asks the other pairs (in other
    # parts), which answer in a second run of tasks; the asking part runs again in a third
    for got, groups, whole in _job("nccl3d_dp_pair_mismatch"):
        most = max(
            cutting.sizes(
                grouped(got.table, groups, profiles_of(got.table)),
                groups,
                cutting.components(grouped(got.table, groups, profiles_of(got.table)), groups),
            )
        )
        first = len(
            cutting.cut_sets(grouped(got.table, groups, profiles_of(got.table)), groups, most) or []
        )

        def runner(cut: Any) -> Any:
            return parts_mod.match_parts(cut, window=2, retries=0)

        counted = FakeRay()
        monkeypatch.setattr(parts_mod, "import_ray", lambda counted=counted: counted)
        match(got.dumps, got.table, groups, PartRunner(runner, most_rows=most))
        assert counted.tasks > first + 1  # a round of answers, and the asking part again

        # the first task answering, and the last (the asking part matched again), lost
        fake = FakeRay(lose=frozenset({first, counted.tasks - 1}))
        monkeypatch.setattr(parts_mod, "import_ray", lambda fake=fake: fake)
        on_ray = match(got.dumps, got.table, groups, PartRunner(runner, most_rows=most))
        lost = [n for n in on_ray.notes if "failed" in n]
        assert len(lost) == 1  # the answering part's result is only its answers
        assert_same_match(replace(on_ray, notes=on_ray.notes[: len(whole.notes)]), whole)


class StalledRay:
    """A cluster whose tasks never come back: `running` of its 2 CPUs busy, as polled."""

    def __init__(self, running: list[float]) -> None:
        self.running, self.polls = running, 0

    def wait(
        self, refs: list[Any], num_returns: int, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]:
        if self.polls >= len(self.running):
            return refs[:num_returns], refs[num_returns:]  # it answers at last
        return [], refs

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def available_resources(self) -> dict[str, float]:
        busy = self.running[self.polls]
        self.polls += 1
        return {"CPU": 2.0 - busy}


def test_a_cluster_that_runs_no_task_while_the_driver_waits_is_one_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connect_mod, "POLL_S", 0.0)
    stalled = StalledRay([0.0] * 1000)
    with pytest.raises(ClusterError, match="ran no task for 0 s while 1 of this run's waited"):
        connect_mod.wait_one(stalled, ["result"], stalled_s=0.0)
    # a cluster busy with tasks is waited on, however long
    busy = StalledRay([1.0] * 50)
    assert connect_mod.wait_one(busy, ["result"], stalled_s=0.0) == "result"
    assert busy.polls == 50
