"""One-rank job on a GPU (NCCL) or CPU (gloo): many op kinds, with an Execution Trace and a
Flight Recorder dump of the same ops. argv: OUTDIR BACKEND."""
import os, sys, datetime
import torch, torch.distributed as dist
from torch.profiler import ExecutionTraceObserver

out, backend = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29577", TORCH_FR_BUFFER_SIZE="2000")
dev = "cuda:0" if backend == "nccl" else "cpu"
if backend == "nccl":
    torch.cuda.set_device(0)
dist.init_process_group(backend, rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
tp = dist.new_group([0], group_desc="mesh_tp") if "group_desc" in dist.new_group.__code__.co_varnames else dist.new_group([0])
et = ExecutionTraceObserver()
et.register_callback(f"{out}/rank-0.et.json")
et.start()
t = torch.ones(1024, device=dev)
dist.all_reduce(t, group=tp)
dist.reduce(t, 0)
dist.broadcast(t, 0, group=tp)
outs = [torch.empty(1024, device=dev)]
dist.all_gather(outs, t)
dist.gather(t, [torch.empty(1024, device=dev)], dst=0)
dist.scatter(t, [torch.ones(1024, device=dev)], src=0)
dist.reduce_scatter(torch.empty(1024, device=dev), [t]) if backend == "nccl" else None
o = torch.empty(1024, device=dev)
dist.all_to_all_single(o, t, [1024], [1024])
dist.all_to_all([torch.empty(1024, device=dev)], [t]) if backend == "nccl" else None
dist.all_gather_into_tensor(torch.empty(1024, device=dev), t, group=tp)
dist.reduce_scatter_tensor(torch.empty(1024, device=dev), t) if backend == "nccl" else None
dist.barrier()
if backend == "nccl":
    torch.cuda.synchronize()
et.stop(); et.unregister_callback()
if backend == "nccl":
    data = torch._C._distributed_c10d._dump_nccl_trace()
    open(f"{out}/nccl_trace_rank_0", "wb").write(data)
dist.destroy_process_group()
print("ok", torch.__version__)
