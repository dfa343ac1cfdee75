"""A tenant file written in place is empty, then partly written, before it
is complete. It must be read once complete (closed after writing, or
renamed into place), never while it is being written: not at its creation,
and not because another file changed meanwhile. Otherwise a tenant meant
to be capped runs with the defaults, uncapped, and stays so if the final
content is bad."""
import os
import time

from testlib import Checks, Machine, Server, wait_for

checks = Checks()
machine = Machine()
server = Server(machine, {"a": "share = 1\n"})


def tenants():
    return {t["name"]: t for t in server.status()["tenants"]}


def path(name):
    return os.path.join(server.conf, name + ".conf")


# Written in place, the final content bad: the tenant is never created.
with open(path("c"), "w") as f:
    f.flush()
    time.sleep(0.3)
    checks.expect("c" not in tenants(), "an empty file still being written is not read (%s)"
                  % tenants().get("c", {}).get("limit"))
    f.write("limit = 0.25\n")
    f.flush()
    # Another file changes meanwhile: c.conf, half written, is not read.
    server.write_tenant("d", "share = 3\n")
    wait_for(lambda: "d" in tenants())
    checks.expect("d" in tenants() and "c" not in tenants(), "another file's change does not read it either (%s)"
                  % sorted(tenants()))
    f.write("memory = 1X\n")
checks.expect(wait_for(lambda: "c.conf:2: memory must be a byte count" in server.log()),
              "once closed it is read, and its error reported")
checks.expect("c" not in tenants(), "the tenant is not created, neither with defaults nor uncapped")

# Written in place, the final content good: created once, capped.
with open(path("e"), "w") as f:
    time.sleep(0.3)
    f.write("limit = 0.25\n")
    f.flush()
    time.sleep(0.3)
    checks.expect("e" not in tenants(), "a file still being written is not read")
checks.expect(wait_for(lambda: tenants().get("e", {}).get("limit") == 0.25), "once closed the tenant is created, capped")
checks.expect(server.log().count("tenant e:") == 1, "once, with its final settings (%d lines)"
              % server.log().count("tenant e:"))

# Removed: the tenant goes.
os.unlink(path("e"))
checks.expect(wait_for(lambda: "e" not in tenants()), "a removed file removes its tenant")
server.stop()
checks.finish()
