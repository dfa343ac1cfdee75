"""gpuslicectl top on a real terminal: it runs in tmux while two tenants
spin (a at share 3 with 256 MiB of a 1 GiB cap, b at share 1 with limit
0.2), the test reads the screen with `tmux capture-pane` and checks the
figures and bars against `gpuslicectl status --json`, presses `s` and
sees the order change, narrows the window and sees the frame adapt, and
presses `q`. Without a terminal, `top --once` prints the same rows as
plain text. The wide frame is saved as test/metrics/top-capture.txt in the build
directory (the README shows it)."""
import os
import re
import subprocess
import time

from metricslib import need
from testlib import BUILD, CTL, MEMHOG, Checks, Machine, Server, wait_for

tmux = need("tmux", "tmux")
checks = Checks()
machine = Machine(memory="8G")
server = Server(machine, {"a": "share = 3\nmemory = 1G\n", "b": "share = 1\nlimit = 0.2\n"}, args=["--metrics", ""])
spins = [server.spin("a", 40), server.spin("b", 40)]
hog = subprocess.Popen([MEMHOG, "--chunk-mb", "64", "--count", "4", "--hold"], env=server.tenant_env("a"),
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
hog_line = hog.stdout.readline()
checks.expect("allocated=4" in hog_line, "memhog holds 4 x 64 MiB in tenant a (%s)" % hog_line.strip())
time.sleep(3.0)  # shares settle

SOCKET = "gpuslice-top-%d" % os.getpid()
SESSION = "top"


def tm(*args, check=True):
    return subprocess.run([tmux, "-L", SOCKET, "-f", "/dev/null"] + list(args), capture_output=True, text=True,
                          check=check)


def screen():
    return tm("capture-pane", "-p", "-t", SESSION).stdout.rstrip("\n").split("\n")


ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%/\s*([\d.]+)%(?:\s+(\[[^\]]*\]))?"
                 r"\s+(\S+)/(\S+)(?:\s+(\[[^\]]*\]))?\s*$")


def rows(lines):
    """{tenant: fields} of the tenant table of a frame."""
    out = {}
    for line in lines:
        m = ROW.match(line)
        if m and m.group(1) in ("a", "b"):
            out[m.group(1)] = {"share": float(m.group(3)), "limit": float(m.group(4)), "procs": int(m.group(5)),
                               "wait": float(m.group(6)), "achieved": float(m.group(7)) / 100,
                               "target": float(m.group(8)) / 100, "bar": m.group(9), "used": m.group(10),
                               "cap": m.group(11), "membar": m.group(12)}
    return out


def status():
    s = server.status()
    return {t["name"]: dict(t["devices"][0], clients=t["clients"], share=t["share"], limit=t["limit"])
            for t in s["tenants"] if t["devices"]}


env = dict(os.environ, TERM="screen")
tm("new-session", "-d", "-s", SESSION, "-x", "132", "-y", "30",
   "%s --run-dir %s top" % (CTL, server.run_dir))
