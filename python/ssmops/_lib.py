"""ctypes binding of libssmops: the library, the C structs the package shares with it, and
the conversion of array objects (numpy, torch, anything with __dlpack__) to ssm_tensor."""
import ctypes
import os
import sys
from pathlib import Path

MAX_DIMS = 6

# ssm_dtype codes and their element sizes
F32, F16, BF16, F64, I32, I64 = 0, 1, 2, 3, 10, 11
DEVICE_CPU, DEVICE_CUDA = 0, 1
BACKENDS = {"auto": 0, "ref": 1, "cpu": 2, "cuda": 3}
ISAS = {"auto": 0, "scalar": 1, "avx2": 2, "avx512": 3}

STATUS_OK = 0
_STATUS_NAMES = {10: "INVALID_ARGUMENT", 11: "INVALID_SHAPE", 12: "INVALID_LAYOUT", 20: "UNSUPPORTED",
                 21: "UNSUPPORTED_HARDWARE", 30: "OUT_OF_MEMORY", 31: "WORKSPACE_TOO_SMALL",
                 40: "DEVICE_ERROR", 90: "INTERNAL"}


class SsmError(Exception):
    """A failed ssmops call: `status` is the library's ssm_status name, the message its own."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = _STATUS_NAMES.get(status, str(status))
        self.code = status


class SsmValueError(SsmError, ValueError):
    """Invalid arguments (INVALID_ARGUMENT, INVALID_SHAPE, INVALID_LAYOUT, WORKSPACE_TOO_SMALL)."""


class SsmMemoryError(SsmError, MemoryError):
    """OUT_OF_MEMORY."""


class SsmRuntimeError(SsmError, RuntimeError):
    """UNSUPPORTED, UNSUPPORTED_HARDWARE, DEVICE_ERROR, INTERNAL."""


def raise_for(status, message):
    if status in (10, 11, 12, 31):
        raise SsmValueError(status, message)
    if status == 30:
        raise SsmMemoryError(status, message)
    raise SsmRuntimeError(status, message)


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("index", ctypes.c_int32)]


class Tensor(ctypes.Structure):
    """ssm_tensor: data, dtype, device, ndim, shape[6], strides[6] (in elements)."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device", Device),
                ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("strides", ctypes.c_int64 * MAX_DIMS)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack's DLTensor (ssm_dl_tensor in ssmops.h)."""
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Allocator(ctypes.Structure):
    _fields_ = [("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p), ("opaque", ctypes.c_void_p)]


class DeviceAllocator(ctypes.Structure):
    _fields_ = [("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p), ("opaque", ctypes.c_void_p)]


class ContextParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("num_threads", ctypes.c_int32), ("backend", ctypes.c_int32),
                ("isa", ctypes.c_int32), ("deterministic", ctypes.c_int32), ("ref_mode", ctypes.c_int32),
                ("allocator", Allocator), ("cuda_stream", ctypes.c_void_p),
                ("device_allocator", DeviceAllocator), ("cuda_portable", ctypes.c_int32)]


def _candidates():
    env = os.environ.get("SSMOPS_LIBRARY")
    if env:
        yield Path(env)
    here = Path(__file__).resolve().parent
    names = ["libssmops.so"] if sys.platform != "darwin" else ["libssmops.dylib"]
    for name in names:
        yield here / name                               # installed next to the package
        for build in ("build", "build-asan"):           # a source checkout: python/ssmops -> ../../build
            yield here.parent.parent / build / name


def _load():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            return ctypes.CDLL(str(path))
    raise ImportError("ssmops: libssmops not found (tried %s); build it with `make` or set SSMOPS_LIBRARY"
                      % ", ".join(tried))


lib = _load()


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


ssm_version = _fn("ssm_version", ctypes.c_char_p)
ssm_tensor_struct_size = _fn("ssm_tensor_struct_size", ctypes.c_size_t)
ssm_context_params_init = _fn("ssm_context_params_init", None, ctypes.POINTER(ContextParams))
ssm_context_create = _fn("ssm_context_create", ctypes.c_int, ctypes.POINTER(ContextParams),
                         ctypes.POINTER(ctypes.c_void_p))
ssm_context_free = _fn("ssm_context_free", None, ctypes.c_void_p)
ssm_context_last_error = _fn("ssm_context_last_error", ctypes.c_char_p, ctypes.c_void_p)
ssm_context_set_variant = _fn("ssm_context_set_variant", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                              ctypes.c_char_p)
ssm_context_last_variant = _fn("ssm_context_last_variant", ctypes.c_char_p, ctypes.c_void_p)
ssm_tensor_from_dlpack = _fn("ssm_tensor_from_dlpack", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DLTensor),
                             ctypes.POINTER(Tensor))
ssm_cuda_device_count = _fn("ssm_cuda_device_count", ctypes.c_int32)

if ssm_tensor_struct_size() != ctypes.sizeof(Tensor):
    raise ImportError("ssmops: this package's ssm_tensor (%d bytes) does not match the library's (%d)"
                      % (ctypes.sizeof(Tensor), ssm_tensor_struct_size()))

check_params = ContextParams()
ssm_context_params_init(ctypes.byref(check_params))
if check_params.size != ctypes.sizeof(ContextParams):
    raise ImportError("ssmops: ssm_context_params layout mismatch")

__version__ = ssm_version().decode()


def last_error(ctx_ptr):
    msg = ssm_context_last_error(ctx_ptr)
    return msg.decode("utf-8", "replace") if msg else ""


def check(status, ctx_ptr):
    if status != STATUS_OK:
        raise_for(status, last_error(ctx_ptr))


def check_backward_device(name, bwd, tensors):
    """NotImplementedError when a backward would run on CUDA tensors and the library has no CUDA
    path for name's backward (bwd: its operator function; the schema's backend bits)."""
    if any(t is not None and t.is_cuda for t in tensors) and not bwd.backends & (1 << BACKENDS["cuda"]):
        raise NotImplementedError("ssmops: %s_bwd has no CUDA path yet (the CUDA backward issue adds it); "
                                  "run the backward on CPU tensors" % name)
