"""Every test's and benchmark's name says where it is, by the rule at the
top of test/meson.build: FOLDER/STEM, or FOLDER/STEM@VARIANT where one file
runs as several tests. test/FOLDER is the test's folder and FOLDER its first
suite; STEM is the file it runs without its extension and "_test": the
script test/FOLDER/STEM_test.py (or STEM.py, STEM.sh), or the program that
test/FOLDER/meson.build builds as STEM_test (or STEM). Read from what meson
recorded of the tests when it configured the build (meson-info).

    test_names_test.py SOURCE_ROOT BUILD_DIR"""
import json
import os
import re
import sys

from testlib import Checks

source, build = (os.path.realpath(p) for p in sys.argv[1:3])
NAME = re.compile(r"^([a-z0-9_]+)/([a-z0-9_]+)(?:@([a-z0-9_-]+))?$")
INTERPRETERS = ("python3", "python", "bash", "sh")


def stem(path):
    """A file's name without its extension and without "_test"."""
    base = os.path.basename(path)
    for ext in (".py", ".sh"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base[: -len("_test")] if base.endswith("_test") else base


def runs(test):
    """(folder, stem, what) of the file a test runs: the script handed to
    an interpreter, or the program meson built; None if neither."""
    cmd = test["cmd"]
    if os.path.basename(cmd[0]) in INTERPRETERS and len(cmd) > 1:
        path, root = os.path.realpath(cmd[1]), os.path.join(source, "test")
    else:
        path, root = os.path.realpath(cmd[0]), os.path.join(build, "test")
    rel = os.path.relpath(path, root)
    if rel.startswith("..") or rel.count(os.sep) != 1:
        return None, None, path
    return os.path.dirname(rel), stem(rel), path


checks = Checks()
seen = {}
for kind in ("tests", "benchmarks"):
    with open(os.path.join(build, "meson-info", "intro-%s.json" % kind)) as f:
        entries = json.load(f)
    checks.expect(kind == "benchmarks" or len(entries) > 50, "meson recorded %d %s" % (len(entries), kind))
    for test in entries:
        name = test["name"]
        seen[name] = seen.get(name, 0) + 1
        m = NAME.match(name)
        if not m:
            checks.expect(False, "%s: a name of the form FOLDER/STEM or FOLDER/STEM@VARIANT" % name)
            continue
        folder, want, _ = m.groups()
        suites = [s.split(":", 1)[-1] for s in test["suite"]]
        if kind == "tests":
            checks.expect(suites and suites[0] == folder,
                          "%s: its first suite is its folder %s (suites %s)" % (name, folder, ", ".join(suites)))
        got_folder, got_stem, path = runs(test)
        checks.expect((got_folder, got_stem) == (folder, want),
                      "%s: runs test/%s/%s (it runs %s)" % (name, folder, want, path))
checks.expect(all(n == 1 for n in seen.values()),
              "no name is given twice (%s)" % ", ".join(sorted(n for n, c in seen.items() if c > 1)))
checks.finish()
