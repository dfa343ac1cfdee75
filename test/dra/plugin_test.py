"""gpuslice-dra whole, as a kubelet and an API server see it: the real
plugin beside a real gpuslice-server that reads its claims' directory after
a namespace tenant's (two --config-dir, as the DaemonSet runs it),
the test API endpoint (apiserver.py, HTTPS) serving the claims, and the
kubelet stand-in (kubelet.py) calling it through gRPC with the kubelet's
messages.

1. It registers (type DRAPlugin, name gpuslice.io, its socket, v1 and
   v1beta1) and publishes the node's ResourceSlice: one device per
   fakecuda GPU, its UUID, memory as capacity, share 100,
   allowMultipleAllocations.
2. Two claims consuming 75 and 25 of gpu-0's share and 8 GiB and 4 GiB of
   memory are prepared in one call: each answers its device with the
   tenant's CDI device and the GPU's (nvidia.com/gpu=0), its tenant file
   says share and memory in bytes, the server serves both tenants with
   those settings and its CDI spec has both. Prepared again: the same
   answer, the file untouched. Through v1beta1 too.
3. A SliceConfig from the class and one from the claim: the claim's
   overrides, the tenant has its limit, class and preempt_ms. A claim of
   two requests that each take a share of gpu-0 (20 and 2 GiB, 30 and
   3 GiB): its tenant has their sum, 50 and 5 GiB, as the scheduler
   counted them; each request is answered.
4. Bad claims and configurations: each answered with an error naming the
   claim (and the field), and no tenant file made: limit out of range, an
   unknown field, a wrong kind, a claim the API does not have, another uid,
   a device of another node's pool; while other claims in the same call are
   prepared.
5. The API unreachable (503s): prepare fails after its retries, saying so,
   and creates nothing; once the API answers, the same claim is prepared.
6. The plugin killed (SIGKILL) between prepare and unprepare and started
   again: unprepare removes exactly that claim's tenant; the server drops
   it and keeps the other; unprepare again is fine.
7. The server not running: prepare fails within --server-wait-ms, saying
   why, and leaves no tenant file.
8. SIGTERM: it exits 0 and takes its sockets away.
Then every body the API endpoint received and every claim it served is
checked against resource.k8s.io/v1 (kube_schema.mjs)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import k8s_npm
import testlib
from testlib import Checks, Machine, Server, skip, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REQUIRED = os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1"




try:
    import grpc  # noqa: F401
    import kubelet
    kubelet.load()
except ImportError as e:
    skip("the kubelet stand-in needs python3-grpcio and the generated messages (%s)" % e)
if not shutil.which("openssl"):
    skip("the openssl command (for the API endpoint's certificate) is missing")
from apiserver import ApiServer  # noqa: E402
from claims import allocated, claim, config, result, slice_claim, slice_config  # noqa: E402
from draplugin import NODE, DraPlugin  # noqa: E402

UID_A = "a0000000-0000-4000-8000-00000000000a"
UID_B = "b0000000-0000-4000-8000-00000000000b"
UID_C = "c0000000-0000-4000-8000-00000000000c"
UID_D = "d0000000-0000-4000-8000-00000000000d"
GIB = 1 << 30

checks = Checks()
tmp = tempfile.mkdtemp(prefix="gpuslice-dra-plugin-")
machine = Machine(memory="16G", FAKENVML_DRIVER_VERSION="580.95.05")
claims_dir = os.path.join(tmp, "claims.d")
cdi_dir = os.path.join(tmp, "cdi")
os.makedirs(cdi_dir)
# A namespace tenant from the first configuration directory, the claims'
# from the second, as the DaemonSet runs it.
os.makedirs(claims_dir)
server = Server(machine, {"team-a": "share = 3\n"}, cdi_dir=cdi_dir, args=["--config-dir", claims_dir])
api = ApiServer(os.path.join(tmp, "api")).start()
plugin = DraPlugin(tmp, api, machine.env, claims_dir, cdi_dir)
registry, endpoint = plugin.registry, plugin.endpoint


def ref(uid, name, namespace="default"):
    return kubelet.claim(namespace, uid, name)


def answer_of(response, uid):
    got = response.claims[uid]
    return {"error": got.error,
            "devices": [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
                        for d in got.devices]}


def tenant_file(uid):
    return os.path.join(claims_dir, "claim-%s.conf" % uid)


def settings(text):
    return {k.strip(): v.strip() for k, v in
            (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))}


def tenants():
    return {t["name"]: t for t in server.status()["tenants"]}


def cdi_devices():
    try:
        with open(os.path.join(cdi_dir, "gpuslice.json")) as f:
            return {d["name"] for d in json.load(f)["devices"]}
    except (OSError, ValueError):
        return set()


try:
    # ---- 1. registration and the ResourceSlice -------------------------------------
    plugin.start()
    info = kubelet.register(registry)
    checks.expect(info.type == "DRAPlugin" and info.name == "gpuslice.io" and info.endpoint == endpoint and
                  list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
                  "it registers as DRAPlugin gpuslice.io at %s with v1 and v1beta1 (%s %s %s %s)"
                  % (endpoint, info.type, info.name, info.endpoint, list(info.supported_versions)))
    wait_for(lambda: api.slices, timeout=10)
    slices = list(api.slices.values())
    dev = slices[0]["spec"]["devices"][0] if slices and slices[0]["spec"].get("devices") else {}
    uuid = subprocess.run([testlib.STAT, "--json", machine.state], capture_output=True, text=True).stdout
    cap = dev.get("capacity", {})
    checks.expect(len(slices) == 1 and slices[0]["spec"]["nodeName"] == NODE and
                  slices[0]["spec"]["driver"] == "gpuslice.io" and dev.get("name") == "gpu-0" and
                  dev.get("allowMultipleAllocations") is True and cap.get("share", {}).get("value") == "100" and
                  cap.get("memory", {}).get("value") == "16Gi" and
                  dev.get("attributes", {}).get("driverVersion") == {"version": "580.95.5"} and
                  dev.get("attributes", {}).get("uuid", {}).get("string", "").startswith("GPU-"),
                  "it publishes node %s's slice: gpu-0 with its UUID, share 100, memory 16Gi, the driver's "
                  "version, allowMultipleAllocations (%s)" % (NODE, json.dumps(slices)[:600]))

    # ---- 2. two claims, 75/8Gi and 25/4Gi -------------------------------------------
    api.set_claim(slice_claim("big", UID_A, "75", "8Gi"))
    api.set_claim(slice_claim("small", UID_B, "25", "4Gi"))
    response = kubelet.prepare(endpoint, [ref(UID_A, "big"), ref(UID_B, "small")])
    a, b = answer_of(response, UID_A), answer_of(response, UID_B)
    checks.expect(a == {"error": "", "devices": [(["gpu"], NODE, "gpu-0",
                                                  ["gpuslice.io/tenant=claim-" + UID_A, "nvidia.com/gpu=0"])]} and
                  b == {"error": "", "devices": [(["gpu"], NODE, "gpu-0",
                                                  ["gpuslice.io/tenant=claim-" + UID_B, "nvidia.com/gpu=0"])]},
                  "two claims prepared in one call answer their device with the tenant's CDI device and the "
                  "GPU's (%s; %s)" % (a, b))
    sa = settings(open(tenant_file(UID_A)).read()) if os.path.exists(tenant_file(UID_A)) else {}
    sb = settings(open(tenant_file(UID_B)).read()) if os.path.exists(tenant_file(UID_B)) else {}
    checks.expect(sa == {"share": "75", "memory": str(8 * GIB)} and sb == {"share": "25", "memory": str(4 * GIB)},
                  "their tenant files say share 75 and 8 GiB, share 25 and 4 GiB (%s; %s)" % (sa, sb))
    t = tenants()
    ta, tb = t.get("claim-" + UID_A, {}), t.get("claim-" + UID_B, {})
    checks.expect(ta.get("share") == 75 and tb.get("share") == 25 and
                  ta.get("memory") == 8 * GIB and tb.get("memory") == 4 * GIB,
                  "the server serves both tenants with those shares and caps (%s; %s)"
                  % ({k: ta.get(k) for k in ("share", "memory")}, {k: tb.get(k) for k in ("share", "memory")}))
    checks.expect({"claim-" + UID_A, "claim-" + UID_B, "team-a"} <= cdi_devices() and t.get("team-a", {}).get("share") == 3,
                  "the server's CDI spec has both claims' devices beside the namespace tenant's (%s)"
                  % sorted(cdi_devices()))
    before = os.stat(tenant_file(UID_A)).st_mtime_ns
    again = answer_of(kubelet.prepare(endpoint, [ref(UID_A, "big")]), UID_A)
    beta = answer_of(kubelet.prepare(endpoint, [ref(UID_A, "big")], version="v1beta1"), UID_A)
    checks.expect(again == a and beta == a and os.stat(tenant_file(UID_A)).st_mtime_ns == before,
                  "prepared again (v1 and v1beta1): the same answer, the file untouched (%s; %s)" % (again, beta))

    # ---- 3. configuration: the class's, then the claim's ---------------------------------
    api.set_claim(slice_claim("tuned", UID_C, "10", "1Gi", configs=[
        config("FromClass", slice_config(limit=0.5, **{"class": "batch"})),
        config("FromClaim", slice_config(preempt_ms=3, **{"class": "latency"}), requests=["gpu"])]))
    c = answer_of(kubelet.prepare(endpoint, [ref(UID_C, "tuned")]), UID_C)
    sc = settings(open(tenant_file(UID_C)).read()) if os.path.exists(tenant_file(UID_C)) else {}
    tc = tenants().get("claim-" + UID_C, {})
    checks.expect(c["error"] == "" and sc == {"share": "10", "memory": str(GIB), "limit": "0.5", "class": "latency",
                                             "preempt_ms": "3"} and
                  tc.get("class") == "latency" and tc.get("limit") == 0.5 and tc.get("preempt_ms") == 3,
                  "the claim's SliceConfig overrides the class's: limit 0.5, class latency, preempt_ms 3 (%s; %s)"
                  % (sc, {k: tc.get(k) for k in ("class", "limit", "preempt_ms")}))
    kubelet.unprepare(endpoint, [ref(UID_C, "tuned")])

    # Two requests of one claim on one GPU, each its own share (shareID).
    pair = claim("pair", allocated([
        result("gpu-0", "20", "2Gi", request="a", share_id="5a000000-0000-4000-8000-00000000000a"),
        result("gpu-0", "30", "3Gi", request="b", share_id="5b000000-0000-4000-8000-00000000000b")]), UID_D)
    pair["spec"]["devices"]["requests"] = [
        {"name": name, "exactly": {"deviceClassName": "gpuslice.io",
                                   "capacity": {"requests": {"share": share, "memory": memory}}}}
        for name, share, memory in (("a", "20", "2Gi"), ("b", "30", "3Gi"))]
    api.set_claim(pair)
    d = answer_of(kubelet.prepare(endpoint, [ref(UID_D, "pair")]), UID_D)
    sd = settings(open(tenant_file(UID_D)).read()) if os.path.exists(tenant_file(UID_D)) else {}
    td = tenants().get("claim-" + UID_D, {})
    checks.expect(d["error"] == "" and [dev[0] for dev in d["devices"]] == [["a"], ["b"]] and
                  all(dev[2] == "gpu-0" for dev in d["devices"]) and
                  sd == {"share": "50", "memory": str(5 * GIB)} and td.get("share") == 50 and
                  td.get("memory") == 5 * GIB,
                  "two requests of one claim on gpu-0 (20 + 30, 2 + 3 GiB): the tenant has 50 and 5 GiB, "
                  "each request answered (%s; %s)" % (d, sd))
    kubelet.unprepare(endpoint, [ref(UID_D, "pair")])

    # ---- 4. bad claims and configurations ----------------------------------------------
    bad = [
        ("limit-high", "d1000000-0000-4000-8000-000000000001", [config("FromClaim", slice_config(limit=1.5))],
         ["claim default/limit-high", "limit", "1.5"]),
        ("unknown-field", "d1000000-0000-4000-8000-000000000002",
         [config("FromClaim", slice_config(quantum=5))], ["claim default/unknown-field", "quantum"]),
        ("wrong-kind", "d1000000-0000-4000-8000-000000000003",
         [config("FromClaim", dict(slice_config(), kind="GpuConfig"))], ["claim default/wrong-kind", "kind"]),
    ]
    for name, uid, configs, _ in bad:
        api.set_claim(slice_claim(name, uid, "25", "1Gi", configs=configs))
    missing_uid = "d1000000-0000-4000-8000-000000000004"
    other_uid = "d1000000-0000-4000-8000-000000000005"
    api.set_claim(slice_claim("other-uid", "d1000000-0000-4000-8000-0000000000ff", "25", "1Gi"))
    elsewhere_uid = "d1000000-0000-4000-8000-000000000006"
    api.set_claim(slice_claim("elsewhere", elsewhere_uid, "25", "1Gi", node="node-b"))
    good_uid = "d1000000-0000-4000-8000-000000000007"
    api.set_claim(slice_claim("good", good_uid, "5", "1Gi"))
    bad += [("missing", missing_uid, None, ["claim default/missing", "not found"]),
            ("other-uid", other_uid, None, ["claim default/other-uid", "uid"]),
            ("elsewhere", elsewhere_uid, None, ["claim default/elsewhere", "node-b"])]
    response = kubelet.prepare(endpoint, [ref(uid, name) for name, uid, _, _ in bad] + [ref(good_uid, "good")])
    for name, uid, _, words in bad:
        got = answer_of(response, uid)
        checks.expect(got["devices"] == [] and all(w in got["error"] for w in words) and
                      not os.path.exists(tenant_file(uid)),
                      "claim %s: an error naming %s, no device, no tenant file (%s)" % (name, words, got["error"]))
    g = answer_of(response, good_uid)
    checks.expect(g["error"] == "" and len(g["devices"]) == 1 and os.path.exists(tenant_file(good_uid)),
                  "a good claim in the same call is prepared (%s)" % g)
    kubelet.unprepare(endpoint, [ref(good_uid, "good")])

    # ---- 5. the API unreachable ---------------------------------------------------------
    flaky_uid = "e1000000-0000-4000-8000-000000000001"
    api.set_claim(slice_claim("flaky", flaky_uid, "5", "1Gi"))
    api.fail_next(1000, 503)
    got = answer_of(kubelet.prepare(endpoint, [ref(flaky_uid, "flaky")], timeout=60), flaky_uid)
    api.clear_failures()
    checks.expect(got["devices"] == [] and "claim default/flaky" in got["error"] and "503" in got["error"] and
                  not os.path.exists(tenant_file(flaky_uid)),
                  "the API answering 503: an error saying so after the retries, nothing created (%s)" % got["error"])
    got = answer_of(kubelet.prepare(endpoint, [ref(flaky_uid, "flaky")]), flaky_uid)
    checks.expect(got["error"] == "" and os.path.exists(tenant_file(flaky_uid)),
                  "once the API answers, the same claim is prepared (%s)" % got)
    kubelet.unprepare(endpoint, [ref(flaky_uid, "flaky")])

    # ---- 6. killed and restarted between prepare and unprepare ------------------------------
    plugin.proc.kill()
    plugin.proc.wait()
    plugin.start()
    kubelet.register(registry)
    response = kubelet.unprepare(endpoint, [ref(UID_A, "big")])
    checks.expect(response.claims[UID_A].error == "" and not os.path.exists(tenant_file(UID_A)) and
                  os.path.exists(tenant_file(UID_B)),
                  "after a SIGKILL and a restart, unprepare removes that claim's tenant file and no other (%s)"
                  % response.claims[UID_A].error)
    gone = wait_for(lambda: "claim-" + UID_A not in tenants() and "claim-" + UID_A not in cdi_devices(), timeout=5)
    checks.expect(gone and "claim-" + UID_B in tenants(),
                  "the server drops its tenant and CDI device and keeps the other (%s)" % sorted(tenants()))
    response = kubelet.unprepare(endpoint, [ref(UID_A, "big")])
    checks.expect(response.claims[UID_A].error == "", "unprepared again: no error (%s)" % response.claims[UID_A].error)

    # ---- 7. the server not running ---------------------------------------------------------
    server.stop()
    lonely_uid = "f1000000-0000-4000-8000-000000000001"
    api.set_claim(slice_claim("lonely", lonely_uid, "5", "1Gi"))
    plugin.proc.terminate()
    plugin.proc.wait()
    plugin.start(server_wait_ms=800)
    os.unlink(os.path.join(cdi_dir, "gpuslice.json")) if os.path.exists(os.path.join(cdi_dir, "gpuslice.json")) else None
    got = answer_of(kubelet.prepare(endpoint, [ref(lonely_uid, "lonely")]), lonely_uid)
    checks.expect(got["devices"] == [] and "gpuslice-server did not take tenant claim-" + lonely_uid in got["error"]
                  and not os.path.exists(tenant_file(lonely_uid)),
                  "no server: prepare fails within --server-wait-ms, saying why, and removes the file it made (%s)"
                  % got["error"])

    # ---- 8. SIGTERM ------------------------------------------------------------------------
    plugin.proc.send_signal(signal.SIGTERM)
    try:
        code = plugin.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        code = None
    checks.expect(code == 0 and not os.path.exists(registry) and not os.path.exists(endpoint),
                  "SIGTERM: it exits 0 and removes its sockets (%s)" % code)
finally:
    plugin.stop()
    server.stop()
    api.stop()
    print("--- gpuslice-dra's log ---\n" + plugin.log()[-4000:])

# ---- everything exchanged, against resource.k8s.io/v1 ------------------------------------
why_not = k8s_npm.install()
if why_not:
    checks.expect(not REQUIRED, "the schema check runs (%s)" % why_not)
else:
    p = subprocess.run(["node", os.path.join(HERE, "kube_schema.mjs"), api.record_dir, k8s_npm.NPM_DIR, "1"],
                       capture_output=True, text=True, timeout=300)
    print(p.stdout, end="")
    print(p.stderr, end="")
    checks.expect(p.returncode == 0, "every body received and every claim served is valid resource.k8s.io/v1 (%s)"
                  % (p.stdout.strip().splitlines() or [""])[-1])
shutil.rmtree(tmp, ignore_errors=True)
shutil.rmtree(machine.dir, ignore_errors=True)
checks.finish()
