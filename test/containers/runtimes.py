"""The container runtimes the tests drive: podman (with CDI, hooks.d or bare
mounts) and plain runc with config.json hooks, each container named
uniquely and removed at the end; and deploy/oci/gpuslice.json pointed at
this build."""
import glob
import json
import os
import shutil
import subprocess
import tempfile

from ctlib import C_LIBCUDA_DIR, C_STATE_DIR, HOOK, LIBCUDA, SHIM, SOURCE


def hook_config(run_dir, stage=None, allow=()):
    """deploy/oci/gpuslice.json as shipped, pointed at this build's hook and
    shim and the test server's run directory, with the given --allow rules
    (TENANT=CGROUP-PATTERN; and, if given, at another stage)."""
    with open(os.path.join(SOURCE, "deploy", "oci", "gpuslice.json")) as f:
        config = json.load(f)
    config["hook"]["path"] = HOOK
    config["hook"]["args"] = ["gpuslice-hook", "--run-dir", run_dir, "--shim", SHIM]
    for rule in allow:
        config["hook"]["args"] += ["--allow", rule]
    if stage:
        config["stages"] = [stage]
    return config


def remove_cgroups(parent):
    """Removes the cgroup directories named parent (a path below the
    hierarchies' roots) and what is left below them, deepest first: runc
    removes a container's own cgroup, not the parents made for it."""
    for top in glob.glob("/sys/fs/cgroup/*/" + parent) + glob.glob("/sys/fs/cgroup/" + parent):
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


# ---- podman ------------------------------------------------------------------------

PODMAN_BASE = ["podman", "--runtime", "runc"]
# Without CAP_SYS_RESOURCE podman cannot raise its own limits here.
PODMAN_RUN = ["run", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]


