"""One server per run directory, restarts that keep the CDI spec, and an
explicit uninstall (issue 29), without a container runtime: a "container"
here is a private mount namespace with the tenant's directory bound
read-only at /run/gpuslice (as in hardening/container_env_test.py).

Before: a second gpuslice-server on the same run directory started without
a word and took the sockets; stopping either one deleted the CDI spec (the
live server's too, or in the middle of an upgrade); and there was no
uninstall, so after the server went, running processes with the default
`wait` policy waited for ever.

1. A second server on the same run directory exits 2 at once, naming the
   first one's PID; the first serves on (status, sockets, spec).
2. A server with another run directory but the same CDI directory does not
   replace the first one's spec, and leaves it when it stops.
3. SIGTERM (a restart) leaves the spec and the policy files; the next
   server serves the same spec.
4. --uninstall with the server running and a `limit = 0.3` tenant's
   processes at work (one in a "container", one on the host with
   GPUSLICE_SOCKET, both on the default `wait`): the server stops, both
   carry on ungated (over 85 % of the device by the fakecuda meter), and
   say so; a new "container" runs ungated from its first kernel; the
   sockets, admin.sock, .clients, the preload list and the copied install
   files are gone, the policy files say `uninstalled open`, and the spec's
   devices only set GPUSLICE_UNINSTALLED=1. A second --uninstall finds
   nothing to do and exits 0.
5. A server started again afterwards gates again (its policy files say
   `wait`, its spec mounts the tenant's directory)."""
import json
import os
import subprocess
import sys
import tempfile
import time

from testlib import SERVER, SHIM, SPIN, Checks, Machine, Server, wait_for

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
machine = Machine()
cdi_dir = os.path.join(machine.dir, "cdi")
spec_path = os.path.join(cdi_dir, "gpuslice.json")
server = Server(machine, {"capped": "limit = 0.3\n", "other": "share = 1\n"}, cdi_dir=cdi_dir)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def spec_mounts():
    """{device: hostPath of its /run/gpuslice mount} of the spec, or None."""
    text = read(spec_path)
    if text is None:
        return None
    out = {}
    for d in json.loads(text)["devices"]:
        m = [m["hostPath"] for m in d["containerEdits"].get("mounts", []) if m["containerPath"] == "/run/gpuslice"]
        out[d["name"]] = m[0] if m else None
    return out


