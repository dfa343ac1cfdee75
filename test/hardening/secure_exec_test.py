"""A set-uid CUDA program could be made to load any library as root: the
shim read GPUSLICE_REAL_LIBCUDA with getenv, so anyone who ran a set-uid
program with GPUSLICE_REAL_LIBCUDA=/tmp/evil.so had evil.so loaded with
euid 0. The shim now reads every variable through secure_getenv, which
gives nothing in glibc's secure-execution mode (set-uid, set-gid, file
capabilities).

secure_probe (a program that calls cuInit, linked against the shim: the
loader ignores LD_PRELOAD for a set-uid program, and a container's
/etc/ld.so.preload is what loads it there) is copied into a temporary
directory, owned by root, and run as uid 65534 with GPUSLICE_REAL_LIBCUDA
naming evil_libcuda.so, whose constructor records that it was loaded:

1. without the set-uid bit (the control: not secure-execution mode), it is
   loaded, with euid 65534: the test sees a load when there is one;
2. with the set-uid bit (secure-execution mode, euid 0), it is not.

Needs root to make a set-uid program (CI runs as root); skipped (77)
otherwise, unless GPUSLICE_REQUIRE_CONTAINERS=1, where that fails."""
import os
import shutil
import subprocess
import sys
import tempfile

from testlib import BUILD, Checks, parse_line

HELPERS = os.path.join(BUILD, "test", "helpers")
PROBE = os.path.join(HELPERS, "secure_probe")
EVIL = os.path.join(HELPERS, "evil_libcuda.so")
NOBODY = 65534


def skip(reason):
    if os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1":
        print("FAILED: %s (GPUSLICE_REQUIRE_CONTAINERS=1)" % reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


if os.geteuid() != 0:
    skip("making a set-uid program needs root")

checks = Checks()
# In the build directory, not /tmp, which may be mounted nosuid.
work = tempfile.mkdtemp(prefix="secure-exec-", dir=HELPERS)
os.chmod(work, 0o755)
markers = os.path.join(work, "markers")
os.mkdir(markers)
os.chmod(markers, 0o1777)
probe = os.path.join(work, "secure_probe")
shutil.copy(PROBE, probe)
os.chown(probe, 0, 0)


def as_nobody():
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def run(mode, label):
    """Runs the copy with the given mode as uid 65534: its line, and what
    evil_libcuda.so recorded."""
    os.chmod(probe, mode)
    marker = os.path.join(markers, label)
    env = dict(os.environ, GPUSLICE_REAL_LIBCUDA=EVIL, EVIL_MARKER=marker, GPUSLICE_LOG="debug")
    env.pop("LD_PRELOAD", None)
    # LeakSanitizer cannot stop the threads of a set-uid (undumpable)
    # process; leaks are checked in the other tests.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    p = subprocess.run([probe], env=env, capture_output=True, text=True, timeout=30, preexec_fn=as_nobody)
    line = parse_line(p.stdout, "secure_probe") or {}
    loaded = open(marker).read() if os.path.exists(marker) else ""
    print("%s: exit %d, %s; evil_libcuda.so: %r; stderr: %s" % (label, p.returncode, line, loaded,
                                                               p.stderr.strip()[-400:]))
    return p, line, loaded


try:
    p, line, loaded = run(0o755, "plain")
    checks.expect(p.returncode == 0 and line.get("at_secure") == "0" and line.get("euid") == str(NOBODY),
                  "control: the program runs as uid %d, not in secure-execution mode (%s)" % (NOBODY, line))
    checks.expect("loaded euid=%d" % NOBODY in loaded,
                  "control: outside secure-execution mode GPUSLICE_REAL_LIBCUDA is followed (%r)" % loaded)

    p, line, loaded = run(0o4755, "setuid")
    if line.get("at_secure") != "1":
        skip("the set-uid bit had no effect in %s (a nosuid mount?): %s" % (work, line))
    checks.expect(p.returncode == 0 and line.get("euid") == "0",
                  "set-uid root, run by uid %d: secure-execution mode, euid 0 (%s)" % (NOBODY, line))
    checks.expect(loaded == "", "set-uid: GPUSLICE_REAL_LIBCUDA is ignored, the library is not loaded "
                  "(it recorded: %r)" % loaded.strip())
finally:
    shutil.rmtree(work, ignore_errors=True)
checks.finish()
