"""Row 10 of test/gpu/check.sh (NVML and nvidia-smi inside tenants) judges
what it should, simulated and --quick (gpu_check.py --rows 10):

1. nvidia-smi's part, which a simulated run otherwise skips, with the
   stand-in smi_standin.py (memory and utilization through NVML's public
   calls, the processes past the shim, as README says nvidia-smi may read
   them): the row passes, every memory figure it shows in a tenant is
   classed as the tenant's and the process list as the whole GPU's, and
   the report says which figures the shim left the whole GPU's.
2. The same stand-in failing wherever the shim is preloaded: the row
   fails, naming nvidia-smi's exit status in a tenant against outside.
3. The planted fault nvml-passthrough (the tenants' NVML clients have no
   server to ask, so the shim passes NVML's own answers through): the row
   fails on the ctypes client's figures, the whole GPU's memory and every
   holder's pid.

That the row passes without a stand-in, nvidia-smi skipped, is
gpu/check's job.

  nvml_row_test.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import testlib  # noqa: E402

build = sys.argv[1]
checks = testlib.Checks()
work = tempfile.mkdtemp(prefix="gpuslice-nvmlrow-")
STANDIN = os.path.join(HERE, "smi_standin.py")


def row10(name, extra_args=(), **env):
    out = os.path.join(work, "%s.md" % name)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_check.py"), "--build", build, "--simulate",
                           "--quick", "--rows", "10", "--out", out] + list(extra_args),
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=240)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    with open(os.path.splitext(out)[0] + ".json") as f:
        return proc.returncode, json.load(f)["rows"][0]


rc, row = row10("standin", ["--nvidia-smi", STANDIN])
smi = row["data"].get("nvidia_smi", {})
classes = smi.get("classes", {})
checks.expect(rc == 0 and row["result"] == "PASS", "row 10 passes with nvidia-smi's stand-in (exit %d, %s)"
              % (rc, row["result"]))
checks.expect(all(classes.get(t, {}).get(f) == "the tenant's" for t in "ab"
                  for f in ("memory.total", "memory.used", "memory.free")),
              "nvidia-smi's memory figures in each tenant are classed as the tenant's (%s)" % classes)
checks.expect(all(classes.get(t, {}).get("apps") == "the whole GPU's" for t in "ab"),
              "its process lists, read past the shim, are classed as the whole GPU's")
checks.expect(smi.get("unchanged") == ["a apps", "b apps"] and
              "left the whole GPU's by the shim: a apps, b apps" in row["measured"],
              "the report names what the shim left the whole GPU's (%s)" % smi.get("unchanged"))
checks.expect("not its own among them" in row["measured"],
              "the report names the pids a tenant's nvidia-smi showed that are not its own")

rc, row = row10("standin-fails", ["--nvidia-smi", STANDIN], SMI_STANDIN_FAIL_IN_TENANT="1")
checks.expect(rc == 1 and row["result"] == "FAIL", "row 10 fails when nvidia-smi fails in the tenants (exit %d, %s)"
              % (rc, row["result"]))
checks.expect(any("in a: exit 3" in w and "outside any tenant exit 0" in w for w in row["data"].get("wrong", [])),
              "it names nvidia-smi's exit status in a tenant and outside (%s)" % row["data"].get("wrong"))

rc, row = row10("passthrough", ["--plant", "nvml-passthrough"])
wrong = row["data"].get("wrong", [])
checks.expect(rc == 1 and row["result"] == "FAIL", "row 10 fails when the tenants' NVML is NVML's own (exit %d, %s)"
              % (rc, row["result"]))
checks.expect(any(w.startswith("a memory total") for w in wrong) and any(w.startswith("b memory_v2 total") for w in wrong),
              "on the memory figures of both tenants, v1 and v2 (%s)" % wrong)
checks.expect(any(w.startswith("a procs_v3 lists") for w in wrong) and any(w.startswith("b detail lists") for w in wrong),
              "and on the process lists (%s)" % wrong)
checks.expect("nvidia-smi: skipped" in row["measured"], "nvidia-smi's part is skipped simulated without a stand-in")
checks.finish()
