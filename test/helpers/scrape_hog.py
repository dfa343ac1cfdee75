"""Hostile and broken scrapers of gpuslice-server's /metrics, all at once,
for SECONDS:

    scrape_hog.py PORT SECONDS [--silent N] [--big-header N] [--flood N] [--slow-read N]
                               [--scrapers N] [--slowloris N]

  --silent N      N connections that never send anything
  --big-header N  N connections that each send a 1 MB request head
  --flood N       N connections opened at once, held open without a word
  --slow-read N   N connections that ask for /metrics and read 1 KiB every 100 ms
  --scrapers N    N scrapers back to back: each asks for /metrics, reads it all,
                  and asks again at once on a new connection
  --slowloris N   N connections that send a request head one byte at a time,
                  as fast as the server takes them, and never end it

Whatever the server closes is opened again once a second (not faster, so
that this process costs the machine little CPU), except the scrapers and
the slowloris connections: at once. Prints "ready" once everything is
open, then at the end "done opened=N closed=N read=BYTES sent=BYTES"."""
import argparse
import errno
import resource
import selectors
import socket
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("seconds", type=float)
for name in ("silent", "big-header", "flood", "slow-read", "scrapers", "slowloris"):
    ap.add_argument("--" + name, type=int, default=0)
args = ap.parse_args()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

BIG = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * (1 << 20) + b"\r\n\r\n"
GET = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
# Never ends: the server answers 431 at its limit on the head, or closes it
# when its time is up.
LORIS = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * (1 << 20)
AT_ONCE = ("scrape", "loris")  # reopened as soon as the server closes them
sel = selectors.DefaultSelector()
want = {"silent": args.silent, "big": args.big_header, "flood": args.flood, "slow": args.slow_read,
        "scrape": args.scrapers, "loris": args.slowloris}
have = {k: 0 for k in want}
opened = closed = read = sent = 0


def open_one(kind):
    global opened
    s = socket.socket()
    if kind == "slow":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if kind == "loris":  # one byte, one segment
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    err = s.connect_ex(("127.0.0.1", args.port))
    if err not in (0, errno.EINPROGRESS):
        s.close()
        return
    out = {"big": BIG, "slow": GET, "scrape": GET, "loris": LORIS}.get(kind, b"")
    state = {"kind": kind, "out": memoryview(out), "step": 1 if kind == "loris" else 65536}
    sel.register(s, selectors.EVENT_READ | (selectors.EVENT_WRITE if state["out"] else 0), state)
    have[kind] += 1
    opened += 1


def drop(s, state):
    global closed
    sel.unregister(s)
    s.close()
    have[state["kind"]] -= 1
    closed += 1
    if state["kind"] in AT_ONCE:
        open_one(state["kind"])


def top_up():
    for kind, n in want.items():
        while have[kind] < n:
            before = have[kind]
            open_one(kind)
            if have[kind] == before:
                break


top_up()
print("ready", flush=True)
sleeping = []  # slow readers between two reads: (when, socket, state)
end = time.monotonic() + args.seconds
next_top_up = time.monotonic() + 1.0
import signal  # noqa: E402
signal.signal(signal.SIGTERM, lambda *_: globals().update(end=0))
while time.monotonic() < end:
    for key, events in sel.select(timeout=0.05):
        s, state = key.fileobj, key.data
        try:
            if events & selectors.EVENT_WRITE and state["out"]:
                n = s.send(state["out"][:state["step"]])
                sent += n
                state["out"] = state["out"][n:]
                if not state["out"]:
                    sel.modify(s, selectors.EVENT_READ, state)
            if events & selectors.EVENT_READ:
                data = s.recv(65536 if state["kind"] == "scrape" else 1024)
                if not data:
                    drop(s, state)
                    continue
                read += len(data)
                if state["kind"] == "slow":  # out of the selector until its next read
                    sel.unregister(s)
                    sleeping.append((time.monotonic() + 0.1, s, state))
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            drop(s, state)
    now = time.monotonic()
    for item in [x for x in sleeping if x[0] <= now]:
        sleeping.remove(item)
        sel.register(item[1], selectors.EVENT_READ, item[2])
    if time.monotonic() >= next_top_up:
        top_up()
        next_top_up = time.monotonic() + 1.0
print("done opened=%d closed=%d read=%d sent=%d" % (opened, closed, read, sent), flush=True)
