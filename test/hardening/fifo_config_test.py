"""A FIFO (or a symlink to one, or a directory) named like a tenant file
must not block the single-threaded server: it is reported as not a regular
file, grants and the status go on, and later changes still apply."""
import os
import signal
import time

from testlib import Checks, Machine, Server, wait_for

checks = Checks()
machine = Machine()
server = Server(machine, {"a": "share = 1\n"})
spin = server.spin("a", 30)


def kernels():
    return sum(p["kernels"] for p in machine.meter()["processes"] if p["pid"] == spin.pid)


wait_for(lambda: kernels() > 0, 3.0)
os.mkfifo(os.path.join(server.conf, "x.conf"))
os.mkfifo(os.path.join(machine.dir, "elsewhere"))
os.symlink(os.path.join(machine.dir, "elsewhere"), os.path.join(server.conf, "y.conf"))
os.mkdir(os.path.join(server.conf, "z.conf"))
time.sleep(0.2)
server.proc.send_signal(signal.SIGHUP)  # reads every file again, the FIFOs included
time.sleep(0.2)
rc, _, took = server.status_text(timeout=10)
checks.expect(rc == 0 and took < 2, "gpuslicectl status answers within 2 s (exit %s, %.2f s)" % (rc, took))
before = kernels()
time.sleep(0.5)
after = kernels()
checks.expect(after > before + 100, "the tenant's work goes on: %d kernels in 0.5 s" % (after - before))
log = server.log()
for name in ("x", "y", "z"):
    checks.expect("%s.conf: not a regular file" % name in log, "%s.conf is reported as not a regular file" % name)
server.write_tenant("c", "share = 1\n")
checks.expect(wait_for(lambda: os.path.exists(server.socket("c"))), "a new tenant still gets its socket")
spin.kill()
spin.wait()
server.stop()
checks.expect(server.proc.returncode == 0, "the server stops on SIGTERM (exit %s)" % server.proc.returncode)
checks.finish()
