"""One Python function per operator, built from the library's schema: the same name and the
same keyword names as the C API (ssm_mamba2_scan -> ssmops.mamba2_scan(x=..., dt=...)).

A function takes its required inputs positionally or by name, optional inputs by name, the
params struct's fields by name (chunk_size=, dt_softplus=, ...), and for each output either an
array to write into, True (make it), or None/False (leave an optional output out). Required
outputs are made when not given, in the framework, device and dtype of the inputs: outputs the
schema marks as activations take the activation inputs' dtype, other float outputs float32,
gradients the dtype and shape of their input. It returns the outputs it wrote, in the order of
the schema (one array alone when there is one)."""
import ctypes
import math
import re

from . import _lib, _schema, _tensors
from ._context import current_context


def _c_function(info):
    f = getattr(_lib.lib, "ssm_" + info.name.decode())
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + (
        [ctypes.c_void_p, ctypes.c_size_t] if info.workspace else [])
    return f


class _Arg:
    __slots__ = ("name", "role", "cls", "flags", "offset", "shape", "needs", "in_place")

    def __init__(self, a):
        self.name = a.name.decode()
        self.role, self.cls, self.flags, self.offset = a.role, a.dtype_class, a.flags, a.offset
        self.shape = a.shape.decode() if a.shape else None
        self.needs = a.needs.decode() if a.needs else None
        self.in_place = a.in_place.decode() if a.in_place else None

    @property
    def output(self):
        return bool(self.role & _schema.ROLE_OUTPUT)

    @property
    def optional(self):
        return bool(self.role & _schema.ROLE_OPTIONAL)


def _make(info):
    name = info.name.decode()
    args = [_Arg(info.args[i]) for i in range(info.nargs)]
    inputs = [a for a in args if not a.output]
    outputs = [a for a in args if a.output]
    required = [a.name for a in inputs if not a.optional]
    pname = info.params.decode()
    pfields = set(_schema.param_names(pname))
    cfun = _c_function(info)
    args_size = info.args_size
    by_name = {a.name: a for a in args}

    def op(*positional, ctx=None, **kw):
        if len(positional) > len(required):
            raise TypeError("%s() takes at most %d positional arrays (%s)" % (name, len(required),
                                                                              ", ".join(required)))
        given = dict(zip(required, positional))
        for k in list(kw):
            if k in given:
                raise TypeError("%s(): %s given twice" % (name, k))
        params = _schema.params_struct(pname)
        for k, v in kw.items():
            if k in by_name:
                given[k] = v
            elif k in pfields:
                setattr(params, k, v)
            else:
                raise TypeError("%s() got an unexpected keyword %r" % (name, k))
        missing = [r for r in required if given.get(r) is None]
        if missing:
            raise TypeError("%s() is missing %s" % (name, ", ".join(missing)))
        present = {a.name for a in inputs if given.get(a.name) is not None}
        keep = []
        buf = ctypes.create_string_buffer(args_size)  # zeroed: every tensor not filled is absent
        views = {a.name: _tensors.to_tensor(given[a.name], a.name, keep,
                                            _lib.Tensor.from_buffer(buf, a.offset)) for a in inputs if a.name in present}
        floats = [a.name for a in inputs if a.name in present and a.cls == _schema.CLASS_FLOAT]
        # outputs live in the framework of the first torch (else numpy) input
        ref = next((given[n] for n in floats if _tensors.is_torch(given[n])),
                   next((given[n] for n in floats if _tensors.is_numpy(given[n])), given[floats[0]]))
        act = next((a.name for a in inputs if a.name in present and a.flags & _schema.FLAG_ACTIVATION), floats[0])
        act_code = views[act].dtype
        # dimension symbols from the inputs' shapes, then the chunk counts (only when an output
        # is to be made: a call with every output given skips this)
        env = {}
        needs_env = False
        for a in outputs:
            v = given.get(a.name)
            if v is True or (v is None and not a.optional):
                needs_env = True
        for a in inputs if needs_env else ():
            if a.name in present:
                _schema.bind(env, _schema.shape_symbols(a.shape, present), tuple(given[a.name].shape))
        batch = env.get("batch", env.get("B"))
        if batch is not None:  # without cu_seqlens every row is one sequence
            env.setdefault("NS", batch)
            env.setdefault("nseq", batch)
        chunk = getattr(params, "chunk_size", None)
        if chunk:
            env.setdefault("Q", chunk)
            env.setdefault("C", chunk)
            if "S" in env:
                env.setdefault("NC", math.ceil(env["S"] / chunk))
                env.setdefault("nc", math.ceil(env["S"] / chunk))
        made = []
        for a in outputs:
            v = given.get(a.name)
            if v is None or v is False:
                if a.optional:
                    given[a.name] = None
                    continue
                v = True
            if v is True:
                # fp32 for parameters and states, unless the call is in float64 (a reference-
                # precision call keeps every output exact)
                shape, code = None, act_code if (a.flags & _schema.FLAG_ACTIVATION or act_code == _lib.F64) else _lib.F32
                src = a.name[1:] if a.name.startswith("d") and a.name[1:] in present else None
                like = re.search(r"(?:as|shape of) `(\w+)`", a.shape or "")
                if like and like.group(1) in present:  # "as `d`": shaped and typed like that input
                    src = like.group(1)
                dims = _schema.shape_symbols(a.shape, present)
                shape = _schema.evaluate(dims, env) if dims is not None and not like else None
                if a.in_place and a.in_place in present:
                    shape, code = tuple(given[a.in_place].shape), views[a.in_place].dtype
                elif shape is None and src is not None:  # a gradient: shaped and typed like its input
                    shape, code = tuple(given[src].shape), views[src].dtype
                elif src is not None and list(shape) == list(given[src].shape):
                    code = views[src].dtype
                if shape is None:
                    raise TypeError("%s(): pass %s= (an array of shape %s): its size does not follow from the "
                                    "inputs" % (name, a.name, a.shape))
                v = _tensors.new_like(ref, shape, code)
            given[a.name] = v
            made.append(v)
        context = ctx if ctx is not None else current_context()
        for a in outputs:
            if given.get(a.name) is not None:
                _tensors.to_tensor(given[a.name], a.name, keep, _lib.Tensor.from_buffer(buf, a.offset))
        call = [context.handle_for(ref), ctypes.byref(params), buf]
        if info.workspace:
            call += [None, 0]
        status = cfun(*call)
        _lib.check(status, call[0])
        return made[0] if len(made) == 1 else tuple(made)

    op.__name__ = name
    op.__qualname__ = name
    op.__doc__ = "ssm_%s: inputs %s; outputs %s; params %s." % (
        name, ", ".join(a.name + ("?" if a.optional else "") for a in inputs),
        ", ".join(a.name + ("?" if a.optional else "") for a in outputs), ", ".join(sorted(pfields)))
    op.schema = args
    op.params_name = pname
    op.backends = info.backends  # bit b: backend b (ssm_backend) has a path
    return op


def build():
    return {info.name.decode(): _make(info) for info in _schema.ops()}
