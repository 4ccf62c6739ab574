"""Call sites of the simulated Megatron-style program: the stack frames an entry records.

A recorded stack is the torch.distributed API's frames, then the user frames of the call site,
then the tail of the program (training loop, setup or evaluation), innermost first, as torch
2.13 writes them (FlightRecorderDetail.hpp). Free-form jobs (custom.py) use the same sites, and
a few of their own (context-parallel ring attention). Paths follow Megatron-LM's layout.
Backward ops are issued from the autograd engine's thread, so their sites carry `autograd=True`
and no training-loop tail; evaluation sites carry `evaluation=True` and Megatron's evaluate
tail.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

RawFrame = tuple[str, str, int]
"""(function name, file name, line)."""

_TORCH = "/usr/local/lib/python3.11/dist-packages/torch"
_C10D = f"{_TORCH}/distributed/distributed_c10d.py"
_LOGGER = f"{_TORCH}/distributed/c10d_logger.py"
_AUTOGRAD = f"{_TORCH}/autograd/function.py"
_CONTEXTLIB = "/usr/lib/python3.11/contextlib.py"
_MEG = "/workspace/Megatron-LM/megatron"
_MAPPINGS = f"{_MEG}/core/tensor_parallel/mappings.py"
_LAYERS = f"{_MEG}/core/tensor_parallel/layers.py"
_P2P = f"{_MEG}/core/pipeline_parallel/p2p_communication.py"
_SCHED = f"{_MEG}/core/pipeline_parallel/schedules.py"
_GRADS = f"{_MEG}/core/distributed/param_and_grad_buffer.py"
_DIST_OPT = f"{_MEG}/core/optimizer/distrib_optimizer.py"
_CLIP = f"{_MEG}/core/optimizer/clip_grads.py"
_TRAINING = f"{_MEG}/training/training.py"
_UTILS = f"{_MEG}/training/utils.py"
_PRETRAIN = "/workspace/Megatron-LM/pretrain_gpt.py"
_TE_ATTN = "/usr/local/lib/python3.11/dist-packages/transformer_engine/pytorch/attention.py"
_TE_FUNCTION = f"{_TORCH}/autograd/function.py"


def _torch_api(name: str, line: int) -> tuple[RawFrame, ...]:
    return ((name, _C10D, line), ("wrapper", _LOGGER, 83))


API_FRAMES: dict[str, tuple[RawFrame, ...]] = {
    "all_reduce": _torch_api("all_reduce", 2950),
    "all_reduce_coalesced": _torch_api("all_reduce_coalesced", 3112),
    "barrier": _torch_api("barrier", 4871),
    "broadcast": _torch_api("broadcast", 2807),
    "all_gather": _torch_api("all_gather", 3811),
    "all_gather_into_tensor": _torch_api("all_gather_into_tensor", 3932),
    "reduce_scatter": _torch_api("reduce_scatter", 4302),
    "reduce_scatter_tensor": _torch_api("reduce_scatter_tensor", 4406),
    "send": _torch_api("send", 2471),
    "recv": _torch_api("recv", 2525),
    "batch_isend_irecv": (("batch_isend_irecv", _C10D, 2764),),
    "_coalescing_manager": (("_coalescing_manager", _C10D, 2622), ("__exit__", _CONTEXTLIB, 144)),
    "all_to_all_single": _torch_api("all_to_all_single", 4594),
    "monitored_barrier": _torch_api("monitored_barrier", 4998),
}
"""torch.distributed entry points, innermost first, keyed by the API the program called."""

_TRAIN_TAIL: tuple[RawFrame, ...] = (
    ("train_step", _TRAINING, 762),
    ("train", _TRAINING, 1391),
    ("pretrain", _TRAINING, 388),
    ("<module>", _PRETRAIN, 281),
)
_SETUP_TAIL: tuple[RawFrame, ...] = (("pretrain", _TRAINING, 301), ("<module>", _PRETRAIN, 281))
_EVAL_TAIL: tuple[RawFrame, ...] = (
    ("evaluate", _TRAINING, 1612),
    ("evaluate_and_print_results", _TRAINING, 1688),
    ("pretrain", _TRAINING, 412),
    ("<module>", _PRETRAIN, 281),
)


class Site(NamedTuple):
    """Where the program issues an op: user frames below torch's, and the issuing thread."""

    frames: tuple[RawFrame, ...]
    autograd: bool = False
    setup: bool = False
    evaluation: bool = False
    tail: tuple[RawFrame, ...] | None = None
    """The program's frames below the site (None: Megatron's training, setup or evaluation
    tail); a job that is not Megatron (FSDP, DDP) has its own training script."""


