"""A GRANT the server sends a holder on its own initiative, for a new bound
on work ahead (a notice), never counts toward the buffer a client that
does not read is dropped for (--client-buffer): it goes out only while
the holder's socket is writable, and otherwise the latest waits for room.

A batch tenant's client holds the GPU (a quantum of 1 s, extended: nobody
else asks) and reads nothing for 4 s, while a latency tenant names the
GPU for 3 ms and leaves it for 0.1 ms, over and over: each time the bound
tightens and lifts, about 600 notices a second. Before notices waited for
room, each went out at once, the holder's buffer filled within a second
and the server dropped it as "does not read its messages". Checked: the
holder is not dropped, what it then reads is GRANTs of its slice (and no
ERROR), and once it reads, the latest bound reaches it (the latency
tenant names the GPU for good: 2 ms)."""
import time

import gsproto
from testlib import Checks, Machine, Server

checks = Checks()
machine = Machine()
server = Server(machine, {"batch": "share = 1\nquantum_ms = 1000\n", "lat": "share = 1\nclass = latency\n"})
gpu, other = gsproto.uuid_bytes(1), gsproto.uuid_bytes(2)

holder = gsproto.Client(server.socket("batch"))
holder.device(0, gpu)
holder.acquire(0)
first = holder.expect(gsproto.GRANT, 5.0)
checks.expect(first is not None and first["ahead_ns"] == 0, "the batch client holds the GPU, unbounded (%s)" % first)

lat = gsproto.Client(server.socket("lat"))
flips = 0
end = time.monotonic() + 4.0
while time.monotonic() < end:
    lat.device(0, gpu)
    time.sleep(0.003)
    lat.device(0, other)
    time.sleep(0.0001)
    flips += 1
lat.device(0, gpu)  # named for good

grants, bounds, other_types, closed = 0, [], [], None
deadline = time.monotonic() + 3.0
while time.monotonic() < deadline:
    try:
        m = holder.recv(0.5)
    except gsproto.Closed as e:
        closed = str(e)
        break
    if m is None:
        if bounds and bounds[-1] == 2000000:
            break
        continue
    if m[0] == gsproto.GRANT:
        grants += 1
        bounds.append(m[1]["ahead_ns"])
    else:
        other_types.append((m[0], m[1]))
dropped = server.log().count("does not read its messages")
checks.expect(closed is None and dropped == 0 and not other_types,
              "the holder that read nothing for 4 s while the bound changed %d times is not dropped (%s; %d such "
              "log lines; other messages: %s)" % (2 * flips, closed or "open", dropped, other_types[:2]))
checks.expect(grants >= 2 and bounds and bounds[-1] == 2000000,
              "once it reads: %d GRANTs of its slice, the last bounding it to 2 ms ahead (%s)"
              % (grants, bounds[-3:]))
holder.close()
lat.close()
server.stop()
checks.finish()
