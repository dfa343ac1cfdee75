"""The shim's files stand in layers, and its slice machine alone.

1. No call circle among the shim's files: from the symbols each object file
   defines and refers to (nm), file A calls file B when A refers to a
   symbol B defines; the calls form no circle, and shim/meson.build lists
   the sources from the bottom up (each file calls only files listed before
   it), so that a reading of the list is a reading of the layers.
2. No include circle among them either (#include "gs_*.h").
3. The slice machine (gs_slice.c) calls nothing: no lock, no clock, no send,
   no other file of the shim (only the compiler's and a sanitizer's
   runtime, and memcpy/memset).

    shim_layers_test.py OBJECT_DIR SHIM_SOURCE_DIR"""
import collections
import glob
import os
import re
import subprocess
import sys

from testlib import Checks

checks = Checks()
objdir, srcdir = sys.argv[1], sys.argv[2]


def module(path):
    base = os.path.basename(path)
    for suffix in (".c.o", ".S.o"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


defined, refers = {}, collections.defaultdict(set)
objects = sorted(glob.glob(os.path.join(objdir, "gs_*.o")))
checks.expect(len(objects) > 20, "the shim's object files are there (%d in %s)" % (len(objects), objdir))
for obj in objects:
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRVWGS":
            defined[parts[2]] = module(obj)
        elif len(parts) == 2 and parts[0] == "U":
            refers[module(obj)].add(parts[1])

calls = collections.defaultdict(set)
for mod, symbols in refers.items():
    for sym in symbols:
        if sym in defined and defined[sym] != mod:
            calls[mod].add(defined[sym])


def circles(edges):
    """The strongly connected components of more than one node."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


found = circles(calls)
checks.expect(not found, "no call circle among the shim's files (%s)" % ("; ".join(" ".join(c) for c in found) or "none"))

order = re.findall(r"'(gs_[a-z0-9_]+)\.c'", open(os.path.join(srcdir, "meson.build")).read())
rank = {name: i for i, name in enumerate(order)}
upward = sorted("%s -> %s" % (a, b) for a, bs in calls.items() for b in bs
                if a in rank and b in rank and rank[b] >= rank[a])
checks.expect(order and not upward, "shim/meson.build lists the files from the bottom up (calls upward: %s)"
              % (", ".join(upward) or "none"))

includes = collections.defaultdict(set)
for path in glob.glob(os.path.join(srcdir, "gs_*.[ch]")):
    mod = os.path.basename(path).rsplit(".", 1)[0]
    for inc in re.findall(r'#include "(gs_[a-z0-9_]+)\.h"', open(path).read()):
        if inc != mod:
            includes[mod].add(inc)
found = circles(includes)
checks.expect(not found, "no include circle among the shim's files (%s)"
              % ("; ".join(" ".join(c) for c in found) or "none"))

allowed = {"memcpy", "memset", "memmove", "_GLOBAL_OFFSET_TABLE_"}
outside = sorted(s for s in refers.get("gs_slice", ()) if not s.startswith("__") and s not in allowed)
checks.expect("gs_slice" in {module(o) for o in objects} and not outside,
              "the slice machine calls nothing outside itself (it refers to: %s)" % (", ".join(outside) or "nothing"))
checks.finish()
