"""The offline install bundle (scripts/bundle) on a node with no registry
and no network, as the DaemonSet runs it, with podman and runc:

1. The tarball for this machine's architecture holds image.tar, the
   manifests, a static bin/gpuslicectl, and a README whose commands load
   the image with `ctr -n k8s.io images import` and `podman load` and apply
   it with `kubectl apply -k`.
2. `podman load -i image.tar` gives the image under the name every
   container of the manifests runs.
3. The DaemonSet's init container script (read from the bundle's
   daemonset.yaml) installs the shim, the hook and the hooks.d file from
   the image into a host directory, with --network none, a read-only root
   and no capabilities. gpuslice-dra runs from the image as the
   DaemonSet's container dra: it registers in the kubelet's directory,
   answers GetInfo through gRPC, says why it cannot publish with no API,
   and takes its sockets away on SIGTERM.
4. The server runs from the image as the DaemonSet runs it: --network none,
   the host's PID namespace, read-only root, no capabilities, its run
   directory and CDI directory from the host. Two containers of the same
   image running its spin, asking for tenants at 3:1 by CDI device, split
   the simulated GPU 75/25 +-3 by the fakecuda meter, and the bundle's
   gpuslicectl lists them by host PID and container ID.
4b. The same server, shown a driver's list of two GPUs (stand-in nodes:
   /dev/fuse and /dev/loop-control, --nvidia-major 10), accepts a
   container given GPU 1's node and refuses GPU 0 to one that makes GPU
   0's node with mknod (CAP_MKNOD): no capability is needed for the check.
5. Where the arm64 bundle is there too and qemu-aarch64 is registered with
   binfmt_misc (scripts/test-aarch64 does that), its image is loaded and
   its server started with --network none under emulation: it serves its
   tenants (sockets and CDI spec), and its install script gives an
   aarch64 shim. Otherwise this part is reported as not checked (a
   failure where GPUSLICE_REQUIRE_CONTAINERS=1).

The bundle is GPUSLICE_BUNDLE, or build-bundle/gpuslice-VERSION-ARCH.tar.gz
in the source tree (scripts/bundle ARCH makes it); without one the test
skips (fails in CI)."""
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time

import ctlib
import runtimes
from ctlib import Checks, Cleanup

ctlib.require({"podman": "podman", "runc": "runc"})
SOURCE = ctlib.SOURCE
VERSION = re.search(r"version : '([^']+)'", open(os.path.join(SOURCE, "meson.build")).read()).group(1)
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip() or "amd64"


def bundle_path(arch):
    if arch == ARCH and os.environ.get("GPUSLICE_BUNDLE"):
        return os.environ["GPUSLICE_BUNDLE"]
    return os.path.join(SOURCE, "build-bundle", "gpuslice-%s-%s.tar.gz" % (VERSION, arch))


BUNDLE = bundle_path(ARCH)
if not os.path.exists(BUNDLE):
    ctlib.skip("no bundle at %s: make it with scripts/bundle %s" % (BUNDLE, ARCH))
# /etc/cdi/gpuslice.json, this test's to write (made, and a stale one
# removed, by ctlib)
CDI_DIR = ctlib.CDI_DIR
SPEC = ctlib.claim_cdi_spec()

