"""What `meson install` puts on a machine (issue 29: the README said to
start gpuslice-server, but nothing installed a unit or a hooks.d file),
checked in a DESTDIR: the server, gpuslicectl, the shim, gpuslice-hook,
the systemd unit (systemd-analyze verify, where systemd is there) whose
ExecStart is the installed server, the hooks.d file naming the installed
hook and shim, the manual pages the build made, and the examples (spin,
infer) in LIBEXECDIR/gpuslice. The installed server and gpuslicectl answer
--version, and the examples --help."""
import json
import os
import shutil
import subprocess
import tempfile

from testlib import BUILD, Checks

checks = Checks()
dest = tempfile.mkdtemp(prefix="gpuslice-install-")
p = subprocess.run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild", "--quiet"],
                   capture_output=True, text=True)
checks.expect(p.returncode == 0, "meson install --destdir works (%s)" % p.stderr.strip()[-300:])
intro = json.loads(subprocess.run(["meson", "introspect", BUILD, "--buildoptions"], capture_output=True, text=True,
                                  check=True).stdout)
opt = {o["name"]: o["value"] for o in intro}
prefix = opt["prefix"]


def installed(*parts):
    return os.path.join(dest, prefix.lstrip("/"), *parts)


files = {
    "server": installed(opt["bindir"], "gpuslice-server"),
    "gpuslicectl": installed(opt["bindir"], "gpuslicectl"),
    "shim": installed(opt["libdir"], "libgpuslice.so"),
    "unit": installed("lib", "systemd", "system", "gpuslice-server.service"),
}
hook = installed(opt["libexecdir"], "gpuslice-hook")
hooks_d = installed(opt["datadir"], "containers", "oci", "hooks.d", "gpuslice.json")
if os.path.exists(os.path.join(BUILD, "hook", "gpuslice-hook")):
    files.update({"hook": hook, "hooks.d file": hooks_d})
# The manual pages the build made (man/meson.build), in MANDIR/man1 and man5.
for page in sorted(os.listdir(os.path.join(BUILD, "man")) if os.path.isdir(os.path.join(BUILD, "man")) else []):
    if page.endswith((".1", ".5")):
        files["page " + page] = installed(opt["mandir"], "man" + page[-1], page)
# The examples an installed node runs its demonstrations with.
for example in ("spin", "infer"):
    files["example " + example] = installed(opt["libexecdir"], "gpuslice", example)
for what, path in files.items():
    checks.expect(os.path.isfile(path), "installs the %s (%s)" % (what, path[len(dest):]))

unit = open(files["unit"]).read() if os.path.exists(files["unit"]) else ""
exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
checks.expect(exec_start and exec_start[0].split("=", 1)[1].split()[0] == files["server"][len(dest):],
              "the unit starts the installed server (%s)" % exec_start)
checks.expect(not [line for line in unit.splitlines() if line.startswith("RuntimeDirectory")], "the unit does not make /run/gpuslice a RuntimeDirectory (systemd "
              "would remove it at each stop, under running containers)")
if shutil.which("systemd-analyze") and unit:
    local = os.path.join(dest, "check.service")
    with open(local, "w") as f:
        f.write(unit.replace(exec_start[0], "ExecStart=%s --version" % files["server"]))
    v = subprocess.run(["systemd-analyze", "verify", local], capture_output=True, text=True)
    checks.expect(v.returncode == 0, "systemd-analyze verify accepts the unit (%s)" % v.stderr.strip()[-300:])
if "hooks.d file" in files and os.path.exists(hooks_d):
    h = json.load(open(hooks_d))
    checks.expect(h["hook"]["path"] == hook[len(dest):] and files["shim"][len(dest):] in h["hook"]["args"],
                  "the hooks.d file names the installed hook and shim (%s)" % h["hook"])
for what in ("server", "gpuslicectl"):
    r = subprocess.run([files[what], "--version"], capture_output=True, text=True)
    checks.expect(r.returncode == 0, "the installed %s runs (%s)" % (what, r.stdout.strip()))
for example in ("spin", "infer"):
    path = files["example " + example]
    r = subprocess.run([path, "--help"], capture_output=True, text=True) if os.path.exists(path) else None
    checks.expect(r is not None and r.returncode == 0 and "Usage" in r.stdout + r.stderr,
                  "the installed %s answers --help (%s)" % (example, r and (r.stdout + r.stderr).strip()[:80]))
shutil.rmtree(dest, ignore_errors=True)
checks.finish()
