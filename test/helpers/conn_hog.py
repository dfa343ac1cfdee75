"""A hostile tenant that takes all the connections it can: it keeps up to
COUNT connections to SOCKET open (each says HELLO, then never asks for
anything), and every 10 ms replaces those the server closed.

    conn_hog.py SOCKET COUNT SECONDS

Prints "ready N" after 1.5 s (N: connections open, including any the
server has not accepted yet), then at the end "done max=N replaced=N"."""
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import gsproto  # noqa: E402

path, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
hello = gsproto.encode(gsproto.HELLO, struct.pack("<I", os.getpid()))
conns = {}
poller = select.poll()
replaced = most = 0
start = time.monotonic()
ready = False
while time.monotonic() - start < seconds:
    while len(conns) < count:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.setblocking(False)
        try:
            s.connect(path)
            s.send(hello)
        except OSError:
            s.close()
            break  # the backlog is full, or the socket is gone: next round
        conns[s.fileno()] = s
        poller.register(s, select.POLLIN)
    most = max(most, len(conns))
    for fd, _ in poller.poll(0):
        s = conns[fd]
        try:
            data = s.recv(70000)
        except OSError:
            data = b""
        if not data or gsproto.decode(data)[0] == gsproto.ERROR:
            poller.unregister(fd)
            del conns[fd]
            s.close()
            replaced += 1
    if not ready and time.monotonic() - start > 1.5:
        print("ready %d" % len(conns), flush=True)
        ready = True
    time.sleep(0.01)
print("done max=%d replaced=%d" % (most, replaced), flush=True)
