"""Hostile and broken scrapers of gpuslice-server's /metrics, all at once,
for SECONDS:

    scrape_hog.py PORT SECONDS [--silent N] [--big-header N] [--flood N] [--slow-read N]

  --silent N      N connections that never send anything
  --big-header N  N connections that each send a 1 MB request head
  --flood N       N connections opened at once, held open without a word
  --slow-read N   N connections that ask for /metrics and read 1 KiB every 100 ms

Whatever the server closes is opened again once a second (not faster, so
that this process costs the machine little CPU). Prints "ready" once
everything is open, then at the end "done opened=N closed=N read=BYTES"."""
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
for name in ("silent", "big-header", "flood", "slow-read"):
    ap.add_argument("--" + name, type=int, default=0)
args = ap.parse_args()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

BIG = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * (1 << 20) + b"\r\n\r\n"
GET = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
sel = selectors.DefaultSelector()
want = {"silent": args.silent, "big": args.big_header, "flood": args.flood, "slow": args.slow_read}
have = {k: 0 for k in want}
opened = closed = read = 0


def open_one(kind):
    global opened
    s = socket.socket()
    if kind == "slow":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    err = s.connect_ex(("127.0.0.1", args.port))
    if err not in (0, errno.EINPROGRESS):
        s.close()
        return
    state = {"kind": kind, "out": BIG if kind == "big" else GET if kind == "slow" else b""}
    sel.register(s, selectors.EVENT_READ | (selectors.EVENT_WRITE if state["out"] else 0), state)
    have[kind] += 1
    opened += 1


def drop(s, state):
    global closed
    sel.unregister(s)
    s.close()
    have[state["kind"]] -= 1
    closed += 1


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
                n = s.send(state["out"][:65536])
                state["out"] = state["out"][n:]
                if not state["out"]:
                    sel.modify(s, selectors.EVENT_READ, state)
            if events & selectors.EVENT_READ:
                data = s.recv(1024)
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
print("done opened=%d closed=%d read=%d" % (opened, closed, read), flush=True)
