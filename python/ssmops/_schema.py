"""The library's operator schema (ssm_op_count / ssm_op_get) read through ctypes, and the params
structs it names, so that every operator's wrapper is built from it."""
import ctypes
import functools
import re

from . import _lib


class ArgInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("role", ctypes.c_int32), ("dtype_class", ctypes.c_int32),
                ("ranks", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("offset", ctypes.c_size_t),
                ("shape", ctypes.c_char_p), ("needs", ctypes.c_char_p), ("in_place", ctypes.c_char_p)]


class OpInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("params", ctypes.c_char_p), ("params_size", ctypes.c_size_t),
                ("args_size", ctypes.c_size_t), ("nargs", ctypes.c_int32), ("args", ctypes.POINTER(ArgInfo)),
                ("backends", ctypes.c_uint32), ("workspace", ctypes.c_int32)]


ROLE_OPTIONAL, ROLE_OUTPUT = 1, 2
CLASS_FLOAT, CLASS_INDEX = 0, 1
FLAG_ACTIVATION = 1

_lib.lib.ssm_op_count.restype = ctypes.c_int32
_lib.lib.ssm_op_get.restype = ctypes.POINTER(OpInfo)
_lib.lib.ssm_op_get.argtypes = [ctypes.c_int32]
_lib.lib.ssm_op_info_struct_size.restype = ctypes.c_size_t
_lib.lib.ssm_arg_info_struct_size.restype = ctypes.c_size_t
if (_lib.lib.ssm_op_info_struct_size() != ctypes.sizeof(OpInfo)
        or _lib.lib.ssm_arg_info_struct_size() != ctypes.sizeof(ArgInfo)):
    raise ImportError("ssmops: the schema structs of this package do not match the library's")


# ---- params structs (ssm_<family>_params): the fields a keyword may set ---------------------
class Mamba2Params(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("chunk_size", ctypes.c_int64), ("dt_softplus", ctypes.c_int32),
                ("dt_limit_lo", ctypes.c_double), ("dt_limit_hi", ctypes.c_double)]


class Conv1dParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("activation", ctypes.c_int32)]


class RmsnormParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("eps", ctypes.c_double), ("group_size", ctypes.c_int64),
                ("norm_before_gate", ctypes.c_int32)]


class Mamba3Params(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("chunk_size", ctypes.c_int64)]


class Mamba3MimoParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("chunk_size", ctypes.c_int64), ("rotary_dim_divisor", ctypes.c_int32),
                ("fuse_pregate_norm", ctypes.c_int32), ("norm_eps", ctypes.c_double)]


PARAMS = {"ssm_mamba2_params": Mamba2Params, "ssm_conv1d_params": Conv1dParams,
          "ssm_rmsnorm_params": RmsnormParams, "ssm_mamba3_params": Mamba3Params,
          "ssm_mamba3_mimo_params": Mamba3MimoParams}


def params_struct(name):
    cls = PARAMS[name]
    init = getattr(_lib.lib, name + "_init")
    init.restype = None
    init.argtypes = [ctypes.POINTER(cls)]
    p = cls()
    init(ctypes.byref(p))
    if p.size != ctypes.sizeof(cls):
        raise ImportError("ssmops: %s layout mismatch (%d bytes here, %d in the library)"
                          % (name, ctypes.sizeof(cls), p.size))
    return p


def param_names(name):
    return [f for f, _ in PARAMS[name]._fields_ if f != "size"]


# ---- shapes: the schema's strings, "(batch, S, H, P)", as symbols -----------------------------
def shape_symbols(text, present):
    """The dims of a shape string as expressions, choosing among the string's alternatives by
    which tensors are present ("(A), or (B) with `t`" and "(A) with `t`; else (B)")."""
    if text is None:
        return None
    cond = _COND.search(text)
    return _shape_symbols(text, bool(cond) and cond.group(1) in present)


_COND = re.compile(r"with `(\w+)`")


@functools.lru_cache(maxsize=None)
def _shape_symbols(text, given):
    groups = re.findall(r"\(([^()]*)\)", text)
    if not groups:
        return None
    cond = _COND.search(text)
    choice = groups[0]
    if cond and len(groups) > 1:
        if ", or (" in text:          # (A), or (B) with `t`
            choice = groups[1] if given else groups[0]
        elif "else" in text:          # (A) with `t`; else (B)
            choice = groups[0] if given else groups[1]
    return tuple(d.strip() for d in choice.split(",") if d.strip())


def _expr(d):
    return d.replace("−", "-").replace("·", "*")


def bind(env, dims, actual):
    """Binds the plain symbols (and `X + 1` / `X - 1`) of dims to an input's actual shape."""
    if dims is None or len(dims) != len(actual):
        return
    for d, n in zip(dims, actual):
        e = _expr(d).replace(" ", "")
        if re.fullmatch(r"[A-Za-z_]\w*", e):
            env.setdefault(e, n)
        else:
            m = re.fullmatch(r"([A-Za-z_]\w*)([+-])(\d+)", e)
            if m:
                env.setdefault(m.group(1), n - int(m.group(3)) if m.group(2) == "+" else n + int(m.group(3)))


def evaluate(dims, env):
    out = []
    for d in dims:
        try:
            out.append(int(eval(_expr(d), {"__builtins__": {}}, env)))  # noqa: S307 (schema strings only)
        except Exception:  # an unbound symbol: the caller must pass this output
            return None
    return out


def ops():
    n = _lib.lib.ssm_op_count()
    for i in range(n):
        yield _lib.lib.ssm_op_get(i).contents
