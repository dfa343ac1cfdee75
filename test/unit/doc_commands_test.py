"""The shell commands of the docs, judged one block at a time: every fenced
```sh, ```bash, ```shell and ```console block of README.md and
docs/operating/*.md has a verdict in VERDICTS below, and a block without
one fails the test, so that a command added to the docs cannot go
unchecked. A verdict is one of:

- Runs: the block runs here, as written, on a temporary node (below),
  and what it prints and leaves behind is checked: exit status 0 and what
  the docs say it does (gpuslicectl status shows the tenant, the CDI spec
  names it, the uninstall leaves 'uninstalled open' ...). A verdict may
  leave out a line that cannot run here (each with its reason) and name
  replacements (each with its reason: train.py, the user's program, is
  spin here); everything else runs with bash -e.
- Elsewhere: another test of the suite runs these commands (podman, an
  install in a DESTDIR, the README's by-hand recipe); the verdict names
  that test, and its file must still hold what it runs.
- NotHere: the block cannot run in this suite (a Kubernetes cluster, a
  container registry, a second build); the verdict says why. A block
  whose every command is kubectl needs a cluster, without a verdict of
  its own.

A verdict holds its block's text: when the block changes, its verdict no
longer matches, the block is reported unjudged and the verdict stale,
until the verdict is looked at again.

The temporary node: a directory that stands for /. Paths the docs write
(/etc/gpuslice, /run/gpuslice, /var/run/cdi, /etc/cdi, the installed
shim) are replaced by their places in it; on PATH, gpuslice-server and
gpuslicectl are this build's programs with each default path they would
use (config, run and CDI directory, shim, NVIDIA and pod-log directory)
moved into the node, and no metrics port unless the command gives one;
systemctl starts and stops the server as the unit this build made
(build/deploy/gpuslice-server.service) says, with its ExecStart's paths
moved into the node; fakecuda is the driver, and spin the user's
program. A block that still names a system path after that is refused,
not run. Run as root (CI), the node has users: gpuslice-server,
gpuslicectl, spin and systemctl run as root under sudo and as nobody
without it, so that a command the docs give without sudo and that needs
root on a node fails here too (gpuslicectl needs the admin socket, mode
0600). Run as another user, sudo only runs its command, and a missing
sudo goes unnoticed.

Also: a fenced block without a shell language whose first word is a
command (gpuslicectl, sudo, podman, ...) fails: label it so that it is
judged. And negative controls: a wrong option, and a failing command
before a passing one, fail a block; an unlisted block and a stale
verdict are reported.

Usage: doc_commands_test.py SOURCE_ROOT BUILD_ROOT"""
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from testlib import Checks

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build"))
SERVER = os.path.join(BUILD, "tokenserver", "gpuslice-server")
CTL = os.path.join(BUILD, "tokenserver", "gpuslicectl")
SHIM = os.path.join(BUILD, "shim", "libgpuslice.so")
UNIT = os.path.join(BUILD, "deploy", "gpuslice-server.service")
SHELL_LANGS = ("sh", "bash", "shell", "console")
# First words that make a block without a shell language a command.
COMMAND_WORDS = {"gpuslicectl", "gpuslice-server", "gpuslice-hook", "gpuslice-dra", "sudo", "systemctl", "podman",
                 "docker", "kubectl", "ctr", "meson", "ninja", "mkdir", "printf", "cat", "curl", "export",
                 "python3", "helm", "runc", "spin"}
NOBODY = 65534


def can_drop():
    """Whether the node can have users: this test runs as root and nobody
    can read the build."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    return subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", "--",
                           "test", "-r", SHIM, "-a", "-x", CTL, "-a", "-x", SERVER], env={}).returncode == 0


DROP = can_drop()


def documents():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "operating", "*.md")))


# ---- the blocks ---------------------------------------------------------------------

class Block:
    def __init__(self, doc, line, lang, text):
        self.doc, self.line, self.lang, self.text = doc, line, lang, text

    def where(self):
        return "%s:%d" % (self.doc, self.line)


FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$",
                   re.M | re.S)


def normal(text):
    """A block's text as verdicts hold it: no trailing spaces, no blank
    lines at either end."""
    return "\n".join(l.rstrip() for l in text.strip("\n").splitlines())


def extract(doc, text):
    """Every fenced block of a markdown text, its indentation taken off."""
    blocks = []
    for m in FENCE.finditer(text):
        n = len(m.group("indent"))
        body = "\n".join(l[n:] if l[:n].strip() == "" else l for l in m.group("body").splitlines())
        blocks.append(Block(doc, text.count("\n", 0, m.start()) + 1, m.group("lang"), normal(body)))
    return blocks


def commands(block):
    """The commands of a block, each with its continuation lines (a line
    ending in a backslash) joined on: a console block's lines after '$ ',
    another's lines that are not comments or blank."""
    lines, out, cont = block.text.splitlines(), [], False
    for l in lines:
        if cont:
            out[-1] = out[-1][:-1] + " " + l.strip()
        elif block.lang == "console":
            if not l.startswith("$ "):
                continue
            out.append(l[2:])
        elif l.strip() and not l.lstrip().startswith("#"):
            out.append(l)
        else:
            continue
        cont = out[-1].endswith("\\")
    return out


