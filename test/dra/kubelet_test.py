"""gpuslice-dra's kubelet side (dra/kubelet/, dra_kubelet_lib) as the
kubelet sees it: kubelet_fake_plugin (the library with the fake prepare of
fake_prepare.c) called by the kubelet stand-in (kubelet.py: the real
protos through Python's grpcio). Registration (type, name, endpoint,
versions; the kubelet's verdict), NodePrepareResources and
NodeUnprepareResources (an entry per claim, devices and CDI IDs, a bad
claim's error in its own entry, the same answer twice, under v1 and
v1beta1), unknown methods and undecodable requests, calls at once, the
tick, a plugin killed and restarted between prepare and unprepare, stale
and foreign files where its sockets go, and a clean stop.

Needs /usr/bin/python3 with grpcio and protobuf (Debian: python3-grpcio,
python3-protobuf) and the generated messages (protoc); skipped without
them, a failure where GPUSLICE_REQUIRE_CONTAINERS=1.

    kubelet_test.py"""
import atexit
import concurrent.futures
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

from testlib import Checks, skip, wait_for

try:
    import grpc
    import google.protobuf.message
except ImportError as missing:
    skip("%s has no grpc or protobuf module (Debian: python3-grpcio python3-protobuf): %s" % (sys.executable, missing))
import kubelet  # noqa: E402 (needs grpc)

