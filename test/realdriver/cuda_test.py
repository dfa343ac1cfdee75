"""libgpuslice.so on NVIDIA's real user-space driver, on a machine without a
GPU: the driver (libcuda1) and runtime (libcudart11.0) come from Debian's
non-free archive, unpacked but not installed (fetch-nvidia-driver.sh).

1. Lookups: for every name the shim wraps (the GS_LAUNCH, GS_MEMORY,
   GS_LIFECYCLE, GS_CUSTOM and GS_LOOKUP lines of shim/gs_entries.h),
   each pointer the driver hands out must lead into libgpuslice.so when the
   shim is preloaded: dlsym(dlopen("libcuda.so.1"), NAME), dlsym(RTLD_DEFAULT,
   NAME), and cuGetProcAddress and cuGetProcAddress_v2 for the base name a
   runtime asks for, at several CUDA versions and stream flags. Every
   pointer that does not is an escape, listed.
2. Calls: cuInit fails with CUDA_ERROR_NO_DEVICE and every call before and
   after it (bad device, no context, ...) returns the same code through the
   shim as without it, on three paths and under both server-down policies.
3. cudart: cudaGetDeviceCount and cudaMalloc return the same error as
   without the shim (no device, or insufficient driver), each run within
   1 s (3 s under emulation), under both server-down policies with no
   server.

Usage: cuda_test.py SHIM ENTRIES_H FETCH_SCRIPT CACHE_DIR LOOKUPS CALLS CUDART
Exits 77 (skipped) when Debian's archive cannot be reached and nothing is
cached.
"""
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from testlib import Checks, runs_emulated  # noqa: E402

SHIM, ENTRIES, FETCH, CACHE, LOOKUPS, CALLS, CUDART = sys.argv[1:8]
VERSIONS = [11000, 11030, 11080, 12000, 12020]
FLAGS = {0: "DEFAULT", 1: "LEGACY_STREAM", 2: "PER_THREAD_DEFAULT_STREAM"}
NO_DEVICE = 100
INSUFFICIENT_DRIVER = 35
# Under emulation (an aarch64 build run by qemu-user) loading NVIDIA's
# driver takes several times longer.
CUDART_LIMIT_S = 3.0 if runs_emulated(SHIM) else 1.0
RUN_TIMEOUT_S = 30
# Not wrapped: with the shim these must still lead into libcuda.so.1, which
# shows that the check tells the two apart.
CONTROLS = ["cuDeviceGetName", "cuDriverGetVersion", "cuModuleLoadData", "cuStreamCreate"]

checks = Checks()


def wrapped_names(path):
    """The exact names the shim wraps, in the order of gs_entries.h."""
    names = []
    for line in open(path):
        m = re.match(r"\s*GS_(LAUNCH|MEMORY|LIFECYCLE|CUSTOM|LOOKUP|INTERNAL)\((\w+),", line)
        if m and m.group(1) != "INTERNAL":
            names.append(m.group(2))
    return names


def base_name(name):
    """The name a runtime passes to cuGetProcAddress: the driver picks the
    versioned or per-thread variant itself."""
    name = re.sub(r"_(ptsz|ptds)$", "", name)
    return re.sub(r"_v\d+$", "", name)


def fetch():
    proc = subprocess.run(["bash", FETCH, CACHE], capture_output=True, text=True)
    if proc.returncode == 77:
        print(proc.stdout.strip())
        sys.exit(77)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        print("FAILED: fetching NVIDIA's driver (exit %d)" % proc.returncode)
        sys.exit(1)
    lib = proc.stdout.strip().splitlines()[-1]
    versions = open(os.path.join(CACHE, "versions")).read().split("\n")
    print("NVIDIA packages:", ", ".join(v for v in versions if v))
    return lib


def environments(lib):
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
    base["LD_LIBRARY_PATH"] = lib
    shim = {}
    for policy in ("wait", "open"):
        env = dict(base)
        env.update({"LD_PRELOAD": SHIM, "GPUSLICE_REAL_LIBCUDA": os.path.join(lib, "libcuda.so.1"),
                    "GPUSLICE_SOCKET": "/nonexistent/gpuslice.sock", "GPUSLICE_ON_SERVER_DOWN": policy})
        shim[policy] = env
    return base, shim


# Run as root, NVIDIA's driver creates /dev/nvidiactl when it is missing:
# the probes run without CAP_MKNOD so that the test leaves the machine as it
# found it.
NO_MKNOD = (["setpriv", "--bounding-set", "-mknod", "--inh-caps", "-mknod"]
            if os.geteuid() == 0 and shutil.which("setpriv") else [])


def run(argv, env, stdin=None):
    """(exit code or 'timeout', stdout, stderr, wall seconds)."""
    argv = NO_MKNOD + argv
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return "timeout", out, err, time.monotonic() - start
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


