"""Failures say what they are, once, and messages do not contradict
themselves (issue 29). Each check failed on the main of the issue:

1. A memory request refused at the cap is logged, with the tenant, the
   request, the cap and what is in use: the second process of a
   `memory = 512M` tenant whose contexts count 300 MiB gets
   CUDA_ERROR_OUT_OF_MEMORY from cuDevicePrimaryCtxRetain (before: nothing
   in the log, even at info); three such refusals in a minute are one line.
2. A protocol error is one line per cause and tenant per minute (before:
   up to 10 per 10 s), and another cause gets its own line.
3. Connections over --max-clients-per-tenant are one line with the limit
   and what is in use.
4. A cap larger than the GPU (`memory = 100T` on a 16 GiB GPU) is warned
   about when a process declares the GPU (before: accepted silently).
5. `memory = 0` is refused with a message that says 0 would allow no
   memory and how to say "no cap" (`memory = none`, or no line); a tenant
   without a cap is logged as "memory none" (before: refused as "not a
   byte count" while the log printed "memory 0" for no cap).
6. A tenant file with a UTF-8 byte order mark and CRLF line ends loads
   with its values (before: "unknown key '???share'").
7. An empty configuration directory is warned about; a missing one stops
   the start with one message, never a promise to watch it (before: "changes
   apply once it is back", then exit 2).
8. --version on gpuslice-server, gpuslicectl, gpuslice-hook, spin and
   infer; spin --help without any libcuda.so.1 (before: the loader
   refused to start it); `gpuslicectl statsu` says "unknown command".
9. A shim whose socket is wrong says so once at warn, with the path and
   the policy it follows and where that came from (before: a line every
   10 s, without the policy)."""
import os
import subprocess
import time

import gsproto
from testlib import BUILD, CTL, MEMHOG, SERVER, SHIM, SPIN, Checks, Machine, Server, parse_line, wait_for

HOOK = os.path.join(BUILD, "hook", "gpuslice-hook")
INFER = os.path.join(BUILD, "examples", "infer", "infer")
checks = Checks()
machine = Machine(memory="16G", FAKECUDA_CONTEXT_BYTES="300M")

# 9 first: it needs 10.5 s of waiting, which the rest of the test fills.
lost_env = dict(machine.env, LD_PRELOAD=SHIM, GPUSLICE_SOCKET="/nonexistent/gpuslice.sock")
lost_env.pop("GPUSLICE_ON_SERVER_DOWN", None)
lost = machine.spawn([SPIN, "--seconds", "1"], env=lost_env, stderr=subprocess.PIPE)
lost_started = time.monotonic()

server = Server(machine, {"m": "memory = 512M\n", "huge": "memory = 100T\n", "p": "share = 1\n",
                          "one": "share = 1\n"}, args=["--max-clients-per-tenant", "4"])


def log_lines(text):
    return [line for line in server.log().splitlines() if text in line]


# ---- 1. memory refusals ---------------------------------------------------------------------
first = server.spin("m", 6)
checks.expect(wait_for(lambda: any(t["name"] == "m" and t["clients"] == 1 for t in server.status()["tenants"]), 5.0),
              "a process of the 512M tenant runs (its context counts 300 MiB)")
results = []
for _ in range(3):
    p = subprocess.run([SPIN, "--seconds", "0.2"], env=server.tenant_env("m"), capture_output=True, text=True,
                       timeout=30)
    results.append((p.returncode, p.stderr.strip()))
checks.expect(all(code == 2 and "cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY" in err
                  for code, err in results), "three more processes get CUDA_ERROR_OUT_OF_MEMORY from "
              "cuDevicePrimaryCtxRetain (%s)" % results[0][1][-200:])
refusals = log_lines("memory lease refused at the tenant's cap")
checks.expect(len(refusals) == 1, "the refusals are one log line in the minute (%d)" % len(refusals))
checks.expect(refusals and "tenant m pid " in refusals[0] and "the process needed 300 MiB more than its unused headroom, and the tenant holds 300 MiB of its 512 MiB cap"
              in refusals[0] and "warn:" in refusals[0],
              "it names the tenant, the request, the cap and what is in use (%s)" % (refusals[:1] or ["none"])[0])
first.kill()
first.wait()

# ---- 2. protocol errors ----------------------------------------------------------------------
for _ in range(5):
    c = gsproto.Client(server.socket("p"), hello=False)
    c.acquire(0)
    try:
        c.recv(5.0)
    except gsproto.Closed:
        pass
    c.close()
c = gsproto.Client(server.socket("p"))
c.acquire(0)  # a slot it never declared
try:
    c.recv(5.0)
except gsproto.Closed:
    pass
c.close()
time.sleep(0.2)
not_hello = log_lines("first message was not HELLO; connection closed")
undeclared = log_lines("ACQUIRE for an undeclared device; connection closed")
checks.expect(len(not_hello) == 1 and "tenant p pid" in not_hello[0],
              "five connections that break the protocol the same way: one line (%d)" % len(not_hello))
checks.expect(len(undeclared) == 1, "another cause of the same tenant: a line of its own (%d)" % len(undeclared))

# ---- 3. a connection limit ---------------------------------------------------------------------
holders = [gsproto.Client(server.socket("one")) for _ in range(4)]
extra = []
for _ in range(3):
    c = gsproto.Client(server.socket("one"), hello=False)
    extra.append(c)
    time.sleep(0.15)  # the socket is not read for 100 ms after a refusal
