"""GPU benchmark: jit_grad(target="cuda") on workloads w1, w2, w3, w4, w6, against the copy bandwidth.

    python benchmarks/gpu.py               # sizes that fill a large GPU (about 2 GiB per array)
    python benchmarks/gpu.py --quick       # tiny sizes (runs under NUMBA_ENABLE_CUDASIM=1 in seconds)
    python benchmarks/gpu.py w1 w6 --reps 10 --no-peers

Inputs are copied to the device once; every timed call takes device arrays and
leaves its results on the device, and is bracketed by device synchronization
(after warm-up calls that include the compile). Each workload reports the
median time, the bytes it must move at least (inputs read once, gradients
written once), the bandwidth that implies, and that bandwidth as a fraction of
the device-to-device copy bandwidth measured at the start of the same run
(bytes read + bytes written by a large cudaMemcpy). w2 is matrix-product bound,
so it also reports GFLOP/s. Side by side, when importable and on a GPU: the
hand-written NumPy forward+backward run on CuPy arrays, PyTorch autograd, and
JAX jit(value_and_grad). float64 throughout. Timing never fails anything.
"""
import argparse
import os
import statistics
import sys
import time
import types

import numpy as np

# JAX would otherwise take 75% of the GPU's memory at start-up, starving the others
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workloads import WORKLOADS  # noqa: E402

import jitgraph as jg  # noqa: E402

NAMES = ("w1", "w2", "w3", "w4", "w6")
FULL = dict(w1=dict(n=2 ** 28), w2=dict(B=16384, D=1024, H=2048, C=10), w3=dict(n=16384),
            w4=dict(n=2 ** 26), w6=dict(r=2 ** 16, c=2 ** 12))
QUICK = dict(w1=dict(n=500), w2=dict(B=8, D=4, H=6, C=3), w3=dict(n=9), w4=dict(n=40),
             w6=dict(r=6, c=10))


def sync():
    from numba import cuda
    cuda.synchronize()


