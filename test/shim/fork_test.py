"""fork() from a process whose other threads allocate, launch and capture
(test/helpers/fork_storm.c), as a PyTorch DataLoader forks its workers:
1000 children run ordinary code (malloc, stdio, dlsym) and exit, every
fourth after using CUDA afresh through the shim (cuInit, the primary
context, cuMemAlloc, cuMemGetInfo, cuMemFree); none hangs or crashes;
then a child that execs a CUDA program (spin) gets a working shim. Run in
every build: under ASan and TSan too.

Before the shim's fork handlers took every lock of its table (they took
two), a child could find a table another thread was growing and free it
twice, or a lock taken by a thread that does not exist in the child.
Without the handlers (neither pthread_atfork registered) the children
that use CUDA hang on such a lock: three hung within the first 8 forks
(fork_storm stops forking after three)."""
import os
import subprocess
import sys

from testlib import BUILD, SPIN, Checks, Machine, Server, parse_line

FORK_STORM = os.path.join(BUILD, "test", "helpers", "fork_storm")
forks = int(sys.argv[1]) if len(sys.argv) > 1 else 1000

checks = Checks()
machine = Machine(memory="8G")
server = Server(machine, {"t": "memory = 4G\nquantum_ms = 10\n"})
env = server.tenant_env("t")
try:
    proc = subprocess.run([FORK_STORM, str(forks), SPIN, "--seconds", "0.3", "--kernel-us", "500"], env=env,
                          capture_output=True, text=True, timeout=600)
    out, err, rc = proc.stdout, proc.stderr, proc.returncode
except subprocess.TimeoutExpired as e:
    out, err, rc = e.stdout or "", e.stderr or "", None
line = parse_line(out, "fork_storm") or {}
checks.expect(rc == 0, "fork_storm ran to its end (exit %s; %s)" % ("none: hung" if rc is None else rc, err[-600:]))
checks.expect(line.get("forks") == str(forks), "it forked %s times (%s)" % (forks, line.get("forks")))
checks.expect(line.get("hung") == "0", "no child hung (%s)" % line.get("hung"))
checks.expect(line.get("crashed") == "0", "no child crashed or failed (%s)" % line.get("crashed"))
for what in ("allocs", "launches", "captures"):
    checks.expect(int(line.get(what, 0)) > 0, "meanwhile its other threads ran: %s %s" % (what, line.get(what)))
spin = parse_line(out, "spin") or {}
checks.expect(line.get("exec_rc") == "0" and int(spin.get("kernels", 0)) > 0,
              "a child that execs spin runs it with the shim (exit %s, %s kernels)"
              % (line.get("exec_rc"), spin.get("kernels")))
server.stop()
checks.finish()
