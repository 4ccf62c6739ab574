"""The analysis on a Ray cluster (`fr-analyze -d SRC --engine ray`, the `ray` extra).

`connect` joins the cluster Ray's own tools name (an address, or a running local cluster) or
starts a local one for the run; `shards` reads the ranks' files there: one task per shard of
ranks, each worker reading its files itself (a shared path or the URL, never through the
driver) with the same loader, decoder and limits as one process (`load.load_all`), its
columns returned through Ray's object store (which spills to disk past its memory). The
driver runs the same stages as one process (`pipeline`): one code path for every rule, so
both give the same report. It takes the shards in file order into the one entry table where
an output shows entries; else the rows stay in the store (`kept`, `fr_analyzer.kept`) and
the driver takes only the ranks' headers and fetches only the rows the diagnosis reads.

Nothing here imports Ray until a cluster is asked for: one process needs no Ray.
"""

from __future__ import annotations

from .connect import Cluster, ClusterError, connect
from .shards import RayEngine, shard_size

__all__ = ["Cluster", "ClusterError", "RayEngine", "connect", "shard_size"]