def script_of(lang, text):
    """What bash runs of a block: a console block's commands, another
    block as it is."""
    return "\n".join(commands(Block("", 0, lang, text))) if lang == "console" else text


# ---- verdicts -----------------------------------------------------------------------

class Verdict:
    def __init__(self, doc, text, why):
        self.doc, self.text, self.why = doc, normal(text), why


class NotHere(Verdict):
    pass


class Elsewhere(Verdict):
    def __init__(self, doc, text, test, path, holds, why=""):
        """test: the test's name; path: its file, which must hold each of
        holds (what it runs of the block)."""
        super().__init__(doc, text, why)
        self.test, self.path, self.holds = test, path, holds


class Runs(Verdict):
    def __init__(self, doc, text, node, step, expect=(), check=None, before=None, replace=(), leave_out=(),
                 timeout=30):
        """node: the name of the temporary node it runs on, step: its turn
        there (blocks on the same node run in the order of their steps, on
        the same files and server: install, use, uninstall); expect: patterns
        its output must match; check(node, output): (condition, what)
        pairs; before(node): prepares the node, and says (condition, what)
        whether it is ready; replace: (text, by, why);
        leave_out: (line's text, why), lines that cannot run here."""
        super().__init__(doc, text, "")
        self.node, self.step, self.expect, self.check, self.before = node, step, expect, check, before
        self.replace, self.leave_out, self.timeout = replace, leave_out, timeout


KUBECTL_ONLY = "needs a Kubernetes cluster (kubernetes/manifests validates the manifests offline)"


def verdict_for(block, verdicts):
    for v in verdicts:
        if v.doc == block.doc and v.text == block.text:
            return v
    cmds = commands(block)
    if cmds and all(c.startswith("kubectl ") for c in cmds):
        return NotHere(block.doc, block.text, KUBECTL_ONLY)
    return None


def judge(blocks, verdicts):
    """(block, verdict) for the shell blocks, and the problems: blocks
    without a verdict, verdicts without a block, blocks that are commands
    without a shell language."""
    judged, problems = [], []
    for b in blocks:
        if b.lang in SHELL_LANGS:
            v = verdict_for(b, verdicts)
            if v is None:
                problems.append("%s: a ```%s block without a verdict in doc_commands_test.py's VERDICTS "
                                "(it runs here, another test runs it, or why it cannot run here): %r"
                                % (b.where(), b.lang, b.text[:200]))
            else:
                judged.append((b, v))
        else:
            first = next((l.split()[0] for l in b.text.splitlines() if l.strip()), "")
            if first in COMMAND_WORDS or re.match(r"[A-Z_]+=\S", first):
                problems.append("%s: a block of commands (%r) without a shell language: label it ```sh so that "
                                "it is judged" % (b.where(), first))
    found = {(b.doc, b.text) for b in blocks if b.lang in SHELL_LANGS}
    for v in verdicts:
        if (v.doc, v.text) not in found:
            problems.append("%s: a verdict whose block is not there (changed or gone: look at it again): %r"
                            % (v.doc, v.text[:200]))
    return judged, problems


# ---- the temporary node -------------------------------------------------------------

# Paths the docs write -> their place under the node's root.
NODE_PATHS = ["/etc/gpuslice", "/run/gpuslice", "/var/run/cdi", "/etc/cdi", "/proc/driver/nvidia",
              "/var/log/containers"]
SYSTEM_PATH = re.compile(r"(?<![\w.~$/-])/(etc|run|var|usr|opt|proc|lib|lib64|sys|dev|srv|boot|root|home)(/|\b)")
BOUNDARY = r"(?<![\w.~$/-])%s(?=[/\s'\":;)]|$)"


