"""What the layering tests share (shim/layers_test.py,
server/layers_test.py): who calls whom among a program's object files, read
with nm, and the circles in such a graph."""
import collections
import os
import re
import subprocess


def module(path):
    """An object file's module: its source file's name without .c."""
    base = os.path.basename(path)
    for suffix in (".c.o", ".S.o"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def symbol_graph(objects):
    """(refers, calls): the symbols each module refers to, and the modules
    each calls (refers to a symbol another defines)."""
    defined, refers = {}, collections.defaultdict(set)
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
    return refers, calls


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


def upward_calls(calls, order):
    """The calls from a file to one listed at or after it in order (a list of
    module names, bottom first), as "a -> b"."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted("%s -> %s" % (a, b) for a, bs in calls.items() for b in bs
                  if a in rank and b in rank and rank[b] >= rank[a])


def include_graph(paths, pattern):
    """Which local header each file includes (#include "NAME.h" matching
    pattern, a regular expression for NAME), by module name."""
    includes = collections.defaultdict(set)
    for path in paths:
        mod = os.path.basename(path).rsplit(".", 1)[0]
        for inc in re.findall(r'#include "(%s)\.h"' % pattern, open(path).read()):
            inc = os.path.basename(inc)
            if inc != mod:
                includes[mod].add(inc)
    return includes


def describe(found):
    return "; ".join(" ".join(c) for c in found) or "none"
