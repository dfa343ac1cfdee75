"""The Kubernetes API side of gpuslice-dra (dra_kube_lib, through
test/dra/kube_client) against the test API endpoint (apiserver.py, HTTPS
with a bearer token): a claim fetched and read, from the options' server
and from KUBERNETES_SERVICE_HOST/_PORT; a claim not found, of another uid,
refused for its configuration; 503s and closed connections retried; an API
that never answers, or whose certificate is not the CA's, reported
unreachable; the token file reread for every request of one client; the
node's ResourceSlice created (owned by its Node), left alone while
unchanged, replaced with the next generation when the GPUs change or the
Node is made again, written again after a conflict, and not written when
the Node cannot be read (refused, or gone).
Then every body the endpoint received and every claim it served is
validated against resource.k8s.io/v1 with kubernetes-models
(kube_schema.mjs; npm packages as test/kubernetes installs them)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import k8s_npm
from testlib import BUILD, FAKECUDA_DIR, Checks

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from apiserver import ApiServer, make_certificate  # noqa: E402
import claims  # noqa: E402
from claims import allocated, config, result, slice_config  # noqa: E402

CLIENT = os.path.join(BUILD, "test", "dra", "kube_client")
UID = "5d1c3f0e-8a4b-4c8e-9f6a-2b7d0e1a3c55"
SLICE = "node-a-gpuslice.io"
SLICE_PATH = "/apis/resource.k8s.io/v1/resourceslices"

if not shutil.which("openssl"):
    print("skipped: the openssl command (for the endpoint's certificate) is missing (apt-get install openssl)")
    sys.exit(77)
checks = Checks()
tmp = tempfile.mkdtemp(prefix="gpuslice-dra-kube-")
api = ApiServer(os.path.join(tmp, "api")).start()


def claim(name, status, uid=UID):
    return claims.claim(name, status, uid)


def client(*args, server=None, ca=None, env=None, stdin=None):
    argv = [CLIENT, "--token", api.token_file, "--ca", ca or api.ca_file]
    if server is not False:
        argv += ["--server", server or api.url]
    e = dict(os.environ, LD_LIBRARY_PATH=FAKECUDA_DIR)
    e.update(env or {})
    started = time.monotonic()
    p = subprocess.run(argv + list(args), capture_output=True, text=True, env=e, input=stdin, timeout=120)
    p.seconds = time.monotonic() - started
    return p


def claim_gets(name):
    return api.requests("GET", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/" + name)


# ---- claims ------------------------------------------------------------------------
api.set_claim(claim("quarter", allocated([result()], [
    config("FromClass", slice_config(limit=0.5, **{"class": "batch"}, preempt_ms=50)),
    config("FromClaim", slice_config(limit=0.25), requests=["gpu"])])))
p = client("claim", "default", "quarter", UID)
got = json.loads(p.stdout) if p.returncode == 0 else {}
checks.expect(p.returncode == 0 and got["devices"] == [{"request": "gpu", "pool": "node-a", "device": "gpu-0",
                                                         "share": 25.0, "memory": 8 << 30}] and
              got["config"] == {"limit": 0.25, "class": "batch", "preempt_ms": 50},
              "a claim of 25 share and 8Gi is fetched and read, the claim's limit over the class's "
              "(rc %d: %s%s)" % (p.returncode, p.stdout.strip(), p.stderr.strip()))
p = client("claim", "default", "quarter", UID, server=False, env=api.env())
checks.expect(p.returncode == 0, "the API server is found from KUBERNETES_SERVICE_HOST and _PORT (rc %d %s)"
              % (p.returncode, p.stderr.strip()))
p = client("claim", "default", "quarter", UID, server=False)
checks.expect(p.returncode == 3 and "KUBERNETES_SERVICE_HOST" in p.stderr,
              "without a server or KUBERNETES_SERVICE_HOST the client says so (%s)" % p.stderr.strip())

p = client("claim", "default", "missing", UID)
checks.expect(p.returncode == 1 and p.stderr.startswith("claim default/missing: not found (HTTP 404"),
              "a claim that does not exist is refused, not retried (rc %d: %s; %d GETs)"
              % (p.returncode, p.stderr.strip(), len(claim_gets("missing"))))
checks.expect(len(claim_gets("missing")) == 1, "a 404 is asked once")
p = client("claim", "default", "quarter", "0a0a0a0a-0000-4000-8000-000000000000")
checks.expect(p.returncode == 1 and "uid %s is not 0a0a0a0a" % UID in p.stderr,
              "a claim of another uid is refused (%s)" % p.stderr.strip())
api.set_claim(claim("pending", {}))
p = client("claim", "default", "pending", UID)
checks.expect(p.returncode == 1 and "claim default/pending: not allocated" in p.stderr,
              "an unallocated claim is refused (%s)" % p.stderr.strip())
api.set_claim(claim("toofast", allocated([result()], [config("FromClaim", slice_config(limit=1.5))])))
p = client("claim", "default", "toofast", UID)
checks.expect(p.returncode == 1 and p.stderr.strip() == "claim default/toofast: status.allocation.devices.config[0]"
              ".opaque.parameters.limit: 1.5 is out of range (0.001 to 1)",
              "a claim with limit 1.5 is refused, naming the field (%s)" % p.stderr.strip())
p = client("claim", "default", "Bad_Name", UID)
checks.expect(p.returncode == 1 and "not a Kubernetes namespace and name" in p.stderr and not claim_gets("Bad_Name"),
              "a name the API cannot hold is refused before any request (%s)" % p.stderr.strip())

# Retries: 503 twice, connections closed twice, then the claim.
api.fail_next(2, 503)
before = len(claim_gets("quarter"))
p = client("claim", "default", "quarter", UID)
checks.expect(p.returncode == 0 and len(claim_gets("quarter")) - before == 3 and p.seconds >= 0.7,
              "two 503s are retried and the third try reads the claim (%d GETs, %.2f s)"
              % (len(claim_gets("quarter")) - before, p.seconds))
api.close_next(2)
p = client("claim", "default", "quarter", UID)
checks.expect(p.returncode == 0, "two closed connections are retried (rc %d %s)" % (p.returncode, p.stderr.strip()))
api.fail_next(10, 503)
before = len(claim_gets("quarter"))
p = client("claim", "default", "quarter", UID)
api.clear_failures()
checks.expect(p.returncode == 2 and "unavailable: HTTP 503 after 4 tries" in p.stderr and
              len(claim_gets("quarter")) - before == 4 and 1.5 <= p.seconds < 10,
              "an API that answers 503 to every try is unreachable after 4 tries in %.2f s (rc %d: %s)"
              % (p.seconds, p.returncode, p.stderr.strip()))
api.fail_next(1, 403)
p = client("claim", "default", "quarter", UID)
checks.expect(p.returncode == 1 and "HTTP 403: injected failure 403" in p.stderr,
              "a 403 is refused with the API's message, not retried (%s)" % p.stderr.strip())

# Nothing listening: unreachable after the retries.
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
closed_port = probe.getsockname()[1]
probe.close()
p = client("claim", "default", "quarter", UID, server="https://127.0.0.1:%d" % closed_port)
checks.expect(p.returncode == 2 and "did not answer after 4 tries" in p.stderr,
              "an API server that does not listen is unreachable (rc %d: %s)" % (p.returncode, p.stderr.strip()))
# A certificate that is not the CA's: refused (verification is never off).
other = os.path.join(tmp, "other")
os.makedirs(other)
other_ca, _ = make_certificate(other)
p = client("claim", "default", "quarter", UID, ca=other_ca)
checks.expect(p.returncode == 2 and "certificate" in p.stderr.lower(),
              "a server whose certificate the CA file does not vouch for is refused (%s)" % p.stderr.strip())
p = client("claim", "default", "quarter", UID, server="http://127.0.0.1:%d" % api.port)
checks.expect(p.returncode == 3 and "not an https:// address" in p.stderr,
              "a plain http:// server is refused (%s)" % p.stderr.strip())

# The token: reread for every request of one client.
proc = subprocess.Popen([CLIENT, "--server", api.url, "--token", api.token_file, "--ca", api.ca_file, "claims",
                         "default", "quarter", UID], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                        env=dict(os.environ, LD_LIBRARY_PATH=FAKECUDA_DIR))


def ask():
    proc.stdin.write("again\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


first = ask()
api.rotate_token("token-2")
second = ask()
api.accept_token("token-3")  # the server moves on, the file does not
third = ask()
api.rotate_token("token-3")
fourth = ask()
proc.stdin.close()
proc.wait(timeout=30)
checks.expect(first.startswith("ok ") and second.startswith("ok ") and fourth.startswith("ok "),
              "one client follows the token file as it is rotated (%s | %s | %s)" % (first[:40], second[:40],
                                                                                        fourth[:40]))
checks.expect(third.startswith("bad ") and "HTTP 401: Unauthorized" in third,
              "a token the server no longer accepts is refused (%s)" % third)

# ---- the ResourceSlice --------------------------------------------------------------
def writes():
    return [entry for entry in api.log if entry[0] in ("POST", "PUT") and entry[1].startswith(SLICE_PATH)]


def published():
    return api.slices.get(SLICE, {})


def machine(name, devices, driver=None):
    env = {"FAKECUDA_STATE": os.path.join(tmp, name), "FAKECUDA_DEVICES": str(devices),
           "FAKECUDA_MEMORY": "3000000000"}
    if driver:
        env["FAKENVML_DRIVER_VERSION"] = driver
    return env


one_gpu = machine("one.state", 1, "580.95.05")
p = client("publish", "node-a", env=one_gpu)
s = published()
device = (s.get("spec", {}).get("devices") or [{}])[0]
checks.expect(p.returncode == 0 and [w[0] for w in writes()] == ["POST"] and s["spec"]["pool"]["generation"] == 1,
              "the slice is created (rc %d %s; writes %s)" % (p.returncode, p.stderr.strip(), writes()))
owner = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": api.node_uid("node-a"), "controller": True}
checks.expect(s.get("metadata", {}).get("ownerReferences") == [owner],
              "its owner is the Node, so that the API server deletes it with the node: %s"
              % s.get("metadata", {}).get("ownerReferences"))
checks.expect(device.get("name") == "gpu-0" and device["attributes"]["driverVersion"] == {"version": "580.95.5"} and
              device["attributes"]["productName"] == {"string": "fakecuda GPU"} and
              device["attributes"]["uuid"]["string"].startswith("GPU-") and
              device["capacity"]["memory"]["value"] == "3G" and device["allowMultipleAllocations"] is True,
              "its device: name, attributes and capacity (the API writes 3000000000 back as 3G): %s"
              % json.dumps(device)[:400])
p = client("publish", "node-a", env=one_gpu)
checks.expect(p.returncode == 0 and len(writes()) == 1,
              "published again unchanged: no write (writes %s)" % writes())

two_gpus = machine("two.state", 2, "580.95.05")
version = s["metadata"]["resourceVersion"]
p = client("publish", "node-a", env=two_gpus)
s = published()
received = [json.load(open(f)) for f in api.recorded() if "received-PUT" in f]
checks.expect(p.returncode == 0 and [w[0] for w in writes()] == ["POST", "PUT"] and
              s["spec"]["pool"]["generation"] == 2 and len(s["spec"]["devices"]) == 2 and received and
              received[-1]["metadata"]["resourceVersion"] == version,
              "two GPUs now: replaced with generation 2 and the resourceVersion read (writes %s)" % writes())
p = client("publish", "node-a", env=two_gpus)
checks.expect(p.returncode == 0 and len(writes()) == 2, "unchanged again: no write (writes %s)" % writes())

# Another writer between the read and the write: read again, then write.
api.fail_next(1, 409, method="PUT")
p = client("publish", "node-a", env=machine("two.state", 2))  # the driver version as a string now
s = published()
checks.expect(p.returncode == 0 and [w[0] for w in writes()] == ["POST", "PUT", "PUT", "PUT"] and
              [w[2] for w in writes()][-2:] == [409, 200] and s["spec"]["pool"]["generation"] == 3 and
              s["spec"]["devices"][1]["attributes"]["driverVersion"] == {"string": "fakecuda"},
              "a conflict is read again and written (writes %s)" % writes())
api.fail_next(2, 503, method="GET")
p = client("publish", "node-a", env=machine("two.state", 2))
checks.expect(p.returncode == 0 and len(writes()) == 4, "503s on the read are retried (rc %d %s)"
              % (p.returncode, p.stderr.strip()))

# The Node deleted and made again under the same name: the new one owns it.
api.recreate_node("node-a")
p = client("publish", "node-a", env=machine("two.state", 2))
s = published()
checks.expect(p.returncode == 0 and len(writes()) == 5 and s["spec"]["pool"]["generation"] == 4 and
              s["metadata"]["ownerReferences"][0]["uid"] == api.node_uid("node-a") != owner["uid"],
              "a Node made again: the slice is replaced with the new Node as its owner (writes %s; owner %s)"
              % (writes(), s["metadata"].get("ownerReferences")))
# The Node cannot be read: nothing is written, and the error says why.
api.fail_next(1, 403, method="GET")
p = client("publish", "node-a", env=one_gpu)
checks.expect(p.returncode == 1 and 'HTTP 403' in p.stderr and 'needs "get" on nodes' in p.stderr and
              len(writes()) == 5, "a 403 on the Node: not published, and the RBAC rule it needs is named (rc %d: %s)"
              % (p.returncode, p.stderr.strip()))
api.remove_node("node-b")
p = client("publish", "node-b", env=one_gpu)
checks.expect(p.returncode == 1 and "/api/v1/nodes/node-b" in p.stderr and "HTTP 404" in p.stderr and
              len(writes()) == 5 and "node-b-gpuslice.io" not in api.slices,
              "no Node of that name: no slice for it (rc %d: %s)" % (p.returncode, p.stderr.strip()))
p = client("publish", "Node_A", env=one_gpu)
checks.expect(p.returncode == 1 and "is not a DNS subdomain" in p.stderr,
              "a node name that is no DNS subdomain is refused (%s)" % p.stderr.strip())
p = client("gpus", env=two_gpus)
checks.expect(p.returncode == 0 and len(json.loads(p.stdout)) == 2 and
              json.loads(p.stdout)[1]["memory"] == 3000000000, "NVML's GPUs: %s" % p.stdout.strip()[:200])
no_nvml = os.path.join(tmp, "no-nvml")
os.makedirs(no_nvml)
p = client("gpus", env={"LD_LIBRARY_PATH": no_nvml})
if p.returncode == 0:
    print("skipped: NVML missing (this machine has its own libnvidia-ml.so.1)")
else:
    checks.expect(p.returncode == 1 and "NVML: cannot load libnvidia-ml.so.1" in p.stderr,
                  "without NVML the GPUs are not listed, and why is said (%s)" % p.stderr.strip())
api.stop()

# ---- everything exchanged, against resource.k8s.io/v1 ----------------------------------
why_not = k8s_npm.install()
if why_not:
    if os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1":
        checks.expect(False, "the schema check runs (%s; GPUSLICE_REQUIRE_CONTAINERS=1)" % why_not)
        checks.finish()
    print("skipped: the schema check: " + why_not)
    if checks.failed:
        checks.finish()
    sys.exit(77)
p = subprocess.run(["node", os.path.join(HERE, "kube_schema.mjs"), api.record_dir, k8s_npm.NPM_DIR], capture_output=True,
                   text=True, timeout=300)
print(p.stdout, end="")
print(p.stderr, end="")
checks.expect(p.returncode == 0, "every body received and every claim served is valid resource.k8s.io/v1, "
                                 "and the negative controls fail (%s)" % (p.stdout.strip().splitlines() or [""])[-1])
shutil.rmtree(tmp, ignore_errors=True)
checks.finish()
