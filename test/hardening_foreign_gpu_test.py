"""A GPU UUID in DEVICE is a claim. A tenant whose container was not given
a GPU must not queue for it, hold it or count memory on it: the server
checks that the driver lists the UUID and that the process's root has the
GPU's device node (tokenserver/gpu_access.c). Before the check, a tenant
could declare and acquire any UUID it learnt (the metrics publish them):
with idle claims, a victim alone on its GPU got 0.05 s of 6 s.

Here a directory stands in for the driver's /proc/driver/nvidia (fakecuda's
two GPUs, minors 0 and 1) and another for /dev, with the two nodes made by
mknod. The victim runs on the host and sees both; the attacker runs in a
mount namespace where that /dev holds nvidia1 only, as a container given
GPU 1. Needs root (mknod, unshare); skipped otherwise."""
import os
import subprocess
import sys
import time

from testlib import BUILD, Checks, Machine, Server, load_note, parse_line

HOSTILE = os.path.join(BUILD, "test", "hostile_tenant")

if os.geteuid() != 0:
    print("skipped: needs root for mknod and a mount namespace")
    sys.exit(77)

checks = Checks()
machine = Machine(devices=2)
uuids = [d["uuid"] for d in machine.meter()["devices"]]


def driver_form(hexuuid):
    h = hexuuid
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


nvidia = os.path.join(machine.dir, "nvidia")
for minor, u in enumerate(uuids):
    bus = os.path.join(nvidia, "gpus", "0000:%02x:00.0" % (minor + 1))
    os.makedirs(bus)
    with open(os.path.join(bus, "information"), "w") as f:
        f.write("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t %s\nVideo BIOS: \t ??\n"
                "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nBus Location: \t 0000:%02x:00.0\nDevice Minor: \t %d\n"
                "GPU Excluded:\t No\n" % (driver_form(u), minor + 1, minor))
dev = os.path.join(machine.dir, "dev")
os.makedirs(dev)
for minor in range(2):
    os.mknod(os.path.join(dev, "nvidia%d" % minor), 0o600 | 0o020000, os.makedev(195, minor))

server = Server(machine, {"victim": "share = 1\n", "attacker": "share = 1\n"},
                args=["--nvidia-dir", nvidia, "--device-node-dir", dev])


def as_container_of_gpu1(argv):
    """argv in a mount namespace whose `dev` holds nvidia1 only."""
    script = ('mount -t tmpfs none "$1" && mknod "$1/nvidia1" c 195 1 && shift && exec "$@"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dev] + argv


# The attacker declares the victim's GPU: refused with a clear reason,
# while the victim keeps its GPU to itself.
victim = server.spin("victim", 14, kernel_us=1000, depth=16)
time.sleep(0.7)
snap = machine.snapshot()
# It tries again and again for 10 s, as a shim reconnecting would.
end = time.monotonic() + 10.0
attempts = 0
while True:
    out = subprocess.run(as_container_of_gpu1([HOSTILE, "hold", server.socket("attacker"), "4", uuids[0],
                                               "--claim-idle"]),
                         capture_output=True, text=True, timeout=60)
    attempts += 1
    if out.returncode != 1 or time.monotonic() > end:
        break
meter = machine.meter(since=snap)
held = parse_line(out.stdout, "held " + uuids[0])
checks.expect(out.returncode == 1 and "was not given" in out.stdout,
              "a process without GPU 0's device node that declares GPU 0 gets an ERROR naming why (%r)"
              % out.stdout.strip()[:200])
checks.expect(held is None or float(held["ms"]) == 0,
              "it never holds GPU 0 (%s ms)" % (held["ms"] if held else 0))
victim_busy = sum(p["busy_ns"] for p in meter["processes"] if p["pid"] == victim.pid) / 1e9
util = meter["devices"][0]["utilization"]
checks.expect(util >= 0.85, "the victim alone on GPU 0 keeps it busy %.1f %% of the time (%.2f s) while the "
              "attacker tries %d times%s" % (100 * util, victim_busy, attempts, load_note()))
victim.kill()
victim.communicate()

# Its own GPU is accepted.
out = subprocess.run(as_container_of_gpu1([HOSTILE, "hold", server.socket("attacker"), "1", uuids[1]]),
                     capture_output=True, text=True, timeout=60)
held = parse_line(out.stdout, "held " + uuids[1])
checks.expect(out.returncode == 0 and held is not None and float(held["ms"]) > 500,
              "the GPU it was given is accepted and granted (%r)" % out.stdout.strip()[:200])

# A UUID the driver does not list is refused, even on the host.
out = subprocess.run([HOSTILE, "hold", server.socket("attacker"), "1", "ab" * 16], capture_output=True, text=True,
                     timeout=60)
checks.expect(out.returncode == 1 and "does not list" in out.stdout,
              "a UUID the driver does not list is refused (%r)" % out.stdout.strip()[:200])

# A symlink where the node should be is not followed: a container could
# point it at the host's node.
server.stop()
os.rename(os.path.join(dev, "nvidia0"), os.path.join(dev, "real-nvidia0"))
os.symlink(os.path.join(dev, "real-nvidia0"), os.path.join(dev, "nvidia0"))
server = Server(machine, {"victim": "share = 1\n", "attacker": "share = 1\n"},
                args=["--nvidia-dir", nvidia, "--device-node-dir", dev])
out = subprocess.run([HOSTILE, "hold", server.socket("attacker"), "1", uuids[0]], capture_output=True, text=True,
                     timeout=60)
checks.expect(out.returncode == 1 and "was not given" in out.stdout,
              "a symlink in place of the device node is not followed (%r)" % out.stdout.strip()[:200])
server.stop()
checks.finish()
