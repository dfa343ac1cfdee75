"""Inside a tenant's container, two environment variables turned the gate
off: with GPUSLICE_SOCKET=/nonexistent GPUSLICE_ON_SERVER_DOWN=open the shim
found no server and ran unthrottled, so a `limit = 0.3` tenant ran at 99 %
and a `memory = 512M` one allocated 64 x 64 MiB. Inside a tenant (its
directory mounted read-only at /run/gpuslice, as the CDI spec and
gpuslice-hook mount it), the socket and the server-down policy now come
from that directory; the environment is ignored.

The container here is a private mount namespace (`unshare -m` as root,
`unshare -rm` otherwise) with a tmpfs on /run and the tenant's directory
bound read-only at /run/gpuslice; the process has LD_PRELOAD as a container
from the CDI spec has. Checks, all with the hostile variables set:

1. a tenant with limit 0.3 is held to it by the fakecuda meter, and the
   process is one of the tenant's clients;
2. a tenant with memory = 512M gets 8 chunks of 64 MiB, not 64;
3. the server stopped, the tenant's policy wait (the default): GPU work
   waits (GPUSLICE_ON_SERVER_DOWN=open notwithstanding), and runs once a
   server is back in the same directory;
4. a directory that holds the socket but no policy file waits (fail
   closed); one whose policy file names a word this shim does not know
   and then `open` runs (the first word it knows);
5. a server started with --on-server-down open writes `open` into each
   tenant's directory, and `wait` where the tenant file says
   `on_server_down = wait`; with the server stopped, GPU work runs in the
   first (GPUSLICE_ON_SERVER_DOWN=wait notwithstanding) and waits in the
   second;
6. a process already running when its tenant's policy changes to open
   follows the new policy once the server stops.

Skipped (77) where no mount namespace can be made, unless
GPUSLICE_REQUIRE_CONTAINERS=1 (CI), where that fails."""
import os
import subprocess
import sys
import tempfile
import time

from testlib import MEMHOG, SHIM, SPIN, Checks, Machine, Server, parse_line, wait_for

HOSTILE = {"GPUSLICE_SOCKET": "/nonexistent/gpuslice.sock", "GPUSLICE_ON_SERVER_DOWN": "open"}
# Mounts /run as a tmpfs, the tenant directory ($0) read-only at
# /run/gpuslice, then runs the command with the shim preloaded (only the
# command: the shell and mount(8) run without it).
SCRIPT = ('mount -t tmpfs gpuslice-test /run && mkdir /run/gpuslice && mount --bind "$0" /run/gpuslice && '
          'mount -o remount,bind,ro /run/gpuslice && export LD_PRELOAD="$GS_TEST_PRELOAD" && exec "$@"')

UNSHARE = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
probe = subprocess.run(UNSHARE + ["sh", "-c", SCRIPT, tempfile.gettempdir(), "true"], capture_output=True, text=True)
if probe.returncode != 0:
    reason = "cannot make a mount namespace with a bind mount (%s): %s" % (" ".join(UNSHARE), probe.stderr.strip())
    if os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1":
        print("FAILED: %s (GPUSLICE_REQUIRE_CONTAINERS=1)" % reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)

checks = Checks()
machine = Machine(memory="16G")