# ---- 1. lookups ----------------------------------------------------------------

def parse_answers(text):
    answers = {}
    for line in text.splitlines():
        query, *fields = line.split("\t")
        answers[query] = dict(f.split("=", 1) for f in fields)
    return answers


def check_lookups(names, plain_env, shim_env):
    bases = sorted(set(base_name(n) for n in names))
    queries = ["dlsym %s" % n for n in names] + ["default %s" % n for n in names]
    queries += ["%s %s %d %d" % (kind, b, v, f) for kind in ("gpa", "gpa_v2") for b in bases
                for v in VERSIONS for f in FLAGS]
    controls = ["dlsym %s" % n for n in CONTROLS] + ["gpa_v2 %s 12000 0" % n for n in CONTROLS]
    queries += controls
    stdin = "\n".join(queries) + "\n"
    answers = {}
    for label, env in (("without", plain_env), ("with", shim_env)):
        rc, out, err, _ = run([LOOKUPS], env, stdin)
        checks.expect(rc == 0, "lookups %s the shim: the probe exits 0 (got %s)%s" % (label, rc, "\n" + err if rc else ""))
        answers[label] = parse_answers(out)
    plain, shim = answers["without"], answers["with"]
    checks.expect(len(plain) == len(queries) and len(shim) == len(queries),
                  "lookups: every one of %d queries answered both ways" % len(queries))

    # Without the shim everything the driver hands out is its own.
    foreign = [q for q in queries if plain.get(q, {}).get("ptr") == "1" and plain[q]["obj"] != "libcuda.so.1"]
    checks.expect(not foreign, "without the shim every pointer is libcuda.so.1's (%s)" % (foreign[:5] or "ok"))
    checks.expect(plain.get("dlsym cuInit", {}).get("ptr") == "1", "the driver exports cuInit")

    kept = [q for q in controls if shim.get(q, {}).get("obj") == "libcuda.so.1"]
    checks.expect(len(kept) == len(controls), "with the shim, unwrapped names still lead into libcuda.so.1 (%d of %d: %s)"
                  % (len(kept), len(controls), ", ".join(CONTROLS)))

    escapes, mismatches = [], []
    stats = {}  # path -> [queries the driver answered, distinct names, escapes]
    for q in queries:
        if q in controls:
            continue
        kind, name = q.split()[:2]
        ref = plain.get("dlsym " + name) if kind == "default" else plain.get(q)
        got = shim.get(q)
        if ref is None or got is None:
            continue
        if kind != "default" and (ref["rc"], ref["status"], ref["ptr"]) != (got["rc"], got["status"], got["ptr"]):
            mismatches.append("%s: without rc=%s status=%s ptr=%s, with rc=%s status=%s ptr=%s" % (
                q, ref["rc"], ref["status"], ref["ptr"], got["rc"], got["status"], got["ptr"]))
        if ref["ptr"] != "1":
            continue
        s = stats.setdefault(kind, [0, set(), 0])
        s[0] += 1
        s[1].add(name)
        if got["obj"] != "libgpuslice.so":
            s[2] += 1
            escapes.append((kind, name, q, got))

    print("\nLookups (pointers the driver hands out, and where they lead with the shim):")
    labels = {"dlsym": "dlsym(dlopen(libcuda.so.1))", "default": "dlsym(RTLD_DEFAULT) (direct symbols)",
              "gpa": "cuGetProcAddress", "gpa_v2": "cuGetProcAddress_v2"}
    for kind in ("dlsym", "default", "gpa", "gpa_v2"):
        n, distinct, bad = stats.get(kind, [0, set(), 0])
        print("  %-38s %3d names, %4d lookups, %3d escape(s)" % (labels[kind], len(distinct), n, bad))
    print("  (%d wrapped names; %d base names asked of cuGetProcAddress at versions %s, flags %s)" % (
        len(names), len(bases), ",".join(map(str, VERSIONS)), ",".join(FLAGS.values())))
    if escapes:
        print("\nEscapes (name: where the pointer leads, [versions/flags]):")
        grouped = {}
        for kind, name, q, got in escapes:
            key = (kind, name, got["obj"], got["sym"])
            parts = q.split()
            grouped.setdefault(key, []).append("%s/%s" % (parts[2], FLAGS[int(parts[3])]) if len(parts) == 4 else "")
        for (kind, name, obj, sym), where in grouped.items():
            detail = " [%s]" % " ".join(w for w in where if w) if any(where) else ""
            print("  %-20s %-32s -> %s %s%s" % (labels[kind], name, obj, sym, detail))
    for m in mismatches:
        print("  MISMATCH", m)
    checks.expect(not mismatches, "lookups: same code, status and NULL-ness with and without the shim (%d differ)" % len(mismatches))
    for kind in ("dlsym", "default", "gpa", "gpa_v2"):
        n, distinct, bad = stats.get(kind, [0, set(), 0])
        checks.expect(n > 0 and bad == 0, "%s: all %d lookups of %d names lead into libgpuslice.so (%d escape)" % (
            labels[kind], n, len(distinct), bad))