class Node:
    def __init__(self, name, top):
        self.name = name
        self.root = os.path.join(top, name)
        self.bin = os.path.join(self.root, "usr-bin")
        self.work = os.path.join(self.root, "work")
        self.journal = os.path.join(self.root, "journal")
        self.pidfile = os.path.join(self.root, "gpuslice-server.pid")
        for d in (self.bin, self.work, self.path("/run"), self.path("/var/run"), self.path("/dev/shm")):
            os.makedirs(d, exist_ok=True)
        for d in (top, self.root, self.path("/dev"), self.path("/run"), self.path("/var"), self.path("/var/run")):
            os.chmod(d, 0o755)
        # The simulated GPU's state, which every user's processes share.
        os.chmod(self.path("/dev/shm"), 0o1777)
        os.symlink(BUILD, os.path.join(self.work, "build"))
        self.blocks_run = 0
        self._wrappers()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSLICE_", "FAKECUDA_", "LD_"))}
        self.env.update({"PATH": self.bin + ":" + os.environ["PATH"],
                         "LD_LIBRARY_PATH": os.path.join(BUILD, "test", "fakecuda"),
                         "FAKECUDA_STATE": self.path("/dev/shm/fakecuda.state"), "HOME": self.work})

    def path(self, doc_path):
        """Where a path of the docs is on this node."""
        return self.root + doc_path

    def map(self, text):
        """The docs' paths in text moved into the node."""
        text = re.sub(BOUNDARY % re.escape("/usr/local/lib/x86_64-linux-gnu/libgpuslice.so"), SHIM, text)
        for p in NODE_PATHS:
            text = re.sub(BOUNDARY % re.escape(p), self.path(p), text)
        return text

    def _write(self, name, text):
        with open(os.path.join(self.bin, name), "w") as f:
            f.write("#!/bin/bash\n" + text)
        os.chmod(os.path.join(self.bin, name), 0o755)

    def _wrappers(self):
        given = ('given() { local a o; for a in "${args[@]}"; do for o in "$@"; do\n'
                 '  [[ $a == "$o" || $a == "$o="* ]] && return 0; done; done; return 1; }\n'
                 'args=("$@"); extra=()\n')

        def default(opts, value):
            return "given %s || extra+=(%s %s)\n" % (" ".join(opts), opts[-1], shlex.quote(value))

        p = self.path
        # Without sudo, as nobody (only when the node has users).
        user = ('as_user=()\n[ "$(id -u)" = 0 ] && [ -z "${DOC_NODE_SUDO:-}" ] && %s && '
                'as_user=(setpriv --reuid=%d --regid=%d --clear-groups --)\n' % ("true" if DROP else "false",
                                                                                NOBODY, NOBODY))
        self._write("gpuslice-server", "# this build's server, its defaults on the node\n" + given + user
                    + default(["-c", "--config-dir"], p("/etc/gpuslice/tenants.d"))
                    + default(["-r", "--run-dir"], p("/run/gpuslice"))
                    + default(["--cdi-dir"], p("/var/run/cdi"))
                    + default(["--shim"], SHIM)
                    + default(["-m", "--metrics"], "")
                    + default(["--nvidia-dir"], p("/proc/driver/nvidia"))
                    + default(["--pod-log-dir"], p("/var/log/containers"))
                    + 'exec "${as_user[@]}" %s "${extra[@]}" "$@"\n' % shlex.quote(SERVER))
        self._write("gpuslicectl", "# this build's gpuslicectl, its defaults on the node\n" + given + user
                    + default(["-r", "--run-dir"], p("/run/gpuslice"))
                    + default(["-c", "--config-dir"], p("/etc/gpuslice/tenants.d"))
                    + default(["--shim"], SHIM)
                    + 'exec "${as_user[@]}" %s "${extra[@]}" "$@"\n' % shlex.quote(CTL))
        self._write("spin", "# the user's program\n" + user
                    + 'exec "${as_user[@]}" %s "$@"\n' % shlex.quote(os.path.join(BUILD, "examples", "spin", "spin")))
        self._write("sudo", '# its command as root where the node has users\nDOC_NODE_SUDO=1 exec "$@"\n')
        with open(UNIT) as f:
            start = re.search(r"^ExecStart=(.*)$", f.read(), re.M).group(1).split()
        start = ["gpuslice-server" if os.path.basename(start[0]) == "gpuslice-server" else start[0]] + \
            [self.map(a) for a in start[1:]]
        # An option of the unit with a path the node does not map: no block runs.
        self.problems = ["the unit's ExecStart keeps a system path: %r" % a for a in start
                         if SYSTEM_PATH.search(a.replace(self.root, "NODE"))]
        admin = os.path.join(self.path("/run/gpuslice"), "admin.sock")
        self._write("systemctl", """# the unit gpuslice-server, as BUILD/deploy/gpuslice-server.service runs it
pidfile=%(pidfile)s
if %(drop)s && [ -z "${DOC_NODE_SUDO:-}" ]; then
    echo "Failed to $1 unit: Interactive authentication required." >&2; exit 1
fi
start() {
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$pidfile" %(start)s </dev/null >>%(journal)s 2>&1 &
    for _ in $(seq 500); do
        [ -S %(admin)s ] && [ -s "$pidfile" ] && return 0
        sleep 0.02
    done
    echo "systemctl: gpuslice-server did not start:" >&2; tail -5 %(journal)s >&2; return 1
}
stop() {
    [ -s "$pidfile" ] || return 0
    local pid; pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 500); do kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }; sleep 0.02; done
    echo "systemctl: gpuslice-server $pid did not stop" >&2; return 1
}
case "$*" in
daemon-reload) exit 0 ;;
"enable --now gpuslice-server" | "start gpuslice-server") start ;;
"disable --now gpuslice-server" | "stop gpuslice-server") stop ;;
"restart gpuslice-server") stop && start ;;
*) echo "systemctl $*: not simulated on the test's node" >&2; exit 1 ;;
esac
""" % {"pidfile": shlex.quote(self.pidfile), "start": " ".join(shlex.quote(a) for a in start),
       "journal": shlex.quote(self.journal), "admin": shlex.quote(admin), "drop": "true" if DROP else "false"})

    def server_pid(self):
        try:
            with open(self.pidfile) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def wait_socket(self, path, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        return os.path.exists(path)

    def run(self, verdict, lang):
        """Runs a verdict's block: (exit status, output, problems found
        before it could run, the process group it ran in)."""
        text, problems = script_of(lang, verdict.text), list(self.problems)
        for line, why in verdict.leave_out:
            if line not in text.splitlines():
                problems.append("the line left out (%s) is not in the block: %r" % (why, line))
            text = "\n".join("# left out here: " + why if l == line else l for l in text.splitlines())
        for old, new, why in verdict.replace:
            if old not in text:
                problems.append("what is replaced (%s) is not in the block: %r" % (why, old))
            text = text.replace(old, new)
        text = self.map(text)
        for l in text.splitlines():
            code = re.sub(r"(^|\s)#.*", "", l)
            if SYSTEM_PATH.search(code.replace(self.root, "NODE").replace(BUILD, "BUILD")):
                problems.append("a system path left in the command, not run: %r" % l)
        if problems:
            return None, "", problems, None
        out_path = os.path.join(self.root, "out-%d" % self.blocks_run)
        with open(out_path, "w") as out:
            p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=self.work, env=self.env,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.blocks_run += 1
        try:
            rc = p.wait(timeout=verdict.timeout)
        except subprocess.TimeoutExpired:
            rc = "still running after %d s" % verdict.timeout
        with open(out_path) as f:
            return rc, f.read(), [], p.pid

    @staticmethod
    def stop_group(pgid):
        """Stops what a block left running in its process group (its own:
        bash started it in a new session)."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self):
        """Stops the server systemctl started, if it still runs."""
        pid = self.server_pid()
        if pid and "gpuslice-server" in read("/proc/%d/cmdline" % pid):
            os.kill(pid, signal.SIGKILL)


def run_verdict(nodes, top, verdict, lang="sh"):
    """Runs a Runs verdict on its node: a list of (condition, what)."""
    node = nodes.get(verdict.node)
    if node is None:
        node = nodes[verdict.node] = Node(verdict.node, top)
    what = "%s (node %s)" % (verdict.doc, verdict.node)
    if verdict.before:
        ready = [(c, "%s: %s" % (what, w)) for c, w in verdict.before(node)]
        if not all(c for c, _ in ready):
            return ready
    rc, out, problems, group = node.run(verdict, lang)
    if problems:
        return [(False, "%s: %s" % (what, p)) for p in problems]
    try:
        return judge_run(verdict, node, what, rc, out)
    finally:
        node.stop_group(group)


def said(cond, what, detail):
    """A check's (condition, message): the detail only when it fails."""
    return cond, what if cond else "%s (%s)" % (what, detail)


def judge_run(verdict, node, what, rc, out):
    results = [said(rc == 0, "%s: the block exits 0" % what, "%s; output: %s" % (rc, out[-1500:]))]
    for pattern in verdict.expect:
        results.append(said(re.search(pattern, out, re.M) is not None, "%s: its output matches %r" % (what, pattern),
                            out[-1500:]))
    if verdict.check:
        results += [(c, "%s: %s" % (what, w)) for c, w in verdict.check(node, out)]
    return results


# ---- what the runnable blocks leave behind ------------------------------------------

def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return "(%s)" % e


def readme_tenant_file():
    """The README's example tenant file (the block after 'Describe each
    tenant in /etc/gpuslice/tenants.d/NAME.conf')."""
    text = read(os.path.join(ROOT, "README.md"))
    after = text.split("Describe each tenant in `/etc/gpuslice/tenants.d/NAME.conf`", 1)[1]
    return extract("README.md", after)[0].text + "\n"


def add_readme_tenant(node):
    conf = node.path("/etc/gpuslice/tenants.d/team-a.conf")
    with open(conf + ".tmp", "w") as f:
        f.write(readme_tenant_file())
    os.rename(conf + ".tmp", conf)
    return [said(node.wait_socket(node.path("/run/gpuslice/tenants/team-a/gpuslice.sock")),
                 "the README's tenant file, as team-a.conf, makes tenant team-a",
                 "journal: " + read(node.journal)[-600:])]


def check_install(node, out):
    journal = read(node.journal)
    return [said(node.server_pid() is not None and "serving " + node.path("/etc/gpuslice/tenants.d") in journal,
                 "the unit's server serves the tenant directory the block made", "journal: " + journal[-600:]),
            said("warn: no tenant: %s has no valid tenant file" % node.path("/etc/gpuslice/tenants.d") in journal,
                 "and says it has no tenant yet", "journal: " + journal[-600:])]


def check_readme(node, out):
    # TENANT SHARE LIMIT CLIENTS DEVICE ACHIEVED SLICES WAIT GPU MEM CAP
    row = re.search(r"^team-a\s+(\d+)\s+([\d.]+)\s+\d+\s+GPU-\S+\s+[\d.]+%\s+(\d+)\s+[\d.]+\s+([\d.]+)"
                    r"\s+[\d.]+\s+([\d.]+)", out, re.M)
    shown = row.group(0) if row else out[-1500:]
    return [said(row is not None and row.group(1) == "3" and row.group(2) == "0.5",
                 "gpuslicectl status shows tenant team-a with the README's share 3 and limit 0.5", shown),
            said(row is not None and int(row.group(3)) > 0 and float(row.group(4)) > 0,
                 "the process under the shim was granted slices and GPU time in tenant team-a", shown),
            said(row is not None and row.group(5) == "4096.0", "team-a's memory cap is the README's 4G", shown)]


def check_uninstall(node, out):
    policy = read(node.path("/run/gpuslice/tenants/team-a/on-server-down"))
    spec = read(node.path("/var/run/cdi/gpuslice.json"))
    return [said(node.server_pid() is None and "signal 15: stopping" in read(node.journal),
                 "systemctl disable --now stopped the server", "journal: " + read(node.journal)[-600:]),
            said(policy.startswith("uninstalled open"), "team-a's on-server-down says 'uninstalled open'",
                 repr(policy)),
            said(not os.path.exists(node.path("/run/gpuslice/tenants/team-a/gpuslice.sock"))
                 and not os.path.exists(node.path("/run/gpuslice/admin.sock")), "the sockets are gone", out[-600:]),
            said("GPUSLICE_UNINSTALLED=1" in spec and '"team-a"' in spec,
                 "the CDI spec's device team-a only sets GPUSLICE_UNINSTALLED=1", spec[:600])]


def add_team_a(node):
    conf = node.path("/etc/gpuslice/tenants.d")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "team-a.conf"), "w") as f:
        f.write("share = 1\n")
    return []


