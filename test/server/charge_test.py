"""A slice is charged from when the server granted it until its holder
released it, less what the holder left idle: the time either side takes to
wake and read the other's message is not the tenant's device time. In 1
and 3 one end is stopped (SIGSTOP) while a message waits for it, so that
the wake-up the test stands for is 300 ms long and cannot be mistaken for
noise:

1. The server is stopped while a holder's RELEASE waits in its socket: the
   slice is charged until the RELEASE was sent, not until it was read
   (gpu_ms in the status).
2. A tenant with a limit L that used b of a slice is next due b / L after
   that slice was due, not after it was granted: the server's own lateness
   (its timer, its loop) is not taken from the tenant's limit. A client
   holds 120 slices for about 4 ms each at limit 0.5: with the rule, a
   grant comes sooner than b / L after the last one whenever the server
   was later with the last than with this one (about 40 % of them on a
   quiet or a loaded machine); before it, never.
3. A process of the tenant (the shim in spin, against a stand-in server)
   is stopped while its GRANT waits in its socket: the RELEASE it sends at
   the end of the slice counts the slice idle from when the GRANT was
   sent, not from when the process read it (its idle field).
4. The idle a RELEASE reports is not charged, up to 1/32 of the slice
   (the most the server refunds for what it cannot see): a slice held
   60 ms and released with 1 ms idle is charged 59 ms, one released with
   40 ms idle about 58 ms (gpu_ms), to the bounds of the send call."""
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import gsproto as gp
from testlib import BUILD, SPIN, Checks, LoadWatch, Machine, Server, wait_for

STOP_S = 0.3
checks = Checks()
machine = Machine()


def lone_client(tenant, conf, uuid_index):
    """A server with one tenant, and a client of it that declared a GPU."""
    server = Server(machine, {tenant: conf})
    wait_for(lambda: os.path.exists(server.socket(tenant)), 5.0)
    client = gp.Client(server.socket(tenant))
    client.device(0, gp.uuid_bytes(uuid_index))
    return server, client


def charged_ms(server, tenant):
    """The device time the server charged the tenant on its GPU."""
    return [t for t in server.status()["tenants"] if t["name"] == tenant][0]["devices"][0]["gpu_ms"]


# ---- 1. the server reads a RELEASE late ------------------------------------
# A long quantum: the deadline is not reached while the server is stopped,
# so the RELEASE is the first thing it sees again.
server, client = lone_client("t", "quantum_ms = 1000\n", 1)
client.acquire(0)
grant = client.expect(gp.GRANT, 5.0)
checks.expect(grant is not None, "the lone tenant is granted its GPU")
if grant:
    watch = LoadWatch()
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        client.release(0, grant["grant"])
        time.sleep(STOP_S)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    time.sleep(0.2)
    gpu_ms = charged_ms(server, "t")
    checks.expect(gpu_ms < 100, "a slice released at once and read %.0f ms later by a stopped server is charged "
                  "%.1f ms: until it was released, not until the server read it (%s)" % (STOP_S * 1000, gpu_ms, watch))
client.close()
server.stop()

# ---- 2. a limit's windows follow each other -------------------------------
# The client holds each slice for about 4 ms, sleeping (a spinning client
# would take a CPU from the server it times). b, each slice's use, runs from
# the grant (its deadline less the quantum) to when the RELEASE was queued,
# which the server reads from the socket (SO_TIMESTAMPNS): somewhere in the
# send call, placed by the total the server charged. The slice after it is
# granted E = start' - start - b / L later than b / L after this one began:
#   - windows that follow each other: E = lateness' - lateness, where
#     lateness is how long after it was due a grant came (the server's
#     timer, its loop); as often below 0 as above it;
#   - windows from the grant (before this rule, and by design after a grant
#     more than 1 ms late): E = lateness' >= 0, never below.
# So a fair part of the E below 0 shows the rule, however late the server
# wakes on a busy machine; the median is printed, not judged.
QUANTUM_MS, HOLD_NS, LIMIT, SLICES = 20, 4_000_000, 0.5, 121
server, client = lone_client("c", "limit = %g\nquantum_ms = %d\n" % (LIMIT, QUANTUM_MS), 2)
client.acquire(0)
watch = LoadWatch()
starts, sends = [], []
for i in range(SLICES):
    g = client.expect(gp.GRANT, 5.0)
    if g is None:
        break
    start = g["deadline"] - QUANTUM_MS * 1_000_000  # when the server granted it
    starts.append(start)
    release = gp.encode(gp.RELEASE, struct.pack("<IQQI", 0, g["grant"], 0, gp.RELEASE_MORE if i < SLICES - 1 else 0))
    pause = start + HOLD_NS - time.monotonic_ns()
    if pause > 0:
        time.sleep(pause / 1e9)
    before = time.monotonic_ns()
    client.sock.send(release)
    sends.append((before, time.monotonic_ns()))