class Podman:
    """Runs containers with podman, each named uniquely and removed at the
    end."""

    def __init__(self, machine, global_args=(), run_args=()):
        """global_args go before `run`, run_args after it, for every container."""
        self.machine = machine
        self.global_args = list(global_args)
        self.run_args = list(run_args)
        self.names = []
        self.prefix = "gpuslice-test-%d-" % os.getpid()

    def argv(self, name, rootfs, argv, args=(), user=None, read_only=False, detach=True):
        """rootfs: a directory (--rootfs) or an image's name."""
        cmd = PODMAN_BASE + self.global_args + PODMAN_RUN + self.run_args + ["--name", name]
        if detach:
            cmd.append("-d")
        cmd += ["-v", LIBCUDA + ":" + C_LIBCUDA_DIR + "/libcuda.so.1:ro",
                "-v", self.machine.state_dir + ":" + C_STATE_DIR]
        for k, v in self.machine.container_env().items():
            cmd += ["-e", "%s=%s" % (k, v)]
        if user is not None:
            cmd += ["--user", str(user)]
        if read_only:
            cmd.append("--read-only")
        root = ["--rootfs", rootfs] if rootfs.startswith("/") else [rootfs]
        return cmd + list(args) + root + list(argv)

    def start(self, label, rootfs, argv, **kw):
        """Starts a detached container; returns its handle."""
        name = self.prefix + label
        self.names.append(name)
        out = subprocess.run(self.argv(name, rootfs, argv, **kw), capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError("podman run %s failed: %s" % (label, out.stderr.strip()))
        return PodmanContainer(name)

    def run(self, label, rootfs, argv, **kw):
        """Runs a container to the end; returns (exit status, stdout, stderr)."""
        name = self.prefix + label
        self.names.append(name)
        out = subprocess.run(self.argv(name, rootfs, argv, detach=False, **kw), capture_output=True,
                             text=True, timeout=120)
        return out.returncode, out.stdout, out.stderr

    def cleanup(self):
        if self.names:
            subprocess.run(["podman", "rm", "-f", "-i"] + self.names, capture_output=True)
        self.names = []


def build_image(tag, rootfs, annotations=None):
    """podman build of an image FROM scratch holding the directory rootfs,
    with the given image annotations (podman build --annotation), offline.
    Returns tag; remove it with remove_image."""
    fd, containerfile = tempfile.mkstemp(prefix="gpuslice-Containerfile-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("FROM scratch\nCOPY %s/ /\n" % os.path.basename(rootfs))
        cmd = ["podman", "build", "--runtime", "runc", "--quiet", "--no-cache", "-t", tag, "-f", containerfile]
        for k, v in (annotations or {}).items():
            cmd += ["--annotation", "%s=%s" % (k, v)]
        out = subprocess.run(cmd + [os.path.dirname(rootfs)], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError("podman build %s failed: %s" % (tag, out.stderr.strip()))
    finally:
        os.unlink(containerfile)
    return tag


def remove_image(tag):
    subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)


class PodmanContainer:
    def __init__(self, name):
        self.name = name

    def inspect(self, fmt):
        return subprocess.run(["podman", "inspect", "--format", fmt, self.name], capture_output=True,
                              text=True, check=True).stdout.strip()

    def host_pid(self):
        return int(self.inspect("{{.State.Pid}}"))

    def container_id(self):
        return self.inspect("{{.Id}}")

    def wait(self):
        """Waits for the end; returns (exit status, output)."""
        code = subprocess.run(["podman", "wait", self.name], capture_output=True, text=True,
                              timeout=120).stdout.strip()
        logs = subprocess.run(["podman", "logs", self.name], capture_output=True, text=True)
        return int(code or -1), logs.stdout + logs.stderr


# ---- runc ----------------------------------------------------------------------------

class Runc:
    """Runs containers with plain runc from bundles whose config.json this
    writes: the rootfs, fakecuda's mounts, and gpuslice-hook at a stage
    with the annotation gpuslice.io/tenant."""

    def __init__(self, machine, server):
        self.machine = machine
        self.server = server
        self.root = tempfile.mkdtemp(prefix="gpuslice-runc-", dir="/run")
        self.ids = []
        self.cgroup_parent = "gpuslice-test-%d" % os.getpid()

    def hook(self):
        """The hook as deploy/oci/gpuslice.json declares it, admitting any
        tenant for the containers of this test's cgroup parent."""
        return hook_config(self.server.run_dir, allow=["*=/%s/*" % self.cgroup_parent])["hook"]

    def bundle(self, label, rootfs, argv, tenant, stage, user=0, read_only=False, hook=None):
        bundle = os.path.join(self.machine.dir, "bundle-" + label)
        os.mkdir(bundle)
        subprocess.run(["runc", "spec", "--bundle", bundle], check=True)
        with open(os.path.join(bundle, "config.json")) as f:
            config = json.load(f)
        cid = os.urandom(32).hex()  # a container ID as containerd and CRI-O make them
        config["root"] = {"path": rootfs, "readonly": read_only}
        env = ["PATH=/usr/bin:/bin"] + ["%s=%s" % kv for kv in self.machine.container_env().items()]
        config["process"].update({"terminal": False, "args": list(argv), "env": env,
                                  "user": {"uid": user, "gid": user}})
        config["mounts"] += [
            {"destination": C_LIBCUDA_DIR + "/libcuda.so.1", "type": "bind", "source": LIBCUDA,
             "options": ["rbind", "ro"]},
            {"destination": C_STATE_DIR, "type": "bind", "source": self.machine.state_dir,
             "options": ["rbind", "rw"]}]
        config["hooks"] = {stage: [hook or self.hook()]}
        config["annotations"] = {"gpuslice.io/tenant": tenant}
        config["linux"]["cgroupsPath"] = "/%s/%s" % (self.cgroup_parent, cid)
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump(config, f)
        return bundle, cid

    def start(self, label, rootfs, argv, tenant, stage, **kw):
        bundle, cid = self.bundle(label, rootfs, argv, tenant, stage, **kw)
        self.ids.append(cid)
        proc = subprocess.Popen(["runc", "--root", self.root, "run", "--bundle", bundle, cid],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        return RuncContainer(self.root, cid, proc)

    def run(self, label, rootfs, argv, tenant, stage, **kw):
        c = self.start(label, rootfs, argv, tenant, stage, **kw)
        return c.wait()

    def cleanup(self):
        for cid in self.ids:
            subprocess.run(["runc", "--root", self.root, "delete", "-f", cid], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        remove_cgroups(self.cgroup_parent)


class RuncContainer:
    def __init__(self, root, cid, proc):
        self.root, self.cid, self.proc = root, cid, proc

    def host_pid(self):
        out = subprocess.run(["runc", "--root", self.root, "state", self.cid], capture_output=True, text=True)
        return json.loads(out.stdout)["pid"] if out.returncode == 0 else -1

    def container_id(self):
        return self.cid

    def wait(self):
        out, _ = self.proc.communicate(timeout=120)
        return self.proc.returncode, out
