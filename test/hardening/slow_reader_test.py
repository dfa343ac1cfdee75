"""A client that asks and never reads its answers: once the messages queued
for it reach the limit it is dropped, with one log line, instead of a log
line per message it could not be sent."""
import statistics
import time

import gsproto
from testlib import Checks, LoadWatch, Machine, Server, wait_for

checks = Checks()
machine = Machine()
server = Server(machine, {"evil": "share = 1\n", "good": "share = 1\n"})
good = gsproto.Client(server.socket("good"))
good.device(0, gsproto.uuid_bytes(1))

evil = gsproto.Client(server.socket("evil"))
evil.device(0, gsproto.uuid_bytes(1))
evil.sock.setblocking(False)
log0 = server.log_size()
watch = LoadWatch()
sent, closed, latencies = 0, None, []
start = time.monotonic()
while time.monotonic() - start < 5.0 and closed is None:
    try:
        for _ in range(50):
            evil.query(0, sent)
            sent += 1
    except BlockingIOError:
        pass  # the server reads slower than this: go on
    except OSError as e:
        closed = "%s after %d requests, %.2f s" % (e.strerror, sent, time.monotonic() - start)
    took = good.grant_latency(0, timeout=1.0)
    latencies.append(took if took is not None else 1.0)
checks.expect(closed is not None, "the client that does not read is disconnected (%s)" % closed)
for _ in range(20):
    took = good.grant_latency(0, timeout=1.0)
    latencies.append(took if took is not None else 1.0)
watch.stop()
time.sleep(0.3)
logged = server.log_size() - log0
lines = server.log().count("does not read its messages")
checks.expect(logged < 10000 and lines == 1, "with one log line (%d such lines, %d bytes of log)" % (lines, logged))
median = statistics.median(latencies) * 1000 if latencies else 0
checks.expect(latencies and median <= 10, "meanwhile another tenant's grants come within 10 ms (median %.2f ms of %d; "
              "%s)" % (median, len(latencies), watch))
checks.expect(wait_for(lambda: [t["clients"] for t in server.status()["tenants"] if t["name"] == "evil"] == [0]),
              "the server counts no connection of that tenant any more")


def never_reads():
    """Another client that asks and never reads, until it is dropped."""
    c = gsproto.Client(server.socket("evil"))
    c.device(0, gsproto.uuid_bytes(1))
    c.sock.setblocking(False)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            c.query(0, 0)
        except BlockingIOError:
            time.sleep(0.001)  # the server reads slower than this
        except OSError:
            break  # dropped
    c.close()


# Fifteen more: ten lines in all per 10 s, then one line with the count.
for _ in range(15):
    never_reads()
checks.expect(wait_for(lambda: "6 more messages like \"tenant evil pid" in server.log(), 12.0),
              "fifteen more such clients: the log says how many lines it suppressed")
lines = server.log().count("does not read its messages")
checks.expect(lines == 11, "ten lines in the 10 s window, then the count (%d lines mention it)" % lines)
server.stop()
checks.finish()
