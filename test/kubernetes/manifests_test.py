"""Runs validate.mjs (or the script named as its argument, names.mjs) on
deploy/kubernetes: the manifests against the
Kubernetes OpenAPI schemas (npm kubernetes-models) and the admission
policy's CEL (npm @marcbachmann/cel-js), offline, no cluster. Installs
node and npm with apt-get if missing, and the npm packages (pinned in
package-lock.json) into the build directory."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("GPUSLICE_BUILD_DIR", os.path.join(SOURCE, "build"))
NPM_DIR = os.path.join(BUILD, "test", "kubernetes", "npm")
REQUIRED = os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1"


def skip(reason):
    if REQUIRED:
        print("FAILED: %s (GPUSLICE_REQUIRE_CONTAINERS=1)" % reason)
        sys.exit(1)
    print("skipped: " + reason)
    sys.exit(77)


def node_version():
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
        return tuple(int(x) for x in out.lstrip("v").split("."))
    except (OSError, ValueError):
        return None


if not shutil.which("node") or not shutil.which("npm"):
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        skip("node and npm are missing (apt-get install nodejs npm)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "nodejs", "npm"], env=env, stdout=subprocess.DEVNULL)
    if not shutil.which("node") or not shutil.which("npm"):
        skip("apt-get install nodejs npm failed")
version = node_version()
if not version or version < (20, 19):
    skip("node %s is older than 20.19, which @marcbachmann/cel-js needs" % ".".join(map(str, version or ())))

# npm ci into the build directory, again only when the lock file changed.
lock = os.path.join(HERE, "package-lock.json")
stamp = os.path.join(NPM_DIR, "installed-lock.json")
if not os.path.exists(stamp) or open(stamp).read() != open(lock).read():
    os.makedirs(NPM_DIR, exist_ok=True)
    shutil.copy(os.path.join(HERE, "package.json"), NPM_DIR)
    shutil.copy(lock, NPM_DIR)
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NPM_DIR,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        skip("npm ci failed (is the npm registry reachable?): " + (p.stderr.strip().splitlines() or [""])[-1])
    shutil.copy(lock, stamp)
# The checks to run: validate.mjs, or the one named (names.mjs).
script = sys.argv[1] if len(sys.argv) > 1 else "validate.mjs"
sys.exit(subprocess.run(["node", os.path.join(HERE, script), os.path.join(SOURCE, "deploy", "kubernetes"),
                         NPM_DIR]).returncode)
