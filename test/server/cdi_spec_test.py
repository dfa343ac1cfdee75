"""The CDI spec gpuslice-server writes (--cdi-dir): its content, that it
follows tenants added and removed within 2 s, that it is replaced whole
(never seen half-written), that it stays when the server stops (a
restart; only --uninstall takes it away), and that
gpuslicectl cdi prints the same text without a server. No container
runtime needed: the container tests use the spec with podman."""
import json
import os
import subprocess
import threading
import time

from testlib import CTL, SHIM, Checks, Machine, Server

checks = Checks()
machine = Machine()
cdi_dir = os.path.join(machine.dir, "cdi")
spec_path = os.path.join(cdi_dir, "gpuslice.json")
server = Server(machine, {"team-a": "share = 3\n", "team-b": "share = 1\n", "_hidden": "share = 1\n"},
                cdi_dir=cdi_dir)


def spec():
    with open(spec_path) as f:
        return json.load(f)


def names():
    try:
        return sorted(d["name"] for d in spec()["devices"])
    except FileNotFoundError:
        return None


def wait_for(cond, limit=2.0):
    """Seconds until cond() held, or None after limit."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if cond():
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def seconds(took):
    return "not within 2 s" if took is None else "%.3f s" % took


s = spec()
checks.expect(s["cdiVersion"] == "0.5.0" and s["kind"] == "gpuslice.io/tenant",
              "cdiVersion 0.5.0, kind gpuslice.io/tenant (%s, %s)" % (s["cdiVersion"], s["kind"]))
checks.expect(names() == ["team-a", "team-b"],
              "one device per tenant; '_hidden' (not a CDI device name) left out: %s" % names())
preload_host = os.path.join(server.run_dir, "cdi", "ld.so.preload")
for d in s["devices"]:
    edits = d["containerEdits"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    checks.expect(edits["env"] == ["LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"],
                  "%s: LD_PRELOAD in env (%s)" % (d["name"], edits["env"]))
    expected = {"/run/gpuslice": os.path.join(server.run_dir, "tenants", d["name"]),
                "/usr/lib/gpuslice/libgpuslice.so": SHIM, "/etc/ld.so.preload": preload_host}
    checks.expect({k: m["hostPath"] for k, m in mounts.items()} == expected and
                  all(m["options"] == ["ro", "bind"] for m in mounts.values()),
                  "%s: the tenant's directory, the shim and the preload list, read-only binds" % d["name"])
with open(preload_host) as f:
    text = f.read()
checks.expect(text == "/usr/lib/gpuslice/libgpuslice.so\n", "the preload list names the shim (%r)" % text)
checks.expect(not preload_host.startswith(os.path.join(server.run_dir, "tenants")),
              "the preload list lives outside every tenant's directory")
checks.expect(os.stat(spec_path).st_mode & 0o777 == 0o644 and os.stat(preload_host).st_mode & 0o777 == 0o644,
              "the spec and the preload list are world-readable (0644)")

# gpuslicectl cdi: the same text, no server needed.
dry = subprocess.run([CTL, "cdi", "--config-dir", server.conf, "--run-dir", server.run_dir, "--shim", SHIM],
                     capture_output=True, text=True)
checks.expect(dry.returncode == 0 and dry.stdout == open(spec_path).read(),
              "gpuslicectl cdi prints exactly what the server wrote")

# Readers never see a half-written spec while tenants change.
torn = []
stop = threading.Event()


def reader():
    while not stop.is_set():
        try:
            with open(spec_path) as f:
                json.load(f)
        except FileNotFoundError:
            pass
        except ValueError as e:
            torn.append(str(e))


t = threading.Thread(target=reader)
t.start()
server.write_tenant("team-c", "share = 2\n")
took = wait_for(lambda: names() == ["team-a", "team-b", "team-c"])
checks.expect(took is not None, "a tenant added appears in the spec within 2 s (%s)" % seconds(took))
os.unlink(os.path.join(server.conf, "team-b.conf"))
took = wait_for(lambda: names() == ["team-a", "team-c"])
checks.expect(took is not None, "a tenant removed leaves the spec within 2 s (%s)" % seconds(took))
for i in range(20):
    server.write_tenant("extra%d" % i, "share = 1\n")
wait_for(lambda: len(names() or []) == 22)
for i in range(20):
    os.unlink(os.path.join(server.conf, "extra%d.conf" % i))
wait_for(lambda: len(names() or []) == 2)
stop.set()
t.join()
checks.expect(not torn, "no reader saw a partial spec during 42 rewrites (%s)" % torn[:1])
checks.expect(not [f for f in os.listdir(cdi_dir) if f != "gpuslice.json"],
              "no temporary file left in the CDI directory: %s" % os.listdir(cdi_dir))

for name in ("team-a", "team-c", "_hidden"):
    os.unlink(os.path.join(server.conf, name + ".conf"))
took = wait_for(lambda: not os.path.exists(spec_path))
checks.expect(took is not None, "no tenant: no spec (one without devices is invalid)")
server.write_tenant("team-d", "share = 1\n")
wait_for(lambda: names() == ["team-d"])
server.stop()
checks.expect(names() == ["team-d"], "the server leaves its spec when it stops: containers created while it "
              "restarts still start (%s)" % names())
checks.expect(server.proc.returncode == 0, "the server exits 0")

# --cdi-dir "" writes nothing.
machine2 = Machine()
server2 = Server(machine2, {"x": "share = 1\n"})
checks.expect(os.path.exists(os.path.join(server2.run_dir, "cdi", "ld.so.preload")),
              "without a CDI directory the preload list is still written (gpuslice-hook mounts it)")
server2.stop()
checks.finish()
