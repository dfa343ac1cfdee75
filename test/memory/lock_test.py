"""No allocation holds the launch gate's lock while it waits for the server:
launches on other threads go on. A stand-in server grants the slice in
20 ms pieces, extended every 10 ms, and answers memory requests 50 ms late
(a busy server); test/helpers/alloc_lock times each launch of one thread
while another allocates, frees and asks cuMemGetInfo in a loop, in phases
with and without that thread. A shim that held the lock across the wait
would stall launches for most of those 50 ms whenever the launching thread
needs the gate (every few ms, as the slice is extended)."""
import os
import select
import socket
import struct
import subprocess
import tempfile
import threading
import time

from testlib import BUILD, Checks, LoadWatch, Machine

import gsproto as gp

ANSWER_DELAY_NS = 50_000_000
checks = Checks()


def fake_server(path, stop):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(4)
    conn, holding, grant, last_extend, due = None, {}, 0, 0, []
    while not stop.is_set():
        fds = [listener] + ([conn] if conn else [])
        readable, _, _ = select.select(fds, [], [], 0.002)
        now = time.monotonic_ns()
        if listener in readable:
            conn, _ = listener.accept()
        if conn in readable:
            data = conn.recv(70000)
            if not data:
                conn, holding = None, {}
                continue
            mtype = struct.unpack_from("<H", data, 6)[0]
            body = data[16:]
            if mtype == gp.HELLO:
                conn.send(gp.encode(gp.WELCOME, b"t".ljust(64, b"\0")))
            elif mtype == gp.ACQUIRE or (mtype == gp.RELEASE and struct.unpack("<IQQI", body)[3] & 1):
                slot = struct.unpack_from("<I", body)[0]
                grant += 1
                holding[slot] = grant
                conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", slot, grant, now + 20_000_000, 0, 0)))
            elif mtype == gp.RELEASE:
                holding.pop(struct.unpack_from("<I", body)[0], None)
            elif mtype == gp.MEM_QUERY:
                _, mid = struct.unpack("<IQ", body)
                due.append((now + ANSWER_DELAY_NS, gp.encode(gp.MEM_RESULT, struct.pack("<QQQ", mid, 1 << 30, 0))))
            elif mtype == gp.MEM_LEASE:
                _, mid, need, want = struct.unpack("<IQQQ", body)
                due.append((now + ANSWER_DELAY_NS, gp.encode(gp.MEM_LEASED, struct.pack("<QIQQQ", mid, 1, want, 1 << 30, want))))
        if conn and now - last_extend >= 10_000_000:
            last_extend = now
            for slot, g in holding.items():
                conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", slot, g, now + 20_000_000, 0, 0)))
        for item in [d for d in due if d[0] <= now]:
            due.remove(item)
            if conn:
                conn.send(item[1])


machine = Machine(memory="4G")
path = os.path.join(tempfile.mkdtemp(prefix="gpuslice-lock-"), "gpuslice.sock")
stop = threading.Event()
server = threading.Thread(target=fake_server, args=(path, stop), daemon=True)
server.start()
time.sleep(0.1)
env = dict(machine.env)
env.update({"LD_PRELOAD": os.path.join(BUILD, "shim", "libgpuslice.so"), "GPUSLICE_SOCKET": path})
watch = LoadWatch()
out = subprocess.run([os.path.join(BUILD, "test", "helpers", "alloc_lock"), "400"], env=env, capture_output=True,
                     text=True, timeout=120)
watch.stop()
stop.set()
print(out.stdout, out.stderr[-500:])
fields = dict(kv.split("=") for kv in out.stdout.split()[1:]) if out.returncode == 0 else {}
checks.expect(out.returncode == 0 and int(fields.get("allocations", 0)) >= 8,
              "the allocating thread made its calls, each answered 50 ms late (%s)" % fields.get("allocations"))
alone, with_ = float(fields.get("max_alone_us", 0)), float(fields.get("max_with_us", 1e9))
checks.expect(with_ <= max(3 * alone, alone + 10000),
              "the longest launch while another thread waits for the server (%.0f us) is within noise of the "
              "longest without it (%.0f us); p99 %s vs %s us (%s)" % (with_, alone, fields.get("p99_with_us"),
                                                                       fields.get("p99_alone_us"), watch))
checks.finish()
