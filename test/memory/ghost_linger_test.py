"""A process whose connection closes while it lives on keeps its device
memory counted for its tenant (a ghost) until it exits. A GPU that no
process declares any more is forgotten after --device-linger-ms, with its
counts: it must not be while a ghost is counted on it, or the tenant's next
process is leased the memory the live one still holds, past the cap. Once
the process exits, its count goes and the GPU is forgotten.

The linger is judged by an event, not a clock: GPU Y, declared by a
connection that held no memory, is forgotten first; only then is X, where
the ghost is, looked at."""
import json
import os
import signal

import gsproto
from testlib import Checks, Machine, Server, wait_for

MIB = 1 << 20
checks = Checks()
machine = Machine()
server = Server(machine, {"t": "memory = 1G\n"}, args=["--device-linger-ms", "100"])
X, Y = gsproto.uuid_bytes(1), gsproto.uuid_bytes(2)


def status():
    rc, out, _ = server.status_text()
    try:
        return json.loads(out) if rc == 0 else None
    except ValueError:
        return None


def known(uuid):
    st = status()
    return st is not None and any(d["uuid"] == gsproto.uuid_str(uuid) for d in st["devices"])


def counted(uuid):
    """Tenant t's count on uuid; None if it has no entry there."""
    st = status() or {"tenants": []}
    for t in st["tenants"]:
        if t["name"] == "t":
            for d in t["devices"]:
                if d["uuid"] == gsproto.uuid_str(uuid):
                    return d["mem_used"]
    return None


# The holder: a child that leases 600 MiB on X, closes its connection and
# lives on (the memory would still be on the GPU) until it is killed.
ready_r, ready_w = os.pipe()
hold_r, hold_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(ready_r)
    os.close(hold_w)
    status_byte = b"0"
    try:
        c = gsproto.Client(server.socket("t"))
        c.device(0, X)
        answer = c.lease_granted(0, 1, 600 * MIB)
        if answer and answer["status"] == gsproto.LEASE_GRANTED:
            status_byte = b"1"
        c.close()
    except (OSError, gsproto.Closed):
        pass
    os.write(ready_w, status_byte)
    os.read(hold_r, 1)  # lives on until killed
    os._exit(0)
os.close(ready_w)
os.close(hold_r)
granted = os.read(ready_r, 1) == b"1"
checks.expect(granted, "the holder is leased 600 MiB on X")

# Y: declared by a connection that holds nothing, then closed.
y = gsproto.Client(server.socket("t"))
y.device(0, Y)
y.query(0, 1)
checks.expect(y.expect(gsproto.MEM_RESULT, 5.0) is not None, "Y is declared")
y.close()
checks.expect(wait_for(lambda: not known(Y), 15.0), "Y, which nobody declares or holds memory on, is forgotten "
              "after the linger")
checks.expect(known(X), "X, where the holder's 600 MiB is counted, is still known after Y's linger ended")
checks.expect(counted(X) == 600 * MIB, "the holder's 600 MiB is still counted on X (%s bytes)" % counted(X))

# Another process of the tenant: room for 424 MiB only.
q = gsproto.Client(server.socket("t"))
q.device(0, X)
answer = q.lease_granted(0, 2, 600 * MIB)
checks.expect(answer is not None and answer["status"] == gsproto.LEASE_REFUSED,
              "a second process's 600 MiB on X is refused: the cap counts the holder's (%s)"
              % (answer and answer["status"]))
q.close()

# The holder exits: its count goes (the server's check of ghosts, every
# second), then X is forgotten after the linger.
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
os.close(hold_w)
os.close(ready_r)
checks.expect(wait_for(lambda: not known(X), 15.0), "once the holder exited, X is forgotten (%s)"
              % ("still known, counting %s bytes" % counted(X) if known(X) else "gone"))
server.stop()
checks.finish()
