"""What one process sees of GPU 0 through NVML, for row 10 of
test/gpu/check.sh: the ctypes client of test/lib/nvml_ctypes.py (it dlopens
libnvidia-ml.so.1 and fetches each function with dlsym, as pynvml does),
one call at a time. A function this NVML does not have is reported as
absent instead of stopping the others, so that the same program runs on
any driver, in a tenant (the shim preloaded) and outside one.

  nvml_view.py

Prints one JSON object: init (nvmlInit_v2's code), and each query's code
with its figures: memory (nvmlDeviceGetMemoryInfo: total, used, free in
bytes), memory_v2, util (nvmlDeviceGetUtilizationRates: gpu, memory in
%), and the processes (pid, used bytes) of procs_v1, procs_v2, procs_v3
(nvmlDeviceGetComputeRunningProcesses and its _v2, _v3) and detail
(nvmlDeviceGetRunningProcessDetailList). A query whose function NVML
lacks is {"absent": true}. Exits 1 if NVML cannot be loaded, initialized
or give GPU 0's handle.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import nvml_ctypes  # noqa: E402

LISTS = {"procs_v1": ("nvmlDeviceGetComputeRunningProcesses", nvml_ctypes.ProcV1),
         "procs_v2": ("nvmlDeviceGetComputeRunningProcesses_v2", nvml_ctypes.ProcV2),
         "procs_v3": ("nvmlDeviceGetComputeRunningProcesses_v3", nvml_ctypes.ProcV2)}


def guarded(query):
    """query()'s (code, figures) as one dict; absent if NVML lacks the
    function it calls."""
    try:
        rc, figures = query()
    except AttributeError:
        return {"absent": True}
    return dict(figures, rc=rc) if isinstance(figures, dict) else {"rc": rc, "procs": figures}


def main():
    try:
        nvml = nvml_ctypes.Nvml()
    except OSError as e:
        print(json.dumps({"error": "libnvidia-ml.so.1: %s" % e}))
        return 1
    view = {"init": nvml.rc}
    if nvml.rc != 0:
        print(json.dumps(view))
        return 1
    rc, handle = nvml.handle(0)
    view["handle"] = rc
    if rc != 0:
        print(json.dumps(view))
        return 1
    view["memory"] = guarded(lambda: nvml.memory(handle))
    view["memory_v2"] = guarded(lambda: nvml.memory_v2(handle))
    view["util"] = guarded(lambda: nvml.utilization(handle))
    for key, (name, struct) in LISTS.items():
        view[key] = guarded(lambda: nvml._list(getattr(nvml.lib, name), struct, handle)[:2])
    view["detail"] = guarded(lambda: nvml.detail(handle)[:2])
    print(json.dumps(view))
    return 0


if __name__ == "__main__":
    sys.exit(main())
