"""Messages say what the user needs (issue 43). Each check failed before
its fix (numbered as the issue's items):

1. An unknown key in a tenant file lists every key the parser knows,
   class and preempt_ms included (before: six of its eight); --help names
   every key, and --help-tenant-file describes each.
2. An allocation refused at a tenant's memory cap is logged by the shim,
   on the application's stderr, with the call and the size the
   application asked for, the tenant's count and its cap, a line a second
   at most with a count of the rest (before: at debug only); the server's
   line says it refused a lease, what the process lacked beyond its
   headroom (before: "asked for" that shortfall, read as the allocation).
3. A flag typo prints the error and one line pointing at --help, with the
   exit status it had (gpuslice-server 1, gpuslicectl 1, gpuslice-hook 2)
   (before: the error and all of the help, some 180 lines).
4. A CDI directory whose spec is another live server's is said once while
   the server retries every second (before: a line a second, ten per 10 s),
   and that it is over once the other server stops and the spec is
   written.
5. A file of a configuration directory not named NAME.conf (team-a.cnf,
   team-a.conf.bak, team-a.yaml) is logged at warn as ignored, once per
   name while it exists, in each of several directories, at start and when
   it appears; a dotfile is not; a name that goes and comes back is said
   again (before: nothing)."""
import os
import re
import subprocess
import time

from testlib import BUILD, CTL, MEMSCRIPT, SERVER, SHIM, Checks, Machine, Server, wait_for

HOOK = os.path.join(BUILD, "hook", "gpuslice-hook")
# Every key the parser knows, read from its table (tokenserver/config.c).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tokenserver", "config.c")) as f:
    source = f.read()
table = source[source.index("const struct config_key config_keys[] = {"):]
table = table[: table.index("};")]
KEYS = re.findall(r'^    \{"([a-z_]+)"', table, re.M)

checks = Checks()
checks.expect(len(KEYS) == 8 and "class" in KEYS and "preempt_ms" in KEYS,
              "the parser's table has its eight keys (%s)" % KEYS)
machine = Machine()
conf2 = os.path.join(machine.dir, "second.d")
os.mkdir(conf2)
os.makedirs(os.path.join(machine.dir, "tenants.d"))
for name in ("team-a.cnf", ".team-a.conf.swp"):
    with open(os.path.join(machine.dir, "tenants.d", name), "w") as f:
        f.write("share = 1\n")
server = Server(machine, {"a": "share = 1\n"}, args=["--config-dir", conf2])


def log_lines(text):
    return [line for line in server.log().splitlines() if text in line]


# ---- 1. the keys ----------------------------------------------------------------------------------
server.write_tenant("typo", "share = 1\nclas = latency\n")
checks.expect(wait_for(lambda: log_lines("typo.conf:2: unknown key 'clas'"), 3.0), "an unknown key is reported")
unknown = (log_lines("typo.conf:2: unknown key 'clas'") or [""])[0]
listed = unknown[unknown.find("(expected "):]
checks.expect(all(re.search(r"\b%s\b" % k, listed) for k in KEYS),
              "the unknown-key message lists every key (%s)" % unknown)
help_text = subprocess.run([SERVER, "--help"], capture_output=True, text=True, timeout=10)
checks.expect(help_text.returncode == 0 and all(re.search(r"\b%s\b" % k, help_text.stdout) for k in KEYS)
              and "--help-tenant-file" in help_text.stdout,
              "gpuslice-server --help names every key and --help-tenant-file")
ref = subprocess.run([SERVER, "--help-tenant-file"], capture_output=True, text=True, timeout=10)
checks.expect(ref.returncode == 0 and all(re.search(r"^  %s = " % k, ref.stdout, re.M) for k in KEYS),
              "gpuslice-server --help-tenant-file describes every key (%s)" % ref.stdout[:80])

# ---- 2. memory refusals ----------------------------------------------------------------------------
MIB = 1 << 20
server.write_tenant("capped", "memory = 4G\n")
checks.expect(wait_for(lambda: any(t["name"] == "capped" for t in server.status()["tenants"]), 3.0),
              "tenant capped (memory = 4G) is there")
