"""The gpuslice wire protocol (include/gpuslice/protocol.h) from Python, for
tests that play a client, a hostile one included: many connections, odd
UUIDs, a client that never reads. Message layouts are written out here on
purpose, independently of protocol.c."""
import os
import select
import socket
import struct
import time

MAGIC = 0x434C5347
VERSION = 2
HELLO, WELCOME, ERROR, DEVICE, ACQUIRE, GRANT, REVOKE, RELEASE = 1, 2, 3, 4, 5, 6, 7, 8
STATUS_REQUEST, STATUS_REPLY = 9, 10
MEM_FREE, MEM_QUERY, MEM_DECLARE, MEM_RESULT = 12, 13, 14, 15
MEM_LEASE, MEM_LEASED, MEM_RECALL = 16, 17, 18
LEASE_REFUSED, LEASE_GRANTED, LEASE_RETRY = 0, 1, 2
USAGE_QUERY, USAGE = 19, 20
USAGE_OK, USAGE_LIMITED = 0, 1
RELEASE_MORE = 1


def encode(mtype, body=b""):
    return struct.pack("<IHHII", MAGIC, VERSION, mtype, len(body), 0) + body


def decode(data):
    """(type, fields) of one message; fields is a dict."""
    magic, version, mtype, length, _ = struct.unpack_from("<IHHII", data)
    if magic != MAGIC or version != VERSION or length != len(data) - 16:
        raise ValueError("bad message")
    b = data[16:]
    if mtype == WELCOME:
        return mtype, {"tenant": b.split(b"\0", 1)[0].decode()}
    if mtype == ERROR:
        return mtype, {"reason": b.split(b"\0", 1)[0].decode()}
    if mtype in (GRANT, REVOKE):
        slot, grant, deadline, flags, ahead = struct.unpack("<IQQIQ", b)
        return mtype, {"slot": slot, "grant": grant, "deadline": deadline, "flags": flags, "ahead_ns": ahead}
    if mtype == MEM_RESULT:
        mid, cap, used = struct.unpack("<QQQ", b)
        return mtype, {"id": mid, "cap": cap, "used": used}
    if mtype == MEM_LEASED:
        mid, status, granted, cap, used = struct.unpack("<QIQQQ", b)
        return mtype, {"id": mid, "status": status, "granted": granted, "cap": cap, "used": used}
    if mtype == MEM_RECALL:
        return mtype, {"slot": struct.unpack("<I", b)[0]}
    if mtype == STATUS_REPLY:
        return mtype, {"text": b}
    if mtype == USAGE:
        mid, status, cap, used, window, busy, total, n = struct.unpack_from("<QIQQQQII", b)
        procs = [struct.unpack_from("<IQ", b, 52 + 12 * i) for i in range(n)]
        return mtype, {"id": mid, "status": status, "cap": cap, "used": used, "window_ns": window, "busy_ns": busy,
                       "procs_total": total, "procs": procs}
    return mtype, {}


class Closed(Exception):
    pass


class Client:
    """One connection to a tenant's (or the admin) socket."""

    def __init__(self, path, hello=True, blocking=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.setblocking(blocking)
        self.sock.connect(path)
        self.tenant = None
        if hello:
            self.send(HELLO, struct.pack("<I", os.getpid()))
            mtype, f = self.recv(5.0)
            if mtype != WELCOME:
                raise Closed("no WELCOME: %s" % f)
            self.tenant = f["tenant"]

    def fileno(self):
        return self.sock.fileno()

    def send(self, mtype, body=b""):
        self.sock.send(encode(mtype, body))

    def recv(self, timeout=5.0):
        """The next message as (type, fields); None on timeout; raises Closed."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        if not poller.poll(max(0, int(timeout * 1000))):
            return None
        try:
            data = self.sock.recv(70000)
        except (ConnectionResetError, BrokenPipeError):
            raise Closed("reset")
        if not data:
            raise Closed("closed")
        return decode(data)

    def device(self, slot, uuid):
        self.send(DEVICE, struct.pack("<I", slot) + bytes(uuid))

    def acquire(self, slot=0):
        self.send(ACQUIRE, struct.pack("<I", slot))

    def release(self, slot, grant, more=False, idle_ns=0):
        self.send(RELEASE, struct.pack("<IQQI", slot, grant, idle_ns, RELEASE_MORE if more else 0))

    def mem(self, mtype, slot, bytes_):
        """MEM_FREE or MEM_DECLARE."""
        self.send(mtype, struct.pack("<IQ", slot, bytes_))

    def query(self, slot, mid):
        """MEM_QUERY: answered with MEM_RESULT."""
        self.send(MEM_QUERY, struct.pack("<IQ", slot, mid))

    def usage(self, uuid, mid):
        """USAGE_QUERY for the GPU uuid: answered with USAGE."""
        self.send(USAGE_QUERY, struct.pack("<Q", mid) + bytes(uuid))

    def lease(self, slot, mid, need, want=None):
        """MEM_LEASE: answered with MEM_LEASED."""
        self.send(MEM_LEASE, struct.pack("<IQQQ", slot, mid, need, need if want is None else want))

    def lease_granted(self, slot, mid, need, want=None, timeout=5.0):
        """MEM_LEASE, retried while the server says RETRY; the final MEM_LEASED."""
        end = time.monotonic() + timeout
        while True:
            self.lease(slot, mid, need, want)
            answer = self.expect(MEM_LEASED, max(0.01, end - time.monotonic()))
            if answer is None or answer["status"] != LEASE_RETRY or time.monotonic() > end:
                return answer
            time.sleep(0.001)

    def expect(self, mtype, timeout=5.0):
        """Waits for a message of mtype, skipping others; its fields, or None."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            m = self.recv(left)
            if m is None:
                return None
            if m[0] == mtype:
                return m[1]

    def grant_latency(self, slot=0, timeout=5.0):
        """ACQUIRE, wait for the GRANT, RELEASE: seconds from ACQUIRE to GRANT."""
        start = time.monotonic()
        self.acquire(slot)
        g = self.expect(GRANT, timeout)
        took = time.monotonic() - start
        if g is None:
            return None
        self.release(slot, g["grant"])
        return took

    def close(self):
        self.sock.close()


def stand_in_messages(listener, stop, tenant=b"t"):
    """For a test that plays the server to a shim: accepts connections on
    the listening socket and yields (conn, type, body) for each message,
    until the event stop is set. What any server answers the same way
    (HELLO with WELCOME, MEM_LEASE with all it wants) is answered here, not
    yielded."""
    conn = None
    while not stop.is_set():
        readable, _, _ = select.select([listener] + ([conn] if conn else []), [], [], 0.01)
        if listener in readable:
            conn, _ = listener.accept()
        if conn not in readable:
            continue
        data = conn.recv(70000)
        if not data:
            conn = None
            continue
        mtype = struct.unpack_from("<H", data, 6)[0]
        body = data[16:]
        if mtype == HELLO:
            conn.send(encode(WELCOME, tenant.ljust(64, b"\0")))
        elif mtype == MEM_LEASE:
            _, mid, need, want = struct.unpack("<IQQQ", body)
            conn.send(encode(MEM_LEASED, struct.pack("<QIQQQ", mid, 1, want, 1 << 34, want)))
        else:
            yield conn, mtype, body


def uuid_bytes(i):
    """A made-up GPU UUID numbered i."""
    return struct.pack("<QQ", 0x5eed0000 + i, 0xfeedface)


def uuid_str(b):
    """A UUID as the status shows it."""
    h = bytes(b).hex()
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