try:
    checks.expect(wait_for(lambda: len(rows(screen())) == 2, 5), "top draws both tenants in tmux")
    time.sleep(1.2)  # a fresh frame, and the status right after it
    before = status()
    lines = screen()
    after = status()
    with open(os.path.join(BUILD, "test", "metrics", "top-capture.txt"), "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    got = rows(lines)
    problems = []
    for t in ("a", "b"):
        r, lo, hi = got.get(t), before[t], after[t]
        if not r:
            problems.append("%s: no row" % t)
            continue
        if r["procs"] != hi["clients"] or r["share"] != hi["share"] or abs(r["limit"] - hi["limit"]) > 0.005:
            problems.append("%s: processes/share/limit %s vs %s" % (t, (r["procs"], r["share"], r["limit"]),
                                                                     (hi["clients"], hi["share"], hi["limit"])))
        if abs(r["achieved"] - hi["achieved_share"]) > 0.03:
            problems.append("%s: achieved %.3f vs status %.3f" % (t, r["achieved"], hi["achieved_share"]))
        if abs(r["target"] - hi["target_share"]) > 0.001:
            problems.append("%s: target %.3f vs status %.3f" % (t, r["target"], hi["target_share"]))
        if not (lo["wait_ms"] / 1000 - 1.5 <= r["wait"] <= hi["wait_ms"] / 1000 + 0.05):
            problems.append("%s: wait %.1f s vs status %.1f..%.1f" % (t, r["wait"], lo["wait_ms"] / 1000,
                                                                       hi["wait_ms"] / 1000))
        inner = len(r["bar"] or "[]") - 2
        filled = len(re.match(r"\[([#|!]*)", r["bar"] or "[").group(1))
        if inner < 10 or abs(filled - round(r["achieved"] * inner)) > 1:
            problems.append("%s: bar %r for %.3f" % (t, r["bar"], r["achieved"]))
        elif r["bar"][1 + min(round(r["target"] * inner), inner - 1)] != "|":
            problems.append("%s: no target mark in %r at %.3f" % (t, r["bar"], r["target"]))
    checks.expect(not problems, "rows match gpuslicectl status --json: processes, share, limit, achieved, target, "
                  "wait, bars (%s)" % problems)
    a, b = got.get("a", {}), got.get("b", {})
    checks.expect(a.get("used") == "256M" and a.get("cap") == "1.0G" and after["a"]["mem_used"] == 256 << 20 and
                  a.get("membar", "").count("#") == round(0.25 * (len(a.get("membar", "[]")) - 2)),
                  "memory: a 256M of 1.0G, a quarter of its bar (%s %s)" % (a.get("used"), a.get("membar")))
    inner_b = len(b.get("bar") or "[]") - 2
    at_limit = (b.get("bar") or "[]")[1 + min(round(0.2 * inner_b), inner_b - 1)] if inner_b > 0 else ""
    checks.expect(b.get("cap") == "-" and abs(b.get("target", 0) - 0.2) < 0.001 and at_limit in ("!", "|"),
                  "b: no cap, target 20.0 %% (its limit), marked at the limit (%r)" % b.get("bar"))
    gpu_lines = [l for l in lines if l.startswith("GPU-")]
    checks.expect(len(gpu_lines) == 1 and re.search(r"\s(running|revoking|idle)\s+(a|b|-)\s", gpu_lines[0]),
                  "the GPU line shows its state and holder (%s)" % gpu_lines[:1])

    tm("send-keys", "-t", SESSION, "s")
    checks.expect(wait_for(lambda: "sort achieved" in screen()[0], 3), "s: sorted by achieved share")
    tm("send-keys", "-t", SESSION, "s")
    checks.expect(wait_for(lambda: "sort wait" in screen()[0], 3), "s again: sorted by wait")
    order = [l.split()[0] for l in screen() if ROW.match(l)]
    checks.expect(order[:2] == ["b", "a"], "b, capped at 0.2, waits most and comes first (%s)" % order)

    tm("resize-window", "-t", SESSION, "-x", "80", "-y", "30")
    checks.expect(wait_for(lambda: len(rows(screen())) == 2 and max(len(l) for l in screen()) <= 80 and
                           all(r["membar"] is None for r in rows(screen()).values()), 3),
                  "80 columns: every line fits, the memory bars give way")
    narrow = rows(screen())
    checks.expect(all(r["bar"] and len(r["bar"]) < len(got[t]["bar"]) for t, r in narrow.items()),
                  "and the share bars are shorter (%s)" % [r["bar"] for r in narrow.values()])
    tm("send-keys", "-t", SESSION, "q")
    checks.expect(wait_for(lambda: tm("has-session", "-t", SESSION, check=False).returncode != 0, 3),
                  "q: top exits")
finally:
    tm("kill-server", check=False)

plain = subprocess.run([CTL, "--run-dir", server.run_dir, "top", "--once"], capture_output=True, text=True)
checks.expect(plain.returncode == 0 and set(rows(plain.stdout.split("\n"))) == {"a", "b"} and "\x1b" not in plain.stdout,
              "not a terminal: --once prints the rows as plain text")
two = subprocess.run([CTL, "--run-dir", server.run_dir, "top", "-n", "2", "--interval", "0.2"], capture_output=True,
                     text=True)
checks.expect(two.returncode == 0 and two.stdout.count("gpuslice top") == 2, "-n 2: two plain frames")
hog.stdin.close()
hog.wait()
for p in spins:
    p.kill()
    p.communicate()
server.stop()
checks.finish()