time.sleep(0.1)
charged = charged_ms(server, "c")
client.close()
server.stop()
checks.expect(len(starts) == SLICES, "the capped client got its %d slices (%d)" % (SLICES, len(starts)))
if len(starts) == SLICES:
    # Where in its send call each RELEASE was queued: the same fraction of
    # each call, such that the slices add up to what the server charged.
    calls = sum(a - b for b, a in sends) or 1
    f = min(1.0, max(0.0, (charged * 1e6 - sum(b - s for s, (b, _) in zip(starts, sends))) / calls))
    used = [b + f * (a - b) - s for s, (b, a) in zip(starts, sends)]
    # Pairs whose send call took over 50 us (preempted in it) are left
    # out: their b is not known to better than E's spread.
    excess = sorted(starts[i + 1] - starts[i] - used[i] / LIMIT for i in range(SLICES - 1)
                    if sends[i][1] - sends[i][0] <= 50_000)
    n = len(excess)
    below = sum(e < 0 for e in excess)
    checks.expect(n >= SLICES // 2 and below >= 0.2 * n,
                  "each slice is due b / L after the last one was due, not after it was granted: %d of %d grants "
                  "came sooner than b / L after the last grant (>= 20 %%; none would); median difference %.1f us "
                  "(p10 %.1f, p90 %.1f us); %s"
                  % (below, n, excess[n // 2] / 1000 if n else 0, excess[n // 10] / 1000 if n else 0,
                     excess[9 * n // 10] / 1000 if n else 0, watch))

# ---- 3. the shim reads a GRANT late ----------------------------------------
# A stand-in server: grants the first ACQUIRE to a stopped process, with a
# deadline 0.5 s after the process is let go, and records its RELEASE; later
# requests get slices of 100 ms, until the program ends.
path = os.path.join(tempfile.mkdtemp(prefix="gpuslice-charge-"), "gpuslice.sock")
released = {}
stop = threading.Event()


def stand_in_server(listener, pid_box):
    granted = 0
    for conn, mtype, body in gp.stand_in_messages(listener, stop):
        if mtype == gp.ACQUIRE and not granted:
            granted = 1
            pid = pid_box[0]
            os.kill(pid, signal.SIGSTOP)
            sent = time.monotonic_ns()
            deadline = sent + int(STOP_S * 1e9) + 500_000_000
            conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", 0, 1, deadline, 0, 0)))
            time.sleep(STOP_S)
            os.kill(pid, signal.SIGCONT)
        elif mtype == gp.RELEASE and "idle_ns" not in released:
            slot, grant_id, idle_ns, flags = struct.unpack("<IQQI", body)
            released.update(grant=grant_id, idle_ns=idle_ns)
        if granted and (mtype == gp.ACQUIRE or (mtype == gp.RELEASE and struct.unpack("<IQQI", body)[3] & gp.RELEASE_MORE)) \
                and "idle_ns" in released:
            granted += 1
            conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", 0, granted, time.monotonic_ns() + 100_000_000, 0, 0)))


env = dict(machine.env)
env.update({"LD_PRELOAD": os.path.join(BUILD, "shim", "libgpuslice.so"), "GPUSLICE_SOCKET": path})
pid_box = [0]
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(path)
listener.listen(1)
thread = threading.Thread(target=stand_in_server, args=(listener, pid_box), daemon=True)
proc = subprocess.Popen([SPIN, "--seconds", "1.5", "--kernel-us", "500"], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
pid_box[0] = proc.pid
watch = LoadWatch()
thread.start()
try:
    out, err = proc.communicate(timeout=30)
except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
finally:
    stop.set()
thread.join(5)
idle_ms = released.get("idle_ns", 0) / 1e6
checks.expect(released.get("grant") == 1, "the process released its slice (%s; spin: %s)" % (released, err[-300:]))
checks.expect(idle_ms >= STOP_S * 1000 * 0.9, "a GRANT read %.0f ms late by a stopped process: the RELEASE counts "
              "the slice idle for %.1f ms, from when the GRANT was sent" % (STOP_S * 1000, idle_ms))
checks.expect(idle_ms < STOP_S * 1000 + 200, "and not much more (%.1f ms): the work after it was not idle (%s)"
              % (idle_ms, watch))

# ---- 4. what the holder left idle is not charged, up to a bound -----------
# The server cannot see idle time, so it refunds at most IDLE_REFUND_MAX
# (1/32) of the slice (tokenserver/sched.c): a small idle claim is refunded
# whole, a large one only to the bound.
REFUND_MAX = 1 / 32
server, client = lone_client("i", "quantum_ms = 1000\n", 3)
for idle_ns in (1_000_000, 40_000_000):
    client.acquire(0)
    grant = client.expect(gp.GRANT, 5.0)
    checks.expect(grant is not None, "the lone tenant is granted its GPU")
    if not grant:
        break
    charged_before = charged_ms(server, "i")
    start = grant["deadline"] - 1_000_000_000
    time.sleep(0.06)
    before = time.monotonic_ns()
    client.sock.send(gp.encode(gp.RELEASE, struct.pack("<IQQI", 0, grant["grant"], idle_ns, 0)))
    after = time.monotonic_ns()
    time.sleep(0.2)
    gpu_ms = charged_ms(server, "i") - charged_before

    def charge(held_ns):
        return (held_ns - min(idle_ns, held_ns * REFUND_MAX)) / 1e6

    low, high = charge(before - start) - 0.2, charge(after - start) + 0.2  # gpu_ms has 0.1 ms
    checks.expect(low <= gpu_ms <= high, "a slice held %.1f ms and released with %.0f ms idle is charged %.1f ms: "
                  "the slice less its idle, refunded up to 1/32 of the slice (%.1f to %.1f)"
                  % ((before - start) / 1e6, idle_ns / 1e6, gpu_ms, low, high))
client.close()
server.stop()

checks.finish()
