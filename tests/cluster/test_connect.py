"""Which cluster a run joins (`cluster.connect`), against a stand-in for Ray: a cluster
running here is joined as it is; with none, the local cluster started for the run lets its
spill disk fill as far as the benchmarks' head does. (On a real head: `test_ray_engine.py`.)"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Any

import pytest

# the module: the package's own `connect` is the function
connect_mod = importlib.import_module("fr_analyzer.cluster.connect")


class LocalRay:
    """Ray's calls `connect` makes: `running` says whether `address="auto"` finds a
    cluster; each `init`'s arguments are kept."""

    def __init__(self, running: bool) -> None:
        self.running = running
        self.inits: list[dict[str, Any]] = []
        self.up = False

    def is_initialized(self) -> bool:
        return self.up

    def init(self, **kwargs: Any) -> None:
        self.inits.append(kwargs)
        signal.signal(signal.SIGTERM, lambda *_: None)  # as Ray's driver does
        if kwargs.get("address") == "auto" and not self.running:
            raise ConnectionError("no cluster running here")
        self.up = True

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 4e9}}]

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def get_runtime_context(self) -> Any:
        class Context:
            gcs_address = "127.0.0.1:6379"

        return Context()

    def shutdown(self) -> None:
        self.up = False


def test_the_local_cluster_started_for_a_run_spills_until_its_disk_is_99_percent_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = LocalRay(running=False)
    monkeypatch.setattr(connect_mod, "import_ray", lambda: fake)
    with connect_mod.connect(None, num_cpus=1) as cluster:
        assert cluster.started
        assert "local Ray cluster started for this run" in cluster.label
    started = fake.inits[-1]
    assert started["num_cpus"] == 1
    assert started["_system_config"] == {"local_fs_capacity_threshold": connect_mod.DISK_SHARE}
    assert connect_mod.DISK_SHARE == 0.99
    assert not fake.up  # shut down after the run


def test_a_cluster_running_here_is_joined_with_its_own_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = LocalRay(running=True)
    monkeypatch.setattr(connect_mod, "import_ray", lambda: fake)
    with connect_mod.connect(None) as cluster:
        assert not cluster.started
        assert cluster.address == "127.0.0.1:6379"
    (joined,) = fake.inits
    assert joined["address"] == "auto"
    assert "_system_config" not in joined  # Ray refuses it when joining a running cluster


def test_a_driver_without_pyarrow_is_refused_in_one_line_before_any_cluster_is_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = LocalRay(running=False)
    monkeypatch.setattr(connect_mod, "import_ray", lambda: fake)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` fails
    refused = pytest.raises(connect_mod.ClusterError, match=r"needs pyarrow .*fr-analyze\[ray\]")
    with refused, connect_mod.connect(None):
        pass
    assert fake.inits == []  # refused before joining or starting anything


def test_leaving_the_cluster_puts_back_the_signal_handlers_ray_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = LocalRay(running=True)
    monkeypatch.setattr(connect_mod, "import_ray", lambda: fake)
    before = signal.getsignal(signal.SIGTERM)
    with connect_mod.connect(None):
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_lost_worker_node_or_object_is_one_cluster_error_and_a_task_s_own_error_is_not() -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed")
    lost = pytest.raises(connect_mod.ClusterError, match=r"^the rows: WorkerCrashedError")
    with lost, connect_mod.lost_as("the rows"):
        raise ray.exceptions.WorkerCrashedError()
    bug = ray.exceptions.RayTaskError("f", "Traceback ...", ValueError("a bug"))
    # a bug of fr-analyze: as it is
    with pytest.raises(ray.exceptions.RayTaskError), connect_mod.lost_as("the rows"):
        raise bug
