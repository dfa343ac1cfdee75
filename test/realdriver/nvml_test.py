"""libgpuslice.so on NVIDIA's real NVML, on a machine without a GPU: NVML
(libnvidia-ml1) and nvidia-smi come from Debian's non-free archive,
unpacked but not installed (fetch-nvidia-ml.sh).

1. Lookups: every name the shim wraps (the GS_NVML lines of
   shim/gs_nvml_entries.h) leads into libgpuslice.so when the shim is
   preloaded, through dlsym(dlopen("libnvidia-ml.so.1"), NAME) and through
   dlsym(RTLD_DEFAULT, NAME) (what a linked program binds to); names it
   does not wrap still lead into libnvidia-ml.so.1, and without the shim
   everything does.
2. Calls: every wrapped function, before and after nvmlInit_v2 (which
   fails: no driver), returns the same code through the shim as without
   it, linked and through dlsym, under both server-down policies with no
   server; and so does every call of the ctypes client (nvml_ctypes.py).
   (A linked program that names a function this NVML lacks finds the
   shim's export, which answers NVML_ERROR_FUNCTION_NOT_FOUND.)
3. nvidia-smi: the same exit code and output with the shim as without it.

Usage: nvml_test.py SHIM ENTRIES_H FETCH_SCRIPT CACHE_DIR LOOKUPS CALLS CTYPES_CLIENT
Exits 77 (skipped) when Debian's archive cannot be reached and nothing is
cached.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from testlib import Checks  # noqa: E402

SHIM, ENTRIES, FETCH, CACHE, LOOKUPS, CALLS, CTYPES = sys.argv[1:8]
CONTROLS = ["nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlErrorString"]
TIMEOUT_S = 60
checks = Checks()

# Run as root, NVIDIA's libraries may create device nodes that are missing:
# the probes run without CAP_MKNOD so that the test leaves the machine as it
# found it.
NO_MKNOD = (["setpriv", "--bounding-set", "-mknod", "--inh-caps", "-mknod"]
            if os.geteuid() == 0 and shutil.which("setpriv") else [])


def wrapped_names(path):
    return [m.group(1) for m in (re.match(r"\s*GS_NVML\((\w+),", line) for line in open(path)) if m]


def fetch():
    proc = subprocess.run(["bash", FETCH, CACHE], capture_output=True, text=True)
    if proc.returncode == 77:
        print(proc.stdout.strip())
        sys.exit(77)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        print("FAILED: fetching NVIDIA's NVML (exit %d)" % proc.returncode)
        sys.exit(1)
    print("NVIDIA packages:", ", ".join(v for v in open(os.path.join(CACHE, "versions")).read().split("\n") if v))
    return proc.stdout.strip().splitlines()[-1]


def run(argv, env, stdin=None):
    try:
        p = subprocess.run(NO_MKNOD + argv, env=env, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def main():
    lib = fetch()
    names = wrapped_names(ENTRIES)
    checks.expect(len(names) >= 20, "shim/gs_nvml_entries.h lists %d wrapped NVML names" % len(names))
    plain = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
    plain["LD_LIBRARY_PATH"] = lib
    shims = {p: dict(plain, LD_PRELOAD=SHIM, GPUSLICE_SOCKET="/nonexistent/gpuslice.sock",
                     GPUSLICE_ON_SERVER_DOWN=p) for p in ("wait", "open")}

    print("\n== 1. lookups ==")
    queries = ["%s %s" % (k, n) for k in ("dlsym", "default") for n in names + CONTROLS]
    answers = {}
    for label, env in (("without", plain), ("with", shims["wait"])):
        rc, out, err = run([LOOKUPS], env, "\n".join(queries) + "\n")
        checks.expect(rc == 0, "lookups %s the shim: the probe exits 0 (%s)%s" % (label, rc, err))
        answers[label] = {line.split("\t")[0]: dict(f.split("=", 1) for f in line.split("\t")[1:])
                          for line in out.splitlines()}
    ref, got = answers["without"], answers["with"]
    print("  names NVIDIA's NVML lacks:", sorted(set(q.split()[1] for q in queries if ref.get(q, {}).get("ptr") != "1")))
    checks.expect(all(ref.get(q, {}).get("obj") in ("libnvidia-ml.so.1", "-") for q in queries),
                  "without the shim every pointer is libnvidia-ml.so.1's")
    for kind in ("dlsym", "default"):
        present = [n for n in names if ref.get("%s %s" % (kind, n), {}).get("ptr") == "1"]
        escapes = [n for n in present if got.get("%s %s" % (kind, n), {}).get("obj") != "libgpuslice.so"]
        checks.expect(len(present) >= 15 and not escapes,
                      "%s: all %d wrapped names NVIDIA's NVML has lead into libgpuslice.so (escapes: %s)" % (
                          kind, len(present), escapes))
        kept = [n for n in CONTROLS if got.get("%s %s" % (kind, n), {}).get("obj") == "libnvidia-ml.so.1"]
        checks.expect(kept == CONTROLS, "%s: names the shim does not wrap still lead into libnvidia-ml.so.1 (%s)" % (
            kind, ", ".join(kept)))
    absent = [n for n in names if ref.get("dlsym " + n, {}).get("ptr") != "1"]
    checks.expect(all(got.get("dlsym " + n, {}).get("ptr") == "0" for n in absent),
                  "a wrapped name NVIDIA's NVML lacks stays absent through dlsym (%s)" % absent)

    print("\n== 2. calls ==")
    for mode in ("direct", "dlsym"):
        rc, ref_out, err = run([CALLS, mode], plain)
        checks.expect(rc == 0, "calls/%s without the shim: exits 0 (%s)%s" % (mode, rc, err))
        lines = ref_out.splitlines()
        init = [l for l in lines if l.startswith("nvmlInit_v2")]
        print("  without the shim: %s; %d calls" % (init, len(lines)))
        for policy, env in shims.items():
            rc, out, err = run([CALLS, mode], env)
            # A name NVIDIA's NVML lacks is still exported by the shim, so a
            # linked program finds it there: NVML_ERROR_FUNCTION_NOT_FOUND.
            diff = [(a, b) for a, b in zip(lines, out.splitlines())
                    if a != b and not (mode == "direct" and a.endswith(" absent") and
                                       b == a.replace(" absent", " rc=13"))]
            for a, b in diff:
                print("  without: %-55s with: %s" % (a, b))
            checks.expect(rc == 0 and not diff and len(out.splitlines()) == len(lines),
                          "calls/%s with the shim (%s, no server): all %d codes as without it (%d differ)" % (
                              mode, policy, len(lines), len(diff)))
    rc, ref_out, _ = run([sys.executable, CTYPES], plain)
    for policy, env in shims.items():
        rc2, out, err = run([sys.executable, CTYPES], env)
        checks.expect(rc == rc2 == 0 and out == ref_out,
                      "the ctypes client (%s): the same answers as without the shim (%s)" % (policy, out.strip()))

    print("\n== 3. nvidia-smi ==")
    smi = os.path.join(os.path.dirname(lib), "bin", "nvidia-smi")
    for args in (["--query-gpu=memory.total,memory.used,memory.free,utilization.gpu", "--format=csv"],
                 ["--query-compute-apps=pid,used_memory", "--format=csv"]):
        ref = run([smi] + args, plain)
        print("  without the shim: exit %s: %s" % (ref[0], ref[1].strip() or ref[2].strip()))
        for policy, env in shims.items():
            got = run([smi] + args, env)
            checks.expect(got[:2] == ref[:2], "nvidia-smi %s (%s): the same exit code and output with the shim" % (
                args[0], policy))
    checks.finish()


main()