# --- sites of the non-Megatron training shapes (shapes.py): FSDP2, HSDP, DDP, a plain script --

_FSDP = f"{_TORCH}/distributed/fsdp/_fully_shard"
_FSDP_COLL = f"{_FSDP}/_fsdp_collectives.py"
_FSDP_PG = f"{_FSDP}/_fsdp_param_group.py"
_FSDP_STATE = f"{_FSDP}/_fsdp_state.py"
_MODULE = f"{_TORCH}/nn/modules/module.py"
_DDP = f"{_TORCH}/nn/parallel/distributed.py"
_DDP_HOOKS = f"{_TORCH}/distributed/algorithms/ddp_comm_hooks/default_hooks.py"
_CLIP_GRAD = f"{_TORCH}/nn/utils/clip_grad.py"
_MOE = f"{_MEG}/core/transformer/moe"
_SCRIPT = "/workspace/train.py"
_SCRIPT_TAIL: tuple[RawFrame, ...] = (
    ("train_step", _SCRIPT, 88),
    ("train", _SCRIPT, 131),
    ("main", _SCRIPT, 170),
    ("<module>", _SCRIPT, 181),
)
_SCRIPT_SETUP_TAIL: tuple[RawFrame, ...] = (("main", _SCRIPT, 158), ("<module>", _SCRIPT, 181))


def _script(*frames: RawFrame, autograd: bool = False, setup: bool = False) -> Site:
    tail = _SCRIPT_SETUP_TAIL if setup else _SCRIPT_TAIL
    return Site(frames, autograd=autograd, setup=setup, tail=tail)


_FSDP_FWD: tuple[RawFrame, ...] = (
    ("foreach_all_gather", _FSDP_COLL, 239),
    ("unshard", _FSDP_PG, 293),
)


def _fwd(*frames: RawFrame) -> Site:
    return Site((*frames, ("forward_step", _SCHED, 275)))


def _p2p(
    name: str, line: int, sched_line: int, batched: bool = False, evaluation: bool = False
) -> Site:
    inner: tuple[RawFrame, ...] = (
        (("_batched_p2p_ops", _P2P, 232), ("_communicate", _P2P, 402))
        if batched
        else (("_communicate", _P2P, 391),)
    )
    return Site(
        (
            *inner,
            (name, _P2P, line),
            ("forward_backward_pipelining_without_interleaving", _SCHED, sched_line),
        ),
        evaluation=evaluation,
    )


