"""The npm packages of the offline Kubernetes checks (test/kubernetes's
package.json, pinned by its package-lock.json: kubernetes-models, the
schemas; @marcbachmann/cel-js, CEL; yaml), installed with `npm ci` into
the build directory, again only when the lock file changed. node and npm
are installed with apt-get where they are missing and we are root.

    import k8s_npm
    why_not = k8s_npm.install()      # None, or why the packages are not there
    k8s_npm.NPM_DIR                  # the directory to give the .mjs scripts
"""
import os
import shutil
import subprocess

from testlib import BUILD

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NPM_DIR = os.path.join(BUILD, "test", "kubernetes", "npm")
PACKAGES = os.path.join(SOURCE, "test", "kubernetes")
NODE_AT_LEAST = (20, 19)  # what @marcbachmann/cel-js needs


def node_version():
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
        return tuple(int(x) for x in out.lstrip("v").split("."))
    except (OSError, ValueError):
        return None


def install():
    """None once the packages are in NPM_DIR, or why they are not."""
    if not shutil.which("node") or not shutil.which("npm"):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            return "node and npm are missing (apt-get install nodejs npm)"
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "nodejs", "npm"], env=env, stdout=subprocess.DEVNULL)
        if not shutil.which("node") or not shutil.which("npm"):
            return "apt-get install nodejs npm failed"
    version = node_version()
    if not version or version < NODE_AT_LEAST:
        return "node %s is older than %s, which @marcbachmann/cel-js needs" % (
            ".".join(map(str, version or ())), ".".join(map(str, NODE_AT_LEAST)))
    lock = os.path.join(PACKAGES, "package-lock.json")
    stamp = os.path.join(NPM_DIR, "installed-lock.json")
    if os.path.exists(stamp) and open(stamp).read() == open(lock).read():
        return None
    os.makedirs(NPM_DIR, exist_ok=True)
    shutil.copy(os.path.join(PACKAGES, "package.json"), NPM_DIR)
    shutil.copy(lock, NPM_DIR)
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NPM_DIR,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return "npm ci failed (is the npm registry reachable?): " + (p.stderr.strip().splitlines() or [""])[-1]
    shutil.copy(lock, stamp)
    return None
