"""Every relative link in README.md and docs/**/*.md resolves: the file or
directory it names exists, and an anchor (#...) names a heading of that
file, made into an anchor as GitHub makes it (lower case, punctuation
but '-' and '_' dropped, spaces made '-', a repeated one numbered -1,
-2, ...). Links to web addresses and mail are not followed.
Usage: doc_links_test.py SOURCE_ROOT"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def documents():
    yield os.path.join(ROOT, "README.md")
    for top, dirs, files in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(top, f)


def prose(text):
    """The text outside fenced code blocks, and without inline code."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "``", line))
    return out


def anchors(path):
    seen, found, fenced = {}, set(), False
    for line in open(path, encoding="utf-8").read().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else "%s-%d" % (slug, n))
    return found


bad = []
count = 0
for doc in documents():
    lines = prose(open(doc, encoding="utf-8").read())
    # Inline code was blanked above; the links are read from the rest.
    for lineno, line in enumerate(lines, 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            count += 1
            path, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            name = os.path.relpath(doc, ROOT)
            if not where.startswith(ROOT) or not os.path.exists(where):
                bad.append("%s: %s: no such file or directory" % (name, target))
            elif anchor and (not where.endswith(".md") or anchor not in anchors(where)):
                bad.append("%s: %s: no heading makes the anchor #%s" % (name, target, anchor))
for b in bad:
    print("FAIL " + b)
print("%d relative links checked, %d broken" % (count, len(bad)))
sys.exit(1 if bad or count == 0 else 0)