stderr_path = os.path.join(machine.dir, "memscript.err")
with open(stderr_path, "w") as err:
    ms = subprocess.Popen([MEMSCRIPT], env=server.tenant_env("capped"), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)


def do(line):
    ms.stdin.write(line + "\n")
    ms.stdin.flush()
    return ms.stdout.readline().split()[0]


def shim_lines():
    with open(stderr_path) as f:
        return [line for line in f.read().splitlines() if "refused" in line]


answers = [do("init"), do("alloc 0 %d" % (3891 * MIB))]
answers += [do("alloc %d %d" % (i, 512 * MIB)) for i in range(1, 6)]
checks.expect(answers == ["rc=CUDA_SUCCESS"] * 2 + ["rc=CUDA_ERROR_OUT_OF_MEMORY"] * 5,
              "3.8 GiB fit the 4 GiB cap, five allocations of 512 MiB more do not (%s)" % answers)
first = shim_lines()
checks.expect(len(first) == 1 and re.search(r"gpuslice\[%d\]: warn: cuMemAlloc_v2 of 512 MiB refused: the tenant "
                                            r"holds (3\.[89]|4) GiB of its 4 GiB cap on device 0" % ms.pid, first[0])
              and "CUDA_ERROR_OUT_OF_MEMORY" in first[0],
              "the shim logs the call, the size asked for, what the tenant holds and its cap, once for five (%s)"
              % first)
time.sleep(1.1)
answers = [do("alloc 6 %d" % (512 * MIB))]
lines = shim_lines()
checks.expect(answers == ["rc=CUDA_ERROR_OUT_OF_MEMORY"] and len(lines) == 2 and
              "(4 more refused since the line before, not logged)" in lines[1],
              "a second later the next refusal is a line with the count of those not logged (%s)" % lines[1:])
lease = log_lines("memory lease refused at the tenant's cap")
need = re.search(r"the process needed ([0-9.]+) (MiB|KiB|bytes) more than its unused headroom, and the tenant holds "
                 r"[0-9.]+ GiB of its 4 GiB cap", lease[0] if lease else "")
checks.expect(len(lease) == 1 and "tenant capped pid %d" % ms.pid in lease[0] and need and
              float(need.group(1)) * {"MiB": MIB, "KiB": 1024, "bytes": 1}[need.group(2)] <= 512 * MIB,
              "the server logs one lease refusal: what the process lacked (512 MiB at most), the count and the cap "
              "(%s)" % lease)
ms.stdin.write("quit\n")
ms.stdin.close()
ms.wait(timeout=30)

# ---- 3. flag typos ---------------------------------------------------------------------------------
for prog, argv, status in ((SERVER, ["--confg-dir", "x"], 1), (CTL, ["--jsno", "status"], 1),
                           (HOOK, ["--alow", "x"], 2)):
    name = os.path.basename(prog)
    if not os.path.exists(prog):
        print("skip: %s is not built" % name)
        continue
    p = subprocess.run([prog] + argv, capture_output=True, text=True, timeout=10)
    lines = p.stderr.splitlines()
    checks.expect(p.returncode == status and len(lines) == 2 and "unrecognized option" in lines[0]
                  and argv[0] in lines[0] and lines[1] == "see %s --help" % name and p.stdout == "",
                  "%s %s: the error, one line pointing at --help, exit %d (%d: %s)"
                  % (name, argv[0], status, p.returncode, lines[:3]))
p = subprocess.run([SERVER, "--config-dir", server.conf, "stray"], capture_output=True, text=True, timeout=10)
checks.expect(p.returncode == 1 and p.stderr.strip().splitlines() ==
              ["gpuslice-server: unexpected argument 'stray'; see gpuslice-server --help"],
              "an unexpected argument is one line (%d: %s)" % (p.returncode, p.stderr[:200]))

