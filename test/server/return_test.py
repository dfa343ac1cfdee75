"""A tenant that comes back to a busy GPU waits at most about one quantum
for its first kernel, whatever it did before. The sequence of the report
(shares 1:1, quantum 20 ms):

1. `inf` runs alone: steps of 4 kernels of 250 us, a stream
   synchronize, 5 ms of host work (examples/infer);
2. a pause in which `inf` launches nothing;
3. `bat` starts: 1 ms kernels, synchronizing every 4, never idle;
4. 0.5 s later `inf` runs the same loop again.

Before, `inf`'s first step took about as long as `bat` needed to use the
device time `inf` had used alone (540-575 ms after a 6 s solo run): `bat`
started at virtual time 0, `inf` kept the virtual time of its solo run.
The step latencies are the program's own clock. The bound judged is two
quanta (the holder's slice and its drain, with room for a loaded machine)."""
import os
import time

from testlib import BUILD, Checks, Machine, Server, load_note, parse_line

INFER = os.path.join(BUILD, "examples", "infer", "infer")
QUANTUM_MS = 20

checks = Checks()
machine = Machine()
server = Server(machine, {"inf": "share = 1\nquantum_ms = %d\n" % QUANTUM_MS,
                          "bat": "share = 1\nquantum_ms = %d\n" % QUANTUM_MS})


def infer(seconds):
    return machine.spawn([INFER, "--seconds", str(seconds), "--blocking-sync"], env=server.tenant_env("inf"))


solo = infer(3)
solo_out, _ = solo.communicate()
checks.expect(solo.returncode == 0, "inf runs alone (%s)" % solo_out.strip())
time.sleep(2.0)
bat = server.spin("bat", 6, kernel_us=1000, depth=16)
time.sleep(0.5)
back = infer(2)
back_out, _ = back.communicate()
bat.kill()
bat.communicate()
figures = parse_line(back_out, "infer")
checks.expect(back.returncode == 0 and figures is not None, "inf runs again beside bat (%s)" % back_out.strip())
if figures:
    first = float(figures["first_ms"])
    checks.expect(first <= 2 * QUANTUM_MS,
                  "its first step after the pause takes %.1f ms: at most two quanta (%d ms); the others p50 %s ms, "
                  "p99 %s ms%s" % (first, 2 * QUANTUM_MS, figures["p50_ms"], figures["p99_ms"], load_note()))
server.stop()
checks.finish()
