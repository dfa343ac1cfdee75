"""The machine-readable lines of the Python benchmarks, in the format of
test/bench/bench_util.h (scripts/benchmarks reads both):

  BENCH-TARGET {"target", "what", "bound", "benchmark"}
      one per target a benchmark declares, printed alone when it is run
      with --targets;
  BENCH-RESULT {"target", "what", "figure", "unit", "bound", "op", "limit",
                "verdict", "benchmark", "note"}
      one per target after a run. The verdict ("met" or "missed") is the
      figure as printed against the limit, so a reader that checks it
      agrees; a figure of null (nothing measured) is missed.

A bound is "op limit unit" with op "<=" or ">=". Where the limit comes
from the same run (a baseline measured beside), the declaration says how
(its "rule") and each result gives the number."""
import json
import math
import sys


class Target:
    def __init__(self, name, what, unit, op, limit=None, rule=None):
        assert op in ("<=", ">=")
        self.name, self.what, self.unit, self.op, self.limit, self.rule = name, what, unit, op, limit, rule

    def bound(self, limit=None):
        limit = self.limit if limit is None else limit
        if limit is None:
            return "%s %s" % (self.op, self.rule)
        text = "%s %s %s" % (self.op, fmt(limit), self.unit)
        return text + (" (%s)" % self.rule if self.rule else "")


def fmt(x):
    return "%.4g" % x


class Targets:
    """The targets of one benchmark (its meson name), in the order printed."""

    def __init__(self, benchmark, targets):
        self.benchmark = benchmark
        self.targets = {t.name: t for t in targets}
        self.results = []

    def declare_if_asked(self, argv=None):
        """With --targets in argv, prints the declarations and exits 0."""
        if "--targets" not in (sys.argv if argv is None else argv):
            return
        for t in self.targets.values():
            print("BENCH-TARGET " + json.dumps({"target": t.name, "what": t.what, "bound": t.bound(),
                                                "benchmark": self.benchmark}))
        sys.exit(0)

    def result(self, name, figure, limit=None, note=None, what=None):
        """Prints the result of target name (declared above: KeyError
        otherwise); limit for a target whose limit comes from the run.
        Returns True if met."""
        t = self.targets[name]
        limit = t.limit if limit is None else limit
        shown = round(float(figure), 3) if figure is not None and math.isfinite(figure) else None
        limit = round(float(limit), 3) if limit is not None and math.isfinite(limit) else None
        met = shown is not None and limit is not None and (shown <= limit if t.op == "<=" else shown >= limit)
        line = {"target": t.name, "what": what or t.what, "figure": shown, "unit": t.unit, "bound": t.bound(limit),
                "op": t.op, "limit": limit, "verdict": "met" if met else "missed", "benchmark": self.benchmark}
        if note:
            line["note"] = note
        print("BENCH-RESULT " + json.dumps(line), flush=True)
        self.results.append(met)
        return met