# ---- 5. files that are not tenant files -----------------------------------------------------------
def ignored(directory, name):
    return log_lines("%s/%s: ignored: tenant files are named NAME.conf" % (directory, name))


checks.expect(len(ignored(server.conf, "team-a.cnf")) == 1 and "warn:" in ignored(server.conf, "team-a.cnf")[0],
              "team-a.cnf, there at start, is logged at warn as ignored (%s)" % ignored(server.conf, "team-a.cnf"))
checks.expect(not log_lines(".team-a.conf.swp"), "a dotfile is not")
for directory, name in ((server.conf, "team-a.conf.bak"), (conf2, "team-b.yaml")):
    with open(os.path.join(directory, name), "w") as f:
        f.write("share = 1\n")
    checks.expect(wait_for(lambda: ignored(directory, name), 3.0),
                  "%s, written into %s, is logged as ignored" % (name, directory))
for _ in range(3):  # rescans and rewrites say nothing more
    server.proc.send_signal(1)
    with open(os.path.join(server.conf, "team-a.conf.bak"), "a") as f:
        f.write("# again\n")
    wait_for(lambda: False, 0.3)
checks.expect(wait_for(lambda: len(log_lines("SIGHUP: reloading")) == 3, 3.0) and
              [len(ignored(server.conf, "team-a.cnf")), len(ignored(server.conf, "team-a.conf.bak")),
               len(ignored(conf2, "team-b.yaml"))] == [1, 1, 1],
              "three SIGHUPs and rewrites later, each name is still one line (%d, %d, %d)"
              % (len(ignored(server.conf, "team-a.cnf")), len(ignored(server.conf, "team-a.conf.bak")),
                 len(ignored(conf2, "team-b.yaml"))))
os.unlink(os.path.join(server.conf, "team-a.cnf"))
wait_for(lambda: False, 0.3)
with open(os.path.join(server.conf, "team-a.cnf"), "w") as f:
    f.write("share = 1\n")
checks.expect(wait_for(lambda: len(ignored(server.conf, "team-a.cnf")) == 2, 3.0),
              "team-a.cnf removed and written again is said again")
checks.expect(any(t["name"] == "a" for t in server.status()["tenants"]) and
              not any(t["name"].startswith("team-") for t in server.status()["tenants"]),
              "none of them is a tenant; a.conf is")

server.stop()

# ---- 4. another server's CDI spec --------------------------------------------------------------------
cdi_dir = os.path.join(machine.dir, "cdi")
owner = Server(machine, {"a": "share = 1\n"}, cdi_dir=cdi_dir)
spec = os.path.join(cdi_dir, "gpuslice.json")
checks.expect(wait_for(lambda: os.path.exists(spec), 3.0), "the first server writes its CDI spec")
other_run = os.path.join(machine.dir, "run2")
other_log = os.path.join(machine.dir, "server2.log")
with open(other_log, "w") as log:
    other = subprocess.Popen([SERVER, "--config-dir", owner.conf, "--run-dir", other_run, "--cdi-dir", cdi_dir,
                              "--shim", SHIM, "--metrics", ""], stdout=log, stderr=log)


def other_lines(text):
    with open(other_log) as f:
        return [line for line in f.read().splitlines() if text in line]


wait_for(lambda: os.path.exists(os.path.join(other_run, "admin.sock")), 5.0)
time.sleep(3.5)  # three or four retries
conflict = other_lines("not replacing it")
checks.expect(len(conflict) == 1 and "pid %d" % owner.proc.pid in conflict[0] and
              "said again if this changes, or every 10 minutes" in conflict[0],
              "a server given another live server's CDI directory says so once in 3.5 s of retries (%d: %s)"
              % (len(conflict), conflict[:1]))
owner.stop()
checks.expect(wait_for(lambda: other_lines("written; the failure said above is over"), 3.0) and
              len(other_lines("not replacing it")) == 1,
              "once that server stops, the spec is written and the log says the failure is over")
other.terminate()
other.wait(timeout=10)
checks.finish()
