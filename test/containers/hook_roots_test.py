"""gpuslice-hook against container roots that are hostile or unusual (no
container runtime: the hook runs in a private mount namespace, as a
runtime runs it at createContainer).

1. Another container changes the root while the hook runs. The image's
   /usr/lib lacks gpuslice's directory, so the hook covers /usr/lib with
   an overlay and sets aside, then binds back, the mounts the runtime made
   below it: here a volume at /usr/lib/x/etc. Meanwhile a process (another
   container sharing the root, or a volume) swaps the directory x with a
   symlink to a host directory, over and over. The hook must never mount
   the host directory inside the root: each run either succeeds with the
   volume where it was, or refuses (exit 1). Before it resolved those
   mounts by file descriptor and checked their mount IDs, it walked their
   paths again from the host's root, and the host directory ended up in
   the container, writable, in about 5 runs of 100 (each exited 0).
2. The image's /etc/ld.so.preload is a symlink (to the shim's own path):
   the hook refuses the container (before: it followed the link, mounted
   the preload list over the shim, and exited 0).
3. The runtime's /run is a read-only tmpfs mounted nosuid, nodev, noexec:
   the overlay the hook puts over it keeps those flags (before: it dropped
   them).
4. Two mounts stacked on the same path below a covered directory: the top
   one is kept (the first version of the fd-based code refused this).
5. The hook runs in the container's PID namespace with the host's /proc,
   through a wrapper (not the init's child): it cannot find the init
   there and refuses (before: it entered /proc/1's mount namespace, the
   host init's, and mounted there, exiting 0).
6. Which roots are the container's own writable layer. A root that is a
   writable overlay mount of its own (as podman, CRI-O and containerd
   mount them) gets the missing mount points in its upper layer, with no
   overlay of gpuslice's over /etc; the image's layer (the lower) is not
   written. A root that is a directory inside an overlay, and a root that
   is a read-only overlay, are not the container's own: nothing is written
   into their layers (an overlay in memory covers the directory).

Needs root (mount namespaces); skipped otherwise, a failure under
GPUSLICE_REQUIRE_CONTAINERS=1."""
import ctypes
import json
import multiprocessing
import os
import socket
import subprocess
import tempfile

from ctlib import HOOK, SHIM, Checks, skip

RUNS = 300

if os.geteuid() != 0:
    skip("the hook's mounts need root")
if not os.path.exists(HOOK):
    skip("gpuslice-hook was not built (json-c missing)")
libc = ctypes.CDLL(None, use_errno=True)
if not hasattr(libc, "renameat2"):
    skip("no renameat2 in this C library")

checks = Checks()
work = tempfile.mkdtemp(prefix="gpuslice-hookrace-")
run_dir = os.path.join(work, "run")
os.makedirs(os.path.join(run_dir, "tenants", "t1"))
os.makedirs(os.path.join(run_dir, "cdi"))
with open(os.path.join(run_dir, "cdi", "ld.so.preload"), "w") as f:
    f.write("/usr/lib/gpuslice/libgpuslice.so\n")
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(os.path.join(run_dir, "tenants", "t1", "gpuslice.sock"))
bundle = os.path.join(work, "bundle")
root = os.path.join(bundle, "rootfs")
for d in ("etc", "run", "tmp", "proc", "usr/lib/x/etc"):
    os.makedirs(os.path.join(root, d))
