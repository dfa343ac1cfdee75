"""Containers keep the tenant directory they were given mounted. When the
tenant is removed and added back, that same directory must get the socket
again, or their processes never reconnect (and under the `wait` policy
block forever). The process here reaches its socket through its working
directory, which like a bind mount holds on to the directory itself, not
to its path."""
import os
import subprocess
import time

from testlib import SPIN, Checks, Machine, Server, wait_for

checks = Checks()
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
tenant_dir = os.path.join(server.run_dir, "tenants", "b")
inode = os.stat(tenant_dir).st_ino


def clients(name):
    for t in server.status()["tenants"]:
        if t["name"] == name:
            return t["clients"]
    return None


def kernels(pid):
    return sum(p["kernels"] for p in machine.meter()["processes"] if p["pid"] == pid)


env = server.tenant_env("b", GPUSLICE_SOCKET="gpuslice.sock", GPUSLICE_ON_SERVER_DOWN="wait", GPUSLICE_LOG="info")
proc = subprocess.Popen([SPIN, "--seconds", "30"], env=env, cwd=tenant_dir, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True)
checks.expect(wait_for(lambda: clients("b") == 1, 3.0), "a process in the tenant's directory is connected")

os.unlink(os.path.join(server.conf, "b.conf"))
checks.expect(wait_for(lambda: clients("b") is None), "the tenant is removed")
checks.expect(os.path.isdir(tenant_dir) and os.listdir(tenant_dir) == ["on-server-down"],
              "its directory stays, with its policy file and no socket (%s)"
              % (os.listdir(tenant_dir) if os.path.isdir(tenant_dir) else "gone"))
time.sleep(0.5)
stopped = kernels(proc.pid)
time.sleep(0.3)
checks.expect(kernels(proc.pid) == stopped, "meanwhile its process waits")

server.write_tenant("b", "share = 1\n")
checks.expect(wait_for(lambda: os.path.exists(server.socket("b"))), "the tenant is added back")
checks.expect(os.path.isdir(tenant_dir) and os.stat(tenant_dir).st_ino == inode,
              "in the same directory (inode %d, was %d)" % (os.stat(tenant_dir).st_ino, inode))
checks.expect(wait_for(lambda: clients("b") == 1, 3.0), "the waiting process reconnects through its old directory")
before = kernels(proc.pid)
time.sleep(0.5)
checks.expect(kernels(proc.pid) > before + 100, "and runs again (%d kernels in 0.5 s)" % (kernels(proc.pid) - before))
proc.kill()
proc.wait()
server.stop()
checks.expect(os.path.isdir(tenant_dir) and not os.path.exists(server.socket("b")),
              "a stopped server leaves the directories and removes its sockets")
checks.finish()