# ---- 2. calls --------------------------------------------------------------------

def check_calls(plain_env, shim_envs):
    no_gpu = None
    for mode in ("direct", "dlsym", "gpa"):
        rc, ref, err, _ = run([CALLS, mode], plain_env)
        checks.expect(rc == 0, "calls/%s without the shim: exits 0 (got %s)%s" % (mode, rc, "\n" + err if rc else ""))
        if no_gpu is None:
            # The point of this test is a machine without a GPU; on one with
            # a GPU the codes are still compared, but success is expected.
            no_gpu = "cuInit rc=%d" % NO_DEVICE in ref.splitlines()
            print(("cuInit returns CUDA_ERROR_NO_DEVICE without the shim: no GPU here" if no_gpu else
                   "note: cuInit does not return CUDA_ERROR_NO_DEVICE here (a GPU?): only comparing codes"))
        for policy, env in shim_envs.items():
            rc, out, err, wall = run([CALLS, mode], env)
            what = "calls/%s with the shim (%s): " % (mode, policy)
            checks.expect(rc == 0, what + "exits 0 (got %s)%s" % (rc, "\nstdout:\n" + out + "stderr:\n" + err if rc else ""))
            diff = [(a, b) for a, b in zip(ref.splitlines(), out.splitlines()) if a != b]
            if len(ref.splitlines()) != len(out.splitlines()):
                diff.append(("%d lines" % len(ref.splitlines()), "%d lines" % len(out.splitlines())))
            for a, b in diff:
                print("  without: %-45s with: %s" % (a, b))
            checks.expect(not diff, what + "all %d codes as without it (%d differ), %.2f s" % (
                len(ref.splitlines()), len(diff), wall))
            if no_gpu and rc == 0:
                checks.expect("cuInit rc=%d" % NO_DEVICE in out.splitlines(),
                              what + "cuInit returns CUDA_ERROR_NO_DEVICE")


# ---- 3. cudart -------------------------------------------------------------------

def parse_cudart(text):
    codes, times = {}, {}
    for line in text.splitlines():
        m = re.match(r"(.+?) rc=(\d+) error=(\S+) ms=([\d.]+)$", line)
        if m:
            codes[m.group(1)] = (int(m.group(2)), m.group(3))
            times[m.group(1)] = float(m.group(4))
    return codes, times


def check_cudart(plain_env, shim_envs):
    rc, out, err, wall = run([CUDART], plain_env)
    checks.expect(rc == 0, "cudart without the shim: exits 0 (got %s)%s" % (rc, "\n" + err if rc else ""))
    ref, _ = parse_cudart(out)
    print("\ncudart without the shim (%.2f s): %s" % (wall, ", ".join("%s=%s" % (k, v[1]) for k, v in ref.items())))
    for call in ("cudaGetDeviceCount", "cudaMalloc"):
        code = ref.get(call, (None,))[0]
        checks.expect(code in (NO_DEVICE, INSUFFICIENT_DRIVER),
                      "cudart without the shim: %s returns cudaErrorNoDevice or cudaErrorInsufficientDriver (%s)" % (call, code))
    for policy, env in shim_envs.items():
        rc, out, err, wall = run([CUDART], env)
        what = "cudart with the shim (%s, no server): " % policy
        checks.expect(rc == 0, what + "exits 0 (got %s)%s" % (rc, "\nstdout:\n" + out + "stderr:\n" + err if rc else ""))
        codes, times = parse_cudart(out)
        print("cudart with the shim (%s): %.2f s: %s" % (policy, wall, ", ".join(
            "%s=%s (%.0f ms)" % (k, v[1], times[k]) for k, v in codes.items())))
        checks.expect(codes == ref, what + "every code as without the shim")
        checks.expect(wall < CUDART_LIMIT_S, what + "the whole program runs in under %.0f s (%.2f s)" % (CUDART_LIMIT_S, wall))
        slow = {k: t for k, t in times.items() if t >= 1000 * CUDART_LIMIT_S}
        checks.expect(codes and not slow, what + "each call answers within %.0f s (%s)" % (CUDART_LIMIT_S, slow or "ok"))


def main():
    lib = fetch()
    names = wrapped_names(ENTRIES)
    checks.expect(len(names) > 0, "shim/gs_entries.h lists %d wrapped names" % len(names))
    plain_env, shim_envs = environments(lib)
    print("\n== 1. lookups ==")
    check_lookups(names, plain_env, shim_envs["wait"])
    print("\n== 2. calls ==")
    check_calls(plain_env, shim_envs)
    print("\n== 3. cudart ==")
    check_cudart(plain_env, shim_envs)
    checks.finish()


main()
