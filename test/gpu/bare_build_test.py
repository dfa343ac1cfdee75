"""check.sh on a bare machine, as a GPU machine lent for minutes may be:
a C compiler, the CUDA headers, python3, meson and ninja, and nothing else.
json-c and ncurses are left out of the build (-D json_c=disabled -D
ncurses=disabled), pkg-config is not on PATH, meson is not either (it runs
as `python3 -m mesonbuild.mesonmain`, as with pip's meson), and apt-get,
apt, dpkg, sudo, pip and pip3 are stubs that record any call and fail.
check.sh --simulate --quick --offline must build into a fresh directory
and run every row that needs no PyTorch to a measurement, calling no
package manager and naming what it left out. A build that fails must exit
2. Whether the rows meet their targets is gpu/check's test: the
--quick rows are too short to judge on a busy machine.

  bare_build_test.py SOURCE_ROOT WORK_DIR [CUDADIR]
"""
import json
import os
import shutil
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import testlib  # noqa: E402

root, work = sys.argv[1], os.path.abspath(sys.argv[2])
cudadir = sys.argv[3] if len(sys.argv) > 3 else ""
shutil.rmtree(work, ignore_errors=True)
stubs, bins = os.path.join(work, "stubs"), os.path.join(work, "bin")
os.makedirs(stubs)
os.makedirs(bins)
calls = os.path.join(work, "package-manager-calls")
HIDDEN_PREFIXES = ("apt", "dpkg", "sudo", "pip", "pkg-config", "pkgconf")
HIDDEN_SUFFIXES = ("-pkg-config",)

for name in ("apt-get", "apt", "dpkg", "sudo", "pip", "pip3"):
    path = os.path.join(stubs, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho \"%s $*\" >> '%s'\nexit 1\n" % (name, calls))
    os.chmod(path, stat.S_IRWXU)

# A python3 that has meson's module (pip's meson, or Debian's beside
# /usr/bin/python3) comes first: meson then runs as that module.
python_with_meson = next((p for p in (shutil.which("python3"), "/usr/bin/python3") if p and subprocess.run(
    [p, "-c", "import mesonbuild.mesonmain"], capture_output=True).returncode == 0), None)
meson_as_module = python_with_meson is not None
if meson_as_module:
    os.symlink(python_with_meson, os.path.join(bins, "python3"))
for directory in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
    if not os.path.isdir(directory):
        continue
    for name in os.listdir(directory):
        if (name.startswith(HIDDEN_PREFIXES) or name.endswith(HIDDEN_SUFFIXES) or
                (meson_as_module and name == "meson")):
            continue
        link = os.path.join(bins, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(directory, name), link)

env = {k: v for k, v in os.environ.items() if k not in ("NINJA", "GPUSLICE_BUILD_DIR", "LD_LIBRARY_PATH")}
env["PATH"] = stubs + ":" + bins
checks = testlib.Checks()
checks.expect(subprocess.run(["sh", "-c", "command -v pkg-config"], env=env, capture_output=True).returncode != 0,
              "pkg-config is not on the test's PATH")

build = os.path.join(work, "build")
out = os.path.join(work, "results.md")
proc = subprocess.run(["bash", os.path.join(root, "test", "gpu", "check.sh"), "--simulate", "--quick", "--offline",
                       "--build-into", build, "-D", "ncurses=disabled", "-D", "json_c=disabled", "--out", out] +
                      (["-D", "cudadir=" + cudadir] if cudadir else []),
                      env=env, capture_output=True, text=True, timeout=600)
print(proc.stdout[-4000:])
print(proc.stderr[-4000:])
checks.expect(proc.returncode in (0, 1), "check.sh built and ran (exit %d: 0 all passed, 1 a row failed)"
              % proc.returncode)
checks.expect(not os.path.exists(calls), "no package manager was called (%s)" % (
    open(calls).read().strip() if os.path.exists(calls) else "none"))
checks.expect("gpuslice-hook is not built" in proc.stderr and "ncurses not used" in proc.stderr,
              "check.sh named what its build left out")
if meson_as_module:
    checks.expect("python3 -m mesonbuild.mesonmain" in proc.stderr, "meson ran as python3 -m mesonbuild.mesonmain")
try:
    with open(os.path.join(work, "results.json")) as f:
        rows = {r["row"]: r for r in json.load(f)["rows"]}
except (OSError, ValueError):
    rows = {}
# A row that measured has its figures in data; one that stopped before
# (a program that failed, a row out of time) has none.
measured = sorted(n for n, r in rows.items() if r["result"] in ("PASS", "FAIL") and r["data"])
checks.expect(measured == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11] and rows.get(3, {}).get("result") == "skipped",
              "every row measured, the PyTorch one skipped: %s" % {n: r["result"] for n, r in rows.items()})
for n, r in sorted(rows.items()):
    if r["result"] == "FAIL":
        print("note: row %d failed its target in this short run: %s" % (n, r["measured"]))

proc = subprocess.run(["bash", os.path.join(root, "test", "gpu", "check.sh"), "--simulate", "--offline",
                       "--build-into", os.path.join(work, "broken"), "-D", "no_such_option=1", "--out", out],
                      env=env, capture_output=True, text=True, timeout=300)
checks.expect(proc.returncode == 2 and "the build failed" in proc.stderr,
              "a build that fails exits 2 (exit %d: %s)" % (proc.returncode, proc.stderr.strip()[-200:]))
if checks.failed == 0:
    shutil.rmtree(work, ignore_errors=True)
checks.finish()
