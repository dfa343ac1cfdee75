"""The README's "By hand, without a GPU" recipe, run as written (issue
29: the by-hand fakecuda run lived only inside scripts/demo): the block
is taken from README.md, run with bash in a directory whose `build` is
this build and with its /tmp/gs made a fresh directory, and what it
prints must show the two tenants at about 75 % and 25 % in `gpuslicectl
status` and on the fakecuda meter."""
import os
import re
import signal
import subprocess
import tempfile

from testlib import BUILD, Checks

checks = Checks()
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "..", "..", "README.md")) as f:
    readme = f.read()
block = readme.split("### By hand, without a GPU", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
work = tempfile.mkdtemp(prefix="gpuslice-readme-")
os.symlink(os.path.abspath(BUILD), os.path.join(work, "build"))
lines = block.replace("/tmp/gs", os.path.join(work, "gs")).splitlines()
# The server's PID, to stop it once the rest is done.
lines = [l + "\nSERVER_PID=$!" if "gpuslice-server" in l and l.rstrip().endswith("&") else l for l in lines]
script = "\n".join(lines) + ('\nfor p in $(jobs -pr); do [ "$p" = "$SERVER_PID" ] || wait "$p" || true; done\n'
                             'kill "$SERVER_PID"; wait "$SERVER_PID" || true\n')
env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSLICE_", "FAKECUDA_", "LD_"))}
# Its own process group, so that whatever it leaves running is stopped.
p = subprocess.Popen(["bash", "-e", "-c", script], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True, start_new_session=True)
try:
    out, err = p.communicate(timeout=45)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    out, err = p.communicate()
    err = "still running after 45 s: " + err
checks.expect(p.returncode in (0, 143), "the README's commands run (%d: %s)" % (p.returncode, err[-600:]))
rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(a|b)\s+\d+\s+\S+\s+\d+\s+GPU-\S+\s+([\d.]+)%", out, re.M)}
checks.expect(abs(rows.get("a", 0) - 75) <= 8 and abs(rows.get("b", 0) - 25) <= 8,
              "gpuslicectl status shows a at about 75 %% and b at 25 %% (%s)" % rows)
shares = sorted(float(m.group(1)) for m in re.finditer(r"^pid=\d+ .* share=([\d.]+)", out, re.M))
checks.expect(len(shares) == 2 and abs(shares[0] - 0.25) <= 0.08 and abs(shares[1] - 0.75) <= 0.08,
              "the fakecuda meter shows 25/75 (%s)" % shares)
checks.expect(out.count("spin: pid=") == 2, "both spins finish (%s)" % out[-300:])
checks.finish()
