"""DRA end to end with podman: gpuslice-dra prepares two ResourceClaims
(served by the test API endpoint, as the scheduler allocated them: 75 and
25 of gpu-0's share, 8 GiB and 4 GiB of its memory) through the kubelet
stand-in, and containers are started with the CDI devices it answered, as
a container runtime would start the pods' containers:

1. the two claims' containers split the GPU 75/25 +-3 by fakecuda's meter
   (and gpuslicectl status lists them);
2. each claim's container is refused device memory past its claim's cap
   (CUDA_ERROR_OUT_OF_MEMORY, with all it got within the cap);
3. NVML inside each container (nvml_probe, linked against
   libnvidia-ml.so.1: fakenvml here) shows its own claim's cap as total;
4. unprepared, the claims' devices leave the CDI spec within 2 s and a
   container asking for one does not start.

The server writes its spec to /etc/cdi (podman 4.3 reads it; the test
removes it at the end), reading the claims' directory as its
configuration directory."""
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "containers"))
import ctlib  # noqa: E402
import runtimes  # noqa: E402
from ctlib import Checks, Cleanup, Server  # noqa: E402
from testlib import BUILD, FAKECUDA_DIR, MEMHOG, wait_for  # noqa: E402

REQUIRED = os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1"
try:
    import grpc  # noqa: F401
    import kubelet
    kubelet.load()
except ImportError as e:
    ctlib.skip("the kubelet stand-in needs python3-grpcio and the generated messages (%s)" % e)
if not shutil.which("openssl"):
    ctlib.skip("the openssl command (for the API endpoint's certificate) is missing")
ctlib.require({"podman": "podman", "runc": "runc"})
from apiserver import ApiServer  # noqa: E402
from claims import slice_claim  # noqa: E402
from draplugin import DraPlugin  # noqa: E402

NVML_PROBE = os.path.join(BUILD, "test", "helpers", "nvml_probe")
FAKENVML = os.path.join(FAKECUDA_DIR, "libnvidia-ml.so.1")
C_NVML = ctlib.C_LIBCUDA_DIR + "/libnvidia-ml.so.1"
GIB = 1 << 30
CHUNK_MB = 256
# Names no other run on this host has.
UID_A = "a%07d-0000-4000-8000-00000000000a" % (os.getpid() % 10000000)
UID_B = "b%07d-0000-4000-8000-00000000000b" % (os.getpid() % 10000000)
CAPS = {"a": 8 * GIB, "b": 4 * GIB}

