"""The README's "By hand, without a GPU" recipe, run as written (issue
29: the by-hand fakecuda run lived only inside scripts/demo): the block
is taken from README.md, run with bash in a directory whose `build` is
this build and with its /tmp/gs made a fresh directory, and what it
prints must show the two tenants at about 75 % and 25 % in `gpuslicectl
status` and on the fakecuda meter."""
import os
import re
import subprocess
import tempfile

from testlib import BUILD, Checks

checks = Checks()
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "..", "README.md")) as f:
    readme = f.read()
block = readme.split("### By hand, without a GPU", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
work = tempfile.mkdtemp(prefix="gpuslice-readme-")
os.symlink(os.path.abspath(BUILD), os.path.join(work, "build"))
script = block.replace("/tmp/gs", os.path.join(work, "gs")) + "\nwait %2 %3\nkill %1\nwait %1\n"
env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSLICE_", "FAKECUDA_", "LD_"))}
p = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=60)
out = p.stdout
checks.expect(p.returncode in (0, 143), "the README's commands run (%d: %s)" % (p.returncode, p.stderr[-300:]))
rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(a|b)\s+\d+\s+\S+\s+\d+\s+GPU-\S+\s+([\d.]+)%", out, re.M)}
checks.expect(abs(rows.get("a", 0) - 75) <= 8 and abs(rows.get("b", 0) - 25) <= 8,
              "gpuslicectl status shows a at about 75 %% and b at 25 %% (%s)" % rows)
shares = sorted(float(m.group(1)) for m in re.finditer(r"^pid=\d+ .* share=([\d.]+)", out, re.M))
checks.expect(len(shares) == 2 and abs(shares[0] - 0.25) <= 0.08 and abs(shares[1] - 0.75) <= 0.08,
              "the fakecuda meter shows 25/75 (%s)" % shares)
checks.expect(out.count("spin: pid=") == 2, "both spins finish (%s)" % out[-300:])
checks.finish()
