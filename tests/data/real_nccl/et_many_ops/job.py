"""The one-rank job that wrote this folder's trace and dump, on a GPU (NCCL) or CPU (gloo):
`python job.py OUTDIR nccl`. Every op kind once, on the world group and on a second group."""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver

out, backend = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29577", TORCH_FR_BUFFER_SIZE="2000")
nccl = backend == "nccl"
dev = "cuda:0" if nccl else "cpu"
if nccl:
    torch.cuda.set_device(0)
dist.init_process_group(backend, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
tp = dist.new_group([0])
trace = ExecutionTraceObserver()
trace.register_callback(f"{out}/rank-0.et.json")
trace.start()
t = torch.ones(1024, device=dev)
dist.all_reduce(t, group=tp)
dist.reduce(t, 0)
dist.broadcast(t, 0, group=tp)
dist.all_gather([torch.empty(1024, device=dev)], t)
dist.gather(t, [torch.empty(1024, device=dev)], dst=0)
dist.scatter(t, [torch.ones(1024, device=dev)], src=0)
if nccl:
    dist.reduce_scatter(torch.empty(1024, device=dev), [t])
dist.all_to_all_single(torch.empty(1024, device=dev), t, [1024], [1024])
if nccl:
    dist.all_to_all([torch.empty(1024, device=dev)], [t])
dist.all_gather_into_tensor(torch.empty(1024, device=dev), t, group=tp)
if nccl:
    dist.reduce_scatter_tensor(torch.empty(1024, device=dev), t)
dist.barrier()
if nccl:
    torch.cuda.synchronize()
trace.stop()
trace.unregister_callback()
if nccl:
    with open(f"{out}/nccl_trace_rank_0", "wb") as f:
        f.write(torch._C._distributed_c10d._dump_nccl_trace())  # type: ignore[attr-defined, unused-ignore]
dist.destroy_process_group()
print("ok", torch.__version__)
