"""torch.autograd for the operators that have a backward: ssmops.autograd.<op>(...) takes the
same arguments as ssmops.<op> (torch tensors), returns the same outputs, and its backward calls
ssmops.<op>_bwd with the saved inputs and the incoming gradients (d<output>), giving d<input>
for every float input that requires a gradient. Deterministic: the library's backward reduces
in a fixed order.

keep_pregate_y=True, keep_chunk_states=True (mamba3_siso, mamba3_mimo): the forward also writes
that result (pregate_y: the pre-gate output, fp32 (B, S, H, V) for SISO, per rank (B, S, H, R, P)
for MIMO; chunk_states: the state entering every chunk of chunk_size tokens, fp32 (NCS, H, V, K)
for SISO, (NCS, H, N, P) for MIMO) into an array it makes, not returned, unless the call passes its
own array (returned as usual, not differentiable), and keeps it for the backward, which may read it
instead of recomputing it (docs/ops/mamba3_siso.md §7 and docs/ops/mamba3_mimo.md §5, "Saved
forward results", say which backend reads what, and when): less backward time for 4·B·S·H·V and
4·NCS·H·V·K (SISO), 4·B·S·H·R·P and 4·NCS·H·N·P (MIMO) bytes held from the forward to the
backward. Such a call takes the torch.autograd.Function path."""
import torch

from . import _lib, _schema

OPS_WITH_BACKWARD = ("mamba2_scan", "causal_conv1d", "rmsnorm_gated", "mamba3_angle_cumsum", "mamba3_siso",
                     "mamba3_mimo")


def _pregate_y_for(given, kw):
    """An fp32 pregate_y array for a forward on these inputs: (B, S, H, V) for mamba3_siso (q is
    (B, S, Hq, K)), (B, S, H, R, P) for mamba3_mimo (q is (B, S, R, G, N))."""
    q, v = given["q"], given["v"]
    shape = tuple(v.shape) if q.dim() == 4 else (v.shape[0], v.shape[1], v.shape[2], q.shape[2], v.shape[3])
    return torch.empty(shape, dtype=torch.float32, device=v.device)


def _chunk_states_for(given, kw):
    """An fp32 chunk_states array for a forward on these inputs, one row per chunk of chunk_size
    tokens of every sequence (batch row, or cu_seqlens sequence): (NCS, H, V, K) for mamba3_siso
    (q is (B, S, Hq, K)), (NCS, H, N, P) for mamba3_mimo (q is (B, S, R, G, N))."""
    q, v = given["q"], given["v"]
    siso = q.dim() == 4
    params = "ssm_mamba3_params" if siso else "ssm_mamba3_mimo_params"
    c = kw.get("chunk_size", _schema.params_struct(params).chunk_size)
    cu = given.get("cu_seqlens")
    if cu is not None:
        rows = int(torch.div(cu[1:] - cu[:-1] + c - 1, c, rounding_mode="floor").sum().item())
    else:
        rows = v.shape[0] * ((v.shape[1] + c - 1) // c)
    tail = (v.shape[3], q.shape[3]) if siso else (q.shape[4], v.shape[3])
    return torch.empty((rows, v.shape[2]) + tail, dtype=torch.float32, device=v.device)


# the forward results a backward may take back, and how to make an array for each
_SAVED = {"pregate_y": _pregate_y_for, "chunk_states": _chunk_states_for}


def _make(name, fwd, bwd):
    fwd_inputs = [a for a in fwd.schema if not a.output]
    fwd_outputs = [a.name for a in fwd.schema if a.output]
    required_outputs = {a.name for a in fwd.schema if a.output and not a.optional}
    bwd_names = {a.name for a in bwd.schema}
    # forward outputs the backward takes back as inputs (pregate_y, chunk_states)
    kept_outputs = [a.name for a in bwd.schema if not a.output and a.name in fwd_outputs]

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, meta, *tensors):
            names, kw, ctxt, keep, hidden = meta
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
            # the kept outputs go to the backward (not differentiable); those made only for it
            # are not returned
            kept = [outs[ctx.out_names.index(o)] for o in keep]
            ctx.kept_names = keep
            if hidden:
                outs = tuple(t for o, t in zip(ctx.out_names, outs) if o not in hidden)
                ctx.out_names = [o for o in ctx.out_names if o not in hidden]
            shown = [t for t in kept if any(t is u for u in outs)]
            if shown:
                ctx.mark_non_differentiable(*shown)
            ctx.save_for_backward(*tensors, *kept)
            idx = [t for n, t in given.items() if t is not None and not t.is_floating_point()]
            if idx:
                ctx.mark_non_differentiable(*idx)
            return outs

        @staticmethod
        def backward(ctx, *grads):
            names, kw, ctxt = ctx.meta[:3]
            saved = ctx.saved_tensors
            tensors = saved[:len(saved) - len(ctx.kept_names)]
            _lib.check_backward_device(name, bwd, tensors)
            given = dict(zip(names, tensors))
            bkw = {n: t for n, t in given.items() if n in bwd_names}
            bkw.update(zip(ctx.kept_names, saved[len(tensors):]))
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

    def op(*positional, ctx=None, keep_pregate_y=False, keep_chunk_states=False, **kw):
        required = [a.name for a in fwd_inputs if not a.optional]
        given = dict(zip(required, positional))
        given.update({k: v for k, v in kw.items() if k in {a.name for a in fwd_inputs}})
        rest = {k: v for k, v in kw.items() if k not in given}
        names = [a.name for a in fwd_inputs if given.get(a.name) is not None]
        tensors = [given[n] for n in names]
        call_kw = rest
        keep, hidden = [], []
        for saved, wanted in (("pregate_y", keep_pregate_y), ("chunk_states", keep_chunk_states)):
            if not wanted:
                continue
            if saved not in kept_outputs:
                raise TypeError("%s(): keep_%s: its backward takes no %s" % (name, saved, saved))
            keep.append(saved)
            if call_kw.get(saved) is None or call_kw.get(saved) is False:
                call_kw = dict(call_kw, **{saved: _SAVED[saved](given, call_kw)})
                hidden.append(saved)
        meta = (names, call_kw, ctx, keep, hidden)
        outs = Function.apply(meta, *tensors)
        return outs[0] if len(outs) == 1 else outs

    op.__name__ = name
    op.__doc__ = "autograd form of ssmops.%s (backward: ssmops.%s_bwd)" % (name, name)
    return op


def _dispatch(name, function_path, library_path, outputs):
    """The custom-op path for plain calls; the autograd.Function path where the custom op
    cannot carry the call (an explicit ctx=, out= arrays to write into, keep_pregate_y,
    keep_chunk_states)."""
    def op(*positional, ctx=None, **kw):
        if (ctx is not None or kw.get("keep_pregate_y") or kw.get("keep_chunk_states")
                or any(isinstance(kw.get(o), torch.Tensor) for o in outputs)):
            return function_path(*positional, ctx=ctx, **kw)
        kw.pop("keep_pregate_y", None)  # False: the default, which the custom op has
        kw.pop("keep_chunk_states", None)
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