with open(os.path.join(bundle, "config.json"), "w") as f:
    json.dump({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, f)
host = os.path.join(work, "host")
os.makedirs(os.path.join(host, "etc"))
with open(os.path.join(host, "etc", "SECRET"), "w") as f:
    f.write("host\n")
volume = os.path.join(work, "volume")
os.makedirs(volume)
usr_lib = os.path.join(root, "usr", "lib")
os.symlink(host, os.path.join(usr_lib, "x2"))


def flip(stop):
    """Swaps usr/lib/x (a directory) and usr/lib/x2 (a symlink to the host
    directory) until stop is set."""
    fd = os.open(usr_lib, os.O_PATH | os.O_DIRECTORY)
    while not stop.is_set():
        for _ in range(100):
            if libc.renameat2(fd, b"x", fd, b"x2", 2) != 0:  # RENAME_EXCHANGE
                return


# One run: a private mount namespace (the container's), the volume mounted
# at whichever of x and x2 is the directory now, the hook, and a look at
# whether a mount of the host directory sits inside the root.
TRIAL = r"""
for n in x x2; do
  [ -d "$ROOT/usr/lib/$n" ] && [ ! -L "$ROOT/usr/lib/$n" ] && mount --bind "$VOLUME" "$ROOT/usr/lib/$n/etc" 2>/dev/null && break
done
"$HOOK" --allow "$ALLOW" --run-dir "$RUN" --shim "$SHIM" < "$STATE" 2>/dev/null; rc=$?
awk -v r="$ROOT/" -v h="$HOST" '$4 ~ h"/etc$" && index($5, r) == 1 {print "escaped"}' /proc/self/mountinfo
echo "rc=$rc"
"""
state = os.path.join(work, "state.json")
env = dict(os.environ, ROOT=root, VOLUME=volume, HOOK=HOOK, ALLOW="t1=*", RUN=run_dir, SHIM=SHIM, STATE=state,
           HOST=host[len(os.path.dirname(host)):])
stop = multiprocessing.Event()
flipper = multiprocessing.Process(target=flip, args=(stop,))
flipper.start()
escaped = succeeded = refused = 0
try:
    for i in range(RUNS):
        # The hook is the child of state.pid at createContainer: the shell.
        out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              'printf \'{"ociVersion":"1.0.2","id":"c%d","pid":%%d,"bundle":"%s",'
                              '"annotations":{"gpuslice.io/tenant":"t1"}}\' $$ > "$STATE"; %s' % (i, bundle, TRIAL)],
                             env=env, capture_output=True, text=True).stdout
        escaped += "escaped" in out
        succeeded += "rc=0" in out
        refused += "rc=1" in out
finally:
    stop.set()
    flipper.join(10)
checks.expect(flipper.exitcode == 0, "1: the directory was swapped all along (flipper exit %s)" % flipper.exitcode)
checks.expect(succeeded > 0, "1: the hook succeeded in %d of %d runs (refused in %d)" % (succeeded, RUNS, refused))
checks.expect(escaped == 0, "1: no run mounted the host directory inside the container's root (%d did)" % escaped)


def fresh_root(name):
    """A bundle whose root has /etc, /run, /tmp, /proc and /usr/lib."""
    b = os.path.join(work, name)
    for d in ("etc", "run", "tmp", "proc", "usr/lib"):
        os.makedirs(os.path.join(b, "rootfs", d))
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, f)
    return b


def hook_in_namespace(b, before="", after=""):
    """Runs the hook for bundle b in a private mount namespace, with shell
    commands before and after it; (exit status, stdout, stderr)."""
    script = ('printf \'{"ociVersion":"1.0.2","id":"c","pid":%%d,"bundle":"%s",'
              '"annotations":{"gpuslice.io/tenant":"t1"}}\' $$ > "$STATE"; %s\n'
              '"$HOOK" --allow "$ALLOW" --run-dir "$RUN" --shim "$SHIM" < "$STATE"; echo "rc=$?"\n%s'
              % (b, before, after))
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env=env,
                       capture_output=True, text=True)
    return p.stdout, p.stderr


# ---- 2. a symlinked /etc/ld.so.preload ------------------------------------------
b = fresh_root("symlinked")
os.symlink("/usr/lib/gpuslice/libgpuslice.so", os.path.join(b, "rootfs", "etc", "ld.so.preload"))
out, err = hook_in_namespace(b)
checks.expect("rc=1" in out and "is a symbolic link" in err,
              "2: an image whose /etc/ld.so.preload is a symlink is refused (%s; %s)" % (out.strip(), err.strip()))

# ---- 3. the flags of what an overlay covers -------------------------------------
b = fresh_root("flags")
run = os.path.join(b, "rootfs", "run")
out, err = hook_in_namespace(b, before='mount -t tmpfs -o ro,nosuid,nodev,noexec tmpfs "%s"' % run,
                             after='grep " %s " /proc/self/mountinfo' % run)
options = [line.split()[5] for line in out.splitlines() if len(line.split()) > 5 and line.split()[4] == run]
top = options[-1].split(",") if options else []
checks.expect("rc=0" in out, "3: the hook serves a root whose /run is a read-only tmpfs (%s)" % err.strip())
checks.expect(all(flag in top for flag in ("ro", "nosuid", "nodev", "noexec")),
              "3: the overlay over /run keeps ro, nosuid, nodev, noexec (%s)" % (options[-1] if options else "none"))

# ---- 4. two mounts stacked on one path below a covered directory ---------------
# The image lacks /etc/ld.so.preload, so /etc is covered; the runtime's
# /etc/hosts has a second mount on top of the first (a volume, say): the
# one on top is the container's and must be the one kept.
b = fresh_root("stacked")
hosts = os.path.join(b, "rootfs", "etc", "hosts")
open(hosts, "w").close()
for name, text in (("lower", "lower\n"), ("upper", "upper\n")):
    with open(os.path.join(work, name), "w") as f:
        f.write(text)