def timed(f, reps, warm=1):
    for _ in range(warm):
        f()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def copy_bandwidth(nbytes, reps):
    """Device-to-device copy bandwidth in bytes/s (read + write)."""
    from numba import cuda
    src = cuda.device_array(nbytes // 8, np.float64)
    dst = cuda.device_array(nbytes // 8, np.float64)
    t = timed(lambda: dst.copy_to_device(src), reps)
    return 2 * (nbytes // 8) * 8 / t


def min_bytes(args, grads):
    """Bytes a value-and-gradient call must move: every input read once, every output written once."""
    return sum(np.asarray(a).nbytes for a in args) + 8 + sum(np.asarray(g).nbytes for g in grads)


def flops(name, kw):
    if name != "w2":
        return None
    B, D, H, C = kw["B"], kw["D"], kw["H"], kw["C"]
    # forward X@W1, a@W2; backward a.T@dlo, dlo@W2.T, X.T@dh (dh@W1.T is not needed)
    return 2 * B * (D * H + H * C) + 2 * B * (H * C + H * C + D * H)


# ---- peers ----------------------------------------------------------------------------------------------
def cupy_fn(w, args):
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return None
    dargs = [cupy.asarray(a) for a in args]
    # the hand-written NumPy forward+backward, run on CuPy arrays (NumPy ufuncs dispatch to CuPy)
    return lambda: w["numpy"](*dargs)


def torch_fn(name, w, args):
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except Exception:
        return None
    nums = w["argnums"] if isinstance(w["argnums"], tuple) else (w["argnums"],)
    ts = [torch.as_tensor(np.asarray(a), device="cuda") for a in args]
    for i in nums:
        ts[i].requires_grad_(True)

    def loss(*t):
        if name == "w1":
            w_, b, x = t
            return (torch.tanh(x * w_ + b) ** 2).sum()
        if name == "w2":
            W1, b1, W2, b2, X, Y = t
            lo = torch.clamp(X @ W1 + b1, min=0) @ W2 + b2
            return -(Y * torch.log_softmax(lo, 1)).sum() / X.shape[0]
        if name == "w3":
            return torch.logsumexp(t[0], 1).sum()
        if name == "w4":
            z = t[0]
            for _ in range(50):
                z = torch.sin(z) * 0.9 + 0.1 * z
            return z.sum()
        x, gamma, beta = t
        y = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5) * gamma + beta
        return (y * y).sum()

    def run():
        v = loss(*ts)
        return v, torch.autograd.grad(v, [ts[i] for i in nums])

    torch.cuda.synchronize()
    return run


def jax_fn(w, args):
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        if jax.devices()[0].platform != "gpu":
            return None
        import jax.numpy as jnp
    except Exception:
        return None
    # the same loss source, with jax.numpy in place of numpy
    src = w["loss"]
    glb = dict(src.__globals__, np=jnp)
    f = types.FunctionType(src.__code__, glb, src.__name__, src.__defaults__)
    g = jax.jit(jax.value_and_grad(f, argnums=w["argnums"]))
    dargs = [jax.device_put(np.asarray(a)) for a in args]
    return lambda: jax.block_until_ready(g(*dargs))


# ---- main -------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(NAMES))
    ap.add_argument("--quick", action="store_true", help="tiny sizes (simulator smoke run)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--no-peers", action="store_true", help="skip CuPy, PyTorch and JAX")
    opt = ap.parse_args()
    from numba import cuda
    from jitgraph.codegen.emit_cuda import require_cuda
    require_cuda()
    sizes = QUICK if opt.quick else FULL
    reps = opt.reps or (1 if opt.quick else 5)
    import numba
    sim = bool(numba.config.ENABLE_CUDASIM)
    if sim:
        # the simulator busy-waits for its threads at syncthreads(): let them run sooner
        sys.setswitchinterval(5e-4)
    dev = cuda.get_current_device()
    name = getattr(dev, "name", "CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else name
    bw = copy_bandwidth(2 ** 16 if opt.quick else 2 ** 31, reps)
    print(f"device: {name}{' (simulator: timings mean nothing)' if sim else ''}")
    print(f"device-to-device copy: {bw / 1e9:.1f} GB/s (read + write)\n")
    cols = ["workload", "size", "jit_grad ms", "GB/s", "of copy", "GFLOP/s", "first call s"]
    if not opt.no_peers:
        cols += ["CuPy ms", "PyTorch ms", "JAX ms"]
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    rng = np.random.default_rng(0)
    for wname in opt.names:
        print(" | ".join(run_workload(wname, sizes[wname], rng, reps, bw, sim, opt)), flush=True)


def run_workload(wname, kw, rng, reps, bw, sim, opt):
    from numba import cuda
    w = WORKLOADS[wname]
    args = w["args"](rng, **kw)
    nums = w["argnums"] if isinstance(w["argnums"], tuple) else (w["argnums"],)
    f = jg.jit_grad(w["loss"], argnums=w["argnums"], target="cuda")
    # the simulator's arrays do not expose __cuda_array_interface__: it gets host arrays
    dargs = args if sim else [cuda.to_device(np.ascontiguousarray(a)) if np.ndim(a) else a for a in args]
    t0 = time.perf_counter()
    value, _ = f(*dargs)
    sync()
    first = time.perf_counter() - t0
    if opt.quick:
        want, _ = w["numpy"](*args)
        got = value.copy_to_host() if hasattr(value, "copy_to_host") else value
        assert np.allclose(got, want, rtol=1e-9), (wname, got, want)
    t = timed(lambda: f(*dargs), reps)
    nbytes = min_bytes(args, [args[i] for i in nums])
    fl = flops(wname, kw)
    row = [wname, ",".join(f"{k}={n}" for k, n in kw.items()), f"{t * 1e3:.3f}",
           f"{nbytes / t / 1e9:.1f}", f"{nbytes / t / bw:.0%}",
           f"{fl / t / 1e9:.0f}" if fl else "", f"{first:.2f}"]
    if not opt.no_peers:
        for make in (lambda: cupy_fn(w, args), lambda: torch_fn(wname, w, args), lambda: jax_fn(w, args)):
            try:
                fn = make()
                row.append(f"{timed(fn, reps) * 1e3:.3f}" if fn is not None else "-")
            except Exception as e:   # a peer that fails (memory, missing kernel) is reported, not fatal
                row.append(f"error: {type(e).__name__}")
        release_peer_memory()
    return row


def release_peer_memory():
    """Hand cached blocks of the peers' allocators back, so the next workload has the memory."""
    for release in (lambda: __import__("cupy").get_default_memory_pool().free_all_blocks(),
                    lambda: __import__("torch").cuda.empty_cache()):
        try:
            release()
        except Exception:   # not installed, or never initialized
            pass

if __name__ == "__main__":
    main()
