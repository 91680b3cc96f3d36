"""Array objects as ssm_tensor views, and new outputs in the caller's framework.

torch tensors and numpy arrays are read directly (no DLPack capsule: a decode step's binding
overhead is a few microseconds); any other object with __dlpack__ (CuPy, JAX, ...) goes through
DLPack and ssm_tensor_from_dlpack."""
import ctypes
import struct

from . import _lib

try:  # numpy and torch are both optional; at least one is needed to make outputs
    import numpy as np
except ImportError:  # pragma: no cover
    np = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

_NP_CODES = {}
if np is not None:
    _NP_CODES = {np.dtype(np.float32): _lib.F32, np.dtype(np.float16): _lib.F16, np.dtype(np.float64): _lib.F64,
                 np.dtype(np.int32): _lib.I32, np.dtype(np.int64): _lib.I64}
_TORCH_CODES = {}
if torch is not None:
    _TORCH_CODES = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16,
                    torch.float64: _lib.F64, torch.int32: _lib.I32, torch.int64: _lib.I64}
    _TORCH_DTYPES = {v: k for k, v in _TORCH_CODES.items()}
_NP_DTYPES = {v: k for k, v in _NP_CODES.items()}

_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x):
    return np is not None and isinstance(x, np.ndarray)


def _fill(t, ptr, code, dev_type, dev_index, shape, strides, name):
    n = len(shape)
    if n > _lib.MAX_DIMS:
        raise _lib.SsmValueError(11, "%s: %d dims; ssmops takes at most %d" % (name, n, _lib.MAX_DIMS))
    t.dtype = code
    t.device.type = dev_type
    t.device.index = dev_index
    t.ndim = n
    t.shape[:n] = shape
    t.strides[:n] = strides
    if ptr:
        t.data = ptr
    elif all(d > 0 for d in shape):
        raise _lib.SsmValueError(10, "%s: has no data" % name)
    else:  # an empty tensor may have no data pointer; NULL would mean "absent"
        t.data = ctypes.addressof(_EMPTY)


_EMPTY = ctypes.create_string_buffer(64)


# ssm_tensor as bytes: data, dtype, device type, device index, ndim, shape[6], strides[6];
# one struct.pack_into per tensor writes it into an args struct (zero-padded to 6 dims):
# an order of magnitude cheaper than setting the ctypes fields one by one.
_TENSOR_FORMAT = "<Qiiii%dq%dx%dq%dx"
_PACK = [struct.Struct(_TENSOR_FORMAT % (n, 8 * (_lib.MAX_DIMS - n), n, 8 * (_lib.MAX_DIMS - n))).pack_into
         for n in range(_lib.MAX_DIMS + 1)]
assert all(struct.calcsize(_TENSOR_FORMAT % (n, 8 * (_lib.MAX_DIMS - n), n, 8 * (_lib.MAX_DIMS - n)))
           == ctypes.sizeof(_lib.Tensor) for n in range(_lib.MAX_DIMS + 1))
_TORCH_TENSOR = torch.Tensor if torch is not None else ()


def pack(buf, offset, x, name, keep):
    """Writes the ssm_tensor view of x into buf at offset; returns its dtype code. torch
    tensors and numpy arrays are read directly; anything else goes through to_tensor."""
    if isinstance(x, _TORCH_TENSOR):
        code = _TORCH_CODES.get(x.dtype)
        shape = x.shape
        n = len(shape)
        if x.is_cpu:
            dev_type, dev_index = _lib.DEVICE_CPU, 0
        elif x.is_cuda:
            dev_type, dev_index = _lib.DEVICE_CUDA, x.get_device()
        else:
            dev_type = None
        ptr = x.data_ptr() if dev_type is not None else 0
        if code is None or n > _lib.MAX_DIMS or not ptr:
            to_tensor(x, name, keep, _lib.Tensor.from_buffer(buf, offset))
            return code
        _PACK[n](buf, offset, ptr, code, dev_type, dev_index, n, *shape, *x.stride())
        return code
    return to_tensor(x, name, keep, _lib.Tensor.from_buffer(buf, offset)).dtype


def to_tensor(x, name, keep, t=None):
    """The ssm_tensor view of x (None -> absent), filled into t (a Tensor, possibly a view into
    an args struct) or a new one. `keep` collects what must outlive the call."""
    if t is None:
        t = _lib.Tensor()
    if x is None:
        return t
    if is_torch(x):
        code = _TORCH_CODES.get(x.dtype)
        if code is None:
            raise _lib.SsmValueError(12, "%s: dtype %s is not supported (float16/32/64, bfloat16, int32/64)"
                                     % (name, x.dtype))
        dev = x.device
        if dev.type == "cpu":
            dt, di = _lib.DEVICE_CPU, 0
        elif dev.type == "cuda":
            dt, di = _lib.DEVICE_CUDA, dev.index if dev.index is not None else 0
        else:
            raise _lib.SsmValueError(12, "%s: device %s is not supported (cpu, cuda)" % (name, dev))
        _fill(t, x.data_ptr(), code, dt, di, tuple(x.shape), x.stride(), name)
        return t
    if is_numpy(x):
        code = _NP_CODES.get(x.dtype)
        if code is None:
            raise _lib.SsmValueError(12, "%s: dtype %s is not supported (float16/32/64, int32/64)" % (name, x.dtype))
        size = x.dtype.itemsize
        if any(s % size for s in x.strides):
            raise _lib.SsmValueError(12, "%s: a stride is not a multiple of the element size" % name)
        _fill(t, x.ctypes.data, code, _lib.DEVICE_CPU, 0, x.shape, [s // size for s in x.strides], name)
        return t
    if hasattr(x, "__dlpack__"):
        capsule = x.__dlpack__()
        keep.append(capsule)
        ptr = _PyCapsule_GetPointer(capsule, b"dltensor")  # DLManagedTensor: its DLTensor comes first
        _lib.check(_lib.ssm_tensor_from_dlpack(None, ctypes.cast(ptr, ctypes.POINTER(_lib.DLTensor)),
                                               ctypes.byref(t)), None)
        return t
    raise _lib.SsmValueError(10, "%s: %s is not an array (numpy, torch or a __dlpack__ object)"
                             % (name, type(x).__name__))


def dtype_code(x):
    if is_torch(x):
        return _TORCH_CODES.get(x.dtype)
    if is_numpy(x):
        return _NP_CODES.get(x.dtype)
    return None


def new_like(ref, shape, code):
    """A new array of `shape` and dtype code in ref's framework and device."""
    if is_torch(ref):
        return torch.empty(tuple(shape), dtype=_TORCH_DTYPES[code], device=ref.device)
    if np is None:
        raise _lib.SsmValueError(10, "outputs of non-torch inputs need numpy")
    if code not in _NP_DTYPES:
        raise _lib.SsmValueError(12, "numpy has no dtype for ssm dtype %s (bfloat16): pass out= arrays" % code)
    return np.empty(tuple(shape), dtype=_NP_DTYPES[code])
