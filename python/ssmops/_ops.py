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
import re

from . import _lib, _schema, _tensors
from ._context import current_context


def _c_function(info):
    """The C entry point, bound once with its argument types: (ctx, params struct, args
    struct as bytes[, workspace, size])."""
    f = _lib.lib["ssm_" + info.name.decode()]  # a function object of its own: argtypes are this binding's
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.POINTER(_schema.PARAMS[info.params.decode()]), ctypes.c_char_p] + (
        [ctypes.c_void_p, ctypes.c_size_t] if info.workspace else [])
    return f


class BoundCall:
    """An operator call prepared by ssmops.<op>.bind(...): its args struct holds the views of
    the arrays it was given (their data pointers, shapes and strides at bind time) and the
    context handle (for CUDA, the stream current then). Calling it runs the C function again
    on those arrays and returns the same outputs: the per-call cost is the ctypes call
    alone. Contract: while it is used, the bound arrays stay alive (it holds references)
    and keep their storage, shape and strides: write new values into them in place
    (x.copy_(...)); an array replaced or resized needs a new bind."""

    __slots__ = ("name", "_cfun", "_context", "_handle", "_params", "_buf", "_keep", "outputs", "_workspace")

    def __init__(self, name, cfun, context, handle, params, buf, keep, outputs, workspace):
        self.name, self._cfun, self._context, self._handle = name, cfun, context, handle
        self._params, self._buf, self._keep, self.outputs, self._workspace = params, buf, keep, outputs, workspace

    def __call__(self):
        status = (self._cfun(self._handle, self._params, self._buf, None, 0) if self._workspace
                  else self._cfun(self._handle, self._params, self._buf))
        if status:
            _lib.check(status, self._handle)
        return self.outputs


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
    nrequired = len(required)
    pname = info.params.decode()
    pfields = frozenset(_schema.param_names(pname))
    pclass = _schema.PARAMS[pname]
    defaults = _schema.params_struct(pname)   # shared by every call that sets no field (read-only in C)
    cfun = _c_function(info)
    args_size = info.args_size
    workspace = bool(info.workspace)
    by_name = {a.name: a for a in args}
    offset = {a.name: a.offset for a in args}
    # the inputs whose framework and device the made outputs take: float inputs, in order
    float_inputs = [a.name for a in inputs if a.cls == _schema.CLASS_FLOAT]
    activation_inputs = [a.name for a in inputs if a.flags & _schema.FLAG_ACTIVATION]
    required_outputs = [a.name for a in outputs if not a.optional]
    output_names = [a.name for a in outputs]

    def parse(positional, kw):
        """The arrays of a call by name, and its params struct."""
        if len(positional) > nrequired:
            raise TypeError("%s() takes at most %d positional arrays (%s)" % (name, nrequired,
                                                                              ", ".join(required)))
        given = dict(zip(required, positional))
        params = defaults
        for k, v in kw.items():
            if k in by_name:
                if k in given:
                    raise TypeError("%s(): %s given twice" % (name, k))
                given[k] = v
            elif k in pfields:
                if params is defaults:
                    params = pclass.from_buffer_copy(defaults)
                setattr(params, k, v)
            else:
                raise TypeError("%s() got an unexpected keyword %r" % (name, k))
        for r in required:
            if given.get(r) is None:
                raise TypeError("%s() is missing %s" % (name, ", ".join(r for r in required if given.get(r) is None)))
        return given, params

    def prepare(positional, kw):
        """Parses a call: the params struct, the args struct (bytes) with every view written,
        the outputs (made where asked), the objects the struct points into, and the input
        whose device picks the context's stream."""
        given, params = parse(positional, kw)
        keep = []
        buf = ctypes.create_string_buffer(args_size)  # zeroed: every tensor not written is absent
        codes = {}
        to_make = False
        for k, v in given.items():
            if v is None or v is False:
                continue
            if v is True:
                to_make = True
                continue
            codes[k] = _tensors.pack(buf, offset[k], v, k, keep)
        for r in required_outputs:
            v = given.get(r)
            if v is None or v is False:
                to_make = True
        ref = None
        for n in float_inputs:
            ref = given.get(n)
            if ref is not None:
                break
        if to_make:
            made = _make_outputs(given, codes, buf, keep, params)
        else:
            made = [v for v in map(given.get, output_names) if v is not None and v is not False]
        keep.append(given)
        return params, buf, keep, made, ref

    def op(*positional, ctx=None, **kw):
        params, buf, keep, made, ref = prepare(positional, kw)
        handle = (ctx if ctx is not None else current_context()).handle_for(ref)
        status = cfun(handle, params, buf, None, 0) if workspace else cfun(handle, params, buf)
        if status:
            _lib.check(status, handle)
        return made[0] if len(made) == 1 else tuple(made)

    def bind(*positional, ctx=None, **kw):
        """A prepared call (BoundCall): the same arguments as the operator, parsed and laid
        out once; calling it runs the C function on them again (for a decode loop that
        writes each token into the same buffers)."""
        params, buf, keep, made, ref = prepare(positional, kw)
        context = ctx if ctx is not None else current_context()
        return BoundCall(name, cfun, context, context.handle_for(ref), params, buf, keep,
                         made[0] if len(made) == 1 else tuple(made), workspace)

    plans = {}  # the output plan of each input signature: the schema walk runs once per signature

    def _signature(given, codes, params):
        """What the output plan depends on: each present input's shape, dtype and kind, which
        outputs are made or given, and the chunk size; None where an input has no shape."""
        key = []
        for a in inputs:
            v = given.get(a.name)
            if v is not None:
                shape = getattr(v, "shape", None)
                if shape is None:
                    return None
                key.append((a.name, tuple(shape), codes.get(a.name), type(v)))
        for a in outputs:
            v = given.get(a.name)
            key.append(0 if v is None or v is False else 1 if v is True else 2)
        key.append(getattr(params, "chunk_size", None))
        return tuple(key)

    def _make_outputs(given, codes, buf, keep, params):
        """Makes every output asked for (True) or required and not given, in the framework and
        device of the inputs; writes their views into buf; returns them in schema order
        together with the given ones."""
        key = _signature(given, codes, params)
        cached = plans.get(key) if key is not None else None
        if cached is None:
            ref_name, plan = _plan_outputs(given, codes, params)
            cached = (ref_name, [(a, v is None, shape, code) for a, v, shape, code in plan])
            if key is not None:
                if len(plans) >= 256:
                    plans.clear()
                plans[key] = cached
        ref = given[cached[0]]
        made = []
        for a, make, shape, code in cached[1]:
            if make:
                v = _tensors.new_like(ref, shape, code)
                _tensors.pack(buf, a.offset, v, a.name, keep)
            else:
                v = given[a.name]
            made.append(v)
        return made

    def output_specs(*positional, **kw):
        """[(name, shape, dtype code)] of the outputs a call with these arguments makes (its
        arrays only read for shape and dtype: torch's fake tensors do)."""
        given, params = parse(positional, kw)
        codes = {k: _tensors.dtype_code(v) for k, v in given.items()
                 if v is not None and v is not True and v is not False}
        _, plan = _plan_outputs(given, codes, params)
        return [(a.name, shape, code) for a, v, shape, code in plan if v is None]

    def _plan_outputs(given, codes, params):
        """The name of the input whose framework the made outputs take, and for each output in
        schema order that the call writes: (arg, the given array or None, shape, dtype code)."""
        present = {a.name for a in inputs if given.get(a.name) is not None}
        floats = [n for n in float_inputs if n in present]
        # outputs live in the framework of the first torch (else numpy) input
        ref = next((n for n in floats if _tensors.is_torch(given[n])),
                   next((n for n in floats if _tensors.is_numpy(given[n])), floats[0]))
        act = next((n for n in activation_inputs if n in present), floats[0])
        act_code = codes[act]
        # dimension symbols from the inputs' shapes, then the chunk counts
        env = {}
        for a in inputs:
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
                env.setdefault("NC", -(-env["S"] // chunk))  # ceil, in integers (also symbolic sizes)
                env.setdefault("nc", -(-env["S"] // chunk))
        plan = []
        for a in outputs:
            v = given.get(a.name)
            if v is None or v is False:
                if a.optional:
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
                    shape, code = tuple(given[a.in_place].shape), codes[a.in_place]
                elif shape is None and src is not None:  # a gradient: shaped and typed like its input
                    shape, code = tuple(given[src].shape), codes[src]
                elif src is not None and list(shape) == list(given[src].shape):
                    code = codes[src]
                if shape is None:
                    raise TypeError("%s(): pass %s= (an array of shape %s): its size does not follow from the "
                                    "inputs" % (name, a.name, a.shape))
                plan.append((a, None, tuple(shape), code))
            else:
                plan.append((a, v, None, None))
        return ref, plan

    op.bind = bind
    op.output_specs = output_specs
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
