"""libgpuslice.so loads on glibc 2.17: no symbol version newer than
GLIBC_2.17 and nothing from GLIBC_PRIVATE, the DT_NEEDED entries an old
glibc needs (libdl.so.2, libpthread.so.0), no libcuda dependency, and
exports limited to the wrapped CUDA and NVML names and dlsym."""
import re
import subprocess
import sys

from testlib import Checks

lib, sanitize = sys.argv[1], sys.argv[2]
if sanitize != "none":
    print("sanitizer builds link their runtime, which needs a newer glibc: skipped")
    sys.exit(77)

checks = Checks()
versions = subprocess.run(["readelf", "-V", "-W", lib], check=True, capture_output=True, text=True).stdout
needed = set(re.findall(r"Name: (GLIBC_[A-Z0-9_.]+)", versions))
print("versions required:", " ".join(sorted(needed)))


def too_new(v):
    if v == "GLIBC_PRIVATE":
        return True
    nums = tuple(int(x) for x in v[len("GLIBC_"):].split("."))
    return nums > (2, 17)


bad = sorted(v for v in needed if too_new(v))
checks.expect(needed and not bad, "no glibc version above GLIBC_2.17 and no GLIBC_PRIVATE (found: %s)" % (bad or "none"))

dynamic = subprocess.run(["readelf", "-d", "-W", lib], check=True, capture_output=True, text=True).stdout
libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
print("DT_NEEDED:", " ".join(libs))
checks.expect("libdl.so.2" in libs and "libpthread.so.0" in libs, "DT_NEEDED names libdl.so.2 and libpthread.so.0")
checks.expect(not any(l.startswith("libcuda") for l in libs), "no DT_NEEDED on libcuda: the driver is dlopen'ed")

symbols = subprocess.run(["readelf", "--dyn-syms", "-W", lib], check=True, capture_output=True, text=True).stdout
exported = []
for line in symbols.splitlines():
    fields = line.split()
    if len(fields) >= 8 and fields[4] in ("GLOBAL", "WEAK") and fields[6] != "UND":
        exported.append(fields[7].split("@")[0])
strays = [s for s in exported if not (s.startswith("cu") or s.startswith("nvml") or s == "dlsym")]
checks.expect(exported and not strays, "exports only cu*, nvml* and dlsym (%d exported, strays: %s)" % (len(exported), strays or "none"))
checks.expect("cuLaunchKernel" in exported and "cuGetProcAddress_v2" in exported and "dlsym" in exported,
              "the wrappers and dlsym are exported")
checks.finish()
