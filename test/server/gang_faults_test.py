"""Gangs whose processes change, exit or misbehave never keep a GPU from
the other tenants (protocol clients, no GPU work):

1. A rank exits while its gang gathers its GPUs: the tenant is no longer a
   gang, and the GPU reserved for it goes to its remaining process or to
   another tenant (before: it stayed reserved for good).
2. A gang declares one more GPU while it gathers and never asks for it:
   it gathers afresh, and the other tenant still gets its GPU.
3. A gang's process releases one of its two GPUs, then exits: both GPUs of
   the slice end, and a tenant waiting for the first is granted (before:
   it stayed "running" for nobody, with no timer, and was never freed, so
   a tenant could fill the server's table of GPUs this way).
4. A gang that keeps trading catch-up grants between its two GPUs (a
   RELEASE with MORE on one each time the other is granted) loses them at
   its deadline plus the grace period, once (before: never).
5. A holder's RELEASE of a wrong grant id, with MORE, is answered by the
   slice's extension: after it releases, it is not granted an empty slice
   while another tenant waits (before: the other tenant waited for it).
6. The same on a gang's GPU: no second join is counted for a process that
   holds the slice, so its releases end it (before: it ran to its deadline
   plus the grace period).
7. A gang of two processes, one GPU each: one exits while the other works
   on. The tenant is no longer a gang, and the GPU nobody holds goes to the
   tenant waiting for it (before: it stayed the gang's while the other
   GPU's slice was extended)."""
import struct
import time

import gsproto as gp
from testlib import Checks, LoadWatch, Machine, Server, wait_for

checks = Checks()
machine = Machine()
QUANTUM = "quantum_ms = 20\n"


def devices(server):
    return {d["uuid"]: d for d in server.status()["devices"]}


def grants(client, want, timeout):
    """Reads messages for up to timeout s; {slot: grant id} of the GRANTs,
    stopping once `want` slots are granted."""
    held = {}
    end = time.monotonic() + timeout
    try:
        while len(held) < want and time.monotonic() < end:
            m = client.recv(max(0.01, end - time.monotonic()))
            if m and m[0] == gp.GRANT:
                held[m[1]["slot"]] = m[1]["grant"]
            elif m and m[0] == gp.ERROR:
                print("server: %s" % m[1]["reason"])
    except gp.Closed:
        pass
    return held


def process(server, tenant, gpus, ask=()):
    """A client of tenant that declared gpus (slot i: gpus[i]) and asked
    for the slots in ask."""
    client = gp.Client(server.socket(tenant))
    for slot, uuid in enumerate(gpus):
        client.device(slot, uuid)
    for slot in ask:
        client.acquire(slot)
    return client


def ms_to_grant(client, slot=0):
    """ACQUIRE on slot and wait for the GRANT: (granted, milliseconds);
    the machine's load meanwhile in `load`."""
    global load
    load = LoadWatch()
    asked = time.monotonic()
    client.acquire(slot)
    granted = bool(grants(client, 1, 2.0))
    load.stop()
    return granted, (time.monotonic() - asked) * 1000


X, Y, W = gp.uuid_bytes(1), gp.uuid_bytes(2), gp.uuid_bytes(3)

# ---- 1. a rank exits while its gang gathers ----------------------------------
server = Server(machine, {"victim": QUANTUM, "other": QUANTUM, "team": QUANTUM})
victim = process(server, "victim", [Y], ask=[0])
held_y = grants(victim, 1, 2.0)
rank2 = process(server, "team", [X])
rank1 = process(server, "team", [X, Y])  # team uses two GPUs: a gang
time.sleep(0.05)
rank2.acquire(0)            # it gathers: X reserved for it, Y busy
time.sleep(0.05)
rank1.close()               # a rank exits: team uses X alone now
time.sleep(0.05)
if held_y:
    victim.release(0, held_y[0])
checks.expect(bool(grants(rank2, 1, 3.0)), "1: a gang whose rank exited while it gathered: its remaining process "
              "is granted X")
other = process(server, "other", [X], ask=[0])
checks.expect(bool(grants(other, 1, 3.0)), "1: and another tenant gets X after it")
server.stop()

# ---- 2. a GPU declared while the gang gathers, never asked for ---------------
server = Server(machine, {"victim": QUANTUM, "evil": QUANTUM})
victim = process(server, "victim", [X], ask=[0])
held_x = grants(victim, 1, 2.0)
evil = process(server, "evil", [X, Y], ask=[0, 1])  # it gathers: Y reserved, X busy
time.sleep(0.05)
evil.device(2, W)           # one more GPU, never asked for
time.sleep(0.05)
if held_x:
    victim.release(0, held_x[0])
time.sleep(0.1)
victim.acquire(0)
checks.expect(bool(grants(victim, 1, 3.0)), "2: a gang that declared a GPU while it gathered does not keep X from "
              "the other tenant")
server.stop()

# ---- 3. a gang's process releases one GPU, then exits ------------------------
server = Server(machine, {"victim": QUANTUM, "b": QUANTUM}, args=["--max-devices", "4", "--device-linger-ms", "100"])
victim = gp.Client(server.socket("victim"))
b = process(server, "b", [Y, X], ask=[0, 1])
held = grants(b, 2, 2.0)
checks.expect(len(held) == 2, "3: the gang holds Y and X (%s)" % held)
victim.device(0, Y)
victim.acquire(0)
if 0 in held:
    b.release(0, held[0])
