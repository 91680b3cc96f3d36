"""Contexts: threads, backend, kernel variants and the reference mode of the calls made under
them. `with ssmops.Context(threads=4):` sets the calling thread's current context; without
one, each Python thread gets its own default (automatic backend, one worker per CPU)."""
import ctypes
import os
import threading

from . import _lib, _tensors


# ssm_device_allocator's functions (ssmops.h): alloc(opaque, bytes, stream), free(opaque, ptr, stream).
_DEVICE_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_DEVICE_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _torch_device_alloc(opaque, nbytes, stream):
    """torch's caching allocator on the call's stream (under torch.cuda.graph, its pool);
    NULL (the call then fails with out-of-memory) when it raises."""
    try:
        return _tensors.torch.cuda.caching_allocator_alloc(nbytes, stream=stream or 0)
    except Exception:  # a C callback must not raise
        return None


def _torch_device_free(opaque, ptr, stream):
    try:
        _tensors.torch.cuda.caching_allocator_delete(ptr)
    except Exception:  # a C callback must not raise
        pass


_TORCH_ALLOC = _DEVICE_ALLOC(_torch_device_alloc)  # kept alive for the library's lifetime
_TORCH_FREE = _DEVICE_FREE(_torch_device_free)


class Context:
    """An ssm_context. backend: 'auto', 'cpu', 'ref' or 'cuda'; isa: 'auto', 'scalar', 'avx2', 'avx512';
    ref_mode: 'exact' or 'upstream_bf16'; variants: {operator: variant name} (CUDA);
    device_allocator: 'default' (cudaMallocAsync on the call's stream) or 'torch' (torch's
    caching allocator owns the CUDA backend's device memory); cuda_portable: the CUDA backend
    chooses as on a GPU without wgmma (to run those kernels on an H100/H200)."""

    def __init__(self, threads=0, backend="auto", isa="auto", ref_mode="exact", variants=None,
                 device_allocator="default", cuda_portable=False):
        if backend not in _lib.BACKENDS:
            raise ValueError("backend must be one of %s" % ", ".join(_lib.BACKENDS))
        if isa not in _lib.ISAS:
            raise ValueError("isa must be one of %s" % ", ".join(_lib.ISAS))
        if ref_mode not in ("exact", "upstream_bf16"):
            raise ValueError("ref_mode must be 'exact' or 'upstream_bf16'")
        if device_allocator not in ("default", "torch"):
            raise ValueError("device_allocator must be 'default' or 'torch'")
        if device_allocator == "torch" and _tensors.torch is None:
            raise ValueError("device_allocator='torch' needs torch")
        self._params = _lib.ContextParams()
        _lib.ssm_context_params_init(ctypes.byref(self._params))
        self._params.num_threads = threads
        self._params.backend = _lib.BACKENDS[backend]
        self._params.isa = _lib.ISAS[isa]
        self._params.ref_mode = 0 if ref_mode == "exact" else 1
        self._params.cuda_portable = int(bool(cuda_portable))
        if device_allocator == "torch":
            self._params.device_allocator.alloc = ctypes.cast(_TORCH_ALLOC, ctypes.c_void_p)
            self._params.device_allocator.free = ctypes.cast(_TORCH_FREE, ctypes.c_void_p)
        self.backend = backend
        self._variants = dict(variants or {})
        self._handles = {}  # CUDA stream -> ssm_context (the stream is fixed at creation)
        self._lock = threading.Lock()
        self._prev = []
        self.handle_for(None)  # creates the host context now: bad settings fail here

    def _create(self, stream):
        self._params.cuda_stream = stream
        h = ctypes.c_void_p()
        _lib.check(_lib.ssm_context_create(ctypes.byref(self._params), ctypes.byref(h)), None)
        for op, var in self._variants.items():
            st = _lib.ssm_context_set_variant(h, op.encode(), var.encode() if var else None)
            if st != _lib.STATUS_OK:
                msg = _lib.last_error(h)
                _lib.ssm_context_free(h)
                _lib.raise_for(st, msg)
        return h

    def handle_for(self, ref):
        """The ssm_context for a call whose inputs live where `ref` does (a torch CUDA tensor
        runs on torch's current stream)."""
        stream = None
        if ref is not None and _tensors.is_torch(ref) and ref.is_cuda:
            stream = _tensors.torch.cuda.current_stream(ref.device).cuda_stream or None
        h = self._handles.get(stream)
        if h is None:
            with self._lock:
                h = self._handles.get(stream)
                if h is None:
                    h = self._create(stream)
                    self._handles[stream] = h
        return h

    @property
    def last_variant(self):
        h = self._handles.get(None)
        return _lib.ssm_context_last_variant(h).decode() if h else ""

    def close(self):
        for h in self._handles.values():
            _lib.ssm_context_free(h)
        self._handles = {}

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self):
        self._prev.append(getattr(_local, "ctx", None))
        _local.ctx = self
        return self

    def __exit__(self, *exc):
        _local.ctx = self._prev.pop()
        return False


_local = threading.local()


def current_context():
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.default = getattr(_local, "default", None) or Context(threads=min(os.cpu_count() or 1, 64))
    return ctx