time.sleep(0.2)
limit_lines = log_lines("tenant one: connection refused: limit 4 connections per tenant")
checks.expect(len(limit_lines) == 1 and "4 in use, 1 more asked for" in limit_lines[0],
              "three connections over --max-clients-per-tenant 4: one line with the limit and what is in use (%s)"
              % limit_lines)
for c in extra + holders:
    c.close()

# ---- 4. a cap larger than the GPU ----------------------------------------------------------------
big = server.spin("huge", 1)
big.wait(timeout=30)
over = log_lines("its memory cap 100 TiB is more than GPU-")
checks.expect(len(over) == 1 and "(16 GiB, as pid %d's driver reports it)" % big.pid in over[0],
              "memory = 100T on a 16 GiB GPU is warned about when the process declares it (%s)" % over)

# ---- 5. memory = 0 and none ------------------------------------------------------------------------
server.write_tenant("zero", "memory = 0\n")
checks.expect(wait_for(lambda: log_lines("zero.conf:1: memory = 0 would allow no device memory at all, so it is "
                                         "refused; for no cap leave 'memory' out or write 'memory = none'"), 3.0),
              "memory = 0 is refused, and the message says why and how to have no cap")
server.write_tenant("nocap", "memory = none\n")
checks.expect(wait_for(lambda: log_lines("tenant nocap: share 1 limit 1 quantum 20 ms memory none"), 3.0),
              "memory = none is no cap, and the log says 'memory none'")

# ---- 6. BOM and CRLF --------------------------------------------------------------------------------
with open(os.path.join(server.conf, ".bom.tmp"), "wb") as f:
    f.write(b"\xef\xbb\xbfshare = 2\r\nlimit = 0.5\r\n")
os.rename(os.path.join(server.conf, ".bom.tmp"), os.path.join(server.conf, "bom.conf"))
checks.expect(wait_for(lambda: any(t["name"] == "bom" and t["share"] == 2 and t["limit"] == 0.5
                                   for t in server.status()["tenants"]), 3.0),
              "a file with a UTF-8 byte order mark and CRLF line ends loads with its values (%s)"
              % (log_lines("bom.conf") or [""])[-1:])
server.stop()

# ---- 7. the configuration directory --------------------------------------------------------------------
empty = os.path.join(machine.dir, "empty.d")
os.mkdir(empty)
m2 = Machine()
s2 = Server(m2, {}, conf=empty)
checks.expect(any("no tenant: %s has no valid tenant file" % empty in line for line in s2.log().splitlines()),
              "an empty configuration directory is warned about")
s2.stop()
missing = subprocess.run([SERVER, "--config-dir", os.path.join(machine.dir, "nowhere"), "--run-dir",
                          os.path.join(machine.dir, "run-missing"), "--cdi-dir", "", "--metrics", ""],
                         capture_output=True, text=True, timeout=10)
checks.expect(missing.returncode == 2 and "cannot read the configuration directory" in missing.stderr and
              "once it is back" not in missing.stderr,
              "a missing configuration directory: exit 2 with one message, no promise to watch it (%s)"
              % missing.stderr.strip()[-300:])

# ---- 8. --version, --help, unknown commands ----------------------------------------------------------------
bare = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
programs = [SERVER, CTL, SPIN, INFER] + ([HOOK] if os.path.exists(HOOK) else [])
for prog in programs:
    p = subprocess.run([prog, "--version"], capture_output=True, text=True, env=bare)
    checks.expect(p.returncode == 0 and "0." in p.stdout, "%s --version (%d: %s)" % (os.path.basename(prog),
                                                                                     p.returncode, p.stdout.strip()))
for prog in (SPIN, INFER):
    p = subprocess.run([prog, "--help"], capture_output=True, text=True, env=bare)
    checks.expect(p.returncode == 0 and "Usage:" in p.stdout, "%s --help without libcuda.so.1 (%d: %s)"
                  % (os.path.basename(prog), p.returncode, p.stderr.strip()[-200:]))
p = subprocess.run([SPIN, "--seconds", "1"], capture_output=True, text=True, env=bare)
checks.expect(p.returncode == 2 and "spin: cannot load the CUDA driver" in p.stderr,
              "spin without a driver: exit 2 with one line saying so (%s)" % p.stderr.strip())
p = subprocess.run([CTL, "statsu"], capture_output=True, text=True)
checks.expect(p.returncode == 1 and "unknown command 'statsu'" in p.stderr,
              "gpuslicectl statsu: unknown command (%d: %s)" % (p.returncode, p.stderr.strip()[:200]))

# ---- 9. a shim that cannot reach its server ----------------------------------------------------------------
time.sleep(max(0.0, 10.6 - (time.monotonic() - lost_started)))
lost.kill()
lost.wait()
warned = [line for line in lost.stderr.read().splitlines() if "gpuslice-server unreachable" in line]
checks.expect(len([w for w in warned if ": warn: " in w]) == 1,
              "a shim with a wrong GPUSLICE_SOCKET warns once in 10.6 s (%d warn lines)"
              % len([w for w in warned if ": warn: " in w]))
checks.expect(warned and "/nonexistent/gpuslice.sock" in warned[0] and
              "the server-down policy is wait: the default" in warned[0],
              "... naming the socket, the policy and where it comes from (%s)" % (warned[:1] or ["none"])[0])
checks.finish()
