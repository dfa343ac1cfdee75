"""Stamp kernels from Python, through the CUDA driver API with ctypes, for
the PyTorch programs of test/gpu/check.sh: the kernel "stamp" of
stamp_kernels.h (whose PTX `stamps ptx` prints) writes the GPU's
%globaltimer when it started and ended, so that a program's kernels can be
placed on the same clock as every other program's.

    stamper = Stamper(ptx_bytes, capacity)   # in a thread with the context current
    stamper.launch(ns)                       # the next slot, on its own stream
    stamper.launch(0, stream=handle, slot=0) # a given slot, on a given stream
    stamper.pairs(n)                         # [(start, end)] of slots 0..n-1

The calls go through libcuda.so.1's symbols as dlsym finds them, so a
preloaded libgpuslice.so gates these launches as it gates PyTorch's.

    python3 gpu_stamps.py --self-test PTX_FILE

runs a few stamps in a context of its own (on fakecuda in the test suite)
and exits 0 if they read as kernels that ran one after the other.
"""
import ctypes
import sys
import threading

CU_STREAM_NON_BLOCKING = 1


class CudaError(RuntimeError):
    pass


def driver():
    """libcuda.so.1 with the argument types of the calls used here."""
    cuda = ctypes.CDLL("libcuda.so.1")
    c_void_p, c_uint, c_size_t, c_u64 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t, ctypes.c_uint64
    signatures = {
        "cuInit": [c_uint],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(c_void_p), ctypes.c_int],
        "cuCtxGetCurrent": [ctypes.POINTER(c_void_p)],
        "cuCtxSetCurrent": [c_void_p],
        "cuModuleLoadData": [ctypes.POINTER(c_void_p), ctypes.c_char_p],
        "cuModuleGetFunction": [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_char_p],
        "cuStreamCreate": [ctypes.POINTER(c_void_p), c_uint],
        "cuStreamSynchronize": [c_void_p],
        "cuMemAlloc_v2": [ctypes.POINTER(c_u64), c_size_t],
        "cuMemsetD8_v2": [c_u64, ctypes.c_ubyte, c_size_t],
        "cuMemcpyDtoH_v2": [c_void_p, c_u64, c_size_t],
        "cuLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p,
                           ctypes.POINTER(c_void_p), ctypes.POINTER(c_void_p)],
    }
    for name, argtypes in signatures.items():
        fn = getattr(cuda, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    return cuda


def check(rc, what):
    if rc != 0:
        raise CudaError("%s failed: CUresult %d" % (what, rc))


class Stamper:
    """Stamp kernels in the context current to the thread that makes it."""

    def __init__(self, ptx, capacity=1 << 16):
        self.cuda = cuda = driver()
        self.capacity = capacity
        self.lock = threading.Lock()
        self.next_slot = 0
        self.ctx = ctypes.c_void_p()
        check(cuda.cuCtxGetCurrent(ctypes.byref(self.ctx)), "cuCtxGetCurrent")
        if not self.ctx.value:
            raise CudaError("no current CUDA context in this thread")
        module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        check(cuda.cuModuleLoadData(ctypes.byref(module), ptx if ptx.endswith(b"\0") else ptx + b"\0"),
              "cuModuleLoadData")
        check(cuda.cuModuleGetFunction(ctypes.byref(self.fn), module, b"stamp"), "cuModuleGetFunction")
        self.stream = ctypes.c_void_p()
        check(cuda.cuStreamCreate(ctypes.byref(self.stream), CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        self.buffer = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(self.buffer), capacity * 16), "cuMemAlloc_v2")
        check(cuda.cuMemsetD8_v2(self.buffer, 0, capacity * 16), "cuMemsetD8_v2")

    def make_current(self):
        """For another thread: the stamper's context becomes its current one."""
        check(self.cuda.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def reserve(self, n):
        """n slots for the caller's own use; the first one's index."""
        with self.lock:
            first = self.next_slot
            self.next_slot += n
        return first

    def launch(self, ns, stream=None, slot=None):
        """One stamp kernel of ns nanoseconds into slot (default: the next
        one; none left: it runs without writing). Returns the slot or None."""
        if slot is None:
            slot = self.reserve(1)
        out = self.buffer.value + 16 * slot if slot < self.capacity else 0
        ns_arg, out_arg = ctypes.c_uint64(ns), ctypes.c_uint64(out)
        params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(ns_arg), ctypes.c_void_p),
                                       ctypes.cast(ctypes.byref(out_arg), ctypes.c_void_p))
        check(self.cuda.cuLaunchKernel(self.fn, 1, 1, 1, 1, 1, 1, 0, self.stream if stream is None else stream,
                                       params, None), "cuLaunchKernel")
        return slot if out else None

    def synchronize(self):
        check(self.cuda.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def pairs(self, first, n):
        """The (start, end) pairs of slots first..first+n-1, as written so far
        (0, 0 for a slot not written)."""
        n = max(0, min(n, self.capacity - first))
        host = (ctypes.c_uint64 * (2 * n))()
        if n:
            check(self.cuda.cuMemcpyDtoH_v2(host, self.buffer.value + 16 * first, 16 * n), "cuMemcpyDtoH_v2")
        return [(host[2 * i], host[2 * i + 1]) for i in range(n)]


def self_test(ptx_path):
    cuda = driver()
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device.value), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    with open(ptx_path, "rb") as f:
        stamper = Stamper(f.read(), capacity=8)
    first = stamper.reserve(2)
    errors = []

    def other_thread():  # as the eager thread of torch_capture.py
        try:
            stamper.make_current()
            for _ in range(3):
                stamper.launch(200000)
        except CudaError as e:
            errors.append(str(e))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    stamper.launch(0, slot=first)
    stamper.launch(0, slot=first + 1)
    for _ in range(5):  # beyond the capacity of 8: not written
        stamper.launch(100000)
    stamper.synchronize()
    pairs = stamper.pairs(0, 8)
    ran = [p for p in pairs[2:5] if p != (0, 0)]
    ok = (not errors and len(ran) == 3 and all(e - s >= 200000 for s, e in ran) and
          all(ran[i][1] <= ran[i + 1][0] for i in range(2)) and ran[-1][1] <= pairs[0][0] <= pairs[1][0] and
          all(p != (0, 0) for p in pairs) and stamper.launch(0) is None)
    print("gpu_stamps self-test: %s (pairs %s, errors %s)" % ("ok" if ok else "FAILED", pairs, errors))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        sys.exit(self_test(sys.argv[2]))
    print(__doc__)
    sys.exit(2)
