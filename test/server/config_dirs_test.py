"""Several configuration directories (--config-dir given twice): tenants of
both get sockets, a WELCOME and a CDI device; a file added to or removed
from the second directory at run time adds or removes its tenant; a name
in both is the first directory's (its share), the other file is logged as
ignored once, naming both files, and its removal leaves the first
directory's tenant alone; when the first directory's file goes, the other
file's settings take the tenant over without disconnecting its processes;
a second directory that does not exist stops the start (exit 2, its name);
no valid file in any directory is warned about, naming them all; and
gpuslicectl cdi, given the same directories, prints the server's spec."""
import json
import os
import signal
import subprocess
import time

from gsproto import Client, Closed
from testlib import CTL, SERVER, SHIM, Checks, Machine, Server
from testlib import wait_for as poll

checks = Checks()


def wait_for(cond):
    """Within 3 s: inotify's events come at once, but this machine may be
    busy."""
    return poll(cond, 3.0)

machine = Machine()
second = os.path.join(machine.dir, "claims.d")
os.makedirs(second)
cdi_dir = os.path.join(machine.dir, "cdi")
spec_path = os.path.join(cdi_dir, "gpuslice.json")


def write(directory, name, text):
    tmp = os.path.join(directory, ".%s.tmp" % name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(directory, name + ".conf"))


write(second, "b", "share = 1\n")
write(second, "x", "share = 7\n")
server = Server(machine, {"a": "share = 2\n", "x": "share = 3\n"}, args=["--config-dir", second],
                cdi_dir=cdi_dir)
first = server.conf
x_first, x_second = os.path.join(first, "x.conf"), os.path.join(second, "x.conf")


def tenants():
    return {t["name"]: t for t in server.status()["tenants"]}


def devices():
    try:
        with open(spec_path) as f:
            return sorted(d["name"] for d in json.load(f)["devices"])
    except FileNotFoundError:
        return None


def clash_lines(ignored, used):
    return [line for line in server.log().splitlines()
            if "%s: ignored: tenant x is configured by %s" % (ignored, used) in line]


def connected(client):
    """Whether the server still has the client's connection (nothing came
    and it was not closed)."""
    try:
        return client.recv(0.2) is None
    except Closed:
        return False


# ---- both directories at start ----------------------------------------------------------------------------
t = tenants()
checks.expect(sorted(t) == ["a", "b", "x"], "tenants of both directories (%s)" % sorted(t))
checks.expect(all(os.path.exists(server.socket(n)) for n in ("a", "b", "x")), "each has its socket")
hello = {}
for name in ("a", "b"):
    try:
        hello[name] = Client(server.socket(name)).tenant
    except (OSError, Closed) as e:
        hello[name] = str(e)
checks.expect(hello == {"a": "a", "b": "b"}, "a client of each directory's tenant is welcomed as it (%s)" % hello)
checks.expect(t.get("x", {}).get("share") == 3, "x, in both: the first directory's share, 3 (%s)"
              % t.get("x", {}).get("share"))
checks.expect(len(clash_lines(x_second, x_first)) == 1,
              "the second directory's x.conf is logged as ignored, naming both files, once (%d)"
              % len(clash_lines(x_second, x_first)))
checks.expect(devices() == ["a", "b", "x"], "the CDI spec lists the tenants of both directories (%s)" % devices())
dry = subprocess.run([CTL, "cdi", "--config-dir", first, "--config-dir", second, "--run-dir", server.run_dir,
                      "--shim", SHIM], capture_output=True, text=True)
with open(spec_path) as f:
    written = f.read()
checks.expect(dry.returncode == 0 and dry.stdout == written and x_second in dry.stderr,
              "gpuslicectl cdi with both directories prints the server's spec and names the ignored file (%d, %s)"
              % (dry.returncode, dry.stderr.strip()[-200:]))

# Once per change: not again every second, nor on a reload.
time.sleep(2.2)
server.proc.send_signal(signal.SIGHUP)
checks.expect(wait_for(lambda: "SIGHUP: reloading %s, %s" % (first, second) in server.log()),
              "SIGHUP reloads both directories")
time.sleep(0.3)
checks.expect(len(clash_lines(x_second, x_first)) == 1,
              "the ignored file is not logged again without a change (%d times)" % len(clash_lines(x_second, x_first)))

# ---- the second directory at run time -------------------------------------------------------------------
write(second, "c", "share = 4\n")
checks.expect(wait_for(lambda: os.path.exists(server.socket("c"))),
              "a file added to the second directory: its tenant's socket appears within 3 s")
checks.expect(tenants().get("c", {}).get("share") == 4, "with its settings")
checks.expect(wait_for(lambda: devices() == ["a", "b", "c", "x"]), "and a CDI device (%s)" % devices())
os.unlink(os.path.join(second, "c.conf"))
checks.expect(wait_for(lambda: not os.path.exists(server.socket("c"))),
              "the file removed: its tenant's socket goes within 3 s")