def run_server(run_dir, timeout=5):
    """A server that is expected to exit: (exit code, its stderr); None
    and a note if it still runs after timeout seconds (then it is
    stopped)."""
    p = subprocess.Popen([SERVER, "--config-dir", server.conf, "--run-dir", run_dir, "--cdi-dir", cdi_dir, "--shim",
                          SHIM, "--metrics", ""], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        return p.wait(timeout=timeout), p.stderr.read()
    except subprocess.TimeoutExpired:
        p.terminate()
        p.wait()
        return None, "still running after %d s: %s" % (timeout, p.stderr.read()[-300:])


def kernels(pid):
    return sum(p["kernels"] for p in machine.meter()["processes"] if p["pid"] == pid)


def spin_argv(seconds):
    return [SPIN, "--seconds", str(seconds), "--kernel-us", "1000", "--depth", "16", "--blocking-sync"]


def in_container(tenant_dir, argv, env):
    env = dict(env)
    env["GS_TEST_PRELOAD"] = env.pop("LD_PRELOAD", SHIM)
    return subprocess.Popen(UNSHARE + ["sh", "-c", SCRIPT, tenant_dir] + argv, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def utilization(seconds):
    snap = machine.snapshot()
    time.sleep(seconds)
    return machine.meter(since=snap)["devices"][0]["utilization"]


first_spec = read(spec_path)
checks.expect(first_spec is not None and spec_mounts()["capped"] == os.path.join(server.run_dir, "tenants", "capped"),
              "the server wrote its CDI spec")

# ---- 1: a second server on the same run directory ------------------------------------------
code, err = run_server(server.run_dir)
checks.expect(code == 2 and "another gpuslice-server (pid %d) serves %s" % (server.proc.pid, server.run_dir) in err,
              "a second server on the same run directory exits 2 naming the first one's pid (%s: %s)"
              % (code, err.strip()[-300:]))
checks.expect(server.proc.poll() is None and server.status()["tenants"] and
              os.path.exists(server.socket("capped")) and read(spec_path) == first_spec,
              "the first one serves on: status, its sockets and its spec are there")

# ---- 2: another run directory, the same CDI directory --------------------------------------
other_run = os.path.join(machine.dir, "run2")
log2 = open(os.path.join(machine.dir, "server2.log"), "w")
second = subprocess.Popen([SERVER, "--config-dir", server.conf, "--run-dir", other_run, "--cdi-dir", cdi_dir,
                           "--shim", SHIM, "--metrics", ""], stdout=log2, stderr=log2)
wait_for(lambda: os.path.exists(os.path.join(other_run, "admin.sock")), 5.0)
time.sleep(1.5)
second.terminate()
second.wait(timeout=10)
log2.close()
err2 = read(os.path.join(machine.dir, "server2.log"))
checks.expect(read(spec_path) == first_spec and "not replacing it" in err2,
              "a server of another run directory leaves a live server's spec alone, and says why (%s)"
              % err2.strip().splitlines()[-1:])

# ---- 3: a restart keeps the spec ------------------------------------------------------------
server.stop()
policy = os.path.join(server.run_dir, "tenants", "capped", "on-server-down")
checks.expect(read(spec_path) == first_spec and read(policy) == "wait\n" and
              not os.path.exists(server.socket("capped")),
              "SIGTERM leaves the spec and the policy files (sockets go): containers created meanwhile start")
server.start()
checks.expect(read(spec_path) == first_spec, "the next server serves the same spec")

# ---- 4: uninstall ------------------------------------------------------------------------
install = os.path.join(machine.dir, "opt-gpuslice")
for rel in ("lib/libgpuslice.so", "bin/gpuslice-hook", "hooks.d/gpuslice.json"):
    os.makedirs(os.path.dirname(os.path.join(install, rel)), exist_ok=True)
    open(os.path.join(install, rel), "w").close()
capped_dir = os.path.join(server.run_dir, "tenants", "capped")
env = server.tenant_env("capped", GPUSLICE_LOG="info")
env.pop("GPUSLICE_ON_SERVER_DOWN", None)
boxed = in_container(capped_dir, spin_argv(14), env)
host = machine.spawn(spin_argv(14), env=env, stderr=subprocess.PIPE)
checks.expect(wait_for(lambda: kernels(boxed.pid) > 20 and kernels(host.pid) > 20, 5.0),
              "two processes of the limit = 0.3 tenant run (one in a container, one on the host)")
gated = utilization(1.5)
checks.expect(gated <= 0.36, "... held to the limit: %.1f%% of the device" % (100 * gated))
server_pid = server.proc.pid
u = subprocess.run([SERVER, "--uninstall", "--run-dir", server.run_dir, "--cdi-dir", cdi_dir, "--install-dir",
                    install], capture_output=True, text=True, timeout=40)
checks.expect(u.returncode == 0 and "stopping the gpuslice-server of %s (pid %d)" % (server.run_dir, server_pid)
              in u.stderr, "--uninstall stops the running server and exits 0 (%d: %s)"
              % (u.returncode, u.stderr.strip()[-400:]))
checks.expect(server.proc.poll() is not None, "the server is gone")
time.sleep(0.5)
ungated = utilization(2.0)
checks.expect(ungated >= 0.85 and boxed.poll() is None and host.poll() is None,
              "running processes carry on ungated: %.1f%% of the device (limit 0.3)" % (100 * ungated))
for p in (boxed, host):
    p.wait(timeout=30)
boxed_err, host_err = boxed.stderr.read(), host.stderr.read()
checks.expect(boxed.returncode == 0 and host.returncode == 0, "both finish (%s, %s)" % (boxed.returncode, host.returncode))
new = in_container(capped_dir, [SPIN, "--seconds", "1", "--kernel-us", "1000", "--blocking-sync"], env)
out, err = new.communicate(timeout=20)
rate = float((out.split("kernels_per_s=") + ["0"])[1].split()[0] or 0)
checks.expect(new.returncode == 0 and rate >= 450,
              "once they are done, a new container of the tenant runs ungated from its first kernel (%s kernels/s, 1 ms kernels; %s)"
              % (rate, err.strip()[-200:]))
checks.expect("gpuslice was uninstalled from this node (/run/gpuslice/on-server-down says so)" in boxed_err,
              "the container's process says it runs ungated because of the uninstall (%s)" % boxed_err.strip()[-300:])
checks.expect("gpuslice was uninstalled from this node (%s says so)" % policy in host_err,
              "so does the host's (%s)" % host_err.strip()[-300:])
leftovers = [p for p in (server.socket("capped"), server.socket("other"), os.path.join(server.run_dir, "admin.sock"),
                         os.path.join(server.run_dir, ".clients"), os.path.join(server.run_dir, "cdi", "ld.so.preload"),
                         install) if os.path.lexists(p)]
checks.expect(not leftovers, "sockets, .clients, the preload list and the install directory are gone (left: %s)"
              % leftovers)
checks.expect(read(policy) == "uninstalled open\n" and os.path.isdir(capped_dir),
              "the tenant's directory stays, its policy says 'uninstalled open' (%r)" % read(policy))
spec = json.loads(read(spec_path) or "{}")
checks.expect(sorted(d["name"] for d in spec.get("devices", [])) == ["capped", "other"] and
              all(d["containerEdits"] == {"env": ["GPUSLICE_UNINSTALLED=1"]} for d in spec["devices"]),
              "the spec's devices only set GPUSLICE_UNINSTALLED=1: containers naming a tenant start without gpuslice")
again = subprocess.run([SERVER, "--uninstall", "--run-dir", server.run_dir, "--cdi-dir", cdi_dir], capture_output=True,
                       text=True, timeout=10)
checks.expect(again.returncode == 0, "a second --uninstall exits 0 (%s)" % again.stderr.strip()[-200:])

# ---- 5: installed again ----------------------------------------------------------------------
server.start()
checks.expect(read(policy) == "wait\n" and spec_mounts() == {"capped": capped_dir,
                                                             "other": os.path.join(server.run_dir, "tenants", "other")},
              "a server started again writes 'wait' and a spec that mounts the tenants' directories")
proc = server.spin("capped", 3)
checks.expect(wait_for(lambda: kernels(proc.pid) > 20, 5.0), "and a new process runs")
gated = utilization(1.5)
checks.expect(gated <= 0.36, "gated again: %.1f%% of the device" % (100 * gated))
proc.wait(timeout=20)
server.stop()
checks.finish()
