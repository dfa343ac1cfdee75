"""Helpers shared by the multi-process tests: paths into the build, a
fresh fakecuda state per test, the fakecuda meter, and a check counter that
prints the 'N passed, N failed' line."""
import json
import os
import subprocess
import sys
import tempfile

BUILD = os.environ.get("GPUSLICE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build"))
FAKECUDA_DIR = os.path.join(BUILD, "test", "fakecuda")
STAT = os.path.join(FAKECUDA_DIR, "fakecuda-stat")
SPIN = os.path.join(BUILD, "examples", "spin", "spin")
MEMHOG = os.path.join(BUILD, "test", "memhog")


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def expect(self, cond, what):
        if cond:
            self.passed += 1
            print("ok:", what)
        else:
            self.failed += 1
            print("FAILED:", what)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


class Machine:
    """One simulated machine: a fresh FAKECUDA_STATE and its environment."""

    def __init__(self, devices=1, memory="16G", **extra):
        self.dir = tempfile.mkdtemp(prefix="gpuslice-test-")
        self.state = os.path.join(self.dir, "fakecuda.state")
        self.env = dict(os.environ)
        self.env.update({
            "LD_LIBRARY_PATH": FAKECUDA_DIR,
            "FAKECUDA_STATE": self.state,
            "FAKECUDA_DEVICES": str(devices),
            "FAKECUDA_MEMORY": memory,
        })
        self.env.update({k: str(v) for k, v in extra.items()})
        # Create the state before anything is measured.
        subprocess.run([SPIN, "--count", "1", "--kernel-us", "1"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)

    def spawn(self, argv, **kw):
        return subprocess.Popen(argv, env=kw.pop("env", self.env), stdout=subprocess.PIPE,
                                stderr=kw.pop("stderr", None), text=True, **kw)

    def snapshot(self):
        path = os.path.join(self.dir, "snap-%d" % len(os.listdir(self.dir)))
        subprocess.run([STAT, "--save", path, self.state], check=True)
        return path

    def meter(self, since=None):
        argv = [STAT, "--json", self.state] if since is None else [STAT, "--json", "--since", since, self.state]
        return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def parse_line(text, prefix):
    """Turns 'prefix: a=1 b=2' (the last such line) into a dict of strings."""
    for line in reversed(text.splitlines()):
        if line.startswith(prefix + ":"):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    return None