def check_cdi(node, out):
    spec = read(node.path("/etc/cdi/gpuslice.json"))
    try:
        parsed = json.loads(spec)
        devices = [d["name"] for d in parsed["devices"]] if parsed["kind"] == "gpuslice.io/tenant" else []
    except (ValueError, KeyError, TypeError):
        devices = []
    return [said(devices == ["team-a"], "the server wrote /etc/cdi/gpuslice.json with the device "
                 "gpuslice.io/tenant=team-a that the podman line asks for", spec[:600] + out[-600:]),
            said(not os.path.exists(node.path("/var/run/cdi/gpuslice.json")), "and nothing into /var/run/cdi", "")]


# ---- the verdicts -------------------------------------------------------------------

PODMAN_ROOT = "podman as root (the containers suite runs it: %s)"
VERDICTS = [
    # README.md
    NotHere("README.md", """
scripts/demo    # build everything and run the demo
scripts/test    # build everything and run the whole test suite
""", "both build (and install missing packages with apt-get); scripts/test runs this suite, and the demo's "
         "commands are the by-hand recipe's (server/readme_by_hand)"),
    Runs("README.md", r"""
LD_PRELOAD=/usr/local/lib/x86_64-linux-gnu/libgpuslice.so \
GPUSLICE_SOCKET=/run/gpuslice/tenants/NAME/gpuslice.sock python3 train.py
sudo gpuslicectl status     # per GPU its holder; per tenant its share, achieved and target
""", "node", 2, before=add_readme_tenant, check=check_readme,
         replace=[("NAME", "team-a", "a tenant, with the README's tenant file"),
                  ("python3 train.py", "spin --seconds 1", "train.py is the user's program; spin stands in")],
         expect=[r"^spin: pid=\d+ .* kernels=[1-9]", r"^TENANT\s+SHARE\s+LIMIT"]),
    Elsewhere("README.md", """
mkdir -p /tmp/gs/tenants.d
printf 'share = 3\\n' > /tmp/gs/tenants.d/a.conf
printf 'share = 1\\n' > /tmp/gs/tenants.d/b.conf
build/tokenserver/gpuslice-server --config-dir /tmp/gs/tenants.d --run-dir /tmp/gs/run --cdi-dir '' --metrics '' &
export LD_LIBRARY_PATH=$PWD/build/test/fakecuda FAKECUDA_STATE=/tmp/gs/fakecuda.state
for t in a b; do
  LD_PRELOAD=$PWD/build/shim/libgpuslice.so GPUSLICE_SOCKET=/tmp/gs/run/tenants/$t/gpuslice.sock \\
      build/examples/spin/spin --seconds 5 &
done
sleep 3
build/tokenserver/gpuslicectl --run-dir /tmp/gs/run status    # a about 75 %, b 25 %
build/test/fakecuda/fakecuda-stat /tmp/gs/fakecuda.state      # the meter of true device time
""", "server/readme_by_hand", "test/server/readme_by_hand_test.py", ['"### By hand, without a GPU"'],
              "it runs this block as written and judges the 75/25 split"),
    # docs/operating/containers.md
    Runs("docs/operating/containers.md", """
sudo gpuslice-server --cdi-dir /etc/cdi   # podman 4.3 reads /etc/cdi and /var/run/cdi
podman --runtime runc run --device gpuslice.io/tenant=team-a IMAGE COMMAND
""", "cdi", 1, before=add_team_a, check=check_cdi,
         replace=[("sudo gpuslice-server --cdi-dir /etc/cdi",
                   "sudo gpuslice-server --cdi-dir /etc/cdi & for _ in $(seq 250); do "
                   "[ -S /run/gpuslice/admin.sock ] && break; sleep 0.02; done",
                   "the server runs in the background while the test looks at its spec")],
         leave_out=[("podman --runtime runc run --device gpuslice.io/tenant=team-a IMAGE COMMAND",
                     PODMAN_ROOT % "containers/cdi")]),
    Elsewhere("docs/operating/containers.md", """
podman --runtime runc --hooks-dir /etc/containers/oci/hooks.d run \\
    --cgroup-parent /gpuslice/team-a --annotation gpuslice.io/tenant=team-a IMAGE COMMAND
""", "containers/hooks", "test/containers/hooks_test.py", ['"--hooks-dir"', '"--cgroup-parent"', '"--annotation"'],
              "podman as root with a hooks directory"),
    Elsewhere("docs/operating/containers.md", """
podman --runtime runc run \\
    -v /run/gpuslice/tenants/team-a:/run/gpuslice:ro \\
    -v /usr/local/lib/x86_64-linux-gnu/libgpuslice.so:/usr/lib/gpuslice/libgpuslice.so:ro \\
    -v /run/gpuslice/cdi/ld.so.preload:/etc/ld.so.preload:ro \\
    -e LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so \\
    IMAGE COMMAND
""", "containers/bare", "test/containers/bare_test.py", ['"%s/tenants/%s:%s:ro"', "cdi/ld.so.preload", '"LD_PRELOAD="'],
              "podman as root"),
    # docs/operating/install.md
    NotHere("docs/operating/install.md", """
meson setup build            # -Dcudadir=/opt/cuda if cuda.h is elsewhere
ninja -C build
meson test -C build
""", "the build and the suite this test is part of"),
    Elsewhere("docs/operating/install.md", """
meson setup build            # --prefix=/usr/local, the default; -Dcudadir=... as above
ninja -C build
sudo meson install -C build
""", "server/install", "test/server/install_test.py", ['"meson", "install"', '"--destdir"'],
              "installing into /usr/local needs root: server/install runs meson install into a DESTDIR"),
    Runs("docs/operating/install.md", """
sudo mkdir -p /etc/gpuslice/tenants.d          # tenant files, below
sudo systemctl daemon-reload
sudo systemctl enable --now gpuslice-server
sudo gpuslicectl status                        # the admin socket is root's
""", "node", 1, check=check_install, expect=[r"^DEVICE\s+STATE\s+HOLDER", r"^TENANT\s+SHARE\s+LIMIT"]),
    NotHere("docs/operating/install.md", """
podman build -f deploy/Containerfile -t REGISTRY/gpuslice:0.1.0 .
podman push REGISTRY/gpuslice:0.1.0
""", "pulls base images and pushes to a registry (the containers suite's bundle test loads the image scripts/bundle "
         "builds)"),
    NotHere("docs/operating/install.md", """
mkdir cuda-headers && cp /usr/local/cuda/include/cuda.h cuda-headers/
printf 'FROM scratch\\nCOPY cuda.h /usr/local/cuda/include/cuda.h\\n' > cuda-headers/Containerfile
podman build -t registry.internal/cuda-headers:13.0 cuda-headers
""", "needs the CUDA toolkit's cuda.h and podman"),
    NotHere("docs/operating/install.md", """
podman build -f deploy/Containerfile \\
    --build-arg BASE=registry.internal/library/debian:bookworm-slim \\
    --build-arg CUDA_HEADERS=registry.internal/cuda-headers:13.0 \\
    -t registry.internal/gpuslice:0.1.0 .
""", "needs a registry mirror and podman"),
    NotHere("docs/operating/install.md", """
scripts/bundle                 # build-bundle/gpuslice-0.1.0-amd64.tar.gz and -arm64.tar.gz
scripts/bundle arm64           # one architecture
""", "builds container images with podman as root, for minutes (containers/bundle checks what it makes)"),
    Elsewhere("docs/operating/install.md", """
# 1. on every GPU node, into its container runtime
ctr -n k8s.io images import image.tar      # containerd
podman load -i image.tar                   # CRI-O (root's podman shares its image store)
# 2. once, for the cluster (tenants in kubernetes/tenants-configmap.yaml first)
kubectl apply -k kubernetes/
# 3. the server on every GPU node
kubectl -n gpuslice-system rollout status daemonset/gpuslice-server
""", "containers/bundle", "test/containers/bundle_test.py",
              ['"ctr -n k8s.io images import image.tar", "podman load -i image.tar", "kubectl apply -k kubernetes/"'],
              "it runs podman load on the bundle and finds these commands in the bundle's README; ctr and kubectl "
              "need containerd and a cluster"),
    NotHere("docs/operating/install.md", """
scripts/test-aarch64          # cross build in build-aarch64/, tests under qemu-user
# or by hand:
scripts/sysroot arm64 build-aarch64-sysroot
meson setup build-aarch64 --cross-file cross/aarch64-linux-gnu.ini \\
    --cross-file build-aarch64-sysroot/cross.ini
ninja -C build-aarch64
""", "a second build, for aarch64, with a cross compiler and a downloaded sysroot: minutes"),
    # docs/operating/kubernetes.md: its kubectl-only blocks need a cluster (KUBECTL_ONLY).
    NotHere("docs/operating/kubernetes.md", """
kubectl -n gpuslice-system exec ds/gpuslice-server -- gpuslicectl status
cat /var/run/cdi/gpuslice.json          # one device per tenant
""", "a cluster's node (on a host, install.md's and containers.md's blocks run the same gpuslicectl status "
         "and CDI spec here)"),
    # docs/operating/lifecycle.md
    Runs("docs/operating/lifecycle.md", """
sudo systemctl disable --now gpuslice-server
sudo gpuslice-server --uninstall        # with the --run-dir and --cdi-dir the server had
sudo ninja -C build uninstall           # the files meson installed
""", "node", 3, check=check_uninstall,
         leave_out=[("sudo ninja -C build uninstall           # the files meson installed",
                     "it removes what meson install put under /usr/local (root); server/install checks that list "
                     "in a DESTDIR")]),
]


