"""The manual pages say what the programs say (issue 43): each page is in
the build (man/), renders without a warning, and names every option its
program's --help names; gpuslice-tenant(5) describes every key of the
tenant file parser's table (tokenserver/config.c). The pages are made
from the programs' own text at build time (man/meson.build), so a check
fails where that chain breaks: a page left out, a renderer's warning, an
option help2man lost, a key the reference no longer prints.

Skipped, with the reason, where the build made no pages (a cross build,
-Dman=disabled; section 1 without help2man) or nothing renders them."""
import os
import re
import shutil
import subprocess

from testlib import BUILD, CTL, SERVER, Checks, skip

HOOK = os.path.join(BUILD, "hook", "gpuslice-hook")
MAN = os.path.join(BUILD, "man")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

with open(os.path.join(SOURCE, "tokenserver", "config.c")) as f:
    source = f.read()
table = source[source.index("const struct config_key config_keys[] = {"):]
KEYS = re.findall(r'^    \{"([a-z_]+)"', table[: table.index("};")], re.M)

if not os.path.exists(os.path.join(MAN, "gpuslice-tenant.5")):
    skip("the build made no manual pages (a cross build, or -Dman=disabled)")
if shutil.which("man"):
    RENDER = ["man", "--warnings", "-l"]
elif shutil.which("groff"):
    RENDER = ["groff", "-man", "-Tutf8", "-ww", "-P-cbou"]
elif shutil.which("mandoc"):
    RENDER = ["mandoc", "-Tutf8", "-Wwarning"]
else:
    skip("neither man, groff nor mandoc is installed to render the pages")


def render(page):
    """(exit status, the page as plain text with its lines joined, warnings)."""
    env = dict(os.environ, MANWIDTH="400", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8")
    p = subprocess.run(RENDER + [page], capture_output=True, text=True, timeout=60, env=env)
    text = re.sub(".\b", "", p.stdout)  # overstrikes, where a renderer writes them
    text = re.sub("[\u2010\u00ad]\n\\s*", "", text)  # words broken at a line's end
    text = text.replace("\u2212", "-").replace("\u2010", "-")
    return p.returncode, " ".join(text.split()), p.stderr.strip()


def options(help_text):
    """The long and short options a --help names."""
    longs = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9])", help_text))
    shorts = set(re.findall(r"^\s+(-[a-zA-Z]),", help_text, re.M))
    return sorted(longs | shorts)


checks = Checks()
checks.expect(len(KEYS) == 8, "the parser's table has its eight keys (%s)" % KEYS)
programs = [("gpuslice-server", SERVER), ("gpuslicectl", CTL)] + ([("gpuslice-hook", HOOK)]
                                                                    if os.path.exists(HOOK) else [])
for name, program in programs:
    page = os.path.join(MAN, name + ".1")
    if not os.path.exists(page) and not shutil.which("help2man"):
        print("skipped: %s.1: help2man is not installed, so the build made no section 1" % name)
        continue
    checks.expect(os.path.exists(page), "%s.1 is in the build" % name)
    if not os.path.exists(page):
        continue
    rc, text, warnings = render(page)
    checks.expect(rc == 0 and not warnings and text.startswith(name.upper() + "(1)"),
                  "%s renders %s.1 without a warning (%d: %s)" % (RENDER[0], name, rc, warnings[:300]))
    help_text = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=10, check=True).stdout
    names = options(help_text)
    missing = [o for o in names if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), text)]
    checks.expect(len(names) >= 4 and not missing, "%s.1 names every option %s --help names (%d; missing: %s)"
                  % (name, name, len(names), missing))

page = os.path.join(MAN, "gpuslice-tenant.5")
rc, text, warnings = render(page)
checks.expect(rc == 0 and not warnings and text.startswith("GPUSLICE-TENANT(5)"),
              "%s renders gpuslice-tenant.5 without a warning (%d: %s)" % (RENDER[0], rc, warnings[:300]))
missing = [k for k in KEYS if not re.search(r"(?<![\w-])%s = " % k, text)]
checks.expect(not missing, "gpuslice-tenant.5 describes every key of the parser (missing: %s)" % missing)
reference = subprocess.run([SERVER, "--help-tenant-file"], capture_output=True, text=True, timeout=10,
                           check=True).stdout
checks.expect(" ".join(reference.split()[4:30]) in text,
              "its text is gpuslice-server --help-tenant-file's (%s)" % " ".join(reference.split()[4:12]))
checks.finish()
