"""An NVML client through ctypes, as pynvml is: it dlopens libnvidia-ml.so.1
and fetches each function with dlsym, so that under libgpuslice.so it takes
the dlopen+dlsym path. Struct layouts are written out from NVIDIA's NVML API
Reference, independently of the shim and of fakenvml.

As a program: nvml_ctypes.py [--calls N] prints one JSON object, every GPU's
memory (v1 and v2), utilization and processes (compute v1, v2, v3, the
detail list, per-process utilization samples and names), with each call's
return code; --calls N instead times N nvmlDeviceGetMemoryInfo calls and
prints their median in microseconds.
"""
import ctypes
import json
import sys
import time


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class ProcV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcV2(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class ProcDetail(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint), ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


class ProcDetailList(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("mode", ctypes.c_uint), ("numProcArrayEntries", ctypes.c_uint),
                ("procArray", ctypes.POINTER(ProcDetail))]


class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def struct_version(struct, ver):
    return ctypes.sizeof(struct) | (ver << 24)


INSUFFICIENT_SIZE = 7


class Nvml:
    def __init__(self, path="libnvidia-ml.so.1"):
        self.lib = ctypes.CDLL(path)
        self.rc = self.lib.nvmlInit_v2()

    def count(self):
        n = ctypes.c_uint(0)
        rc = self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        return rc, n.value

    def handle(self, index):
        h = ctypes.c_void_p()
        rc = self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h))
        return rc, h

    def uuid(self, h):
        buf = ctypes.create_string_buffer(96)
        rc = self.lib.nvmlDeviceGetUUID(h, buf, 96)
        return rc, buf.value.decode()

    def memory(self, h):
        m = Memory()
        rc = self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
        return rc, {"total": m.total, "free": m.free, "used": m.used}

    def memory_v2(self, h):
        m = MemoryV2(version=struct_version(MemoryV2, 2))
        rc = self.lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m))
        return rc, {"total": m.total, "reserved": m.reserved, "free": m.free, "used": m.used}

    def utilization(self, h):
        u = Utilization()
        rc = self.lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u))
        return rc, {"gpu": u.gpu, "memory": u.memory}

    def _list(self, fn, struct, h):
        """NVML's two-call convention: count, then fill."""
        n = ctypes.c_uint(0)
        rc = fn(h, ctypes.byref(n), None)
        if rc not in (0, INSUFFICIENT_SIZE):
            return rc, [], n.value
        asked = n.value
        arr = (struct * max(asked, 1))()
        n = ctypes.c_uint(asked)
        rc = fn(h, ctypes.byref(n), arr)
        return rc, [{"pid": arr[i].pid, "used": arr[i].usedGpuMemory} for i in range(n.value if rc == 0 else 0)], asked

    def processes(self, h, variant):
        fn, struct = {"v1": (self.lib.nvmlDeviceGetComputeRunningProcesses, ProcV1),
                      "v2": (self.lib.nvmlDeviceGetComputeRunningProcesses_v2, ProcV2),
                      "v3": (self.lib.nvmlDeviceGetComputeRunningProcesses_v3, ProcV2),
                      "graphics": (self.lib.nvmlDeviceGetGraphicsRunningProcesses_v3, ProcV2),
                      "mps": (self.lib.nvmlDeviceGetMPSComputeRunningProcesses_v3, ProcV2)}[variant]
        return self._list(fn, struct, h)

    def detail(self, h):
        lst = ProcDetailList(version=struct_version(ProcDetailList, 1), mode=0, numProcArrayEntries=0)
        rc = self.lib.nvmlDeviceGetRunningProcessDetailList(h, ctypes.byref(lst))
        asked = lst.numProcArrayEntries
        arr = (ProcDetail * max(asked, 1))()
        lst = ProcDetailList(version=struct_version(ProcDetailList, 1), mode=0, numProcArrayEntries=asked,
                             procArray=arr)
        rc = self.lib.nvmlDeviceGetRunningProcessDetailList(h, ctypes.byref(lst))
        n = lst.numProcArrayEntries if rc == 0 else 0
        return rc, [{"pid": arr[i].pid, "used": arr[i].usedGpuMemory} for i in range(n)], asked

    def samples(self, h):
        n = ctypes.c_uint(0)
        rc = self.lib.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(n), ctypes.c_ulonglong(0))
        if rc not in (0, INSUFFICIENT_SIZE):
            return rc, [], n.value
        asked = n.value
        arr = (Sample * max(asked, 1))()
        n = ctypes.c_uint(asked)
        rc = self.lib.nvmlDeviceGetProcessUtilization(h, arr, ctypes.byref(n), ctypes.c_ulonglong(0))
        return rc, [{"pid": arr[i].pid, "sm": arr[i].smUtil} for i in range(n.value if rc == 0 else 0)], asked

    def name(self, pid):
        buf = ctypes.create_string_buffer(256)
        rc = self.lib.nvmlSystemGetProcessName(ctypes.c_uint(pid), buf, 256)
        return rc, buf.value.decode(errors="replace")


def report(nvml):
    out = {"init": nvml.rc, "gpus": []}
    rc, n = nvml.count()
    out["count_rc"] = rc
    for i in range(n if rc == 0 else 0):
        rc, h = nvml.handle(i)
        gpu = {"handle_rc": rc}
        gpu["uuid_rc"], gpu["uuid"] = nvml.uuid(h)
        gpu["memory_rc"], gpu["memory"] = nvml.memory(h)
        gpu["memory_v2_rc"], gpu["memory_v2"] = nvml.memory_v2(h)
        gpu["util_rc"], gpu["util"] = nvml.utilization(h)
        for variant in ("v1", "v2", "v3", "graphics", "mps"):
            rc, procs, asked = nvml.processes(h, variant)
            gpu["procs_" + variant] = {"rc": rc, "procs": procs, "count": asked}
        rc, procs, asked = nvml.detail(h)
        gpu["detail"] = {"rc": rc, "procs": procs, "count": asked}
        rc, samples, asked = nvml.samples(h)
        gpu["samples"] = {"rc": rc, "samples": samples, "count": asked}
        gpu["names"] = {str(p["pid"]): nvml.name(p["pid"]) for p in gpu["procs_v3"]["procs"]}
        out["gpus"].append(gpu)
    return out


def main():
    nvml = Nvml()
    if len(sys.argv) == 3 and sys.argv[1] == "--calls":
        _, h = nvml.handle(0)
        m = Memory()
        times = []
        fn = nvml.lib.nvmlDeviceGetMemoryInfo
        for _ in range(int(sys.argv[2])):
            t = time.perf_counter()
            fn(h, ctypes.byref(m))
            times.append(time.perf_counter() - t)
        times.sort()
        print(json.dumps({"median_us": 1e6 * times[len(times) // 2]}))
        return
    print(json.dumps(report(nvml)))


if __name__ == "__main__":
    main()