BUILD = os.environ.get("GPUSLICE_BUILD_DIR",
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
try:
    registration_pb, dra_pb = kubelet.load(os.environ.get("GPUSLICE_KUBELET_PROTO_DIR")
                                           or os.path.join(BUILD, "test", "dra"))
except ImportError as missing:
    skip("the kubelet's messages are not generated for python (protoc missing?): %s" % missing)

FAKE_PLUGIN = os.environ.get("GPUSLICE_KUBELET_FAKE_PLUGIN",
                             os.path.join(BUILD, "test", "dra", "kubelet_fake_plugin"))
DRIVER = "gpuslice.io"
V1_PREPARE = kubelet.DRA_SERVICES["v1"] + "NodePrepareResources"

checks = Checks()
os.umask(0o022)  # the plugins inherit it: the modes checked below are the plugin's own
top = tempfile.mkdtemp(prefix="gs-dra-")
started = []
plugins = []


@atexit.register
def clean_up():
    """Whatever the outcome: no plugin left running, no files left."""
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
    shutil.rmtree(top, ignore_errors=True)


class Plugin:
    """kubelet_fake_plugin serving a kubelet's layout under root:
    plugins_registry/gpuslice.io-reg.sock and plugins/gpuslice.io/dra.sock."""

    def __init__(self, root, registry=None, plugin_socket=None):
        self.root = root
        os.makedirs(os.path.join(root, "plugins_registry"), exist_ok=True)
        self.registry = registry or os.path.join(root, "plugins_registry", DRIVER + "-reg.sock")
        self.socket = plugin_socket or os.path.join(root, "plugins", DRIVER, "dra.sock")
        self.calls_log = os.path.join(root, "calls.log")
        self.stderr_path = os.path.join(root, "stderr.log")
        self.tick_file = os.path.join(root, "ticks")
        self.process = None
        plugins.append(self)

    def start(self, wait=True):
        env = dict(os.environ, GPUSLICE_FAKE_PREPARE_LOG=self.calls_log)
        with open(self.stderr_path, "ab") as err:
            self.process = subprocess.Popen([FAKE_PLUGIN, self.registry, self.socket, self.tick_file], env=env,
                                            stdout=subprocess.DEVNULL, stderr=err)
        started.append(self.process)
        if wait:
            up = wait_for(lambda: self.process.poll() is not None or (accepts(self.registry) and accepts(self.socket)),
                          timeout=10.0)
            if not up or self.process.poll() is not None:
                raise RuntimeError("kubelet_fake_plugin did not come up (exit %s): %s" % (self.process.poll(),
                                                                                         self.stderr()))
        return self

    def stop(self):
        """SIGTERM; its exit status and how long it took."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=20)
        return status, time.monotonic() - began

    def kill(self):
        self.process.kill()
        self.process.wait(timeout=20)

    def calls(self):
        try:
            with open(self.calls_log) as f:
                return [line.split() for line in f]
        except FileNotFoundError:
            return []

    def stderr(self):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def ticks(self):
        try:
            with open(self.tick_file) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0


def is_socket(path):
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def accepts(path):
    """Whether a process listens on the unix socket at path."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
            return True
        except OSError:
            return False


def device_fields(device):
    return (list(device.request_names), device.pool_name, device.device_name, list(device.cdi_device_ids))


def status_of(call):
    """(code, details) of a call that should fail; (OK, answer) if it did not."""
    try:
        return grpc.StatusCode.OK, call()
    except grpc.RpcError as error:
        return error.code(), error.details()


def claim(namespace, uid, name):
    return kubelet.claim(namespace, uid, name)


# ---- registration ---------------------------------------------------------
plugin = Plugin(os.path.join(top, "a")).start()
plugin_dir = os.path.dirname(plugin.socket)
checks.expect(os.path.isdir(plugin_dir) and stat.S_IMODE(os.stat(plugin_dir).st_mode) == 0o750,
              "the plugin socket's directory is made, mode 0750 (%s)" %
              (oct(stat.S_IMODE(os.stat(plugin_dir).st_mode)) if os.path.isdir(plugin_dir) else "missing"))
info = kubelet.register(plugin.registry)
checks.expect(info.type == "DRAPlugin", "GetInfo: type DRAPlugin (got %r)" % info.type)
checks.expect(info.name == DRIVER, "GetInfo: name %s (got %r)" % (DRIVER, info.name))
checks.expect(info.endpoint == plugin.socket, "GetInfo: endpoint is the plugin socket (got %r)" % info.endpoint)
checks.expect(list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
              "GetInfo: supported versions v1.DRAPlugin, v1beta1.DRAPlugin (got %s)" % list(info.supported_versions))
checks.expect(wait_for(lambda: "the kubelet registered driver gpuslice.io" in plugin.stderr(), timeout=5),
              "an accepted registration is said on stderr")
kubelet.register(plugin.registry, accept=False, error="driver gpuslice.io is already registered")
refusal = "the kubelet refused to register driver gpuslice.io: driver gpuslice.io is already registered"
checks.expect(wait_for(lambda: refusal in plugin.stderr(), timeout=5), "a refused registration is said on stderr, "
              "with the kubelet's reason (stderr: %r)" % plugin.stderr()[-400:])

# ---- prepare --------------------------------------------------------------
pid = str(plugin.process.pid)
answer = kubelet.prepare(plugin.socket, [claim("default", "uid-a", "gpu-a"), claim("team-b", "uid-b", "multi-b")])
checks.expect(sorted(answer.claims.keys()) == ["uid-a", "uid-b"],
              "prepare: one entry per claim, keyed by UID (got %s)" % sorted(answer.claims.keys()))
a, b = answer.claims["uid-a"], answer.claims["uid-b"]
checks.expect(a.error == "" and [device_fields(d) for d in a.devices] ==
              [(["gpu"], "node-1", "gpu-0", ["gpuslice.io/tenant=claim-uid-a"])],
              "prepare: claim uid-a has its device and CDI ID (got error %r, devices %s)" %
              (a.error, [device_fields(d) for d in a.devices]))
checks.expect(b.error == "" and [device_fields(d) for d in b.devices] ==
              [(["gpu"], "node-1", "gpu-0", ["gpuslice.io/tenant=claim-uid-b", "gpuslice.io/tenant=claim-uid-b-1"]),
               (["gpu/shared"], "node-1", "gpu-1",
                ["gpuslice.io/tenant=claim-uid-b", "gpuslice.io/tenant=claim-uid-b-1"])],
              "prepare: claim uid-b has both devices, each its requests and CDI IDs (got %s)" %
              [device_fields(d) for d in b.devices])
checks.expect(plugin.calls() == [["prepare", pid, "default", "gpu-a", "uid-a"],
                                 ["prepare", pid, "team-b", "multi-b", "uid-b"]],
              "prepare: dra_prepare called once per claim, in order, with namespace, name and UID (log %s)" %
              plugin.calls())

mixed = kubelet.prepare(plugin.socket, [claim("default", "uid-c", "gpu-c"), claim("default", "uid-bad", "bad-claim")])
bad, good = mixed.claims["uid-bad"], mixed.claims["uid-c"]
checks.expect(bad.error == "claim default/bad-claim: no device of driver gpuslice.io is allocated to it"
              and len(bad.devices) == 0,
              "prepare: a bad claim's error is in its own entry, with no device (got %r, %d devices)" %
              (bad.error, len(bad.devices)))
checks.expect(good.error == "" and [d.cdi_device_ids[0] for d in good.devices] == ["gpuslice.io/tenant=claim-uid-c"],
              "prepare: the good claim of the same call is prepared (got %r, %s)" %
              (good.error, [device_fields(d) for d in good.devices]))

first = kubelet.prepare(plugin.socket, [claim("default", "uid-a", "gpu-a")])
second = kubelet.prepare(plugin.socket, [claim("default", "uid-a", "gpu-a")])
checks.expect(first == second and first.claims["uid-a"] == a,
              "prepare twice: the same answer as the first time (got %s then %s)" % (first, second))
beta = kubelet.prepare(plugin.socket, [claim("default", "uid-a", "gpu-a")], version="v1beta1")
checks.expect(beta == first, "prepare under v1beta1.DRAPlugin: the same answer as under v1 (got %s)" % beta)
empty = kubelet.prepare(plugin.socket, [])
checks.expect(len(empty.claims) == 0, "prepare with no claims: an empty answer (got %s)" % empty)

# An error truncated within a character, or holding bytes that are not
# UTF-8, still makes a message the kubelet can decode: the stand-in's
# decoder refuses invalid UTF-8 in a string, as the kubelet's does.
try:
    dra_pb.NodeUnprepareResourceResponse.FromString(b"\x0a\x01\xff")  # error = "\xff"
    refused = False
except google.protobuf.message.DecodeError:
    refused = True
checks.expect(refused, "the stand-in refuses a string that is not UTF-8")
utf8 = kubelet.prepare(plugin.socket, [claim("default", "uid-u", "badutf8-u")])
checks.expect(utf8.claims["uid-u"].error == "claim badutf8-u: bad ? byte, cut ?",
              "prepare: an error that is not UTF-8 is repaired, each bad byte a '?' (got %r)" %
              utf8.claims["uid-u"].error)

# ---- unprepare ------------------------------------------------------------
before = len(plugin.calls())
undone = kubelet.unprepare(plugin.socket, [claim("default", "uid-a", "gpu-a"), claim("team-b", "uid-b", "multi-b"),
                                           claim("default", "uid-bad", "bad-claim")])
checks.expect(sorted(undone.claims.keys()) == ["uid-a", "uid-b", "uid-bad"],
              "unprepare: one entry per claim (got %s)" % sorted(undone.claims.keys()))
checks.expect(undone.claims["uid-a"].error == "" and undone.claims["uid-b"].error == "",
              "unprepare: the good claims have no error (got %r, %r)" %
              (undone.claims["uid-a"].error, undone.claims["uid-b"].error))
checks.expect(undone.claims["uid-bad"].error == "claim default/bad-claim: its tenant cannot be removed",
              "unprepare: the bad claim's error in its entry (got %r)" % undone.claims["uid-bad"].error)
checks.expect(plugin.calls()[before:] == [["unprepare", pid, "default", "gpu-a", "uid-a"],
                                          ["unprepare", pid, "team-b", "multi-b", "uid-b"],
                                          ["unprepare", pid, "default", "bad-claim", "uid-bad"]],
              "unprepare: dra_unprepare called once per claim (log %s)" % plugin.calls()[before:])
beta_undone = kubelet.unprepare(plugin.socket, [claim("default", "uid-a", "gpu-a")], version="v1beta1")
checks.expect(list(beta_undone.claims.keys()) == ["uid-a"] and beta_undone.claims["uid-a"].error == "",
              "unprepare under v1beta1.DRAPlugin (got %s)" % beta_undone)

# ---- methods it does not have, requests that do not decode -----------------
for socket_path, method, why in [
        (plugin.socket, kubelet.DRA_SERVICES["v1"] + "NodeWatchResources", "a method the service does not have"),
        (plugin.socket, "/v1.DRAPlugin/NodePrepareResources", "the short service name, not a gRPC path"),
        (plugin.socket, kubelet.REGISTRATION + "GetInfo", "registration on the plugin socket"),
        (plugin.registry, V1_PREPARE, "the node service on the registration socket")]:
    code, details = status_of(lambda: kubelet.call_bytes(socket_path, method, b""))
    checks.expect(code == grpc.StatusCode.UNIMPLEMENTED and details == "unknown method " + method,
                  "%s: UNIMPLEMENTED, naming it (got %s %r)" % (why, code, details))
code, details = status_of(lambda: kubelet.call_bytes(plugin.socket, V1_PREPARE, b"\xff\xff\xff"))
checks.expect(code == grpc.StatusCode.INVALID_ARGUMENT and details ==
              V1_PREPARE + ": the request is not a k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesRequest",
              "a request that does not decode: INVALID_ARGUMENT (got %s %r)" % (code, details))
info_again = kubelet.get_info(plugin.registry)
checks.expect(info_again.name == DRIVER, "the plugin serves on after those (got %r)" % info_again.name)

# ---- calls at once (the kubelet makes them for several pods) ---------------
with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    futures = [pool.submit(kubelet.prepare, plugin.socket, [claim("default", "uid-p%d" % i, "gpu-p%d" % i)])
               for i in range(16)]
    answers = [f.result() for f in futures]
wrong = [i for i, got in enumerate(answers)
         if list(got.claims.keys()) != ["uid-p%d" % i]
         or got.claims["uid-p%d" % i].devices[0].cdi_device_ids[0] != "gpuslice.io/tenant=claim-uid-p%d" % i]
checks.expect(not wrong, "16 calls from 8 threads at once: each its own answer (wrong: %s)" % wrong)

# ---- the tick -------------------------------------------------------------
seen = plugin.ticks()
checks.expect(wait_for(lambda: plugin.ticks() >= seen + 2, timeout=6.0),
              "tick: called about once a second (%d, then %d after 6 s at most)" % (seen, plugin.ticks()))

# ---- killed between prepare and unprepare ----------------------------------
kubelet.prepare(plugin.socket, [claim("default", "uid-k", "gpu-k")])
old_pid = pid
plugin.kill()
checks.expect(is_socket(plugin.registry) and is_socket(plugin.socket),
              "a plugin killed by SIGKILL leaves both sockets behind")
plugin.start()
pid = str(plugin.process.pid)
info = kubelet.register(plugin.registry)
checks.expect(info.endpoint == plugin.socket, "restarted on its stale sockets: it registers (got %r)" % info.endpoint)
undone = kubelet.unprepare(plugin.socket, [claim("default", "uid-k", "gpu-k")])
checks.expect(list(undone.claims.keys()) == ["uid-k"] and undone.claims["uid-k"].error == "",
              "restarted: the claim prepared before the kill is unprepared (got %s)" % undone)
calls = plugin.calls()
checks.expect(["prepare", old_pid, "default", "gpu-k", "uid-k"] in calls
              and calls[-1] == ["unprepare", pid, "default", "gpu-k", "uid-k"] and pid != old_pid,
              "the killed plugin prepared it, the restarted one unprepared it (log tail %s)" % calls[-3:])

# ---- what it finds where its sockets go ------------------------------------
# A second instance on the same sockets: refused, the first one's sockets
# left alone.
second_instance = Plugin(plugin.root)
second_instance.stderr_path = os.path.join(plugin.root, "second.log")
second_instance.start(wait=False)
status = second_instance.process.wait(timeout=20)
checks.expect(status == 1 and "another process serves this socket" in second_instance.stderr(),
              "a second instance on live sockets refuses to start (exit %s: %r)" % (status, second_instance.stderr()))
checks.expect(is_socket(plugin.registry) and is_socket(plugin.socket)
              and kubelet.get_info(plugin.registry).endpoint == plugin.socket,
              "the first instance keeps its sockets and serves on")

# Stale sockets made by hand (bound, closed, never removed) are replaced:
# nothing answers on them before, the plugin does after. (Not judged by
# inode numbers: an unlinked socket's number may be the new one's.)
stale = Plugin(os.path.join(top, "stale"))
os.makedirs(os.path.dirname(stale.socket))
refused = []
for path in (stale.registry, stale.socket):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as leftover:
        leftover.bind(path)
    refused.append(not accepts(path))
stale.start()
info = kubelet.register(stale.registry)
checks.expect(all(refused) and info.name == DRIVER and accepts(stale.registry) and accepts(stale.socket),
              "stale socket files, where nothing answered, are replaced by live ones (refused before: %s; "
              "GetInfo answered %r)" % (refused, info.name))
status, _ = stale.stop()

# A file that is not a socket is not replaced.
occupied = Plugin(os.path.join(top, "occupied"))
os.makedirs(os.path.dirname(occupied.socket))
with open(occupied.socket, "w") as f:
    f.write("not a socket\n")
occupied.start(wait=False)
status = occupied.process.wait(timeout=20)
with open(occupied.socket) as f:
    kept = f.read()
checks.expect(status == 1 and "there is a file there that is not a socket" in occupied.stderr()
              and kept == "not a socket\n" and not os.path.exists(occupied.registry),
              "a file that is not a socket where the plugin socket goes: refused, the file kept "
              "(exit %s: %r)" % (status, occupied.stderr()))

# The registration directory is the kubelet's: not made, and without it
# nothing is served, no socket left behind.
unregistered = Plugin(os.path.join(top, "unregistered"),
                      registry=os.path.join(top, "unregistered", "no-registry", DRIVER + "-reg.sock"))
unregistered.start(wait=False)
status = unregistered.process.wait(timeout=20)
checks.expect(status == 1 and "gRPC cannot listen there" in unregistered.stderr()
              and not os.path.exists(unregistered.socket) and not os.path.exists(unregistered.registry),
              "no registration directory: refused, the plugin socket made before removed (exit %s: %r)" %
              (status, unregistered.stderr()[-300:]))

too_long = Plugin(os.path.join(top, "long"), plugin_socket=os.path.join(top, "long", "x" * 120, "dra.sock"))
too_long.start(wait=False)
status = too_long.process.wait(timeout=20)
checks.expect(status == 1 and "too long for a unix socket" in too_long.stderr(),
              "a socket path too long: refused with the reason (exit %s: %r)" % (status, too_long.stderr()))

# ---- a clean stop ----------------------------------------------------------
status, took = plugin.stop()
checks.expect(status == 0 and took < 5.0, "SIGTERM: exits 0 within 5 s (exit %s after %.1f s)" % (status, took))
checks.expect(not os.path.exists(plugin.registry) and not os.path.exists(plugin.socket),
              "SIGTERM: both sockets are removed")
reports = [p.stderr_path for p in plugins if "Sanitizer" in p.stderr() or "runtime error" in p.stderr()]
checks.expect(not reports, "no sanitizer report from any instance (in %s)" % reports)
checks.finish()