out, err = hook_in_namespace(b, before='mount --bind "%s" "%s"; mount --bind "%s" "%s"'
                             % (os.path.join(work, "lower"), hosts, os.path.join(work, "upper"), hosts),
                             after='cat "%s"' % hosts)
checks.expect("rc=0" in out and out.strip().endswith("upper"),
              "4: with two mounts stacked on /etc/hosts the hook serves the container and keeps the top one (%s; %s)"
              % (out.strip().replace("\n", " "), err.strip()))

# ---- 5. run through a wrapper, in the container's PID namespace -----------------
# At createContainer the hook is in the container's PID namespace while /proc
# is still the host's; run from the init's child (not the init itself),
# state.pid (1) cannot be looked up there: /proc/1 is the host's init.
b = fresh_root("wrapped")
script = ('printf \'{"ociVersion":"1.0.2","id":"c","pid":1,"bundle":"%s",'
          '"annotations":{"gpuslice.io/tenant":"t1"}}\' > "$STATE"; '
          'sh -c \'"$HOOK" --allow "$ALLOW" --run-dir "$RUN" --shim "$SHIM" < "$STATE"; echo "rc=$?"\'' % b)
p = subprocess.run(["unshare", "-m", "-p", "--fork", "--propagation", "private", "sh", "-c", script], env=env,
                   capture_output=True, text=True)
checks.expect("rc=1" in p.stdout and "not of the hook's PID namespace" in p.stderr,
              "5: the hook run through a wrapper with the host's /proc refuses, rather than enter the host's init's "
              "mounts (%s; %s)" % (p.stdout.strip(), p.stderr.strip()))

# ---- 6. the container's own writable layer, or not --------------------------------
def overlay_case(name, sub="", ro=False):
    """An overlay of an image directory (lower) and an upper directory,
    mounted in the hook's namespace at the bundle's root (or with the root
    at its subdirectory sub); the hook's output and what the upper layer
    and the image directory hold afterwards."""
    b = os.path.join(work, name)
    layers = {d: os.path.join(b, d) for d in ("lower", "upper", "work", "merged")}
    image = os.path.join(layers["lower"], sub) if sub else layers["lower"]
    root = os.path.join(layers["merged"], sub) if sub else layers["merged"]
    for d in ("etc", "run", "tmp", "proc", "usr/lib"):
        os.makedirs(os.path.join(image, d))
    for d in ("upper", "work", "merged"):
        os.makedirs(layers[d])
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "root": {"path": root}}, f)
    options = "lowerdir=%s,upperdir=%s,workdir=%s%s" % (layers["lower"], layers["upper"], layers["work"],
                                                        ",ro" if ro else "")
    out, err = hook_in_namespace(b, before='mount -t overlay overlay -o %s "%s"' % (options, layers["merged"]),
                                 after='cat "%s/etc/ld.so.preload"; grep -c " %s/etc .* - overlay " /proc/self/mountinfo'
                                 % (root, root))
    in_upper = sorted(p for p in ("etc/ld.so.preload", "usr/lib/gpuslice/libgpuslice.so", "run/gpuslice")
                      if os.path.lexists(os.path.join(layers["upper"], sub, p)))
    in_image = image_paths(image)
    return out, err, in_upper, in_image


def image_paths(root):
    return [p for p in ("run/gpuslice", "usr/lib/gpuslice", "etc/ld.so.preload")
            if os.path.lexists(os.path.join(root, p))]


out, err, in_upper, in_image = overlay_case("own")
lines = out.strip().splitlines()
checks.expect("rc=0" in out and "/usr/lib/gpuslice/libgpuslice.so" in out and lines[-1:] == ["0"],
              "6: a root that is a writable overlay mount of its own is served with no overlay over /etc (%s; %s)"
              % (out.strip().replace("\n", " "), err.strip()))
checks.expect(len(in_upper) == 3 and not in_image,
              "6: ... its mount points are in its upper layer (%s), none in the image's (%s)" % (in_upper, in_image))
for name, kw, what in (("inside", {"sub": "rootfs"}, "a directory inside an overlay"),
                       ("read-only", {"ro": True}, "a read-only overlay")):
    out, err, in_upper, in_image = overlay_case(name, **kw)
    lines = out.strip().splitlines()
    checks.expect("rc=0" in out and not in_upper and not in_image and lines[-1:] == ["1"],
                  "6: a root that is %s is served under an overlay of /etc, writing into neither layer "
                  "(%s; upper %s, image %s; %s)" % (what, out.strip().replace("\n", " "), in_upper, in_image,
                                                    err.strip()))
checks.finish()
