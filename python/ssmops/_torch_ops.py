"""The operators with a backward as torch.library custom ops (torch >= 2.4), so that
torch.compile(fullgraph=True) traces a model through them without a graph break:

    torch.ops.ssmops.<op>(inputs..., params..., out_mask) -> (one tensor per schema output)
    torch.ops.ssmops.<op>_bwd(inputs..., d<outputs>..., params..., grad_mask)
                                                          -> (one tensor per forward input)

Every array argument is `Tensor?` (absent = None), every params field a plain int/float, and
the masks say which optional outputs to make (bit i: the schema's i-th output) and which
gradients to compute (bit i: the i-th forward input). An output not made comes back as an
empty float32 tensor (a custom op returns a fixed number of tensors). Each op has a fake
(meta) implementation giving its outputs' shapes and dtypes from the library's schema
(ssmops.<op>.output_specs), and the forward op's autograd formula calls the backward op.
The ops run on the calling thread's current ssmops.Context (an explicit ctx= cannot pass
through a custom op: ssmops.autograd takes the torch.autograd.Function path for it)."""
import ctypes
import inspect
import typing

import torch

from . import _lib, _schema, _tensors

NAMESPACE = "ssmops"


def available():
    """torch.library's custom-op API (torch >= 2.4)."""
    lib = getattr(torch, "library", None)
    return all(hasattr(lib, f) for f in ("custom_op", "register_fake", "register_autograd"))


def _param_fields(pname):
    """[(field, 'int' | 'float')] of a params struct."""
    out = []
    for f, ctype in _schema.PARAMS[pname]._fields_:
        if f != "size":
            out.append((f, "float" if ctype in (ctypes.c_double, ctypes.c_float) else "int"))
    return out


def _define(qualname, fn, args, nret):
    """custom_op with the schema given as text where torch takes it, else as a signature
    with type hints (infer_schema reads __signature__)."""
    ret = "Tensor" if nret == 1 else "(%s)" % ", ".join(["Tensor"] * nret)
    schema = "(%s) -> %s" % (", ".join("%s %s" % (ty, n) for n, ty in args), ret)
    if "schema" in inspect.signature(torch.library.custom_op).parameters:
        return torch.library.custom_op(qualname, fn, mutates_args=(), schema=schema)
    hint = {"Tensor?": typing.Optional[torch.Tensor], "int": int, "float": float}
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hint[ty]) for n, ty in args]
    fn.__signature__ = inspect.Signature(params, return_annotation=torch.Tensor if nret == 1
                                         else typing.Tuple[(torch.Tensor,) * nret])
    return torch.library.custom_op(qualname, fn, mutates_args=())


def _empty(ref):
    return torch.empty(0, dtype=torch.float32, device=ref.device)


