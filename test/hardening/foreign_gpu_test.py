"""A GPU UUID in DEVICE is a claim. A tenant whose container was not given
a GPU must not queue for it, hold it or count memory on it: the server
checks that the driver lists the UUID and that the DEVICE came with an open
descriptor of the GPU's device node, which the kernel let the process open
(tokenserver/gpu_access.c). Before any check, a tenant could declare and
acquire any UUID it learnt (the metrics publish them): with idle claims, a
victim alone on its GPU got 0.05 s of 6 s.

Here a directory stands in for the driver's /proc/driver/nvidia (fakecuda's
two GPUs) and another for /dev, with the two nodes made by mknod; the shim
is pointed at both (GPUSLICE_NVIDIA_DIR, GPUSLICE_DEVICE_DIR) and passes the
node it opens. Without the NVIDIA driver its nodes (major 195) cannot be
opened, so the nodes stand in are those of the kernel's memory devices,
which can (/dev/full 1:7 for GPU 0, /dev/random 1:8 for GPU 1), and the
server is told their major (--nvidia-major 1). The victim runs on the host and sees both;
the attacker runs in a mount namespace where that /dev holds GPU 1's node only,
as a container given GPU 1. A node the attacker makes itself is refused by
a container's device cgroup, which this test has none of: the containers
suite tries that under runc (containers/mknod_gpu). Needs root (mknod,
unshare); skipped otherwise."""
import os
import subprocess
import sys
import time

from testlib import BUILD, Checks, Machine, Server, load_note, parse_line

HOSTILE = os.path.join(BUILD, "test", "helpers", "hostile_tenant")

if os.geteuid() != 0:
    print("skipped: needs root for mknod and a mount namespace")
    sys.exit(77)

checks = Checks()
machine = Machine(devices=2)
uuids = [d["uuid"] for d in machine.meter()["devices"]]


def driver_form(hexuuid):
    h = hexuuid
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


MINORS = [7, 8]  # GPU k's node: /dev/nvidia{MINORS[k]}, character device 1:MINORS[k]
nvidia = os.path.join(machine.dir, "nvidia")
for k, u in enumerate(uuids):
    minor = MINORS[k]
    bus = os.path.join(nvidia, "gpus", "0000:%02x:00.0" % (k + 1))
    os.makedirs(bus)
    with open(os.path.join(bus, "information"), "w") as f:
        f.write("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t %s\nVideo BIOS: \t ??\n"
                "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nBus Location: \t 0000:%02x:00.0\nDevice Minor: \t %d\n"
                "GPU Excluded:\t No\n" % (driver_form(u), k + 1, minor))
dev = os.path.join(machine.dir, "dev")
os.makedirs(dev)
for minor in MINORS:
    os.mknod(os.path.join(dev, "nvidia%d" % minor), 0o600 | 0o020000, os.makedev(1, minor))

server = Server(machine, {"victim": "share = 1\n", "attacker": "share = 1\n"}, args=["--nvidia-dir", nvidia, "--nvidia-major", "1"])


def as_container_of_gpu1(argv):
    """argv in a mount namespace whose `dev` holds GPU 1's node only."""
    script = ('mount -t tmpfs none "$1" && mknod "$1/nvidia8" c 1 8 && shift && exec "$@"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dev] + argv


# The attacker declares the victim's GPU: refused with a clear reason,
# while the victim keeps its GPU to itself.
victim = server.spin("victim", 14, kernel_us=1000, depth=16, GPUSLICE_NVIDIA_DIR=nvidia, GPUSLICE_DEVICE_DIR=dev)
time.sleep(0.7)
snap = machine.snapshot()
# It tries again and again for 10 s, as a shim reconnecting would.
end = time.monotonic() + 10.0
attempts = 0
while True:
    out = subprocess.run(as_container_of_gpu1([HOSTILE, "hold", server.socket("attacker"), "4", uuids[0],
                                               "--claim-idle", "--node", os.path.join(dev, "nvidia7")]),
                         capture_output=True, text=True, timeout=60)
    attempts += 1
    if out.returncode != 1 or time.monotonic() > end:
        break
meter = machine.meter(since=snap)
held = parse_line(out.stdout, "held " + uuids[0])
checks.expect(out.returncode == 1 and "was not given" in out.stdout and "could not open" in out.stdout,
              "a process that cannot open GPU 0's device node and declares GPU 0 gets an ERROR naming why (%r)"
              % out.stdout.strip()[:200])
checks.expect(victim.poll() is None, "the victim, which passed the node it opened, runs on")
checks.expect(held is None or float(held["ms"]) == 0,
              "it never holds GPU 0 (%s ms)" % (held["ms"] if held else 0))
victim_busy = sum(p["busy_ns"] for p in meter["processes"] if p["pid"] == victim.pid) / 1e9
util = meter["devices"][0]["utilization"]
checks.expect(util >= 0.85, "the victim alone on GPU 0 keeps it busy %.1f %% of the time (%.2f s) while the "
              "attacker tries %d times%s" % (100 * util, victim_busy, attempts, load_note()))
victim.kill()
victim.communicate()

# Its own GPU is accepted, with its node.
out = subprocess.run(as_container_of_gpu1([HOSTILE, "hold", server.socket("attacker"), "1", uuids[1], "--node",
                                           os.path.join(dev, "nvidia8")]),
                     capture_output=True, text=True, timeout=60)
held = parse_line(out.stdout, "held " + uuids[1])
checks.expect(out.returncode == 0 and held is not None and float(held["ms"]) > 500,
              "the GPU it was given is accepted and granted (%r)" % out.stdout.strip()[:200])

# A UUID the driver does not list is refused, even on the host.
out = subprocess.run([HOSTILE, "hold", server.socket("attacker"), "1", "ab" * 16], capture_output=True, text=True,
                     timeout=60)
checks.expect(out.returncode == 1 and "does not list" in out.stdout,
              "a UUID the driver does not list is refused (%r)" % out.stdout.strip()[:200])

# Its own GPU's node passed for the other GPU, /dev/null, or nothing: refused.
for what, argv in [("its own GPU 1's node", as_container_of_gpu1([HOSTILE, "hold", server.socket("attacker"), "1",
                                                                    uuids[0], "--node", os.path.join(dev, "nvidia8")])),
                   ("/dev/null", [HOSTILE, "hold", server.socket("attacker"), "1", uuids[0], "--node", "/dev/null"]),
                   ("no descriptor, on the host", [HOSTILE, "hold", server.socket("attacker"), "1", uuids[0]])]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    checks.expect(out.returncode == 1 and "was not given" in out.stdout,
                  "GPU 0 declared with %s is refused (%r)" % (what, out.stdout.strip()[:200]))
server.stop()
checks.finish()