SITES: dict[str, Site] = {
    "setup": Site(
        (("_broadcast_params", _TRAINING, 510), ("setup_model", _TRAINING, 540)), setup=True
    ),
    "metadata": Site(
        (("gather_shard_sizes", _UTILS, 118), ("setup_model", _TRAINING, 552)), setup=True
    ),
    "init_barrier": Site((("initialize_megatron", _TRAINING, 290),), setup=True),
    "attn_fwd": _fwd(("_reduce", _MAPPINGS, 31), ("forward", _LAYERS, 1018)),
    "mlp_fwd": _fwd(("_reduce", _MAPPINGS, 31), ("forward", _LAYERS, 1021)),
    "sp_gather": _fwd(("_gather_along_first_dim", _MAPPINGS, 120), ("forward", _LAYERS, 480)),
    "logits_gather": _fwd(("_gather_along_last_dim", _MAPPINGS, 87), ("forward", _MAPPINGS, 264)),
    "attn_bwd": Site((("backward", _MAPPINGS, 229), ("apply", _AUTOGRAD, 307)), autograd=True),
    "mlp_bwd": Site(
        (("_reduce", _MAPPINGS, 31), ("backward", _MAPPINGS, 229), ("apply", _AUTOGRAD, 307)),
        autograd=True,
    ),
    "recv_forward": _p2p("recv_forward", 478, 1467),
    "send_forward": _p2p("send_forward", 514, 1480),
    "recv_backward": _p2p("recv_backward", 496, 1552),
    "send_backward": _p2p("send_backward", 532, 1537),
    "send_fwd_recv_bwd": _p2p("send_forward_recv_backward", 552, 1509, batched=True),
    "send_bwd_recv_fwd": _p2p("send_backward_recv_forward", 572, 1541, batched=True),
    "grad_sync": Site((("start_grad_sync", _GRADS, 318), ("finish_grad_sync", _GRADS, 361))),
    "layernorm_grads": Site(
        (("_allreduce_layernorm_grads", _GRADS, 97), ("finalize_model_grads", _GRADS, 142))
    ),
    "grad_norm": Site((("get_grad_norm_fp32", _CLIP, 112), ("clip_grad_norm", _CLIP, 160))),
    "loss": Site(
        (("average_losses_across_data_parallel_group", _UTILS, 201), ("loss_func", _PRETRAIN, 160))
    ),
    "param_gather": Site(
        (("_all_gather_params", _DIST_OPT, 1733), ("step_with_ready_grads", _DIST_OPT, 1802))
    ),
    "checkpoint": Site(
        (("gather_optimizer_state", _DIST_OPT, 921), ("save_checkpoint", _TRAINING, 1130))
    ),
    "log_metrics": Site((("reduce_loss_dict", _TRAINING, 845), ("training_log", _TRAINING, 902))),
    "barrier": Site((("check_adlr_autoresume_termination", _UTILS, 288),)),
    "debug_barrier": Site((("maybe_sync_for_debug", _UTILS, 340), ("train_step", _TRAINING, 770))),
    # evaluation (Megatron's `evaluate`: forward only)
    "eval_attn_fwd": Site(
        (("_reduce", _MAPPINGS, 31), ("forward", _LAYERS, 1018), ("forward_step", _TRAINING, 1580)),
        evaluation=True,
    ),
    "eval_mlp_fwd": Site(
        (("_reduce", _MAPPINGS, 31), ("forward", _LAYERS, 1021), ("forward_step", _TRAINING, 1580)),
        evaluation=True,
    ),
    "eval_recv_forward": _p2p("recv_forward", 478, 1467, evaluation=True),
    "eval_send_forward": _p2p("send_forward", 514, 1480, evaluation=True),
    "eval_loss": Site(
        (("average_losses_across_data_parallel_group", _UTILS, 201), ("loss_func", _PRETRAIN, 160)),
        evaluation=True,
    ),
    # FSDP2 / HSDP (torch.distributed.fsdp.fully_shard), a plain training script
    "fsdp_unshard": _script(
        *_FSDP_FWD,
        ("pre_forward", _FSDP_PG, 406),
        ("_pre_forward", _FSDP_STATE, 230),
        ("_call_impl", _MODULE, 1773),
    ),
    "fsdp_prefetch": _script(
        *_FSDP_FWD,
        ("_prefetch_unshard", _FSDP_PG, 640),
        ("pre_forward", _FSDP_PG, 409),
        ("_pre_forward", _FSDP_STATE, 230),
        ("_call_impl", _MODULE, 1773),
    ),
    "fsdp_unshard_bwd": _script(
        *_FSDP_FWD,
        ("pre_backward", _FSDP_PG, 470),
        ("_pre_backward", _FSDP_STATE, 281),
        autograd=True,
    ),
    "fsdp_reduce": _script(
        ("foreach_reduce", _FSDP_COLL, 412),
        ("post_backward", _FSDP_PG, 511),
        ("_root_post_backward_final_callback", _FSDP_STATE, 318),
        autograd=True,
    ),
    "hsdp_replicate": _script(
        ("foreach_reduce", _FSDP_COLL, 471),
        ("post_backward", _FSDP_PG, 511),
        ("_root_post_backward_final_callback", _FSDP_STATE, 318),
        autograd=True,
    ),
    "train_grad_norm": _script(
        ("_get_total_norm", _CLIP_GRAD, 105), ("clip_grad_norm_", _CLIP_GRAD, 190)
    ),
    "train_loss": _script(
        ("reduce_loss", _SCRIPT, 61),
    ),
    # DDP: buckets from the reducer's comm hook (autograd thread), module states at setup
    "ddp_bucket": _script(
        ("_allreduce_fut", _DDP_HOOKS, 21), ("allreduce_hook", _DDP_HOOKS, 56), autograd=True
    ),
    "ddp_setup": _script(
        ("_sync_module_states", f"{_TORCH}/distributed/utils.py", 295),
        ("__init__", _DDP, 850),
        setup=True,
    ),
    # new_subgroups: each subgroup's own metrics; monitored_barrier / barrier between phases
    "subgroup_metrics": _script(
        ("all_reduce_metrics", _SCRIPT, 70),
    ),
    "sync_barrier": _script(
        ("sync_ranks", _SCRIPT, 95),
    ),
    # Megatron MoE: expert-parallel token dispatch and combine (all_to_all_single)
    "moe_dispatch": _fwd(
        ("forward", _MAPPINGS, 413),
        ("all_to_all", _MAPPINGS, 531),
        ("token_permutation", f"{_MOE}/token_dispatcher.py", 612),
        ("forward", f"{_MOE}/moe_layer.py", 141),
    ),
    "moe_combine": _fwd(
        ("forward", _MAPPINGS, 413),
        ("all_to_all", _MAPPINGS, 531),
        ("token_unpermutation", f"{_MOE}/token_dispatcher.py", 698),
        ("forward", f"{_MOE}/moe_layer.py", 149),
    ),
    "moe_dispatch_bwd": Site(
        (("backward", _MAPPINGS, 420), ("apply", _AUTOGRAD, 307)), autograd=True
    ),
    "moe_combine_bwd": Site(
        (("backward", _MAPPINGS, 420), ("apply", _AUTOGRAD, 307)), autograd=True
    ),
    # context-parallel ring attention (TransformerEngine), for free-form jobs
    "cp_ring_fwd": Site(
        (
            ("flash_attn_p2p_communicate", _TE_ATTN, 1542),
            ("forward", _TE_ATTN, 1783),
            ("apply", _TE_FUNCTION, 575),
            ("attn_forward_func_with_cp", _TE_ATTN, 3519),
            ("forward", _TE_ATTN, 7880),
            ("forward_step", _SCHED, 275),
        )
    ),
    "cp_ring_bwd": Site(
        (
            ("flash_attn_p2p_communicate", _TE_ATTN, 1542),
            ("backward", _TE_ATTN, 2311),
            ("apply", _AUTOGRAD, 307),
        ),
        autograd=True,
    ),
}


@lru_cache(maxsize=1024)
def stack(site: str, api: str) -> tuple[RawFrame, ...]:
    """The recorded frames, innermost first, of an op issued through `api` at `site`."""
    where = SITES[site]
    if where.autograd:
        tail: tuple[RawFrame, ...] = ()
    elif where.tail is not None:
        tail = where.tail
    elif where.evaluation:
        tail = _EVAL_TAIL
    elif where.setup:
        tail = _SETUP_TAIL
    else:
        tail = _TRAIN_TAIL
    return (*API_FRAMES[api], *where.frames, *tail)


def is_autograd(site: str) -> bool:
    """Whether ops at call site `site` are issued from the autograd engine's thread."""
    return SITES[site].autograd