PODMAN = ["podman", "--runtime", "runc"]
# What the DaemonSet's securityContext says, and no network at all (and,
# as in runtimes.PODMAN_RUN, limits podman need not raise here).
LOCKED = ["--network", "none", "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges",
          "--user", "0", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
prefix = "b%d-" % os.getpid()
checks = Checks()


def unpack(path, dest):
    with tarfile.open(path) as t:
        t.extractall(dest)
    (top,) = os.listdir(dest)
    return os.path.join(dest, top)


def load(image_tar):
    """podman load; the name it loaded."""
    out = subprocess.run(["podman", "load", "-i", image_tar], capture_output=True, text=True)
    names = re.findall(r"Loaded image(?:\(s\))?: *(\S+)", out.stdout)
    return out.returncode, names[0] if names else "", out.stdout + out.stderr


def install_script(daemonset):
    """The init container `install`'s shell script: the block scalar after
    its `- -c`."""
    lines = open(daemonset).read().splitlines()
    start = next(i for i, l in enumerate(lines) if re.match(r"\s*- name: install\s*$", l))
    block = next(i for i in range(start, len(lines)) if re.match(r"\s*- \|\s*$", lines[i]))
    body = []
    for line in lines[block + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= len(lines[block]) - len(lines[block].lstrip()):
            break
        body.append(line.strip())
    return "\n".join(body)


def elf_machine(path):
    with open(path, "rb") as f:
        return {62: "x86-64", 183: "aarch64"}.get(int.from_bytes(f.read(20)[18:20], "little"), "?")


def start_server(cleanup, image, name, run_dir, conf, opt_dir, platform=(), volumes=(), args=()):
    """The DaemonSet's server container: returns its name."""
    argv = PODMAN + ["run", "-d", "--name", name] + list(platform) + LOCKED + [
        "--pid", "host", "-v", conf + ":/etc/gpuslice/tenants.d:ro", "-v", run_dir + ":" + run_dir,
        "-v", CDI_DIR + ":/var/run/cdi"] + list(volumes) + [
        image, "/usr/bin/gpuslice-server", "--config-dir=/etc/gpuslice/tenants.d",
        "--run-dir=" + run_dir, "--cdi-dir=/var/run/cdi",
        "--shim=" + os.path.join(opt_dir, "lib", "libgpuslice.so")] + list(args)
    out = subprocess.run(argv, capture_output=True, text=True)
    cleanup.add(lambda: subprocess.run(["podman", "rm", "-f", "-t", "5", name], capture_output=True))
    return out.returncode, out.stderr.strip()


def wait_served(run_dir, tenants, timeout):
    """Whether every tenant's socket and the CDI spec naming it appeared."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        socks = all(os.path.exists(os.path.join(run_dir, "tenants", t, "gpuslice.sock")) for t in tenants)
        spec = os.path.exists(SPEC) and all(t in open(SPEC).read() for t in tenants)
        if socks and spec:
            return True
        time.sleep(0.1)
    return False


class ContainerServer:
    """What ctlib.measure_split asks of a server: its status, here from the
    bundle's own gpuslicectl."""

    def __init__(self, ctl, run_dir):
        self.ctl, self.run_dir = ctl, run_dir

    def status(self):
        out = subprocess.run([self.ctl, "--run-dir", self.run_dir, "status", "--json"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out)


with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    work = tempfile.mkdtemp(prefix="gpuslice-bundle-")
    cleanup.add(lambda: shutil.rmtree(work, ignore_errors=True))
    print("bundle: %s (%s)" % (BUNDLE, time.ctime(os.path.getmtime(BUNDLE))))

    # 1. What the tarball holds.
    top = unpack(BUNDLE, os.path.join(work, "bundle"))
    readme = open(os.path.join(top, "README")).read()
    ctl = os.path.join(top, "bin", "gpuslicectl")
    checks.expect(os.path.basename(top) == "gpuslice-%s-%s" % (VERSION, ARCH) and
                  all(os.path.exists(os.path.join(top, p)) for p in ("image.tar", "kubernetes/daemonset.yaml",
                                                                         "kubernetes/kustomization.yaml")),
                  "the bundle holds image.tar, kubernetes/ and bin/gpuslicectl in %s" % os.path.basename(top))
    commands = ["ctr -n k8s.io images import image.tar", "podman load -i image.tar", "kubectl apply -k kubernetes/"]
    checks.expect(all(c in readme for c in commands), "its README loads and applies it with: %s" % "; ".join(commands))
    # the manual pages: the tenant file's always, section 1 where help2man made them
    pages = ["man/man5/gpuslice-tenant.5"] + (["man/man1/gpuslice-server.1", "man/man1/gpuslicectl.1"]
                                              if shutil.which("help2man") else [])
    missing = [p for p in pages if "\n.TH " not in "\n" + open(os.path.join(top, p)).read()
               ] if all(os.path.exists(os.path.join(top, p)) for p in pages) else pages
    checks.expect(not missing, "the bundle holds the manual pages %s (missing or not a page: %s)"
                  % (", ".join(pages), missing or "none"))
    checks.expect("man -l man/man1/gpuslicectl.1" in readme, "its README says how to read them")
    static = "INTERP" not in subprocess.run(["readelf", "-l", ctl], capture_output=True, text=True).stdout
    checks.expect(static and elf_machine(ctl) == elf_machine(ctlib.SHIM),
                  "bin/gpuslicectl is a static %s executable" % elf_machine(ctl))

    # 2. podman load, under the manifests' name.
    code, image, out = load(os.path.join(top, "image.tar"))
    cleanup.add(lambda: image and subprocess.run(["podman", "rmi", image], capture_output=True))
    images = set(re.findall(r"^\s*image:\s*(\S+)", open(os.path.join(top, "kubernetes", "daemonset.yaml")).read() +
                            open(os.path.join(top, "kubernetes", "example-pods.yaml")).read(), re.M))
    checks.expect(code == 0 and images == {image},
                  "podman load gives %s, the image every container of the manifests runs (%s; %s)"
                  % (image or "nothing", sorted(images), out.strip()[-200:]))

    # 3. The init container's script installs the host's files.
    opt_dir = os.path.join(work, "opt-gpuslice")
    os.makedirs(opt_dir)
    script = install_script(os.path.join(top, "kubernetes", "daemonset.yaml"))
    out = subprocess.run(PODMAN + ["run", "--rm"] + LOCKED + ["-v", opt_dir + ":/host/opt/gpuslice", image,
                                                               "/bin/sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    installed = [p for p in ("lib/libgpuslice.so", "bin/gpuslice-hook", "hooks.d/gpuslice.json")
                 if os.path.exists(os.path.join(opt_dir, p))]
    checks.expect(out.returncode == 0 and len(installed) == 3,
                  "the DaemonSet's install script, run from the image with --network none, installs %s (%d: %s)"
                  % (", ".join(installed), out.returncode, out.stderr.strip()[-200:]))

    # ... and gpuslice-dra, the DaemonSet's second container, finds its
    # libraries (gRPC, protobuf-c, libcurl, json-c) in the image.
    out = subprocess.run(PODMAN + ["run", "--rm"] + LOCKED + [image, "/usr/bin/gpuslice-dra", "--version"],
                         capture_output=True, text=True, timeout=120)
    checks.expect(out.returncode == 0 and out.stdout.strip() == "gpuslice-dra " + VERSION,
                  "gpuslice-dra --version runs in the image with --network none (%d: %s %s)"
                  % (out.returncode, out.stdout.strip(), out.stderr.strip()[-200:]))

    # ... and runs as the DaemonSet runs it (its container dra: uid 0, no
    # capability, read-only root, the kubelet's two directories, the
    # claims' directory, the CDI directory read-only, a token): it
    # registers in the kubelet's plugins_registry, serves its node service
    # (GetInfo answered through gRPC by test/dra/kubelet.py, where Debian's
    # python3-grpcio is), and takes its sockets away on SIGTERM. With no
    # network the API is unreachable: it says so and keeps serving.
    dra_dir = os.path.join(work, "dra")
    dra_mounts = {"registry": "/var/lib/kubelet/plugins_registry", "plugins": "/var/lib/kubelet/plugins",
                  "claims": "/var/lib/gpuslice/claims.d", "cdi": "/var/run/cdi", "token": "/var/run/secrets/gpuslice-dra"}
    volumes = []
    for name, path in dra_mounts.items():
        os.makedirs(os.path.join(dra_dir, name))
        volumes += ["-v", os.path.join(dra_dir, name) + ":" + path + (":ro" if name in ("cdi", "token") else "")]
    for name in ("token", "ca.crt"):
        open(os.path.join(dra_dir, "token", name), "w").close()
    dra_name = "gpuslice-test-%d-dra" % os.getpid()
    cleanup.add(lambda: subprocess.run(["podman", "rm", "-f", "-t", "2", dra_name], capture_output=True))
    out = subprocess.run(PODMAN + ["run", "-d", "--name", dra_name] + LOCKED + volumes + [
        "-e", "NODE_NAME=node-a", image, "/usr/bin/gpuslice-dra", "--node-name=node-a",
        "--kubelet-dir=/var/lib/kubelet", "--claims-dir=/var/lib/gpuslice/claims.d", "--cdi-dir=/var/run/cdi",
        "--api-server=https://127.0.0.1:6443", "--token-file=/var/run/secrets/gpuslice-dra/token",
        "--ca-file=/var/run/secrets/gpuslice-dra/ca.crt"], capture_output=True, text=True)
    registry = os.path.join(dra_dir, "registry", "gpuslice.io-reg.sock")
    endpoint = os.path.join(dra_dir, "plugins", "gpuslice.io", "dra.sock")
    deadline = time.monotonic() + 20
    while out.returncode == 0 and time.monotonic() < deadline and not (os.path.exists(registry) and
                                                                       os.path.exists(endpoint)):
        time.sleep(0.1)
    proto_dir = os.path.join(ctlib.BUILD, "test", "dra")
    info = subprocess.run(["/usr/bin/python3", "-c", "import sys, kubelet; i = kubelet.get_info(sys.argv[1]); "
                           "print(i.type, i.name, i.endpoint)", registry],
                          env=dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "test", "dra"),
                                   GPUSLICE_KUBELET_PROTO_DIR=proto_dir), capture_output=True, text=True, timeout=30)
    checks.expect(out.returncode == 0 and info.stdout.split() == ["DRAPlugin", "gpuslice.io",
                                                                 "/var/lib/kubelet/plugins/gpuslice.io/dra.sock"]
                  and os.path.exists(endpoint),
                  "gpuslice-dra runs from the image under the DaemonSet's settings and mounts: registers in the "
                  "kubelet's directory and serves its node service (%d: %s %s %s)"
                  % (out.returncode, out.stderr.strip()[-200:], info.stdout.strip(), info.stderr.strip()[-300:]))
    stop = subprocess.run(["podman", "stop", "-t", "10", dra_name], capture_output=True, text=True)
    code = subprocess.run(["podman", "inspect", "--format", "{{.State.ExitCode}}", dra_name], capture_output=True,
                          text=True).stdout.strip()
    logs = subprocess.run(["podman", "logs", dra_name], capture_output=True, text=True).stderr
    checks.expect(stop.returncode == 0 and code == "0" and not os.path.exists(registry) and
                  not os.path.exists(endpoint) and "cannot publish the ResourceSlice" in logs,
                  "... says why it cannot publish with no API, exits 0 on SIGTERM and takes its sockets away "
                  "(exit %s; %s)" % (code, logs.strip()[-300:]))

    # 4. The server from the image, with no network; two tenants at 3:1.
    run_dir = os.path.join(work, "run")
    conf = os.path.join(work, "tenants.d")
    os.makedirs(run_dir)
    os.makedirs(conf)
    for name, text in ctlib.tenants(prefix).items():
        with open(os.path.join(conf, name + ".conf"), "w") as f:
            f.write(text)
    cleanup.add(lambda: os.path.exists(SPEC) and prefix + "a" in open(SPEC).read() and os.unlink(SPEC))
    code, err = start_server(cleanup, image, "gpuslice-test-%d-server" % os.getpid(), run_dir, conf, opt_dir)
    served = code == 0 and wait_served(run_dir, [prefix + "a", prefix + "b"], 20)
    logs = subprocess.run(["podman", "logs", "gpuslice-test-%d-server" % os.getpid()], capture_output=True,
                          text=True)
    checks.expect(served, "the server starts from the image with --network none and serves its tenants "
                  "(sockets, CDI spec) (%d: %s)" % (code, (err + logs.stderr)[-300:]))
    if served:
        podman = runtimes.Podman(machine)
        cleanup.add(podman.cleanup)

        def device(tenant):
            return ["--device", "gpuslice.io/tenant=" + prefix + tenant]

        ctlib.measure_split(
            checks, machine, ContainerServer(ctl, run_dir), "bundle",
            lambda s: podman.start("a", image, ctlib.spin_argv(s), args=device("a"), user=65534, read_only=True),
            lambda s: podman.start("b", image, ctlib.spin_argv(s), args=device("b")))
        subprocess.run(["podman", "stop", "-t", "5", "gpuslice-test-%d-server" % os.getpid()], capture_output=True)
        # A stop is a restart's first half: the spec stays, so that
        # containers created meanwhile start (gpuslice-server --uninstall
        # is what retires it).
        checks.expect(os.path.exists(SPEC), "bundle: the server's CDI spec stays when its container stops")
        try:
            os.unlink(SPEC)
        except FileNotFoundError:
            pass

    # 4b. The same server checks the GPUs its tenants declare, with no
    # capability (issue 40): the driver's directory it is shown lists two
    # GPUs, whose nodes stand in as two of the kernel's misc devices that
    # can be opened here and that podman does not allow by default
    # (NVIDIA's, major 195, cannot be opened without the driver):
    # /dev/fuse (10:229) for GPU 0, /dev/loop-control (10:237) for GPU 1.
    # Two containers of tenant b are given GPU 1's node; one of them, with
    # CAP_MKNOD, makes GPU 0's node and runs on GPU 0: refused.
    stand_in = {0: (229, "/dev/fuse"), 1: (237, "/dev/loop-control")}
    try:
        for _, path in stand_in.values():
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        openable = ""
    except OSError as e:
        openable = str(e)
    if served and not openable:
        gmachine = ctlib.SharedMachine(devices=2)
        cleanup.add(gmachine.cleanup)
        uuids = [d["uuid"] for d in gmachine.meter()["devices"]]
        nvidia = os.path.join(work, "nvidia")
        for gpu, (minor, _) in stand_in.items():
            bus = os.path.join(nvidia, "gpus", "0000:%02x:00.0" % (gpu + 1))
            os.makedirs(bus)
            h = uuids[gpu]
            with open(os.path.join(bus, "information"), "w") as f:
                f.write("GPU UUID: \t GPU-%s-%s-%s-%s-%s\nDevice Minor: \t %d\n"
                        % (h[:8], h[8:12], h[12:16], h[16:20], h[20:], minor))
        subprocess.run(["chmod", "-R", "a+rX", work], check=True)
        gname = "gpuslice-test-%d-server-gpus" % os.getpid()
        code, err = start_server(cleanup, image, gname, run_dir, conf, opt_dir, volumes=["-v", nvidia + ":/nvidia:ro"],
                                 args=["--nvidia-dir=/nvidia", "--nvidia-major=10"])
        checks.expect(code == 0 and wait_served(run_dir, [prefix + "a", prefix + "b"], 20),
                      "bundle: the server under the DaemonSet's settings starts with a driver's list of GPUs (%d: %s)"
                      % (code, err[-300:]))
        gpodman = runtimes.Podman(gmachine)
        cleanup.add(gpodman.cleanup)
        given = ["--device", "gpuslice.io/tenant=" + prefix + "b", "--device", "/dev/loop-control:/dev/nvidia237",
                 "-e", "GPUSLICE_NVIDIA_DIR=/nvidia", "-v", nvidia + ":/nvidia:ro"]
        code, out, err = gpodman.run("given", image, ctlib.spin_argv(2, "--device", "1"), args=given)
        checks.expect(code == 0 and "device=1" in out,
                      "bundle: a container given GPU 1's node runs its CUDA process there (%d: %s)"
                      % (code, (out + err).strip()[-200:]))
        minor0 = stand_in[0][0]
        attack = "mknod /dev/nvidia%d c 10 %d && echo made && exec %s" % (minor0, minor0, " ".join(
            ctlib.spin_argv(3, "--device", "0")))
        snap = gmachine.snapshot()
        gpodman.start("mknod", image, ["/bin/sh", "-c", attack], args=given + ["--cap-add", "MKNOD"])
        refused, logs = False, ""
        end = time.monotonic() + 20
        while time.monotonic() < end and not refused:
            time.sleep(0.2)
            logs = subprocess.run(["podman", "logs", gname], capture_output=True, text=True).stderr
            refused = "could not open the device node nvidia%d" % minor0 in logs
        time.sleep(1.0)
        busy0 = gmachine.meter(since=snap)["devices"][0]["busy_ns"]
        made = subprocess.run(["podman", "logs", gpodman.prefix + "mknod"], capture_output=True, text=True)
        checks.expect("made" in made.stdout + made.stderr,
                      "bundle: the container with CAP_MKNOD made GPU 0's node (%s)" % made.stdout.strip()[-120:])
        checks.expect(refused and busy0 == 0,
                      "bundle: its GPU 0 is refused by the server under the DaemonSet's settings, which says why, "
                      "and none of its kernels ran there (%s; busy %d ns)"
                      % ([l for l in logs.splitlines() if "not given" in l][-1:], busy0))
        gpodman.cleanup()
        subprocess.run(["podman", "stop", "-t", "5", gname], capture_output=True)
        try:
            os.unlink(SPEC)
        except FileNotFoundError:
            pass
    elif served:
        checks.expect(not ctlib.REQUIRED, "bundle: the GPU check under the DaemonSet's settings needs /dev/fuse and "
                      "/dev/loop-control to open (%s)" % openable)

    # 5. The arm64 image, under emulation, where it can be.
    other = "arm64" if ARCH == "amd64" else None
    binfmt = "/proc/sys/fs/binfmt_misc/qemu-aarch64"
    enabled = os.path.exists(binfmt) and open(binfmt).read().startswith("enabled")
    if other and os.path.exists(bundle_path(other)) and enabled:
        if image:
            subprocess.run(["podman", "rmi", image], capture_output=True)
        top = unpack(bundle_path(other), os.path.join(work, "bundle-" + other))
        code, image, out = load(os.path.join(top, "image.tar"))
        arch = subprocess.run(["podman", "image", "inspect", "--format", "{{.Architecture}}", image],
                              capture_output=True, text=True).stdout.strip()
        checks.expect(code == 0 and arch == other, "%s: podman load gives %s for %s (%s)" % (other, image, arch,
                                                                                         out.strip()[-200:]))
        opt_dir = os.path.join(work, "opt-gpuslice-" + other)
        os.makedirs(opt_dir)
        platform = ["--platform", "linux/" + other]
        out = subprocess.run(PODMAN + ["run", "--rm"] + platform + LOCKED +
                             ["-v", opt_dir + ":/host/opt/gpuslice", image, "/bin/sh", "-c", script],
                             capture_output=True, text=True, timeout=120)
        shim = os.path.join(opt_dir, "lib", "libgpuslice.so")
        checks.expect(out.returncode == 0 and os.path.exists(shim) and elf_machine(shim) == "aarch64",
                      "%s: the install script, emulated, installs an aarch64 shim (%d: %s)"
                      % (other, out.returncode, out.stderr.strip()[-200:]))
        run_dir = os.path.join(work, "run-" + other)
        os.makedirs(run_dir)
        tenants = [prefix + "a", prefix + "b"]
        code, err = start_server(cleanup, image, "gpuslice-test-%d-server-%s" % (os.getpid(), other), run_dir, conf,
                                 opt_dir, platform)
        checks.expect(code == 0 and wait_served(run_dir, tenants, 60),
                      "%s: its server starts with --network none, emulated, and serves its tenants (%d: %s)"
                      % (other, code, err[-300:]))
        subprocess.run(["podman", "stop", "-t", "5", "gpuslice-test-%d-server-%s" % (os.getpid(), other)],
                       capture_output=True)
    elif other:
        what = "the %s image (needs %s and qemu-aarch64 registered with binfmt_misc)" % (other, bundle_path(other))
        checks.expect(not ctlib.REQUIRED, "%s: checked where GPUSLICE_REQUIRE_CONTAINERS=1 (CI)" % what)
        print("not checked: " + what)
checks.finish()
