"""The log's rate limit holds for every kind of message at once: a client
of each of 160 tenants breaks the protocol 25 times in a row (its first
message is not HELLO), round after round across the tenants. Each
tenant's message is its own kind (the same text, another tenant), and a
refusal is logged once per cause and tenant per minute (issue 29), so
the log gets exactly one line of it per tenant, whatever other kinds
arrive in between; the rest are counted. (The limit used to be kept per slot of a
small hash table, and two kinds that landed in one slot reset each
other's count whenever they alternated: every message was written. 160
kinds are more than it had slots, so some always collided.)"""
import re
import time

import gsproto
from testlib import Checks, Machine, Server

TENANTS, ROUNDS, BURST, WINDOW = 160, 25, 1, 60
checks = Checks()
machine = Machine()
names = ["t%03d" % i for i in range(TENANTS)]
server = Server(machine, {n: "share = 1\n" for n in names})
log0 = server.log_size()
start = time.monotonic()
refused = 0
for _ in range(ROUNDS):
    clients = [gsproto.Client(server.socket(n), hello=False) for n in names]
    for c in clients:
        c.acquire(0)
    for c in clients:
        try:
            m = c.recv(5.0)
            refused += m is not None and m[0] == gsproto.ERROR
        except gsproto.Closed:
            pass
        c.close()
elapsed = time.monotonic() - start
time.sleep(0.2)
with open(server.log_path) as f:
    f.seek(log0)
    log = f.read()
per_tenant = {n: 0 for n in names}
for m in re.finditer(r"^\S+ gpuslice-server: warn: tenant (t\d{3}) pid \d+: first message was not HELLO; "
                     r"connection closed$", log, re.M):
    per_tenant[m.group(1)] += 1
# A kind's window starts at its first line: a run longer than a minute may
# see a second window.
allowed = BURST * (1 + int(elapsed // WINDOW))
worst = max(per_tenant, key=per_tenant.get)
print("%d connections in %.1f s; lines per tenant: at most %d (%s), in all %d; log %d bytes"
      % (TENANTS * ROUNDS, elapsed, per_tenant[worst], worst, sum(per_tenant.values()), len(log)))
checks.expect(refused == TENANTS * ROUNDS, "every connection is refused with an ERROR (%d of %d)"
              % (refused, TENANTS * ROUNDS))
checks.expect(per_tenant[worst] <= allowed, "each tenant's message is logged at most %d times (at most %d, by %s)"
              % (allowed, per_tenant[worst], worst))
checks.expect(min(per_tenant.values()) >= min(BURST, ROUNDS), "and each at least %d times (the first ones are "
              "written; at least %d)" % (min(BURST, ROUNDS), min(per_tenant.values())))
checks.expect(server.proc.poll() is None, "the server is up")
server.stop()
checks.finish()
