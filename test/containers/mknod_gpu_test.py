"""A container that makes a GPU's device node with mknod does not get the
GPU (issue 40's first break). Under plain runc, two containers of tenant
`b` are each given GPU 1 only (its node and a device-cgroup rule for it);
one also has CAP_MKNOD, as Docker and containerd give by default, and runs
`mknod /dev/nvidiaN` for GPU 0 before its CUDA process starts on GPU 0.
The server, with the driver's directory it is shown, takes a GPU only with
an open descriptor of its node (tokenserver/gpu_access.c): the device
cgroup lets the container open GPU 1's node and not the one it made, so
GPU 1 is accepted and GPU 0 refused, with the reason in the server's log,
and no kernel of that container runs on GPU 0.

No NVIDIA driver here: its nodes (major 195) cannot be opened, so two of
the kernel's misc devices, which can be and which runc does not allow by
default, stand in (/dev/fuse 10:229 for GPU 0, /dev/loop-control 10:237
for GPU 1), and the server is told their major (--nvidia-major 10). The
shim finds the driver's directory stood in at /nvidia
(GPUSLICE_NVIDIA_DIR)."""
import json
import os
import subprocess
import sys
import time

import ctlib
import runtimes
from ctlib import C_SPIN, Checks, Cleanup, Server

ctlib.require({"runc": "runc"})
ctlib.require_hook()
STAND_IN = {0: (10, 229, "/dev/fuse"), 1: (10, 237, "/dev/loop-control")}
for major, minor, path in STAND_IN.values():
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as e:
        ctlib.skip("the stand-in device %s (%d:%d) cannot be opened here: %s" % (path, major, minor, e))

checks = Checks()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine(devices=2)
    cleanup.add(machine.cleanup)
    uuids = [d["uuid"] for d in machine.meter()["devices"]]
    nvidia = os.path.join(machine.dir, "nvidia")
    for gpu, (major, minor, _) in STAND_IN.items():
        bus = os.path.join(nvidia, "gpus", "0000:%02x:00.0" % (gpu + 1))
        os.makedirs(bus)
        h = uuids[gpu]
        with open(os.path.join(bus, "information"), "w") as f:
            f.write("Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-%s-%s-%s-%s-%s\nBus Location: \t "
                    "0000:%02x:00.0\nDevice Minor: \t %d\n" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:], gpu + 1,
                                                                minor))
    subprocess.run(["chmod", "-R", "a+rX", nvidia], check=True)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"), extra=("mknod",))
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"},
                    args=["--nvidia-dir", nvidia, "--nvidia-major", "10"])
    cleanup.add(server.stop)
    runc = runtimes.Runc(machine, server)
    cleanup.add(runc.cleanup)

    def start(label, argv, mknod):
        """A container of tenant b given GPU 1's node alone; mknod: with
        CAP_MKNOD too."""
        bundle, cid = runc.bundle(label, rootfs, argv, "b", "createRuntime")
        path = os.path.join(bundle, "config.json")
        with open(path) as f:
            config = json.load(f)
        major, minor, _ = STAND_IN[1]
        config["linux"].setdefault("devices", []).append(
            {"path": "/dev/nvidia%d" % minor, "type": "c", "major": major, "minor": minor, "fileMode": 0o666,
             "uid": 0, "gid": 0})
        config["linux"].setdefault("resources", {}).setdefault("devices", []).append(
            {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rw"})
        config["mounts"].append({"destination": "/nvidia", "type": "bind", "source": nvidia,
                                 "options": ["rbind", "ro"]})
        config["process"]["env"].append("GPUSLICE_NVIDIA_DIR=/nvidia")
        if mknod:
            for kind in ("bounding", "effective", "permitted"):
                config["process"]["capabilities"][kind].append("CAP_MKNOD")
        with open(path, "w") as f:
            json.dump(config, f)
        runc.ids.append(cid)
        return subprocess.Popen(["runc", "--root", runc.root, "run", "--bundle", bundle, cid],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    # Given GPU 1: accepted, its kernels run.
    given = start("given", ctlib.spin_argv(2, "--device", "1"), mknod=False)
    out, _ = given.communicate(timeout=120)
    checks.expect(given.returncode == 0 and "device=1" in out and "kernels=" in out,
                  "a container given GPU 1 runs its CUDA process there (exit %d: %s)"
                  % (given.returncode, out.strip()[-200:]))

    # mknod of GPU 0's node: made, but not opened; GPU 0 refused.
    _, minor0, _ = STAND_IN[0]
    script = "mknod /dev/nvidia%d c 10 %d && echo made && exec %s" % (minor0, minor0, " ".join(
        ctlib.spin_argv(3, "--device", "0")))
    snap = machine.snapshot()
    attacker = start("mknod", ["sh", "-c", script], mknod=True)
    refused = False
    end = time.monotonic() + 20
    while time.monotonic() < end and not refused:
        time.sleep(0.2)
        refused = "could not open the device node nvidia%d" % minor0 in server.log()
    time.sleep(1.0)
    meter = machine.meter(since=snap)
    on_gpu0 = meter["devices"][0]["busy_ns"] if "busy_ns" in meter["devices"][0] else None
    subprocess.run(["runc", "--root", runc.root, "kill", runc.ids[-1], "KILL"], capture_output=True)
    try:
        out, _ = attacker.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        attacker.kill()
        out, _ = attacker.communicate()
    checks.expect("made" in out, "the container with CAP_MKNOD made GPU 0's node (%s)" % out.strip()[-200:])
    checks.expect(refused, "its declaration of GPU 0 was refused, the server's log says why (%s)"
                  % [line for line in server.log().splitlines() if "not given" in line][-1:])
    checks.expect(on_gpu0 == 0, "no kernel of it ran on GPU 0 (busy %s ns there meanwhile)" % on_gpu0)
checks.finish()
