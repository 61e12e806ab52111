"""How many aten ops one call dispatches. count_aten_ops (torch.profiler): the streaming tick's
cost on a CPU is op dispatch, not arithmetic, so its benchmark reports these and its tests bound
them. count_dispatch (a dispatch mode): launches, host synchronisations and host<->device copies
of the GPU code path, counted on the meta device (the launch budgets in test/engine)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


@dataclass(frozen=True)
class AtenOps:
    all: int  # every aten event, nested ones included
    top: int  # aten events with no aten caller (what Python dispatched)
    gemm: int  # top-level matrix products


def count_aten_ops(fn: Callable[[], object]) -> AtenOps:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]

    def top(e) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return False
            p = p.cpu_parent
        return True

    tops = [e for e in events if top(e)]
    return AtenOps(len(events), len(tops), sum(e.name in _GEMMS for e in tops))


# Ops that only re-describe a tensor (no kernel runs on a GPU).
_VIEW_OPS = frozenset({
    "view", "_unsafe_view", "unsqueeze", "squeeze", "t", "transpose", "permute", "expand", "slice", "select",
    "as_strided", "alias", "_reshape_alias", "split", "split_with_sizes", "unbind", "chunk", "narrow", "detach",
    "lift_fresh", "reshape", "expand_as", "view_as", "unflatten", "flatten", "diagonal",
})
# Ops whose result the host must read: on a GPU each one waits for the device to finish.
_SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select", "_unique2",
                       "unique_consecutive", "unique_dim"})


@dataclass
class DispatchCount:
    """What one call dispatches below autograd, counted per op: an engine built on the meta device
    runs the GPU code path (no oneDNN packing) at any size without computing anything, so these
    are a CUDA run's launches and synchronisations, counted on a CPU machine."""
    ops: int = 0  # ops that launch work (views excluded): about one kernel launch each on a GPU
    host_syncs: int = 0  # device results the host reads (.item(), int()/bool(), nonzero, boolean indexing)
    to_device: int = 0  # host tensors copied onto the device (torch.tensor(..., device=), .to(dev))
    to_host: int = 0  # device tensors copied to the host (.cpu(), .numpy() after it, .tolist())
    by_op: Dict[str, int] = field(default_factory=dict)


def count_dispatch(fn: Callable[[], object]) -> Tuple[object, DispatchCount]:
    """fn() under a dispatch counter; returns (its result, the counts). On the meta device the
    counter answers host reads with 1 and copies to the host with zeros (a meta tensor holds no
    data), so a whole call runs through; its counts do not depend on the values."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    count = DispatchCount()

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func._schema.name.split("::")[-1]
            count.by_op[name] = count.by_op.get(name, 0) + 1
            if name not in _VIEW_OPS:
                count.ops += 1
            src = args[0] if args and isinstance(args[0], torch.Tensor) else None
            on_device = src is not None and src.device.type != "cpu"
            bool_index = name == "index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                                 for i in (args[1] if len(args) > 1 else ()) or ())
            if on_device and (name in _SYNC_OPS or bool_index):  # a CPU tensor's read waits for nothing
                count.host_syncs += 1
                if src.device.type == "meta" and name == "_local_scalar_dense":
                    return 1
            if name == "_to_copy" and src is not None:
                dst = torch.device(kwargs.get("device") or src.device)
                if src.device.type == "cpu" and dst.type != "cpu":
                    count.to_device += 1
                elif src.device.type != "cpu" and dst.type == "cpu":
                    count.to_host += 1
                    if src.device.type == "meta":
                        return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype)
            if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
                if args[1].device.type == "cpu" and args[0].device.type != "cpu":
                    count.to_device += 1
                elif args[1].device.type != "cpu" and args[0].device.type == "cpu":
                    count.to_host += 1
                    if args[1].device.type == "meta":
                        return args[0]
            return func(*args, **kwargs)

    import torch.fx.experimental._config as fx_config

    # Boolean indexing on meta tensors: assume every element selected (the count is the same).
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True), _Counter():
        result = fn()
    return result, count
