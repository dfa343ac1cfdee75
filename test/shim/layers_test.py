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

    layers_test.py OBJECT_DIR SHIM_SOURCE_DIR"""
import glob
import os
import re
import sys

from layers import circles, describe, include_graph, module, symbol_graph, upward_calls
from testlib import Checks

checks = Checks()
objdir, srcdir = sys.argv[1], sys.argv[2]

objects = sorted(glob.glob(os.path.join(objdir, "gs_*.o")))
checks.expect(len(objects) > 20, "the shim's object files are there (%d in %s)" % (len(objects), objdir))
refers, calls = symbol_graph(objects)

found = circles(calls)
checks.expect(not found, "no call circle among the shim's files (%s)" % describe(found))

order = re.findall(r"'(gs_[a-z0-9_]+)\.c'", open(os.path.join(srcdir, "meson.build")).read())
upward = upward_calls(calls, order)
checks.expect(order and not upward, "shim/meson.build lists the files from the bottom up (calls upward: %s)"
              % (", ".join(upward) or "none"))

includes = include_graph(glob.glob(os.path.join(srcdir, "gs_*.[ch]")), "gs_[a-z0-9_]+")
found = circles(includes)
checks.expect(not found, "no include circle among the shim's files (%s)" % describe(found))

allowed = {"memcpy", "memset", "memmove", "_GLOBAL_OFFSET_TABLE_"}
outside = sorted(s for s in refers.get("gs_slice", ()) if not s.startswith("__") and s not in allowed)
checks.expect("gs_slice" in {module(o) for o in objects} and not outside,
              "the slice machine calls nothing outside itself (it refers to: %s)" % (", ".join(outside) or "nothing"))
checks.finish()
