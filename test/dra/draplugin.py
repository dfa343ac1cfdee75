"""gpuslice-dra run for a test: on a private kubelet directory, reading
claims from a test API endpoint (apiserver.py) and writing tenant files
where a gpuslice-server reads them; started again after a kill as the
kubelet's plugin manager would see it.

    plugin = DraPlugin(tmp, api, env, claims_dir, cdi_dir)
    plugin.start()                       # waits until it answers
    plugin.registry, plugin.endpoint     # its two sockets
    plugin.proc, plugin.log()
"""
import os
import subprocess

import grpc
import kubelet
from testlib import BUILD, wait_for

PLUGIN = os.path.join(BUILD, "dra", "gpuslice-dra")
NODE = "node-a"


class DraPlugin:
    def __init__(self, tmp, api, env, claims_dir, cdi_dir, args=()):
        self.api, self.env, self.claims_dir, self.cdi_dir = api, env, claims_dir, cdi_dir
        self.args = list(args)
        self.kubelet_dir = os.path.join(tmp, "kubelet")
        os.makedirs(os.path.join(self.kubelet_dir, "plugins_registry"), exist_ok=True)
        self.registry = os.path.join(self.kubelet_dir, "plugins_registry", "gpuslice.io-reg.sock")
        self.endpoint = os.path.join(self.kubelet_dir, "plugins", "gpuslice.io", "dra.sock")
        self.log_path = os.path.join(tmp, "gpuslice-dra.log")
        self.proc = None

    def start(self, server_wait_ms=3000, extra=()):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [PLUGIN, "--node-name", NODE, "--kubelet-dir", self.kubelet_dir, "--claims-dir", self.claims_dir,
             "--cdi-dir", self.cdi_dir, "--server-wait-ms", str(server_wait_ms), "--api-server", self.api.url,
             "--token-file", self.api.token_file, "--ca-file", self.api.ca_file] + self.args + list(extra),
            env=self.env, stdout=log, stderr=log)
        log.close()
        # (a killed one's sockets stay until this one replaces them)
        if not wait_for(self.answers, timeout=20, step=0.1):
            raise RuntimeError("gpuslice-dra does not answer on its sockets: " + self.log()[-2000:])

    def answers(self):
        if self.proc.poll() is not None:
            return False
        try:
            kubelet.get_info(self.registry, timeout=1)
            return True
        except grpc.RpcError:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self):
        if not os.path.exists(self.log_path):
            return ""
        with open(self.log_path) as f:
            return f.read()
