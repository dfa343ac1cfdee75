"""Shared by the container tests (test/containers/*_test.py): what they
need (root, podman, runc; installed with apt-get when missing), a root
filesystem of the few host files the tests run (no image is pulled), one
fakecuda machine shared by every container, and the measurement of two
containers' split by the fakecuda meter. runtimes.py drives podman and
runc."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import testlib  # noqa: E402
from testlib import BUILD, CTL, SHIM, SPIN, Checks, Server  # noqa: E402,F401

HOOK = os.path.join(BUILD, "hook", "gpuslice-hook")
LIBCUDA = os.path.join(testlib.FAKECUDA_DIR, "libcuda.so.1")
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# CI sets this: a test that cannot get what it needs fails instead of
# skipping.
REQUIRED = os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1"

# Paths inside the containers.
C_LIBCUDA_DIR = "/opt/fakecuda"
C_STATE_DIR = "/var/lib/fakecuda"
C_SPIN = "/usr/bin/spin"
# What gpuslice puts into a container (include/gpuslice/containers.h).
C_RUN_DIR = "/run/gpuslice"
C_SHIM = "/usr/lib/gpuslice/libgpuslice.so"
C_PRELOAD = "/etc/ld.so.preload"

WINDOW = 5.0   # seconds measured, as in token_shares_test


skip = testlib.skip


def require(tools):
    """tools: {command: Debian package}. Installs the missing ones with
    apt-get; skips (exit 77) where that is not possible."""
    if os.geteuid() != 0:
        skip("containers need root")
    missing = sorted({pkg for cmd, pkg in tools.items() if not shutil.which(cmd)})
    if not missing:
        return
    if not shutil.which("apt-get"):
        skip("%s missing and no apt-get to install them" % " ".join(missing))
    print("installing %s with apt-get" % " ".join(missing), flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    ok = subprocess.run(["apt-get", "update", "-qq"], env=env).returncode == 0 and \
        subprocess.run(["apt-get", "install", "-y", "-qq"] + missing, env=env,
                       stdout=subprocess.DEVNULL).returncode == 0
    if not ok or any(not shutil.which(cmd) for cmd in tools):
        skip("apt-get install %s failed" % " ".join(missing))


def require_hook():
    if not os.path.exists(HOOK):
        skip("gpuslice-hook was not built (json-c missing: apt-get install libjson-c-dev)")


def build_rootfs(dest, extra=()):
    """A Debian-like root (merged /usr) holding sh, env, cat, sleep, true, spin,
    the host programs named in extra (names on PATH, or paths), and the libraries they, the shim and
    fakecuda need, copied from the host; mount points for fakecuda; nothing
    of gpuslice's."""
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "proc", "sys", "dev", "etc", "tmp", "run",
              "root", "opt/fakecuda", "var/lib/fakecuda"):
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        os.symlink(target, os.path.join(dest, link))
    programs = {shutil.which(p): "usr/bin/" + os.path.basename(p)
                for p in ("sh", "env", "cat", "sleep", "true") + tuple(extra)}
    programs[SPIN] = C_SPIN.lstrip("/")
    for src, rel in programs.items():
        shutil.copy(src, os.path.join(dest, rel))
    env = dict(os.environ, LD_LIBRARY_PATH=testlib.FAKECUDA_DIR)
    libs = set()
    for binary in list(programs) + [SHIM, LIBCUDA]:
        out = subprocess.run(["ldd", binary], env=env, capture_output=True, text=True, check=True).stdout
        libs |= {w for line in out.splitlines() for w in line.split()
                 if w.startswith("/") and "fakecuda" not in w}
    for lib in libs:
        target = os.path.join(dest, lib.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(lib, target)  # follows symlinks: the real file under the soname
    open(os.path.join(dest, C_LIBCUDA_DIR.lstrip("/"), "libcuda.so.1"), "w").close()  # mount point
    with open(os.path.join(dest, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
    with open(os.path.join(dest, "etc/group"), "w") as f:
        f.write("root:x:0:\nnogroup:x:65534:\n")
    return dest


def gpuslice_paths_in(rootfs):
    """What gpuslice would have left in a root filesystem had anything
    written into it."""
    return [p for p in (C_RUN_DIR, os.path.dirname(C_SHIM), C_PRELOAD)
            if os.path.lexists(os.path.join(rootfs, p.lstrip("/")))]


class SharedMachine(testlib.Machine):
    """A fakecuda machine whose state lives alone in a directory that every
    container mounts, readable and writable by any uid."""

    def __init__(self, devices=1):
        self.dir = tempfile.mkdtemp(prefix="gpuslice-ct-")
        os.chmod(self.dir, 0o755)
        self.state_dir = os.path.join(self.dir, "state")
        os.mkdir(self.state_dir)
        os.chmod(self.state_dir, 0o1777)
        self.state = os.path.join(self.state_dir, "fakecuda.state")
        self.env = dict(os.environ, LD_LIBRARY_PATH=testlib.FAKECUDA_DIR, FAKECUDA_STATE=self.state,
                        FAKECUDA_DEVICES=str(devices), FAKECUDA_MEMORY="16G")
        subprocess.run([SPIN, "--count", "1", "--kernel-us", "1"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        os.chmod(self.state, 0o666)

    def container_env(self):
        """-e pairs for a container that uses this machine."""
        return {"LD_LIBRARY_PATH": C_LIBCUDA_DIR, "FAKECUDA_STATE": C_STATE_DIR + "/fakecuda.state"}

    def live_ids(self):
        """The meter's ids of live processes that have run kernels."""
        return {p["id"] for p in self.meter()["processes"] if p["alive"] and p["kernels"] > 0}

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def spin_argv(seconds, *extra):
    return [C_SPIN, "--seconds", str(seconds), "--kernel-us", "1000", "--depth", "16", "--blocking-sync"] + \
        list(extra)


# ---- measuring -------------------------------------------------------------------------

def wait_new_id(machine, known, timeout=20):
    """Waits until the meter shows a live process that is not in known."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = machine.live_ids() - known
        if len(new) == 1:
            return new.pop()
        time.sleep(0.05)
    raise RuntimeError("no new process on the meter after %d s" % timeout)


def measure_split(checks, machine, server, label, start_a, start_b, window=WINDOW):
    """Starts container a, waits for its process on the meter, then b (so
    the meter's ids tell them apart even though both are pid 1 in their
    own PID namespace); measures the window; checks 75/25 +-3 and that
    gpuslicectl status lists both containers' host PIDs and IDs. start_a
    and start_b start a container running spin for `seconds` and return a
    handle with wait(), host_pid() and container_id()."""
    before = machine.live_ids()
    a = start_a(window + 4.5)
    id_a = wait_new_id(machine, before)
    b = start_b(window + 2.5)
    id_b = wait_new_id(machine, before | {id_a})
    time.sleep(0.5)
    status = server.status()
    snap = machine.snapshot()
    time.sleep(window)
    meter = machine.meter(since=snap)
    share = {p["id"]: p["share"] for p in meter["processes"]}
    sa, sb = share.get(id_a, 0.0), share.get(id_b, 0.0)
    checks.expect(abs(sa - 0.75) <= 0.03 and abs(sb - 0.25) <= 0.03,
                  "%s: tenants at 3:1 in two containers split 75/25 +-3 (got %.1f/%.1f)"
                  % (label, 100 * sa, 100 * sb))
    listed = {(p["pid"], p["container_id"]) for t in status["tenants"] for p in t["processes"]}
    for name, c in (("a", a), ("b", b)):
        pid, cid = c.host_pid(), c.container_id()
        checks.expect((pid, cid) in listed,
                      "%s: gpuslicectl status lists container %s by host pid %d and id %s... (listed: %s)"
                      % (label, name, pid, cid[:12], sorted((p, (i or "-")[:12]) for p, i in listed)))
    for name, c in (("a", a), ("b", b)):
        code, out = c.wait()
        checks.expect(code == 0 and "spin: " in out, "%s: spin in container %s exits 0 (%d: %s)"
                      % (label, name, code, out.strip()[-200:]))
    return sa, sb


def measure_cap(checks, machine, label, start, limit=0.3, window=3.0):
    """Starts one container alone (in a tenant with the given limit) and
    checks that the device is busy at most limit + 1 point."""
    before = machine.live_ids()
    c = start(window + 1.5)
    wait_new_id(machine, before)
    time.sleep(0.3)
    snap = machine.snapshot()
    time.sleep(window)
    util = machine.meter(since=snap)["devices"][0]["utilization"]
    code, out = c.wait()
    return util, code, out


def escape_argv(seconds):
    """A shell in the container that drops LD_PRELOAD, shows that it is
    gone, and runs spin: only /etc/ld.so.preload can gate it."""
    spin = " ".join(spin_argv(seconds))
    inner = "echo \"LD_PRELOAD=[$LD_PRELOAD]\"; exec %s" % spin
    return ["/bin/sh", "-c", "exec env -u LD_PRELOAD /bin/sh -c '%s'" % inner]


def check_escape(checks, label, util, code, out, gated=True):
    """The result of measure_cap on escape_argv: LD_PRELOAD was really gone
    and the device time stayed under the 0.3 limit (or, for a container
    without gpuslice's preload list, did not)."""
    checks.expect(code == 0 and "LD_PRELOAD=[]" in out and "spin: " in out,
                  "%s: a process started with env -u LD_PRELOAD runs without it (%d: %s)"
                  % (label, code, out.strip()[-160:]))
    if gated:
        checks.expect(util <= 0.31, "%s: ... and is still gated: a limit = 0.3 tenant uses <= 31%% (got %.1f%%)"
                      % (label, 100 * util))
    else:
        checks.expect(util >= 0.9, "%s: without /etc/ld.so.preload the same process escapes: >= 90%% (got %.1f%%)"
                      % (label, 100 * util))


def tenants(prefix=""):
    """The tenants every container test uses: a and b at 3:1, and a capped
    one with limit 0.3."""
    return {prefix + "a": "share = 3\n", prefix + "b": "share = 1\n", prefix + "capped": "limit = 0.3\n"}


class Cleanup:
    """Runs the registered cleanups in reverse order at the end of a test,
    whatever happened."""

    def __init__(self):
        self.fns = []

    def add(self, fn):
        self.fns.append(fn)
        return fn

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for fn in reversed(self.fns):
            try:
                fn()
            except Exception as e:  # keep cleaning up
                print("cleanup: %s" % e)
        return False



# ---- the CDI directory podman 4.3 reads --------------------------------------------------

CDI_DIR = "/etc/cdi"
CDI_SPEC = os.path.join(CDI_DIR, "gpuslice.json")


def claim_cdi_spec():
    """Makes /etc/cdi/gpuslice.json this test's to write (podman 4.3 has no
    --cdi-spec-dir): a spec a killed test run left (its run directories
    are gone, or it names none, as after --uninstall) is removed; one of a
    server in use skips the test. The caller removes the spec at the end."""
    import json
    if os.path.exists(CDI_SPEC):
        try:
            with open(CDI_SPEC) as f:
                dirs = [m["hostPath"] for d in json.load(f)["devices"]
                        for m in d["containerEdits"].get("mounts", []) if m["containerPath"] == C_RUN_DIR]
        except (OSError, ValueError, KeyError, TypeError):
            dirs = ["?"]
        if not any(os.path.exists(d) for d in dirs):
            print("removing a stale %s (it names no tenant directory that exists)" % CDI_SPEC)
            os.unlink(CDI_SPEC)
        else:
            skip("%s exists: another gpuslice-server writes there" % CDI_SPEC)
    os.makedirs(CDI_DIR, exist_ok=True)
    return CDI_SPEC
