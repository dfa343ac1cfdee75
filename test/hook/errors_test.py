"""gpuslice-hook refuses, with one line naming the problem and a non-zero
status (so the runtime does not start the container unprotected), every
case it cannot serve: no tenant annotation, a malformed tenant name, a
tenant no --allow rule admits for the container's cgroup (no rules at all,
a rule for another tenant or another cgroup), a tenant the server does not
serve, no server directory, no preload list, malformed JSON; a malformed
--allow rule is a usage error. These checks come before any mount, so no
root and no container runtime are needed; test/containers/ runs the hook
for real."""
import json
import os
import subprocess
import sys
import tempfile

from testlib import BUILD, SHIM, Checks

HOOK = os.path.join(BUILD, "hook", "gpuslice-hook")
if not os.path.exists(HOOK):
    print("skipped: gpuslice-hook was not built (json-c missing: apt-get install libjson-c-dev)")
    sys.exit(77)

checks = Checks()
work = tempfile.mkdtemp(prefix="gpuslice-hook-")
run_dir = os.path.join(work, "run")
os.makedirs(os.path.join(run_dir, "tenants", "team-a"))
os.makedirs(os.path.join(run_dir, "cdi"))
# A real listening socket is not needed: the hook checks that one exists.
import socket  # noqa: E402
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.bind(os.path.join(run_dir, "tenants", "team-a", "gpuslice.sock"))
bundle = os.path.join(work, "bundle")
os.makedirs(os.path.join(bundle, "rootfs"))


def run_hook(state, config=None, run=run_dir, allow=("*=*",), cgroup=None):
    """Runs the hook with --allow rules allow, config.json config (or one
    whose linux.cgroupsPath is cgroup)."""
    if config is None:
        config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}}
        if cgroup is not None:
            config["linux"] = {"cgroupsPath": cgroup}
    with open(os.path.join(bundle, "config.json"), "w") as f:
        f.write(config if isinstance(config, str) else json.dumps(config))
    stdin = state if isinstance(state, str) else json.dumps(state)
    argv = [HOOK, "--run-dir", run, "--shim", SHIM]
    for rule in allow:
        argv += ["--allow", rule]
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    return p.returncode, p.stderr.strip()


def state(tenant=None):
    s = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 999999, "bundle": bundle}
    if tenant is not None:
        s["annotations"] = {"gpuslice.io/tenant": tenant}
    return s


def refused(label, result, *words):
    code, err = result
    one_line = err.count("\n") == 0 and err.startswith("gpuslice-hook: ")
    checks.expect(code == 1 and one_line and all(w in err for w in words),
                  "%s: exit 1 and one line naming %s (%d: %s)" % (label, ", ".join(words), code, err))


refused("no annotation", run_hook(state()), "gpuslice.io/tenant", "c1")
refused("malformed name", run_hook(state("../team-a")), "'../team-a'", "not a valid tenant name")
refused("name with a slash", run_hook(state("team-a/x")), "'team-a/x'")
refused("empty name", run_hook(state("")), "gpuslice.io/tenant")
refused("unknown tenant", run_hook(state("team-zz")), "unknown tenant 'team-zz'")
# The annotation alone (which an image can carry: podman copies an image's
# annotations into its containers') chooses no tenant: an --allow rule must
# admit the tenant for the container's cgroup.
refused("no --allow rule", run_hook(state("team-a"), allow=()), "c1", "'team-a'", "--allow", "team-a=CGROUP")
refused("a rule for another tenant", run_hook(state("team-a"), allow=("team-b=*",), cgroup="/gs/team-a/c1"),
        "c1", "'/gs/team-a/c1'", "may not use tenant 'team-a'")
refused("a rule for another cgroup", run_hook(state("team-a"), allow=("team-a=/gs/team-a/*",), cgroup="/gs/team-b/c1"),
        "'/gs/team-b/c1'", "may not use tenant 'team-a'")
refused("a pattern that is a prefix, not a match", run_hook(state("team-a"), allow=("team-a=/gs/team-a",),
                                                            cgroup="/gs/team-a/c1"), "may not use tenant 'team-a'")
refused("no cgroup path", run_hook(state("team-a"), allow=("team-a=/gs/*",)), "cgroup ''", "may not use tenant")
# Past the rules, the next check speaks: the rule admitted the tenant.
for rule, cgroup in (("team-q=/gs/team-q/*", "/gs/team-q/c1"), ("*=/gs/*", "/gs/team-q/c1"),
                     ("team-q=team_q.slice:*", "team_q.slice:crio:c1")):
    refused("admitted by %s" % rule, run_hook(state("team-q"), allow=("team-b=*", rule), cgroup=cgroup),
            "unknown tenant 'team-q'")
refused("no server directory", run_hook(state("team-a"), run=os.path.join(work, "nowhere")),
        os.path.join(work, "nowhere"), "gpuslice-server")
refused("no preload list", run_hook(state("team-a")), "preload list", "ld.so.preload")
# An annotation is the container's to choose: control bytes in it are
# shown escaped, so that it cannot add lines to the runtime's log.
refused("name with a newline", run_hook(state("x\ngpuslice-hook: container c1 OK")), "x\\x0agpuslice-hook")
refused("malformed state", run_hook("{\"pid\": 12, "), "state", "JSON")
refused("state without pid", run_hook({"bundle": bundle}), "pid")
refused("malformed config.json", run_hook(state("team-a"), config="[1,2"), "config.json")
refused("config.json without root", run_hook(state("team-a"), config={"ociVersion": "1.0.2"}), "root.path")
# The annotation may come from config.json alone (older runtimes' state).
cfg = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "annotations": {"gpuslice.io/tenant": "team-q"}}
refused("tenant from config.json", run_hook(state(), config=cfg), "unknown tenant 'team-q'")
code = subprocess.run([HOOK, "--bogus"], capture_output=True).returncode
checks.expect(code == 2, "a usage error exits 2 (%d)" % code)
for rule in ("team-a", "team-a=", "../x=*", "=*", "team a=*"):
    p = subprocess.run([HOOK, "--allow", rule], input="{}", capture_output=True, text=True)
    checks.expect(p.returncode == 2 and ("--allow " + rule) in p.stderr and p.stderr.count("\n") == 1,
                  "a malformed rule --allow '%s' is a usage error, exit 2, one line naming it (%d: %s)"
                  % (rule, p.returncode, p.stderr.strip()))
sock.close()
subprocess.run(["rm", "-rf", work])
checks.finish()
