"""Device memory counts are what caps are checked against, and a client
says what it leases, frees and holds. Counts must never wrap (a wrapped
count lets a tenant past its cap), and a slot declared again as another GPU
gives back what it held on the old one, or that memory stays counted there
forever."""
import json

import gsproto
from testlib import Checks, Machine, Server

MIB = 1 << 20
checks = Checks()
machine = Machine()
server = Server(machine, {"nocap": "share = 1\n", "capped": "memory = 1G\n"})
X, Y, Z = gsproto.uuid_bytes(1), gsproto.uuid_bytes(2), gsproto.uuid_bytes(3)


def lease(c, nbytes, mid):
    """A lease of exactly nbytes: its MEM_LEASED, with ok = 1 when granted."""
    answer = c.lease_granted(0, mid, nbytes)
    answer["ok"] = int(answer["status"] == gsproto.LEASE_GRANTED)
    return answer


def used(tenant, uuid):
    st = json.loads(server.status_text()[1])
    for t in st["tenants"]:
        if t["name"] == tenant:
            for d in t["devices"]:
                if d["uuid"] == gsproto.uuid_str(uuid):
                    return d["mem_used"]
    return None


# Without a cap: two leases of 2^63 bytes.
c = gsproto.Client(server.socket("nocap"))
c.device(0, X)
first, second = lease(c, 1 << 63, 1), lease(c, 1 << 63, 2)
checks.expect(first["ok"] == 1 and second["ok"] == 0 and second["used"] == 1 << 63,
              "a lease that would overflow the count is refused (second: ok=%d used=%d)"
              % (second["ok"], second["used"]))
checks.expect(used("nocap", X) == 1 << 63, "the count stays 2^63 (%s)" % used("nocap", X))
c.close()

# Declarations that add up past 2^64, then a lease under the cap.
a = gsproto.Client(server.socket("capped"))
a.device(0, X)
a.mem(gsproto.MEM_DECLARE, 0, (1 << 64) - MIB)
b = gsproto.Client(server.socket("capped"))
b.device(0, X)
b.mem(gsproto.MEM_DECLARE, 0, 2 * MIB)
err = b.expect(gsproto.ERROR, 1.0)
checks.expect(err is not None and "more device memory than can be counted" in err["reason"],
              "a declaration that would overflow the count gets the client dropped (%s)" % (err and err["reason"]))
r = lease(a, 512 * MIB, 3)
checks.expect(r["ok"] == 0 and r["used"] == (1 << 64) - MIB,
              "the tenant's count did not wrap: 512 MiB under a 1 GiB cap is refused (ok=%d, used=%d)"
              % (r["ok"], r["used"]))
a.close()
b.close()

# A slot declared again as another GPU while it holds memory.
c = gsproto.Client(server.socket("capped"))
c.device(0, Y)
r = lease(c, 100 * MIB, 4)
checks.expect(r["ok"] == 1 and used("capped", Y) == 100 * MIB, "100 MiB leased on GPU Y")
c.device(0, Z)
c.query(0, 5)
q = c.expect(gsproto.MEM_RESULT)
checks.expect(used("capped", Y) == 0, "declaring the slot as GPU Z gives Y's 100 MiB back (Y: %s)" % used("capped", Y))
checks.expect(q and q["used"] == 0, "and counts none of it on Z (%s)" % (q and q["used"]))
c.close()
checks.expect(used("capped", Y) in (0, None) and used("capped", Z) in (0, None),
              "after the client is gone nothing stays counted (Y: %s, Z: %s)" % (used("capped", Y), used("capped", Z)))
server.stop()
checks.finish()
