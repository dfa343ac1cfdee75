"""Deadlines hold across time namespaces (time_namespaces(7)): a process in
a namespace whose CLOCK_MONOTONIC is shifted (`unshare --time`, a container
restored by CRIU) reads the server's deadlines on its own clock. The wire
carries them on the initial namespace's clock and each side converts
(include/gpuslice/transport.h).

1. A server in a namespace 100 000 s ahead grants a slice whose deadline,
   on the wire, is its quantum after now on this (the initial) clock.
2. A tenant's process (spin, deep queue) in a namespace 100 000 s ahead,
   and in one behind, against a stand-in server that grants a slice ending
   300 ms later on the wire's clock: the process releases it at that
   deadline, not at once (it would think the deadline long past) and not
   never (it would think it far off).

Needs unshare(1) with --time and the right to create time namespaces
(root); skipped (77) otherwise."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import gsproto as gp
from testlib import BUILD, SPIN, Checks, LoadWatch, Machine, Server, wait_for

AHEAD_S = 100000
QUANTUM_MS = 200


def own_offset_ns():
    """This process's CLOCK_MONOTONIC minus the initial namespace's."""
    try:
        with open("/proc/self/timens_offsets") as f:
            for line in f:
                name, sec, nsec = line.split()
                if name == "monotonic":
                    return int(sec) * 1_000_000_000 + int(nsec)
    except FileNotFoundError:
        pass
    return 0


def wire_now_ns():
    return time.monotonic_ns() - own_offset_ns()


def in_namespace(offset_s):
    """argv prefix that runs a command in a new time namespace."""
    return ["unshare", "--time", "--monotonic=%d" % offset_s]


probe = subprocess.run(in_namespace(1) + ["true"], capture_output=True, text=True)
if probe.returncode != 0:
    print("SKIP: cannot create a time namespace here: %s" % probe.stderr.strip())
    sys.exit(77)

checks = Checks()
machine = Machine()

# ---- 1. the server in a shifted namespace -----------------------------------
server = Server(machine, {"t": "quantum_ms = %d\n" % QUANTUM_MS}, wrapper=in_namespace(AHEAD_S))
wait_for(lambda: os.path.exists(server.socket("t")), 5.0)
client = gp.Client(server.socket("t"))
client.device(0, gp.uuid_bytes(1))
asked = wire_now_ns()
client.acquire(0)
grant = client.expect(gp.GRANT, 5.0)
checks.expect(grant is not None, "the tenant is granted its GPU by a server in a time namespace")
if grant:
    left_ms = (grant["deadline"] - asked) / 1e6
    checks.expect(0 < left_ms <= QUANTUM_MS + 100,
                  "the deadline on the wire is %.1f ms after the request on the initial namespace's clock "
                  "(quantum %d ms; the server's own clock is %d s ahead)" % (left_ms, QUANTUM_MS, AHEAD_S))
checks.expect("deadlines are converted" in server.log(), "the server logs that it converts deadlines")
client.close()
server.stop()


# ---- 2. a tenant's process in a shifted namespace ---------------------------
def held_in_namespace(offset_s):
    """Runs spin in a namespace offset_s off against a stand-in server; how
    long after the first grant (300 ms) its RELEASE came (None: none while
    spin ran), and spin's stderr."""
    tmp = tempfile.mkdtemp(prefix="gpuslice-timens-")
    path = os.path.join(tmp, "gpuslice.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(1)
    result = {}
    stop = threading.Event()

    def stand_in():
        """Grants the first ACQUIRE a slice of 300 ms and records its
        RELEASE; later requests get slices of 100 ms, until spin ends."""
        granted = 0
        for conn, mtype, body in gp.stand_in_messages(listener, stop):
            more = mtype == gp.RELEASE and struct.unpack("<IQQI", body)[3] & gp.RELEASE_MORE
            if mtype == gp.RELEASE and granted == 1 and "released_ms" not in result:
                result["released_ms"] = (time.monotonic_ns() - result["granted"]) / 1e6
            if (mtype == gp.ACQUIRE or more) and granted == 0:
                granted = 1
                result["granted"] = time.monotonic_ns()
                conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", 0, 1, wire_now_ns() + 300_000_000, 0, 0)))
            elif (mtype == gp.ACQUIRE or more) and "released_ms" in result:
                granted += 1
                conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", 0, granted, wire_now_ns() + 100_000_000, 0, 0)))

    thread = threading.Thread(target=stand_in, daemon=True)
    thread.start()
    env = dict(machine.env)
    # A state of its own, made in the namespace: fakecuda keeps its
    # device's times on the clock of the process that made the state.
    env.update({"LD_PRELOAD": os.path.join(BUILD, "shim", "libgpuslice.so"), "GPUSLICE_SOCKET": path,
                "FAKECUDA_STATE": os.path.join(tmp, "fakecuda.state"), "GPUSLICE_LOG": "info"})
    proc = subprocess.Popen(in_namespace(offset_s) + [SPIN, "--seconds", "2", "--kernel-us", "1000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    finally:
        stop.set()
    thread.join(10)
    listener.close()
    return result.get("released_ms"), err


behind_s = -min(1000, int(wire_now_ns() / 2e9))
for offset_s in (AHEAD_S, behind_s):
    watch = LoadWatch()
    held_ms, err = held_in_namespace(offset_s)
    watch.stop()
    checks.expect(held_ms is not None and 250 <= held_ms <= 700,
                  "a process whose clock is %+d s off releases a slice of 300 ms after %s (%s; spin: %s)"
                  % (offset_s, "%.0f ms" % held_ms if held_ms is not None else "never, while it ran", watch,
                     err[-300:]))
    checks.expect("deadlines are converted" in err, "the shim logs that it converts deadlines (clock %+d s)" % offset_s)
checks.finish()
