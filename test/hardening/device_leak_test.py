"""A tenant declares thousands of made-up GPU UUIDs. Each known GPU costs
the server memory and a timer descriptor, so what declarations can make is
bounded (per tenant and in all) and a GPU nobody declares any more is freed:
after the attacker, the server is not at its descriptor limit, other
tenants' GPUs are accepted and granted, and the status is whole."""
import json
import os

import gsproto
from testlib import Checks, Machine, Server, wait_for

checks = Checks()
machine = Machine()


def open_fds(server):
    return len(os.listdir("/proc/%d/fd" % server.proc.pid))


def status(server):
    rc, out, _ = server.status_text()
    try:
        return json.loads(out) if rc == 0 else None
    except ValueError:
        return None


def good_is_granted(server, uuid):
    try:
        good = gsproto.Client(server.socket("good"))
        good.device(0, uuid)
        took = good.grant_latency(0, timeout=2.0)
        good.close()
        return took is not None
    except (OSError, gsproto.Closed):
        return False


server = Server(machine, {"evil": "share = 1\n", "good": "share = 1\n"}, nofile=1024)
baseline = open_fds(server)

# One connection, 2000 UUIDs, its 16 slots declared again and again.
evil = gsproto.Client(server.socket("evil"))
try:
    for i in range(2000):
        evil.device(i % 16, gsproto.uuid_bytes(100000 + i))
    evil.query(0, 1)
    alive = evil.expect(gsproto.MEM_RESULT, 5.0) is not None
except (OSError, gsproto.Closed):
    alive = False
evil.close()
checks.expect(alive, "re-declaring its slots is allowed: the connection stays")
fds = open_fds(server)
checks.expect(fds < baseline + 300, "after 2000 UUIDs the server holds %d descriptors (%d before): bounded"
              % (fds, baseline))
checks.expect(good_is_granted(server, gsproto.uuid_bytes(1)), "another tenant's GPU is accepted and granted")
st = status(server)
checks.expect(st is not None and len(st["devices"]) <= 257, "the status is whole JSON and lists at most the "
              "device limit (%s devices)" % (len(st["devices"]) if st else "no status"))

# Many connections, 16 UUIDs each, all held at once: the per-tenant limit.
conns = []
for c in range(20):
    try:
        conn = gsproto.Client(server.socket("evil"))
    except (OSError, gsproto.Closed):
        continue
    conns.append(conn)
    try:
        for slot in range(16):
            conn.device(slot, gsproto.uuid_bytes(200000 + 16 * c + slot))
    except OSError:
        pass  # dropped: its ERROR is read below
reasons = []
for conn in conns:
    try:
        m = conn.recv(0.5)
        if m and m[0] == gsproto.ERROR:
            reasons.append(m[1]["reason"])
    except (OSError, gsproto.Closed):
        pass
checks.expect(any("declared more GPUs than tenant evil may (64)" in r for r in reasons),
              "declaring more GPUs at once than the per-tenant limit gets a process dropped, with the reason (%s)"
              % (reasons[:1] or "none"))
st = status(server)
referenced = sum(1 for d in st["devices"] if d["processes"] > 0) if st else -1
checks.expect(0 < referenced <= 64, "the tenant's processes hold at most 64 GPUs at once (%d)" % referenced)
checks.expect(good_is_granted(server, gsproto.uuid_bytes(2)), "another tenant still gets a new GPU and its grants")
for conn in conns:
    conn.close()
server.stop()

# GPUs nobody declares any more are freed after the linger time.
server = Server(machine, {"evil": "share = 1\n", "good": "share = 1\n"}, nofile=1024,
                args=["--device-linger-ms", "200"])
evil = gsproto.Client(server.socket("evil"))
for i in range(500):
    evil.device(i % 16, gsproto.uuid_bytes(300000 + i))
evil.close()
good = gsproto.Client(server.socket("good"))
good.device(0, gsproto.uuid_bytes(3))
checks.expect(wait_for(lambda: (status(server) or {}).get("devices", [None, None])
                       and len(status(server)["devices"]) == 1, 3.0),
              "once the attacker is gone its GPUs are freed: only the GPU in use is left (%s)"
              % len((status(server) or {}).get("devices", [])))
good.close()
server.stop()
checks.finish()