spec = ctlib.claim_cdi_spec()
checks = Checks()
with Cleanup() as cleanup:
    tmp = tempfile.mkdtemp(prefix="gpuslice-dra-podman-")
    cleanup.add(lambda: shutil.rmtree(tmp, ignore_errors=True))
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"), extra=(MEMHOG, NVML_PROBE))
    open(os.path.join(rootfs, C_NVML.lstrip("/")), "w").close()  # mount point
    cleanup.add(lambda: os.path.exists(spec) and os.unlink(spec))
    claims_dir = os.path.join(tmp, "claims.d")
    server = Server(machine, {}, conf=claims_dir, cdi_dir=ctlib.CDI_DIR)
    cleanup.add(server.stop)
    api = ApiServer(os.path.join(tmp, "api")).start()
    cleanup.add(api.stop)
    plugin = DraPlugin(tmp, api, machine.env, claims_dir, ctlib.CDI_DIR, args=["--gpu-cdi", "none"])
    cleanup.add(lambda: print("--- gpuslice-dra's log ---\n" + plugin.log()[-3000:]))
    cleanup.add(plugin.stop)
    plugin.start()
    kubelet.register(plugin.registry)
    podman = runtimes.Podman(machine)
    cleanup.add(podman.cleanup)

    # ---- the claims, prepared --------------------------------------------------------
    api.set_claim(slice_claim("train", UID_A, "75", "8Gi", namespace="team-c"))
    api.set_claim(slice_claim("infer", UID_B, "25", "4Gi", namespace="team-c"))
    refs = [kubelet.claim("team-c", UID_A, "train"), kubelet.claim("team-c", UID_B, "infer")]
    cleanup.add(lambda: kubelet.unprepare(plugin.endpoint, refs))
    response = kubelet.prepare(plugin.endpoint, refs)
    cdi = {}
    for label, uid in (("a", UID_A), ("b", UID_B)):
        got = response.claims[uid]
        ids = [i for d in got.devices for i in d.cdi_device_ids]
        checks.expect(got.error == "" and ids == ["gpuslice.io/tenant=claim-" + uid],
                      "claim %s is prepared: its CDI device is its tenant's (%s %s)" % (label, ids, got.error))
        cdi[label] = ids

    def devices(label):
        return [a for i in cdi[label] for a in ("--device", i)]

    # ---- 1. the split ----------------------------------------------------------------
    ctlib.measure_split(
        checks, machine, server, "DRA",
        lambda s: podman.start("a", rootfs, ctlib.spin_argv(s), args=devices("a"), user=65534, read_only=True),
        lambda s: podman.start("b", rootfs, ctlib.spin_argv(s), args=devices("b")))

    # ---- 2. memory caps, 3. NVML -------------------------------------------------------
    for label in ("a", "b"):
        cap = CAPS[label]
        count = cap // (CHUNK_MB << 20) + 4
        # Contexts hold no memory here, so that the cap is the allocations' alone.
        code, out, err = podman.run("mem-" + label, rootfs,
                                    ["/usr/bin/memhog", "--chunk-mb", str(CHUNK_MB), "--count", str(count)],
                                    args=devices(label) + ["-e", "FAKECUDA_CONTEXT_BYTES=0",
                                                           "-e", "GPUSLICE_CONTEXT_BYTES=0"])
        fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
        got = int(fields.get("allocated", -1)) * (CHUNK_MB << 20)
        checks.expect(code == 0 and fields.get("last_error") == "CUDA_ERROR_OUT_OF_MEMORY" and
                      got == cap,
                      "claim %s's container is refused past its cap of %d GiB: it got all of it, %.2f GiB, then "
                      "CUDA_ERROR_OUT_OF_MEMORY (%d: %s %s)" % (label, cap // GIB, got / GIB, code, out.strip(),
                                                                err.strip()[-200:]))
        code, out, err = podman.run("nvml-" + label, rootfs, ["/usr/bin/nvml_probe", "report"],
                                    args=devices(label) + ["-v", FAKENVML + ":" + C_NVML + ":ro"])
        fields = dict(w.split("=", 1) for w in out.replace('"', " ").split() if "=" in w)
        checks.expect(code == 0 and fields.get("total") == str(cap) and fields.get("rc") == "0",
                      "NVML in claim %s's container shows its cap, %d bytes, as the GPU's memory (%d: %s %s)"
                      % (label, cap, code, out.strip(), err.strip()[-200:]))

    # ---- 4. unprepared -----------------------------------------------------------------
    response = kubelet.unprepare(plugin.endpoint, refs)
    left = set()

    def spec_left():
        # Unprepare removes the tenant files; the server drops the tenants
        # from its spec when it sees them go, as it does for any tenant
        # file (and removes the spec once it has no tenant).
        left.clear()
        if os.path.exists(spec):
            with open(spec) as f:
                left.update(d["name"] for d in json.load(f)["devices"])
        return not ({"claim-" + UID_A, "claim-" + UID_B} & left)

    start = time.monotonic()
    gone = wait_for(spec_left, timeout=2.0, step=0.01)
    took = time.monotonic() - start
    checks.expect(all(response.claims[r.uid].error == "" for r in refs) and gone,
                  "unprepared, the claims' devices leave the CDI spec within 2 s (%.3f s; left: %s)"
                  % (took, sorted(left)))
    code, out, err = podman.run("gone", rootfs, ["/bin/true"], args=devices("a"))
    checks.expect(code != 0 and "claim-" + UID_A in err,
                  "a container asking for an unprepared claim's device does not start, naming it (%d: %s)"
                  % (code, err.strip()[-200:]))
checks.finish()