def in_container(tenant_dir, argv, env):
    """Starts argv in a 'container' that has tenant_dir at /run/gpuslice."""
    env = dict(env)
    env["GS_TEST_PRELOAD"] = env.pop("LD_PRELOAD", SHIM)
    return subprocess.Popen(UNSHARE + ["sh", "-c", SCRIPT, tenant_dir] + argv, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def container_env(server, tenant, **extra):
    env = server.tenant_env(tenant, GPUSLICE_LOG="info", **HOSTILE)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def kernels(pid):
    return sum(p["kernels"] for p in machine.meter()["processes"] if p["pid"] == pid)


def clients(server, name):
    for t in server.status()["tenants"]:
        if t["name"] == name:
            return t["clients"]
    return None


def finish(proc):
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    return out, err


def spin_argv(seconds):
    return [SPIN, "--seconds", str(seconds), "--kernel-us", "1000", "--depth", "16", "--blocking-sync"]


def check_waits(label, tenant_dir, env, then=None):
    """A spin in the container with no server: it must not run a kernel in
    1 s (and still be running). then(): brings a server back; the spin must
    run again within 3 s."""
    proc = in_container(tenant_dir, spin_argv(20), env)
    time.sleep(1.0)
    ran = kernels(proc.pid)
    checks.expect(proc.poll() is None and ran == 0,
                  "%s: no server, GPUSLICE_ON_SERVER_DOWN=open: GPU work waits (%d kernels in 1 s, %s)"
                  % (label, ran, "running" if proc.poll() is None else "exited %s" % proc.returncode))
    if then:
        then()
        checks.expect(wait_for(lambda: kernels(proc.pid) > 50, 3.0),
                      "%s: ... and runs once a server is back (%d kernels)" % (label, kernels(proc.pid)))
    out, err = finish(proc)
    return err


def check_runs(label, tenant_dir, env):
    """A spin in the container with no server: it must run."""
    proc = in_container(tenant_dir, spin_argv(20), env)
    ok = wait_for(lambda: kernels(proc.pid) > 50, 3.0)
    checks.expect(ok, "%s: no server, GPUSLICE_ON_SERVER_DOWN=wait: GPU work runs (%d kernels)"
                  % (label, kernels(proc.pid)))
    out, err = finish(proc)
    if not ok:
        print(err[-1500:])


# ---- 1, 2: the server up, a limit and a memory cap --------------------------------------
server = Server(machine, {"capped": "limit = 0.3\nmemory = 512M\n"})
capped_dir = os.path.join(server.run_dir, "tenants", "capped")

proc = in_container(capped_dir, spin_argv(8), container_env(server, "capped"))
connected = wait_for(lambda: clients(server, "capped") == 1, 3.0)
checks.expect(connected, "a process in the container connects to its tenant's socket, not to GPUSLICE_SOCKET")
time.sleep(0.3)
snap = machine.snapshot()
time.sleep(2.0)
util = machine.meter(since=snap)["devices"][0]["utilization"]
out, err = finish(proc)
checks.expect(0.15 <= util <= 0.36, "limit = 0.3 holds by the meter (got %.1f%%)" % (100 * util))
checks.expect("GPUSLICE_SOCKET and GPUSLICE_ON_SERVER_DOWN are ignored" in err,
              "the shim says once that it ignored the variables (%r)" % err.strip()[-300:])

proc = in_container(capped_dir, [MEMHOG, "--chunk-mb", "64", "--count", "64"], container_env(server, "capped"))
out, err = proc.communicate(timeout=60)
line = parse_line(out, "memhog") or {}
checks.expect(line.get("allocated") == "8",
              "memory = 512M holds: 8 x 64 MiB allocated, the 9th refused (got %s, %s; %s)"
              % (line.get("allocated"), line.get("last_error"), err.strip()[-300:]))

# ---- 3: the server down, policy wait (the default) -----------------------------------------
server.stop()
check_waits("policy wait", capped_dir, container_env(server, "capped"), then=server.start)
server.stop()

# ---- 4: directories the server did not write -----------------------------------------------
bare = tempfile.mkdtemp(prefix="gpuslice-tenant-", dir=machine.dir)
open(os.path.join(bare, "gpuslice.sock"), "w").close()  # present, but nobody listens
os.chmod(bare, 0o755)
check_waits("socket without a policy file", bare, container_env(server, "capped"))

later = tempfile.mkdtemp(prefix="gpuslice-tenant-", dir=machine.dir)
with open(os.path.join(later, "on-server-down"), "w") as f:
    f.write("someday open\n")
os.chmod(later, 0o755)
check_runs("a policy file 'someday open'", later, container_env(server, "capped", GPUSLICE_ON_SERVER_DOWN="wait"))

# ---- 5: the policy the server writes: --on-server-down open, a tenant file's wait ----------
server.args += ["--on-server-down", "open"]
server.write_tenant("batch", "share = 1\n")
server.write_tenant("held", "on_server_down = wait\n")
try:
    server.start()
    started = True
except RuntimeError as e:
    started = False
    print(e)
checks.expect(started, "the server starts with --on-server-down open")
if started:
    for name, want in (("capped", "open"), ("batch", "open"), ("held", "wait")):
        path = os.path.join(server.run_dir, "tenants", name, "on-server-down")
        text = open(path).read() if os.path.exists(path) else None
        checks.expect(text == want + "\n", "the server wrote %s's policy file: %r (want %r)"
                      % (name, text, want + "\n"))
    server.stop()
    check_runs("policy open", os.path.join(server.run_dir, "tenants", "batch"),
               container_env(server, "batch", GPUSLICE_ON_SERVER_DOWN="wait"))
    check_waits("policy wait, from the tenant file", os.path.join(server.run_dir, "tenants", "held"),
                container_env(server, "held"))

    # ---- 6: a policy changed before an outage reaches running processes ----------------------
    server.start()
    held_policy = os.path.join(server.run_dir, "tenants", "held", "on-server-down")
    proc = in_container(os.path.join(server.run_dir, "tenants", "held"), spin_argv(20), container_env(server, "held"))
    checks.expect(wait_for(lambda: clients(server, "held") == 1, 3.0), "a process of 'held' is connected")
    server.write_tenant("held", "on_server_down = open\n")
    checks.expect(wait_for(lambda: open(held_policy).read() == "open\n", 3.0),
                  "a changed tenant file rewrites its policy file (%r)" % open(held_policy).read())
    server.stop()
    time.sleep(0.3)
    before = kernels(proc.pid)
    checks.expect(wait_for(lambda: kernels(proc.pid) > before + 50, 3.0),
                  "the server stopped, the running process follows the new policy: it runs (%d kernels)"
                  % (kernels(proc.pid) - before))
    finish(proc)
checks.finish()
