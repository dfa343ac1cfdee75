"""A hostile tenant races the server for its socket's path. Inside its own
directory (mounted into its containers) it keeps renaming a symlink to a
root-owned 0600 file outside the run directory over gpuslice.sock, for more
than 10 s, while its tenant is removed and re-added and the server restarts.
The server must never change that file (it makes sockets with their mode
from the start and never follows a path the tenant controls), and once the
attacker stops, every tenant has a working socket again."""
import os
import signal
import stat
import subprocess
import sys
import time

import gsproto
from testlib import Checks, Machine, Server, wait_for

ATTACK_S = 11.0
checks = Checks()
machine = Machine()
sentinel = os.path.join(machine.dir, "sentinel")
with open(sentinel, "w") as f:
    f.write("secret\n")
os.chmod(sentinel, 0o600)
before = os.stat(sentinel)

server = Server(machine, {"evil": "share = 1\n", "good": "share = 1\n"})
evil_dir = os.path.join(server.run_dir, "tenants", "evil")

# The attacker: its own process, swapping as fast as it can.
attacker = subprocess.Popen([sys.executable, "-c", """
import os, sys, time
d, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.monotonic() + seconds
tmp, sock = os.path.join(d, ".x"), os.path.join(d, "gpuslice.sock")
n = 0
while time.monotonic() < end:
    try:
        os.symlink(target, tmp)
        os.rename(tmp, sock)
        n += 1
    except OSError:
        pass
print(n)
""", evil_dir, sentinel, str(ATTACK_S)], stdout=subprocess.PIPE, text=True)

start = last_restart = time.monotonic()
recreations = restarts = 0
crashed = False
while time.monotonic() - start < ATTACK_S - 0.5:
    # Re-create the tenant: its socket is made again each time.
    os.unlink(os.path.join(server.conf, "evil.conf"))
    time.sleep(0.02)
    server.write_tenant("evil", "share = 1\n")
    time.sleep(0.03)
    recreations += 1
    if time.monotonic() - last_restart > 1.8:
        crashed |= server.proc.poll() is not None
        if restarts % 2:
            server.kill(signal.SIGKILL)
        else:
            server.stop()
        server.start()
        restarts += 1
        last_restart = time.monotonic()
swaps = int(attacker.communicate()[0].strip() or 0)
crashed |= server.proc.poll() is not None
print("attacker: %d swaps; %d re-creations, %d restarts" % (swaps, recreations, restarts))
checks.expect(swaps > 1000 and restarts >= 3, "the attack ran: %d symlink swaps over %.0f s, %d tenant re-creations, "
              "%d server restarts" % (swaps, ATTACK_S, recreations, restarts))

after = os.stat(sentinel)
checks.expect(stat.S_IMODE(after.st_mode) == 0o600 and after.st_uid == before.st_uid and after.st_gid == before.st_gid,
              "the file outside the run directory keeps mode 0600 and its owner (mode %o, uid %d)"
              % (stat.S_IMODE(after.st_mode), after.st_uid))
checks.expect(not crashed, "the server never crashed")
checks.expect(stat.S_ISDIR(os.lstat(evil_dir).st_mode), "the tenant's directory is still a directory")


def hello(tenant):
    try:
        return gsproto.Client(server.socket(tenant)).tenant
    except (OSError, gsproto.Closed):
        return None


# The attacker left a symlink where its socket was; the next re-creation
# (or the retry every second) makes the socket again.
server.write_tenant("evil", "share = 2\n")
os.unlink(os.path.join(server.conf, "evil.conf"))
time.sleep(0.1)
server.write_tenant("evil", "share = 1\n")
checks.expect(wait_for(lambda: hello("evil") == "evil", 3.0), "after the attack the tenant has a working socket again")
checks.expect(hello("good") == "good", "and so has the other tenant")
st = os.lstat(server.socket("evil"))
checks.expect(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666,
              "the socket is a socket of mode 0666 (%o)" % stat.S_IMODE(st.st_mode))
server.stop()
checks.finish()
