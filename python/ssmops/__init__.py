"""ssmops: Mamba-2 and Mamba-3 state-space-model operators (float64 reference, CPU, CUDA) for
numpy and PyTorch, over the C library's ABI (ctypes; no compiled extension).

    import ssmops
    out = ssmops.mamba2_scan(x, dt, a, b, c, d=d, z=z, chunk_size=256, dt_softplus=1)

Every operator of the C API is a function of the same name (ssmops.OPERATORS lists them);
errors raise ssmops.SsmError subclasses (ValueError, MemoryError, RuntimeError) carrying the
library's status and message. ssmops.Context sets threads, backend and kernel variants."""
from ._lib import SsmError, SsmMemoryError, SsmRuntimeError, SsmValueError, __version__
from ._context import Context, current_context
from . import _ops

_functions = _ops.build()
globals().update(_functions)
OPERATORS = tuple(_functions)


try:  # autograd Functions where torch is installed: ssmops.autograd.mamba2_scan(...)
    from . import autograd as _autograd_module
    import types as _types
    autograd = _types.SimpleNamespace(**_autograd_module.build(_functions))
except ImportError:  # pragma: no cover (no torch)
    autograd = None

if autograd is not None:  # a sequence split across torch.distributed ranks: ssmops.distributed.mamba2_scan(...)
    from . import distributed
else:  # pragma: no cover (no torch)
    distributed = None


def cuda_device_count():
    from ._lib import ssm_cuda_device_count
    return int(ssm_cuda_device_count())


__all__ = ["Context", "current_context", "SsmError", "SsmValueError", "SsmMemoryError", "SsmRuntimeError",
           "OPERATORS", "cuda_device_count", "autograd", "distributed", "__version__"] + list(OPERATORS)
