"""torch.autograd for the operators that have a backward: ssmops.autograd.<op>(...) takes the
same arguments as ssmops.<op> (torch tensors), returns the same outputs, and its backward calls
ssmops.<op>_bwd with the saved inputs and the incoming gradients (d<output>), giving d<input>
for every float input that requires a gradient. Deterministic: the library's backward reduces
in a fixed order."""
import torch

from . import _lib, _schema

OPS_WITH_BACKWARD = ("mamba2_scan", "causal_conv1d", "rmsnorm_gated", "mamba3_angle_cumsum", "mamba3_siso",
                     "mamba3_mimo")


def _make(name, fwd, bwd):
    fwd_inputs = [a for a in fwd.schema if not a.output]
    fwd_outputs = [a.name for a in fwd.schema if a.output]
    required_outputs = {a.name for a in fwd.schema if a.output and not a.optional}
    bwd_names = {a.name for a in bwd.schema}

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, meta, *tensors):
            names, kw, ctxt = meta
            given = dict(zip(names, tensors))
            outs = fwd(**given, **kw, ctx=ctxt)
            outs = outs if isinstance(outs, tuple) else (outs,)
            ctx.meta = (names, kw, ctxt)
            # the outputs made, in the schema's order: the required ones, and the optional ones
            # asked for (True) or given as arrays to write into
            ctx.out_names = [o for o in fwd_outputs
                             if o in required_outputs or kw.get(o) is not None and kw.get(o) is not False
                             or given.get(o) is not None]
            ctx.out0 = (tuple(outs[0].shape), outs[0].dtype, outs[0].device)
            ctx.save_for_backward(*tensors)
            idx = [t for n, t in given.items() if t is not None and not t.is_floating_point()]
            if idx:
                ctx.mark_non_differentiable(*idx)
            return outs

        @staticmethod
        def backward(ctx, *grads):
            names, kw, ctxt = ctx.meta
            tensors = ctx.saved_tensors
            _lib.check_backward_device(name, bwd, tensors)
            given = dict(zip(names, tensors))
            bkw = {n: t for n, t in given.items() if n in bwd_names}
            for o, g in zip(ctx.out_names, grads):
                if "d" + o in bwd_names and g is not None:
                    bkw["d" + o] = g.contiguous()
            main = "d" + ctx.out_names[0]
            if main in bwd_names and main not in bkw:  # the main output's gradient is required
                shape, dtype, device = ctx.out0
                bkw[main] = torch.zeros(shape, dtype=dtype, device=device)
            wanted = []
            for i, n in enumerate(names):
                t = tensors[i]
                ok = (t is not None and t.is_floating_point() and ctx.needs_input_grad[i + 1]
                      and "d" + n in bwd_names)
                if ok:
                    bkw["d" + n] = True
                    wanted.append(n)
            params = {k: v for k, v in kw.items() if k in _schema.param_names(bwd.params_name) and k not in bkw}
            res = bwd(**bkw, **params, ctx=ctxt) if wanted else ()
            res = res if isinstance(res, tuple) else (res,)
            made = [a.name for a in bwd.schema if a.output and bkw.get(a.name) is not None]
            by = dict(zip(made, res))
            return (None,) + tuple(by.get("d" + n) if n in wanted else None for n in names)

    def op(*positional, ctx=None, **kw):
        required = [a.name for a in fwd_inputs if not a.optional]
        given = dict(zip(required, positional))
        given.update({k: v for k, v in kw.items() if k in {a.name for a in fwd_inputs}})
        rest = {k: v for k, v in kw.items() if k not in given}
        names = [a.name for a in fwd_inputs if given.get(a.name) is not None]
        tensors = [given[n] for n in names]
        call_kw = rest
        meta = (names, call_kw, ctx)
        outs = Function.apply(meta, *tensors)
        return outs[0] if len(outs) == 1 else outs

    op.__name__ = name
    op.__doc__ = "autograd form of ssmops.%s (backward: ssmops.%s_bwd)" % (name, name)
    return op


def _dispatch(name, function_path, library_path, outputs):
    """The custom-op path for plain calls; the autograd.Function path where the custom op
    cannot carry the call (an explicit ctx=, or out= arrays to write into)."""
    def op(*positional, ctx=None, **kw):
        if ctx is not None or any(isinstance(kw.get(o), torch.Tensor) for o in outputs):
            return function_path(*positional, ctx=ctx, **kw)
        return library_path(*positional, **kw)

    op.__name__ = name
    op.__doc__ = function_path.__doc__ + "; a torch.library custom op (torch.ops.ssmops.%s) for torch.compile" % name
    return op


def build(functions):
    """ssmops.autograd's functions: on torch >= 2.4 over torch.library custom ops (so that
    torch.compile traces through them), else torch.autograd.Functions."""
    from . import _torch_ops
    library = _torch_ops.available()
    out = {}
    for name in OPS_WITH_BACKWARD:
        fwd, bwd = functions[name], functions[name + "_bwd"]
        out[name] = _make(name, fwd, bwd)
        if library:
            outputs = [a.name for a in fwd.schema if a.output]
            out[name] = _dispatch(name, out[name], _torch_ops.register(name, fwd, bwd), outputs)
    return out