time.sleep(0.05)            # Y's deadline passes while X is held
b.close()
checks.expect(bool(grants(victim, 1, 3.0)), "3: the tenant waiting for Y is granted after the gang's process exited")
victim.close()
for r in range(3):          # the same, with fresh GPUs and nobody waiting
    u, v = gp.uuid_bytes(100 + 2 * r), gp.uuid_bytes(101 + 2 * r)
    b = process(server, "b", [u, v], ask=[0, 1])
    held = grants(b, 2, 2.0)
    if 0 in held:
        b.release(0, held[0])
    time.sleep(0.01)
    b.close()
    time.sleep(0.05)
checks.expect(wait_for(lambda: all(d["state"] == "idle" for d in devices(server).values()), 3.0),
              "3: no GPU is left running for a gone gang (%s)"
              % [(d["state"], d["holder"]) for d in devices(server).values()])
late = process(server, "victim", [gp.uuid_bytes(7), gp.uuid_bytes(8)])
try:
    answer = late.recv(1.0)
except gp.Closed:
    answer = "closed"

checks.expect(answer is None or answer[0] != gp.ERROR, "3: and GPUs can still be declared (--max-devices 4): %s"
              % (answer,))
server.stop()

# ---- 4. catch-up grants traded between two GPUs ------------------------------
GRACE_MS = 250
server = Server(machine, {"victim": QUANTUM, "evil": QUANTUM}, grace_ms=GRACE_MS)
evil = process(server, "evil", [X, Y], ask=[0, 1])
victim = gp.Client(server.socket("victim"))
held = grants(evil, 2, 2.0)
victim.device(0, X)
victim.acquire(0)
load = LoadWatch()
start = time.monotonic()
if 0 in held:
    evil.release(0, held.pop(0), more=True)
victim_after = None
traded = 0
while time.monotonic() - start < 3.0 and victim_after is None:
    m = evil.recv(0.02)
    if m and m[0] == gp.GRANT:
        slot = m[1]["slot"]
        held[slot] = m[1]["grant"]
        traded += 1
        if 1 - slot in held:
            evil.release(1 - slot, held.pop(1 - slot), more=True)
    r = victim.recv(0)
    if r and r[0] == gp.GRANT:
        victim_after = time.monotonic() - start
load.stop()
checks.expect(victim_after is not None and victim_after < (20 + GRACE_MS) / 1000 + 0.5,
              "4: a gang trading catch-up grants loses the GPU the victim waits for after %s s (%d grants traded; "
              "its deadline + grace: %.2f s; %s)" % ("%.2f" % victim_after if victim_after is not None else "> 3",
                                                       traded, (20 + GRACE_MS) / 1000, load))
server.stop()

# ---- 5. a RELEASE of a wrong grant id, with MORE -----------------------------
server = Server(machine, {"a": "quantum_ms = 200\n", "v": QUANTUM})
a = process(server, "a", [X], ask=[0])
v = process(server, "v", [X])
g = grants(a, 1, 1.0).get(0)
if g:
    a.send(gp.RELEASE, struct.pack("<IQQI", 0, g + 7, 0, gp.RELEASE_MORE))
    time.sleep(0.3)         # extended: nobody else waits
    a.release(0, g)
time.sleep(0.05)
granted, waited_ms = ms_to_grant(v)
checks.expect(granted and waited_ms < 50, "5: after a stale RELEASE with MORE and its real release, the holder "
              "gets no empty slice (200 ms): another tenant is granted the idle GPU in %.0f ms (%s)" % (waited_ms, load))
server.stop()

# ---- 6. the same on a gang's GPU ----------------------------------------------
server = Server(machine, {"g": "quantum_ms = 200\n", "v": QUANTUM}, grace_ms=250)
gang = process(server, "g", [X, Y], ask=[0, 1])
v = process(server, "v", [X])
held = grants(gang, 2, 2.0)
if len(held) == 2:
    gang.send(gp.RELEASE, struct.pack("<IQQI", 0, held[0] + 7, 0, gp.RELEASE_MORE))
    time.sleep(0.05)
    gang.release(0, held[0])
    gang.release(1, held[1])
time.sleep(0.05)
granted, waited_ms = ms_to_grant(v)
checks.expect(granted and waited_ms < 50, "6: a gang that sent a stale RELEASE with MORE and then released both GPUs "
              "holds neither: another tenant is granted X in %.0f ms (its slice ran to 200 ms + grace before; %s)"
              % (waited_ms, load))
server.stop()

# ---- 7. a rank of a gang exits while its peer works on -------------------------
# Slices of 200 ms: the rank exits well before its deadline.
server = Server(machine, {"team": "quantum_ms = 200\n", "victim": QUANTUM})
rank1 = process(server, "team", [X])
rank2 = process(server, "team", [Y])  # two processes, one GPU each: a gang
time.sleep(0.05)
rank1.acquire(0)
rank2.acquire(0)
got1, got2 = grants(rank1, 1, 2.0), grants(rank2, 1, 2.0)
checks.expect(bool(got1) and bool(got2), "7: the gang of two processes holds X and Y")
victim = process(server, "victim", [Y], ask=[0])
time.sleep(0.01)
exited = time.monotonic()
rank2.close()               # the rank on Y exits; the one on X keeps its slice
granted = bool(grants(victim, 1, 2.0))
waited_ms = (time.monotonic() - exited) * 1000
checks.expect(granted, "7: the tenant waiting for Y is granted once the gang's rank there exited, while the other "
              "rank holds X (after %.0f ms)" % waited_ms)
server.stop()
checks.finish()