# ---- negative controls --------------------------------------------------------------

def controls(checks, nodes, top):
    """The checks can fail: an unlisted block and a stale verdict are
    reported, a command under a shell language's missing label is; a wrong
    option fails a block, and so does a failing command before a passing
    one (run on the node whose server the install block started)."""
    md = ("Text.\n\n```sh\nsudo gpuslicectl status\n```\n\n```sh\ngpuslicectl --no-such-option status\n```\n\n"
          "  ```bash\n  gpuslicectl --run-dir /run/gpuslice status\n  ```\n\n```\nsudo gpuslicectl status\n```\n")
    blocks = extract("control.md", md)
    good = Runs("control.md", "sudo gpuslicectl status", "node", 0, expect=[r"^TENANT\s+SHARE"])
    stale = NotHere("control.md", "gpuslicectl top", "")
    judged, problems = judge(blocks, [good, stale])
    checks.expect(len(blocks) == 4 and blocks[2].text == "gpuslicectl --run-dir /run/gpuslice status",
                  "control: the four fences are found, an indented one without its indentation (%s)"
                  % [b.text for b in blocks])
    checks.expect(len(judged) == 1 and sum("without a verdict" in p for p in problems) == 2
                  and sum("verdict whose block is not there" in p for p in problems) == 1
                  and sum("without a shell language" in p for p in problems) == 1,
                  "control: two unlisted blocks, a stale verdict and an unlabeled command are reported (%s)"
                  % problems)
    cases = [("sudo gpuslicectl status", True), ("sudo gpuslicectl --no-such-option status", False),
             ("sudo gpuslicectl --no-such-option status\nsudo gpuslicectl status", False)]
    if DROP:
        cases += [("gpuslicectl status", False), ("systemctl restart gpuslice-server", False)]
    else:
        print("note: not root, so the node has one user: a command that needs sudo and lacks it is not caught")
    for text, ok in cases:
        v = Runs("control.md", text, "node", 0, expect=[r"^TENANT\s+SHARE"])
        passed = all(c for c, _ in run_verdict(nodes, top, v))
        checks.expect(passed == ok, "control: %r %s" % (text, "passes" if ok else "fails"))
    v = Runs("control.md", "ls /run/gpuslice/../../etc/passwd /etc/hostname", "node", 0)
    checks.expect(any("system path" in w and not c for c, w in run_verdict(nodes, top, v)),
                  "control: a block that names a system path the node does not map is refused")


