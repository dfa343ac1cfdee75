#!/usr/bin/env python3
"""A stand-in for nvidia-smi on fakecuda, for the test of row 10 of
test/gpu/check.sh (smi_standin_test.py): nvidia-smi itself does not run on
the simulated NVML (it needs NVML's private export table, which fakenvml
does not imitate). It answers the row's two queries in nvidia-smi's CSV
form, each figure the way README says the real one may get it:

  smi_standin.py --query-gpu=memory.total,memory.used,memory.free,utilization.gpu --format=csv
  smi_standin.py --query-compute-apps=pid,used_memory --format=csv

- memory and utilization through NVML's public calls
  (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetUtilizationRates, by dlsym as
  test/lib/nvml_ctypes.py makes them): in a tenant, the shim answers them;
- the processes from fakecuda's meter (fakecuda-stat, beside
  libcuda.so.1 on LD_LIBRARY_PATH, run without the shim), standing for the
  private export table the shim does not see: the whole GPU's.

Any other command line, or no NVML, exits 2 as nvidia-smi's errors do.
With SMI_STANDIN_FAIL_IN_TENANT set, it fails (exit 3) wherever the shim is
preloaded: an nvidia-smi that the shim breaks, which the row must catch.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import nvml_ctypes  # noqa: E402

GPU = "--query-gpu=memory.total,memory.used,memory.free,utilization.gpu"
APPS = "--query-compute-apps=pid,used_memory"
MIB = 1 << 20


def stat_path():
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.exists(os.path.join(d, "fakecuda-stat")):
            return os.path.join(d, "fakecuda-stat")
    return None


def main():
    if len(sys.argv) != 3 or sys.argv[2] != "--format=csv" or sys.argv[1] not in (GPU, APPS):
        print("smi_standin: only the two queries of test/gpu/check.sh's row 10", file=sys.stderr)
        return 2
    if os.environ.get("SMI_STANDIN_FAIL_IN_TENANT") and "libgpuslice" in os.environ.get("LD_PRELOAD", ""):
        print("smi_standin: failing in a tenant, as asked", file=sys.stderr)
        return 3
    if sys.argv[1] == GPU:
        try:
            nvml = nvml_ctypes.Nvml()
        except OSError as e:
            print("NVML: %s" % e, file=sys.stderr)
            return 2
        _, handle = nvml.handle(0)
        rc, memory = nvml.memory_v2(handle)
        urc, util = nvml.utilization(handle)
        if nvml.rc != 0 or rc != 0:
            print("Failed to initialize NVML (%d, %d)" % (nvml.rc, rc), file=sys.stderr)
            return 2
        print("memory.total [MiB], memory.used [MiB], memory.free [MiB], utilization.gpu [%]")
        print("%d MiB, %d MiB, %d MiB, %s" % (memory["total"] // MIB, memory["used"] // MIB, memory["free"] // MIB,
                                             "%d %%" % util["gpu"] if urc == 0 else "[N/A]"))
        return 0
    stat = stat_path()
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([stat, "--json", env.get("FAKECUDA_STATE", "")], env=env, capture_output=True, text=True,
                         timeout=30) if stat else None
    if not out or out.returncode != 0:
        print("Failed to read the processes", file=sys.stderr)
        return 2
    print("pid, used_gpu_memory [MiB]")
    for p in json.loads(out.stdout)["processes"]:
        if p["alive"] and p["mem_used"]:
            print("%d, %d MiB" % (p["pid"], p["mem_used"] // MIB))
    return 0


if __name__ == "__main__":
    sys.exit(main())
