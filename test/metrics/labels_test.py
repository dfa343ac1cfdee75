"""/metrics labelled as dcgm-exporter labels (issue 29): GPU series carry
UUID, gpu, modelName (from the driver's /proc/driver/nvidia/gpus/*/
information, a copy made here) and Hostname (--hostname, as the DaemonSet
gives the node's name; promtool's lint dislikes these camelCase names,
and nothing else); per-process series (gpuslice_process_info,
gpuslice_process_gpu_memory_bytes) carry the tenant, the host PID and the
GPU's labels, and the memory a process holds. The peak's help text says
it counts leased headroom (it said "the most device memory the tenant has
had counted", and showed 662 MiB for a program holding 300). The live scrape passes
`promtool check metrics` where promtool is installed.

Before: GPU series had UUID and gpu only, and there were no per-process
series (the server knew each client's container and pod, and /metrics
said nothing of them)."""
import os
import shutil
import subprocess
import time

from metricslib import MetricsServer, parse, request, split_response, value, values
from testlib import MEMHOG, Checks, Machine, wait_for

checks = Checks()
machine = Machine()
hexid = machine.meter()["devices"][0]["uuid"]
uuid = "GPU-%s-%s-%s-%s-%s" % (hexid[:8], hexid[8:12], hexid[12:16], hexid[16:20], hexid[20:])
nvidia = os.path.join(machine.dir, "nvidia")
os.makedirs(os.path.join(nvidia, "gpus", "0000:3b:00.0"))
with open(os.path.join(nvidia, "gpus", "0000:3b:00.0", "information"), "w") as f:
    f.write("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 150\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\n"
            "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 0\n"
            "GPU Excluded:\t No\n" % uuid)
server = MetricsServer(machine, {"a": "share = 3\nmemory = 1G\n"},
                       args=["--hostname", "node-7", "--nvidia-dir", nvidia, "--verify-gpus", "off"])
hog = subprocess.Popen([MEMHOG, "--chunk-mb", "64", "--count", "2", "--hold"], env=server.tenant_env("a"),
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
line = hog.stdout.readline()
checks.expect("allocated=2" in line, "memhog holds 2 x 64 MiB in tenant a (%s)" % line.strip())
time.sleep(0.2)


def scrape():
    return parse(split_response(request(server.port, b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n"))[2].decode())


m = scrape()
gpu_labels = {"UUID": uuid, "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-7"}
checks.expect(value(m, "gpuslice_tenant_gpu_memory_bytes", tenant="a", **gpu_labels) is not None,
              "tenant-and-GPU series: UUID, gpu, modelName and Hostname (%s)"
              % list(values(m, "gpuslice_tenant_gpu_memory_bytes")))
checks.expect(value(m, "gpuslice_gpu_slices_total", **gpu_labels) is not None, "GPU series: the same labels")
info = values(m, "gpuslice_process_info", tenant="a", pid=str(hog.pid), Hostname="node-7")
checks.expect(list(info.values()) == [1.0], "gpuslice_process_info names the process by tenant and host PID (%s)"
              % list(values(m, "gpuslice_process_info")))
held = value(m, "gpuslice_process_gpu_memory_bytes", tenant="a", pid=str(hog.pid), **gpu_labels)
checks.expect(held is not None and held >= 128 << 20,
              "gpuslice_process_gpu_memory_bytes: what it holds on the GPU, with the GPU's labels (%s)" % held)
peak = value(m, "gpuslice_tenant_gpu_memory_peak_bytes", tenant="a", UUID=uuid)
checks.expect("headroom" in m["help"].get("gpuslice_tenant_gpu_memory_peak_bytes", "") and peak >= held,
              "the peak is documented as what it counts, leased headroom included (%s; peak %s, held %s)"
              % (m["help"].get("gpuslice_tenant_gpu_memory_peak_bytes"), peak, held))
promtool = shutil.which("promtool")
if promtool:
    text = split_response(request(server.port, b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n"))[2].decode()
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    # dcgm-exporter's label names are camelCase (modelName, Hostname), which
    # promtool's lint dislikes; nothing else may be reported.
    other = [l for l in (lint.stdout + lint.stderr).splitlines()
             if l.strip() and "label names should be written in 'snake_case' not 'camelCase'" not in l]
    checks.expect(not other, "promtool check metrics finds nothing but dcgm-exporter's camelCase label names (%s)"
                  % other[:3])
hog.stdin.close()
hog.wait(timeout=10)
checks.expect(wait_for(lambda: not values(scrape(), "gpuslice_process_info", tenant="a"), 3.0),
              "the process's series go when it does")
server.stop()
checks.finish()