checks.expect("c" not in tenants() and wait_for(lambda: devices() == ["a", "b", "x"]),
              "and the tenant and its CDI device (%s, %s)" % (sorted(tenants()), devices()))

# Removing the ignored file leaves the first directory's tenant alone.
x_client = Client(server.socket("x"))
os.unlink(x_second)
time.sleep(1.2)
t = tenants()
checks.expect("x" in t and t["x"]["share"] == 3 and os.path.exists(server.socket("x")) and connected(x_client),
              "the second directory's x.conf removed: the first directory's x stays, share 3, its client connected")
write(second, "x", "share = 7\n")
checks.expect(wait_for(lambda: len(clash_lines(x_second, x_first)) == 2),
              "written again, it is logged as ignored again (a change): %d times"
              % len(clash_lines(x_second, x_first)))
checks.expect(tenants()["x"]["share"] == 3, "and the first directory's share stays")

# The first directory's file goes: the second's takes the tenant over.
os.unlink(x_first)
checks.expect(wait_for(lambda: tenants().get("x", {}).get("share") == 7),
              "the first directory's x.conf removed: x has the second one's share, 7, within 3 s (%s)"
              % tenants().get("x", {}).get("share"))
checks.expect(os.path.exists(server.socket("x")) and connected(x_client) and tenants()["x"]["clients"] == 1,
              "its socket stays and its client stays connected")
checks.expect("configured by %s now, no longer by %s" % (x_second, x_first) in server.log(),
              "the log says which file configures it now")
# Back in the first directory: the first directory wins again.
write(first, "x", "share = 3\n")
checks.expect(wait_for(lambda: tenants().get("x", {}).get("share") == 3),
              "x.conf back in the first directory: its share applies again (%s)" % tenants().get("x", {}).get("share"))
checks.expect(wait_for(lambda: len(clash_lines(x_second, x_first)) == 3) and connected(x_client),
              "the second directory's file is logged as ignored again; the client stays connected")
# Gone from both: the tenant goes.
os.unlink(x_second)
os.unlink(x_first)
checks.expect(wait_for(lambda: "x" not in tenants() and not os.path.exists(server.socket("x"))),
              "x.conf gone from both directories: the tenant and its socket go")
checks.expect(not connected(x_client), "and its client is disconnected")
server.stop()
ok = server.proc.returncode == 0 and "ERROR: AddressSanitizer" not in server.log()
checks.expect(ok, "the server stops cleanly (%s)" % server.proc.returncode)

# ---- at start ---------------------------------------------------------------------------------------------
missing = os.path.join(machine.dir, "nowhere.d")
run = subprocess.run([SERVER, "--config-dir", first, "--config-dir", missing, "--run-dir",
                      os.path.join(machine.dir, "run-missing"), "--cdi-dir", "", "--metrics", ""],
                     capture_output=True, text=True, timeout=10)
checks.expect(run.returncode == 2 and "cannot read the configuration directory %s" % missing in run.stderr,
              "a second directory that does not exist: exit 2, naming it (%d, %s)"
              % (run.returncode, run.stderr.strip()[-300:]))
nine = []
for i in range(9):
    nine += ["--config-dir", first]
run = subprocess.run([SERVER] + nine + ["--run-dir", os.path.join(machine.dir, "run-nine"), "--cdi-dir", "",
                                        "--metrics", ""], capture_output=True, text=True, timeout=10)
checks.expect(run.returncode == 1 and "at most 8" in run.stderr,
              "--config-dir given 9 times is a usage error (%d, %s)" % (run.returncode, run.stderr.strip()))
run = subprocess.run([SERVER, "--config-dir", first, "--config-dir", second, "--config-dir", first,
                      "--run-dir", os.path.join(machine.dir, "run-twice"), "--cdi-dir", "", "--metrics", ""],
                     capture_output=True, text=True, timeout=10)
checks.expect(run.returncode == 1 and "--config-dir %s is given twice" % first in run.stderr,
              "the same directory given twice is a usage error (%d, %s)" % (run.returncode, run.stderr.strip()))

machine2 = Machine()
empty_a, empty_b = os.path.join(machine2.dir, "empty-a"), os.path.join(machine2.dir, "empty-b")
os.makedirs(empty_a)
os.makedirs(empty_b)
s2 = Server(machine2, {}, conf=empty_a, args=["--config-dir", empty_b])
checks.expect("no tenant: none of %s, %s has a valid tenant file" % (empty_a, empty_b) in s2.log(),
              "no valid tenant file in either directory: warned, naming both")
write(empty_b, "late", "share = 1\n")
checks.expect(wait_for(lambda: os.path.exists(s2.socket("late"))),
              "a file in the second directory alone is enough: its socket appears")
s2.stop()
checks.finish()