def main():
    checks = Checks()
    blocks = []
    for path in documents():
        with open(path) as f:
            blocks += extract(os.path.relpath(path, ROOT), f.read())
    judged, problems = judge(blocks, VERDICTS)
    for p in problems:
        checks.expect(False, p)
    runs = elsewhere = not_here = 0
    for b, v in judged:
        if isinstance(v, Elsewhere):
            elsewhere += 1
            text = read(os.path.join(ROOT, v.path))
            missing = [h for h in v.holds if h not in text]
            checks.expect(not missing, "%s: run by %s (%s), whose %s holds %s%s"
                          % (b.where(), v.test, v.why, v.path, v.holds, " but not %s" % missing if missing else ""))
        elif isinstance(v, NotHere):
            not_here += 1
            print("not run here: %s: %s" % (b.where(), v.why))
    top = tempfile.mkdtemp(prefix="gpuslice-doc-commands-")
    nodes = {}
    try:
        for b, v in sorted(((b, v) for b, v in judged if isinstance(v, Runs)), key=lambda bv: (bv[1].node, bv[1].step)):
            runs += 1
            for c, what in run_verdict(nodes, top, v, b.lang):
                checks.expect(c, "%s: %s" % (b.where(), what))
            if v.node == "node" and v.step == 1:
                # The server the install block started answers the controls.
                controls(checks, nodes, top)
    finally:
        for n in nodes.values():
            n.close()
    if checks.failed == 0:
        shutil.rmtree(top, ignore_errors=True)
    print("%d blocks: %d run here, %d run by other tests, %d cannot run here" % (runs + elsewhere + not_here, runs,
                                                                                  elsewhere, not_here))
    checks.finish()


main()