def register(name, fwd, bwd):
    """Defines ssmops::<name> and ssmops::<name>_bwd; returns a function taking the same
    arguments as ssmops.<name> (no ctx) that calls the custom op."""
    inputs = [a.name for a in fwd.schema if not a.output]
    outputs = [a for a in fwd.schema if a.output]
    out_names = [a.name for a in outputs]
    pfields = _param_fields(fwd.params_name)
    pnames = [f for f, _ in pfields]
    bwd_inputs = [a.name for a in bwd.schema if not a.output]
    bwd_required = {a.name for a in bwd.schema if not a.output and not a.optional}
    bwd_outputs = {a.name for a in bwd.schema if a.output}
    # d<output> of the forward (not a forward output the backward takes back: pregate_y, chunk_states)
    douts = [n for n in bwd_inputs if n not in inputs and n not in out_names]
    bwd_pnames = set(_schema.param_names(bwd.params_name))
    n_in, n_out = len(inputs), len(outputs)

    def fwd_call_args(args):
        tensors = dict(zip(inputs, args[:n_in]))
        params = dict(zip(pnames, args[n_in:n_in + len(pnames)]))
        mask = args[-1]
        kw = {n: t for n, t in tensors.items() if t is not None}
        for i, a in enumerate(outputs):
            if a.optional and mask >> i & 1:
                kw[a.name] = True
        return kw, params, mask

    def ref_of(kw):
        return next(t for t in kw.values() if isinstance(t, torch.Tensor) and t.is_floating_point())

    def fwd_impl(*args):
        kw, params, mask = fwd_call_args(args)
        res = fwd(**kw, **params)
        res = iter(res if isinstance(res, tuple) else (res,))
        ref = ref_of(kw)
        # each output a tensor of its own (a custom op's outputs may not alias)
        outs = tuple(next(res) if not a.optional or mask >> i & 1 else _empty(ref) for i, a in enumerate(outputs))
        return outs[0] if n_out == 1 else outs

    def fwd_fake(*args):
        kw, params, mask = fwd_call_args(args)
        ref = ref_of(kw)
        specs = {n: (shape, code) for n, shape, code in fwd.output_specs(**kw, **params)}
        outs = []
        for n in out_names:
            if n in specs:
                shape, code = specs[n]
                outs.append(torch.empty(shape, dtype=_tensors._TORCH_DTYPES[code], device=ref.device))
            else:
                outs.append(_empty(ref))
        return outs[0] if n_out == 1 else tuple(outs)

    fwd_args = [(n, "Tensor?") for n in inputs] + pfields + [("out_mask", "int")]
    fwd_op = _define("%s::%s" % (NAMESPACE, name), fwd_impl, fwd_args, n_out)
    torch.library.register_fake("%s::%s" % (NAMESPACE, name), fwd_fake)

    def bwd_call_args(args):
        tensors = dict(zip(inputs + douts, args[:n_in + len(douts)]))
        params = dict(zip(pnames, args[n_in + len(douts):-1]))
        mask = args[-1]
        kw = {n: t for n, t in tensors.items() if t is not None and n in bwd_inputs}
        for i, n in enumerate(inputs):
            if mask >> i & 1 and "d" + n in bwd_outputs:
                kw["d" + n] = True
        return kw, {k: v for k, v in params.items() if k in bwd_pnames}, mask

    def bwd_impl(*args):
        kw, params, mask = bwd_call_args(args)
        res = bwd(**kw, **params)
        res = list(res) if isinstance(res, tuple) else [res]
        made = [a.name for a in bwd.schema if a.output and (not a.optional or kw.get(a.name) is not None)]
        by = dict(zip(made, res))
        ref = ref_of(kw)
        return tuple(by["d" + n] if mask >> i & 1 and "d" + n in by else _empty(ref)
                     for i, n in enumerate(inputs))

    def bwd_fake(*args):
        kw, params, mask = bwd_call_args(args)
        ref = ref_of(kw)
        specs = {n: (shape, code) for n, shape, code in bwd.output_specs(**kw, **params)}
        out = []
        for i, n in enumerate(inputs):
            if mask >> i & 1 and "d" + n in specs:
                shape, code = specs["d" + n]
                out.append(torch.empty(shape, dtype=_tensors._TORCH_DTYPES[code], device=ref.device))
            else:
                out.append(_empty(ref))
        return tuple(out)

    bwd_args = [(n, "Tensor?") for n in inputs + douts] + pfields + [("grad_mask", "int")]
    bwd_op = _define("%s::%s_bwd" % (NAMESPACE, name), bwd_impl, bwd_args, n_in)
    torch.library.register_fake("%s::%s_bwd" % (NAMESPACE, name), bwd_fake)

    def setup_context(ctx, inputs, output):  # torch passes these by name: ctx, inputs, output
        tensors = inputs[:n_in]
        ctx.params = tuple(inputs[n_in:n_in + len(pnames)])
        ctx.out_mask = inputs[-1]
        outs = output if isinstance(output, tuple) else (output,)
        ctx.out_like = [(tuple(o.shape), o.dtype) for o in outs]
        ctx.save_for_backward(*tensors)

    def backward(ctx, *grads):
        tensors = ctx.saved_tensors
        # raised here, in Python, rather than inside the backward op (the schema's bitmask:
        # it lifts by itself when the library gains the CUDA path)
        _lib.check_backward_device(name, bwd, tensors)
        needs = getattr(ctx, "needs_input_grad", None) or (True,) * n_in
        grad_mask = 0
        for i, n in enumerate(inputs):
            t = tensors[i]
            if t is not None and t.is_floating_point() and needs[i] and "d" + n in bwd_outputs:
                grad_mask |= 1 << i
        if not grad_mask:
            return (None,) * (n_in + len(pnames) + 1)
        ref = next(t for t in tensors if t is not None and t.is_floating_point())
        dvals = []
        for n in douts:
            i = out_names.index(n[1:]) if n[1:] in out_names else None
            g = grads[i] if i is not None else None
            wrote = i is not None and (not outputs[i].optional or ctx.out_mask >> i & 1)
            if g is None or not wrote:
                if n not in bwd_required:
                    dvals.append(None)
                    continue
                shape, dtype = ctx.out_like[i]
                g = torch.zeros(shape, dtype=dtype, device=ref.device)
            dvals.append(g.contiguous())
        res = bwd_op(*tensors, *dvals, *ctx.params, grad_mask)
        res = res if isinstance(res, tuple) else (res,)
        grads_in = tuple(res[i] if grad_mask >> i & 1 else None for i in range(n_in))
        return grads_in + (None,) * (len(pnames) + 1)

    torch.library.register_autograd("%s::%s" % (NAMESPACE, name), backward, setup_context=setup_context)

    struct = _schema.params_struct(fwd.params_name)
    defaults = {f: getattr(struct, f) for f in pnames}  # plain values: torch.compile traces this wrapper
    input_set = set(inputs)
    required = [a.name for a in fwd.schema if not a.output and not a.optional]

    def call(*positional, **kw):
        given = dict(zip(required, positional))
        for k, v in kw.items():
            if k in given:
                raise TypeError("%s(): %s given twice" % (name, k))
        given.update(kw)
        unknown = [k for k in given if k not in input_set and k not in out_names and k not in pnames]
        if unknown:
            raise TypeError("%s() got an unexpected keyword %r" % (name, unknown[0]))
        mask = 0
        for i, a in enumerate(outputs):
            v = given.get(a.name)
            if v is not None and v is not True and v is not False:
                raise TypeError("%s(): %s= must be True or None on the torch.library path (no out= arrays)"
                                % (name, a.name))
            if a.optional and v is True:
                mask |= 1 << i
        params = [given.get(f, defaults[f]) for f in pnames]
        res = fwd_op(*[given.get(n) for n in inputs], *params, mask)
        res = res if isinstance(res, tuple) else (res,)
        made = [r for i, r in enumerate(res) if not outputs[i].optional or mask >> i & 1]
        return made[0] if len(made) == 1 else tuple(made)

    call.__name__ = name
    call.__doc__ = "torch.library form of ssmops.%s (custom op %s::%s; backward %s::%s_bwd)" % (
        name, NAMESPACE, name, NAMESPACE, name)
    return call
