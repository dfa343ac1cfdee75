"""What of the real-GPU check's GPU side can be checked without a GPU:

- the PTX of the stamp kernels (stamps ptx) compiles for an H100/H200
  (sm_90) with NVIDIA's ptxas, where one is installed (a real driver
  JIT-compiles the same text);
- gpu_stamps.py, the ctypes binding the PyTorch programs launch stamp
  kernels with, works against a driver (fakecuda): its argument types,
  another thread's launches, slots past its capacity;
- the PyTorch programs at least compile (no PyTorch here to run them);
- stamps refuses a command line without --out.

  programs_test.py STAMPS CUDA_BIN_DIR   (LD_LIBRARY_PATH: fakecuda)
"""
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import testlib  # noqa: E402

stamps, cuda_bin = sys.argv[1], sys.argv[2]
checks = testlib.Checks()
work = tempfile.mkdtemp(prefix="gpuslice-programs-")
env = dict(os.environ, FAKECUDA_STATE=os.path.join(work, "fakecuda.state"))

ptx = os.path.join(work, "stamp.ptx")
with open(ptx, "w") as f:
    rc = subprocess.run([stamps, "ptx"], stdout=f, env=env).returncode
checks.expect(rc == 0 and ".entry stamp(" in open(ptx).read(), "stamps ptx prints the kernels' PTX")

ptxas = next((p for p in (os.path.join(cuda_bin, "ptxas"), os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"),
                                                                       "bin", "ptxas"),
                          "/usr/local/cuda/bin/ptxas", shutil.which("ptxas") or "") if p and os.access(p, os.X_OK)),
             None)
if ptxas:
    proc = subprocess.run([ptxas, "-arch=sm_90", ptx, "-o", os.path.join(work, "stamp.cubin")], capture_output=True,
                          text=True)
    checks.expect(proc.returncode == 0, "ptxas compiles the PTX for sm_90 (%s)" % (proc.stderr.strip() or "ok"))
else:
    print("note: no ptxas found: the PTX is not compiled here")

proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_stamps.py"), "--self-test", ptx], env=env,
                      capture_output=True, text=True, timeout=60)
print(proc.stdout, proc.stderr)
checks.expect(proc.returncode == 0, "gpu_stamps.py's self-test passes on fakecuda")

for name in ("torch_capture.py", "torch_matmul.py", "torch_memcap.py", "torch_infer.py", "torch_train.py", "gpu_check.py",
             "checkrun.py"):
    try:
        py_compile.compile(os.path.join(HERE, name), cfile=os.path.join(work, name + "c"), doraise=True)
        checks.expect(True, "%s compiles" % name)
    except py_compile.PyCompileError as e:
        checks.expect(False, "%s compiles: %s" % (name, e))

proc = subprocess.run([stamps, "run", "--seconds", "1"], env=env, capture_output=True, text=True)
checks.expect(proc.returncode == 1 and "Usage" in proc.stderr, "stamps run without --out is a usage error")
shutil.rmtree(work, ignore_errors=True)
checks.finish()
