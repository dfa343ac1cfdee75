"""Runs validate.mjs (or the script named as its argument, names.mjs) on
deploy/kubernetes: the manifests against the
Kubernetes OpenAPI schemas (npm kubernetes-models) and the admission
policy's CEL (npm @marcbachmann/cel-js), offline, no cluster. Installs
node and npm with apt-get if missing, and the npm packages (pinned in
package-lock.json) into the build directory."""
import os
import subprocess
import sys

import k8s_npm
from testlib import skip

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))




why_not = k8s_npm.install()
if why_not:
    skip(why_not)
# The checks to run: validate.mjs, or the one named (names.mjs).
script = sys.argv[1] if len(sys.argv) > 1 else "validate.mjs"
sys.exit(subprocess.run(["node", os.path.join(HERE, script), os.path.join(SOURCE, "deploy", "kubernetes"),
                         k8s_npm.NPM_DIR]).returncode)
