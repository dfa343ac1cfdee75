"""Rows 4, 6 and 11 of test/gpu/check.sh fail when gpuslice does: each runs,
simulated and --quick, with a planted fault preloaded ahead of the shim
into its tenants (gpu_check.py --plant), and must fail on the figure that
fault breaks, the rest of the row unharmed:

- graph-gate-bypass (plant_graph_bypass.c): cuGraphLaunch goes straight to
  the driver, past the gate. Row 4's replays then take most of the GPU
  (GPU time / wall far above the limit of 0.3), while the capture still
  succeeds and the tenant still loses the GPU inside it.
- handoff-delay (plant_handoff_delay.c): every GRANT reaches the shim
  50 ms late. Row 6's median handoff, one tenant's last kernel end to the
  next one's first kernel start by %globaltimer, is then 50 ms or more.
- preemption-ignored (plant_preemption_ignored.c), in row 11's batch
  tenant: REVOKEs hidden and no bound on work ahead, so the batch holder
  keeps each slice to its deadline. The inference steps as class = latency
  then wait about as long as they do as class = batch (median over 4 ms).

That the same rows pass without the faults is gpu/check's job.

  plant_test.py BUILD_DIR
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
work = tempfile.mkdtemp(prefix="gpuslice-plant-")


def planted(row, fault):
    out = os.path.join(work, "%s.md" % fault)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_check.py"), "--build", build, "--simulate",
                           "--quick", "--rows", str(row), "--plant", fault, "--out", out],
                          capture_output=True, text=True, timeout=240)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    with open(os.path.splitext(out)[0] + ".json") as f:
        result = json.load(f)
    return proc.returncode, result["rows"][0]


rc, row = planted(4, "graph-gate-bypass")
data = row["data"]
checks.expect(rc == 1 and row["row"] == 4 and row["result"] == "FAIL",
              "row 4 fails with graph launches past the gate (exit %d, %s)" % (rc, row["result"]))
checks.expect(data.get("replay_fraction", 0) > 0.6,
              "its replays took %.2f of the GPU, far past the limit of 0.3" % data.get("replay_fraction", 0))
checks.expect(data.get("lost", 0) >= 1 and "CUDA_SUCCESS" in row["measured"],
              "the capture itself still succeeded and lost the GPU %d times: the replays failed the row"
              % data.get("lost", 0))

rc, row = planted(6, "handoff-delay")
data = row["data"]
checks.expect(rc == 1 and row["row"] == 6 and row["result"] == "FAIL",
              "row 6 fails with every grant held 50 ms (exit %d, %s)" % (rc, row["result"]))
checks.expect(data.get("median_ms", 0) >= 45,
              "its median handoff is %.1f ms (the fault: 50 ms)" % data.get("median_ms", 0))
rc, row = planted(11, "preemption-ignored")
data = row["data"]
latency = data.get("beside_latency", {}).get("p50_ms", 0)
checks.expect(rc == 1 and row["row"] == 11 and row["result"] == "FAIL",
              "row 11 fails with a batch holder that ignores preemption (exit %d, %s)" % (rc, row["result"]))
checks.expect(latency > 4.0, "its inference steps as class = latency have a median of %.2f ms (over 4)" % latency)
checks.finish()
