"""gpuslice-server's files stand in layers.

1. No call circle among the server's files (its own and the scheduler's
   core library's, the metrics endpoint's included): from the symbols each
   object file defines and refers to (nm), file A calls file B when A
   refers to a symbol B defines (a function or a table: tables.c holds the
   tables many files read, options.c the options).
2. tokenserver/meson.build lists gpuslice-server's sources, and the
   scheduler's core library's, from the bottom up: each file calls only
   files listed before it.
3. No include circle among the server's headers and sources
   (#include "NAME.h" of tokenserver/ and tokenserver/metrics/).

    layers_test.py SERVER_OBJECT_DIR CORE_OBJECT_DIR SOURCE_DIR"""
import glob
import os
import re
import sys

from layers import circles, describe, include_graph, symbol_graph, upward_calls
from testlib import Checks

checks = Checks()
server_dir, core_dir, srcdir = sys.argv[1], sys.argv[2], sys.argv[3]

server_objects = sorted(glob.glob(os.path.join(server_dir, "*.o")))
core_objects = sorted(glob.glob(os.path.join(core_dir, "*.o")))
checks.expect(len(server_objects) > 25 and len(core_objects) >= 4,
              "the server's object files are there (%d in %s, %d in %s)"
              % (len(server_objects), server_dir, len(core_objects), core_dir))
refers, calls = symbol_graph(server_objects + core_objects)

found = circles(calls)
checks.expect(not found, "no call circle among the server's files (%s)" % describe(found))

build = open(os.path.join(srcdir, "meson.build")).read()


def sources(start):
    """The .c files of the target whose definition begins with start, in
    the order listed (up to its first keyword argument)."""
    at = build.index(start)
    end = build.index(" : ", at)
    return [name for name in re.findall(r"'([a-z0-9_]+)\.c'", build[at:end])]


for what, start in (("gpuslice-server's sources", "executable('gpuslice-server',"),
                    ("the scheduler's core library", "static_library('gpuslice_sched',")):
    order = sources(start)
    upward = upward_calls(calls, order)
    checks.expect(len(order) >= 5 and not upward, "tokenserver/meson.build lists %s from the bottom up "
                  "(%d files; calls upward: %s)" % (what, len(order), ", ".join(upward) or "none"))

paths = glob.glob(os.path.join(srcdir, "*.[ch]")) + glob.glob(os.path.join(srcdir, "metrics", "*.[ch]"))
includes = include_graph(paths, "(?:metrics/)?[a-z0-9_]+")
found = circles(includes)
checks.expect(len(includes) > 10 and not found, "no include circle among the server's files (%s)" % describe(found))
checks.finish()
