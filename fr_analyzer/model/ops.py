"""The op catalog: every op name a recorder writes (after the backend prefix), and the size
rule each follows. The one place an op name is classified; the loader, the matcher and the
diagnosis read these sets."""

from __future__ import annotations

MARKER_OPS = frozenset({"coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})
P2P_OPS = frozenset({"send", "recv"})
KNOWN_OPS = (
    MARKER_OPS
    | P2P_OPS
    | frozenset(
        {
            "all_reduce",
            "allreduce",
            "allreduce_coalesced",
            "all_reduce_coalesced",
            "all_reduce_barrier",
            "all_reduce_sparse",
            "barrier",
            "monitored_barrier",
            "broadcast",
            "_broadcast_oop",
            "reduce",
            "_reduce_oop",
            "all_gather",
            "allgather",
            "_all_gather_base",
            "all_gather_into_tensor",
            "all_gather_into_tensor_coalesced",
            "allgather_into_tensor_coalesced",
            "allgather_coalesced",
            "reduce_scatter",
            "_reduce_scatter_base",
            "reduce_scatter_tensor",
            "reduce_scatter_tensor_coalesced",
            "gather",
            "scatter",
            "all_to_all",
            "all_to_all_single",
            "all_to_all_v_single",
            "all_gather_single",
            "all_gather_v",
            "reduce_scatter_single",
            "reduce_scatter_v",
            "split",
            "new_window",
            "batch_op_issue",
            "batch_isend_irecv",
            "alltoall",
            "alltoall_base",
            "recvAnysource",
        }
    )
)

BATCH_OPS = frozenset({"batch_op_issue"})
"""torchcomms: a batch of send/recv recorded as one op, with no tensors."""
UNPAIRED_P2P_OPS = frozenset({"batch_op_issue", "batch_isend_irecv"})
"""A batch of p2p ops recorded as one op (torchcomms), or its members named by their frame
(HCCL): which peers, and which are sends, is not recorded."""

# Op names (after the backend prefix) by the size rule they follow.
GATHER_OPS = frozenset({"gather"})
SCATTER_OPS = frozenset({"scatter"})
ALL_TO_ALL_OPS = frozenset(
    {"all_to_all", "all_to_all_single", "all_to_all_v_single", "alltoall", "alltoall_base"}
)
UNEVEN_INPUT_OPS = frozenset({"all_gather_v"})  # each rank gives its own size; outputs agree
UNEVEN_OUTPUT_OPS = frozenset({"reduce_scatter_v"})  # inputs agree; each rank gets its own
ALL_GATHER_OPS = frozenset(
    {
        "all_gather",
        "_all_gather_base",
        "all_gather_into_tensor_coalesced",
        "allgather",
        "all_gather_into_tensor",
        "allgather_into_tensor_coalesced",
        "all_gather_single",
    }
)
REDUCE_SCATTER_OPS = frozenset(
    {
        "reduce_scatter",
        "_reduce_scatter_base",
        "reduce_scatter_tensor_coalesced",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
    }
)
SAME_IN_OUT_OPS = frozenset({"all_reduce", "allreduce"})
UNCHECKED_SIZE_OPS = frozenset(
    {
        "all_reduce_sparse",
        "coalesced",
        "ALLGATHER_coalesced",
        "REDUCE_SCATTER_coalesced",
        "barrier",
        "all_reduce_barrier",
        "split",  # torchcomms: a communicator split, no tensors
        "new_window",
    }
)

BROADCAST_OPS = frozenset({"broadcast", "_broadcast_oop"})
REDUCE_OPS = frozenset({"reduce", "_reduce_oop"})
BARRIER_OPS = frozenset({"barrier", "all_reduce_barrier", "monitored_barrier"})
ALL_REDUCE_COALESCED_OPS = frozenset({"allreduce_coalesced", "all_reduce_coalesced"})
ALL_GATHER_COALESCED_OPS = frozenset({"allgather_coalesced"})

# c10d's own names for the ops, as an Execution Trace writes them

C10D_OP_NAMES: dict[str, str] = {
    "allreduce": "all_reduce",
    "_allgather_base": "_all_gather_base",
    "allgather": "all_gather",
    "all_to_allv": "all_to_all",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
    "alltoall": "all_to_all",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "barrier": "all_reduce_barrier",
}
"""c10d's collective names (an Execution Trace's `record_param_comms`) -> the recorder's op
names, where they differ."""

C10D_OUTPUT_FIRST_OPS = frozenset(
    {
        "_allgather_base_",
        "allgather_into_tensor_coalesced_",
        "_reduce_scatter_base_",
        "reduce_scatter_tensor_coalesced_",
        "alltoall_base_",
        "allgather_",
        "reduce_scatter_",
        "alltoall_",
    }
)
"""c10d's dispatcher ops (`c10d::allgather_`) whose first argument is the output: an Execution
Trace's gloo ops read their tensors by it."""
