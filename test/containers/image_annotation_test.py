"""An image cannot choose its container's tenant under podman's hooks.d.

podman copies an image's annotations into the container's OCI spec (an
annotation given with `podman run --annotation` wins over the image's), so
an image built with `podman build --annotation gpuslice.io/tenant=b` asks
for tenant b in every container run from it. gpuslice-hook serves a
tenant only where one of its --allow rules (the hooks.d file's args, the
host's word) admits the tenant for the container's cgroup, which the
image cannot set.

1. The hooks.d file as shipped (no rule): `podman run IMAGE` is refused and
   the error names the tenant (before the rules: the container started
   with tenant b's socket at /run/gpuslice).
2. With rules a=/P/a/*, b=/P/b/*: the image's container in podman's
   default cgroup is refused, and so is one in a's cgroup (--cgroup-parent
   /P/a: a is allowed there, b is not).
3. In a's cgroup with `--annotation gpuslice.io/tenant=a` (the user's word
   wins over the image's) the container is served as a: /run/gpuslice is
   tenant a's directory and /etc/ld.so.preload names the shim. In b's
   cgroup the image's own annotation is served as b: the host put it there.

Needs root, podman and runc; skipped otherwise, a failure under
GPUSLICE_REQUIRE_CONTAINERS=1."""
import json
import os
import subprocess

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server

ctlib.require({"podman": "podman", "runc": "runc"})
ctlib.require_hook()
checks = Checks()
PARENT = "gpuslice-test-%d" % os.getpid()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    cleanup.add(lambda: runtimes.remove_cgroups(PARENT))  # after the containers are gone
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    server = Server(machine, ctlib.tenants())
    cleanup.add(server.stop)
    image = "localhost/gpuslice-test-%d-evil" % os.getpid()
    cleanup.add(lambda: runtimes.remove_image(image))
    runtimes.build_image(image, rootfs, {"gpuslice.io/tenant": "b"})

    def hooks_dir(name, allow):
        d = os.path.join(machine.dir, name)
        os.mkdir(d)
        with open(os.path.join(d, "gpuslice.json"), "w") as f:
            json.dump(runtimes.hook_config(server.run_dir, allow=allow), f)
        return d

    shipped = runtimes.Podman(machine, ["--hooks-dir", hooks_dir("hooks-shipped", [])])
    cleanup.add(shipped.cleanup)
    ruled = runtimes.Podman(machine, ["--hooks-dir", hooks_dir("hooks-ruled", ["a=/%s/a/*" % PARENT,
                                                                              "b=/%s/b/*" % PARENT])])
    cleanup.add(ruled.cleanup)
    show = ["/bin/sh", "-c", "cat /etc/ld.so.preload; cat /proc/self/mountinfo"]

    def tenant_dir(out):
        """The host directory mounted at /run/gpuslice (mountinfo's root
        field), or None."""
        for line in out.splitlines():
            f = line.split()
            if len(f) > 4 and f[4] == ctlib.C_RUN_DIR:
                return f[3]
        return None

    inspect = subprocess.run(["podman", "image", "inspect", "--format", "{{json .Annotations}}", image],
                             capture_output=True, text=True).stdout
    checks.expect('"gpuslice.io/tenant":"b"' in inspect.replace(" ", ""),
                  "the image carries the annotation gpuslice.io/tenant=b (%s)" % inspect.strip())

    # ---- 1. the hooks.d file as shipped --------------------------------------------
    code, out, err = shipped.run("shipped", image, show)
    checks.expect(code != 0 and tenant_dir(out) is None and "gpuslice-hook:" in err and "'b'" in err
                  and "--allow" in err,
                  "1: with the hooks.d file as shipped, `podman run IMAGE` of an image annotated "
                  "gpuslice.io/tenant=b is refused, and the error names the tenant and --allow "
                  "(%d, mounted %s: %s)" % (code, tenant_dir(out), err.strip()[-300:]))

    # ---- 2. rules that do not admit the image's choice --------------------------------
    code, out, err = ruled.run("default-cgroup", image, show)
    checks.expect(code != 0 and tenant_dir(out) is None and "'b'" in err and "libpod" in err,
                  "2: in podman's default cgroup the image's tenant b is refused; the error names the tenant and "
                  "the cgroup (%d, mounted %s: %s)" % (code, tenant_dir(out), err.strip()[-300:]))
    code, out, err = ruled.run("a-cgroup", image, show, args=["--cgroup-parent", "/%s/a" % PARENT])
    checks.expect(code != 0 and tenant_dir(out) is None and "'b'" in err and "/%s/a/" % PARENT in err,
                  "2: in tenant a's cgroup the image's tenant b is refused (%d, mounted %s: %s)"
                  % (code, tenant_dir(out), err.strip()[-300:]))

    # ---- 3. what the host allows ---------------------------------------------------
    code, out, err = ruled.run("a-named", image, show, args=["--cgroup-parent", "/%s/a" % PARENT,
                                                             "--annotation", "gpuslice.io/tenant=a"])
    mounted = tenant_dir(out) or ""
    checks.expect(code == 0 and mounted.endswith("/tenants/a") and out.startswith(ctlib.C_SHIM),
                  "3: in a's cgroup, with --annotation gpuslice.io/tenant=a, the container is served as a "
                  "(%d, /run/gpuslice from %s, preload %r: %s)"
                  % (code, mounted, out.split("\n")[0], err.strip()[-300:]))
    code, out, err = ruled.run("b-cgroup", image, show, args=["--cgroup-parent", "/%s/b" % PARENT])
    mounted = tenant_dir(out) or ""
    checks.expect(code == 0 and mounted.endswith("/tenants/b"),
                  "3: in b's cgroup the image's own annotation is served as b (%d, /run/gpuslice from %s: %s)"
                  % (code, mounted, err.strip()[-300:]))
checks.finish()
