"""What runs on a node's host loads on an old one: libgpuslice.so, which
every CUDA process loads, needs no glibc symbol version above GLIBC_2.17
and nothing from GLIBC_PRIVATE; gpuslice-hook (run by the container
runtime), gpuslicectl (copied to a node by an operator) and
gpuslice-server (on the host or in its image) are static executables, or
else held to the same GLIBC_2.17. Read from the ELF files with readelf, so
it judges a cross build (aarch64) as well as a native one. Prints the
highest glibc version each needs; a part after --info is printed, not
judged.

Usage: host_symbols_test.py SANITIZE NAME=PATH... [--info NAME=PATH...]
(a PATH of "" is a part this build left out: named, not judged)."""
import re
import subprocess
import sys

from testlib import Checks

LIMIT = (2, 17)


def readelf(flag, path):
    return subprocess.run(["readelf", flag, "-W", path], check=True, capture_output=True, text=True).stdout


def describe(path):
    """(static, machine, needed libraries, glibc versions required)."""
    header = readelf("-h", path)
    machine = re.search(r"Machine:\s+(.*)", header).group(1).strip()
    static = "INTERP" not in readelf("-l", path)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", path))
    versions = set(re.findall(r"Name: (GLIBC_[A-Z0-9_.]+)", readelf("-V", path)))
    return static and not needed, machine, needed, versions


def number(version):
    return tuple(int(x) for x in version[len("GLIBC_"):].split(".")) if version != "GLIBC_PRIVATE" else (99,)


def highest(versions):
    return max(versions, key=number) if versions else "none"


args = sys.argv[1:]
sanitize = args.pop(0)
if sanitize != "none":
    print("sanitizer builds link their runtime, which needs a newer glibc: skipped")
    sys.exit(77)
info = args[args.index("--info") + 1:] if "--info" in args else []
judged = args[:args.index("--info")] if "--info" in args else args

checks = Checks()
for item in judged:
    name, path = item.split("=", 1)
    if not path:
        print("%s: not built in this configuration, not judged" % name)
        continue
    static, machine, needed, versions = describe(path)
    print("%s (%s): %s, highest glibc version %s" % (
        name, machine, "static" if static else "dynamic, needs " + " ".join(needed), highest(versions)))
    too_new = sorted((v for v in versions if number(v) > LIMIT), key=number)
    if name == "libgpuslice.so":
        checks.expect(not static and versions and not too_new,
                      "%s loads on glibc 2.17: nothing above GLIBC_2.17, no GLIBC_PRIVATE (too new: %s)"
                      % (name, too_new or "none"))
    else:
        checks.expect(static or not too_new,
                      "%s is static or loads on glibc 2.17 (%s; too new: %s)"
                      % (name, "static" if static else "dynamic", too_new or "none"))
for item in info:
    name, path = item.split("=", 1)
    if path:
        static, machine, needed, versions = describe(path)
        print("%s (%s, not copied to hosts): %s, highest glibc version %s" % (
            name, machine, "static" if static else "dynamic", highest(versions)))
checks.finish()
