"""docs/BENCHMARKS.md's table is the benchmarks' own, and the page tells no
history:

1. every benchmark under bench/ declares its targets (--targets), each
   name once;
2. scripts/benchmarks --from writes a row per target from a log made of
   the declarations: the verdicts as printed, the machine from the log's
   BENCH-MACHINE line, the text outside the markers kept, and the same
   table again when run twice; a missed target reads "missed" (and the
   script still succeeds); a log without one target's line, with a
   verdict its figure contradicts, or with a target nobody declares is
   refused, naming it, and the document is left as it was;
3. docs/BENCHMARKS.md's table has exactly one row per declared target,
   each with a verdict, a command and a machine that claims no GPU;
4. no dated row, commit hash or history word anywhere in the page; the
   check itself finds a planted date, hash and history word.

Usage: benchmarks_doc_test.py SOURCE_ROOT BUILD_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from testlib import Checks  # noqa: E402

ROOT, BUILD = (os.path.realpath(p) for p in sys.argv[1:3])
SCRIPT = os.path.join(ROOT, "scripts", "benchmarks")
DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")
BEGIN, END = "<!-- table begin -->", "<!-- table end -->"
MACHINE = "Test CPU 9000, 3 CPUs, no GPU (simulated driver)"
checks = Checks()


def script(*args):
    return subprocess.run([sys.executable, SCRIPT, BUILD] + list(args), capture_output=True, text=True, timeout=300)


# 1. The declarations, asked of each benchmark as meson runs it.
with open(os.path.join(BUILD, "meson-info", "intro-benchmarks.json")) as f:
    benches = [b for b in json.load(f) if b["name"].startswith("bench/")]
checks.expect(len(benches) >= 5, "meson registers %d benchmarks under bench/" % len(benches))
declared = []
for b in benches:
    out = subprocess.run(b["cmd"] + ["--targets"], env=dict(os.environ, **(b.get("env") or {})),
                         capture_output=True, text=True, timeout=60).stdout
    mine = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("BENCH-TARGET ")]
    checks.expect(mine and all(d["benchmark"] == b["name"] and d["bound"][:2] in ("<=", ">=") for d in mine),
                  "%s declares its targets, each with a bound (%d)" % (b["name"], len(mine)))
    declared += mine
names = [d["target"] for d in declared]
checks.expect(len(names) == len(set(names)), "no target is declared twice (%s)" % ", ".join(sorted(names)))
listed = [json.loads(line.split(" ", 1)[1])["target"] for line in script("--targets").stdout.splitlines()
          if line.startswith("BENCH-TARGET ")]
checks.expect(listed == names, "scripts/benchmarks --targets lists the same targets")


# 2. The generator, on logs made from the declarations.
def result(d, figure, verdict=None):
    """A result line for declaration d: the limit 10 (or the declared
    one), the verdict from the figure unless given."""
    op = d["bound"][:2]
    m = re.match(r"[<>]= ([0-9.]+) ", d["bound"])
    limit = float(m.group(1)) if m else 10.0
    met = figure <= limit if op == "<=" else figure >= limit
    return "BENCH-RESULT " + json.dumps({
        "target": d["target"], "what": d["what"], "figure": figure, "unit": "u", "bound": d["bound"], "op": op,
        "limit": limit, "verdict": verdict or ("met" if met else "missed"), "benchmark": d["benchmark"]})


def meeting(d):
    m = re.match(r"[<>]= ([0-9.]+) ", d["bound"])
    return float(m.group(1)) if m else 10.0


def table_rows(text):
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        return None
    body = text.split(BEGIN)[1].split(END)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", r).group(1): [c.strip() for c in r.strip("|").split(" | ")] for r in rows}, rows


tmp = tempfile.mkdtemp()
try:
    doc = os.path.join(tmp, "doc.md")
    skeleton = "# Page\n\nabove\n\n%s\nold row\n%s\n\nbelow\n" % (BEGIN, END)
    with open(doc, "w") as f:
        f.write(skeleton)
    log = os.path.join(tmp, "log")
    # some noise around the lines, as meson test -v prints them
    good = ["BENCH-MACHINE " + json.dumps({"machine": MACHINE}), "1/5 bench/x RUNNING"]
    good += ["  " + result(d, meeting(d)) for d in declared]
    missed = declared[-1]
    bad_figure = meeting(missed) + 1 if missed["bound"].startswith("<=") else meeting(missed) - 1

    with open(log, "w") as f:
        f.write("\n".join(good[:-1] + [result(missed, bad_figure)]) + "\n")
    run = script("--from", log, "--doc", doc)
    checks.expect(run.returncode == 0, "a complete log is taken (exit %d: %s)" % (run.returncode, run.stderr.strip()))
    with open(doc) as f:
        first = f.read()
    parsed = table_rows(first)
    rows = parsed[0] if parsed else {}
    checks.expect(sorted(rows) == sorted(names) and len(parsed[1]) == len(names) if parsed else False,
                  "one row per declared target (%d rows, %d targets)" % (len(rows), len(names)))
    checks.expect(first.startswith("# Page\n\nabove\n\n" + BEGIN) and first.endswith(END + "\n\nbelow\n")
                  and "old row" not in first, "only the text between the markers is replaced")
    checks.expect(all(r[3] == "met" for t, r in rows.items() if t != missed["target"]),
                  "the targets met read met")
    checks.expect(rows.get(missed["target"], [""] * 4)[3] == "**missed**",
                  "the missed target reads missed (%s)" % rows.get(missed["target"]))
    checks.expect(all(r[5] == MACHINE for r in rows.values()), "the machine is the log's")
    checks.expect(all(r[4] == "`meson test -C build --benchmark -v %s`" % d["benchmark"]
                      for d in declared for t, r in rows.items() if t == d["target"]),
                  "each row's command runs its benchmark")
    run = script("--from", log, "--doc", doc)
    with open(doc) as f:
        checks.expect(run.returncode == 0 and f.read() == first, "a second run writes the same page")

    for label, lines, want in (
            ("without %s's line" % missed["target"], good[:-1], "printed no result for %s" % missed["target"]),
            ("with a verdict its figure contradicts", good[:-1] + [result(missed, bad_figure, "met")],
             "%s says met" % missed["target"]),
            ("with an undeclared target", good + [result(dict(missed, target="bench.planted"), 1.0)],
             "bench.planted, which no benchmark declares")):
        with open(log, "w") as f:
            f.write("\n".join(lines) + "\n")
        run = script("--from", log, "--doc", doc)
        with open(doc) as f:
            checks.expect(run.returncode != 0 and want in run.stderr and f.read() == first,
                          "a log %s is refused, naming it, the page untouched (exit %d: %s)"
                          % (label, run.returncode, run.stderr.strip()))
finally:
    shutil.rmtree(tmp)

# 3. The committed table.
with open(DOC) as f:
    page = f.read()
parsed = table_rows(page)
checks.expect(parsed is not None, "docs/BENCHMARKS.md has one %s ... %s pair" % (BEGIN, END))
if parsed:
    rows, raw = parsed
    checks.expect(len(raw) == len(rows) and sorted(rows) == sorted(names),
                  "docs/BENCHMARKS.md has one row per declared target; missing: %s; not declared: %s"
                  % (", ".join(sorted(set(names) - set(rows))) or "none",
                     ", ".join(sorted(set(rows) - set(names))) or "none"))
    checks.expect(all(len(r) == 6 and r[3] in ("met", "**missed**") and r[4].startswith("`meson test")
                      and r[5].endswith("no GPU (simulated driver)") for r in rows.values()),
                  "each row has a verdict, a command and the machine")

# 4. No history.
HISTORY = [
    (r"\b\d{4}-\d{2}-\d{2}\b", "a date"),
    (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", "a commit hash"),
    (r"(?i)\bused to\b|\bearlier (build|run|version|code)|\bno longer\b|\bpreviously\b|\bformerly\b|"
     r"\b(at|since|before|after) commit\b|\bnot kept\b|\btaken back\b|\breverted\b|\bmeasured on\b|"
     r"\bthe code before\b|\bbefore the (fix|change)|\bthis change\b", "a history word"),
]


def history(text):
    return ["%s: %s" % (what, m.group(0)) for pattern, what in HISTORY for m in re.finditer(pattern, text)]


found = history(page)
checks.expect(not found, "docs/BENCHMARKS.md tells no history (%s)" % "; ".join(found[:10]))
planted = history("| 2026-11-30 | 36.3 ns | commit 2db82ab |\nThe gate used to wake it.\n")
checks.expect(len(planted) == 3, "the history check finds a planted date, hash and word (%s)" % "; ".join(planted))
checks.finish()
