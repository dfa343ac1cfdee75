"""The operating docs name every setting and every warning:

1. every key of a tenant file (gpuslice-server --help-tenant-file) is a row
   of the keys table in docs/operating/tenants.md ("### Tenant files");
2. every long option of gpuslice-server --help and gpuslicectl --help is a
   row of its program's table in tenants.md's "Settings" section ("### The
   server's options", "### gpuslicectl's options"); one listed in a table
   of another docs/operating page as well is reported as a warning;
3. every message at warn or error that a user can meet is quoted in
   docs/operating/troubleshooting.md: the format strings of
   slog/slog_limited/slog_refusal at LOG_WARN or LOG_ERR in tokenserver/,
   gs_log at GS_LOG_WARN or GS_LOG_ERROR in shim/, die() in hook/ and
   fprintf(stderr, "gpuslice-dra: ...") in dra/. A message's stable text is
   its first literal run (between % conversions and macros) of at least
   16 characters, else its longest; the doc must hold that run (it may
   write anything, '...' or 'X', for the variable parts around it).
4. negative controls: with one key, one option or one message's text taken
   out of the docs, the checks report exactly that one.

Usage: docs_test.py SOURCE_ROOT BUILD_ROOT"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build"))
OPERATING = os.path.join(ROOT, "docs", "operating")
TENANTS_MD = os.path.join(OPERATING, "tenants.md")
TROUBLE_MD = os.path.join(OPERATING, "troubleshooting.md")

# Options that ask for text and change nothing: not settings.
NOT_SETTINGS = {"--help", "--version", "--help-tenant-file"}

# Messages without a stable text of their own, or that are not warnings:
# (file, a piece of the format string) -> why the check passes them over.
SYSCALL = "a system call's name and its error, no text of its own (troubleshooting.md's row on system calls)"
EXCLUDED = {
    (None, '"close: %s"'): SYSCALL,
    (None, '"closedir: %s"'): SYSCALL,
    (None, '"chdir /: %s"'): SYSCALL,
    (None, '"signals: %s"'): SYSCALL,
    (None, '"dup: %s"'): SYSCALL,
    (None, '"tenant %s: epoll: %s"'): SYSCALL,
    (None, '"tenant %s pid %u: epoll: %s"'): SYSCALL,
    ("dra/prepare.c", '"gpuslice-dra: fsync %s: %s\\n"'): SYSCALL,
    ("dra/prepare.c", '"gpuslice-dra: close %s: %s\\n"'): SYSCALL,
    ("tokenserver/tenants.c", '"%s/%s: %s"'): "a tenant file that cannot be read: its path and strerror",
    ("tokenserver/uninstall.c", '"cannot %s %s: %s"'): "the CDI spec cannot be rewritten or removed: "
        "'rewrite' or 'remove', its path and strerror",
    ("tokenserver/cdi.c", '"%s"'): "the CDI spec's failure, whose text its callers write; the row on the CDI "
        "spec quotes them",
    ("hook/hook_main.c", '"%s %s: %s"'): "a source the hook mounts (the shim, the tenant's directory) cannot "
        "be opened: what it is, its path and strerror",
    ("dra/kubelet/node_service.c", "gpuslice-dra: %s\\n"):
        "the text is the error a claim's preparation wrote, which the kubelet gets too: "
        "docs/operating/kubernetes.md lists them",
    ("dra/main.c", "gpuslice-dra: %s: %s\\n"):
        "an option's value, and the parser's own words about it",
    ("dra/main.c", "gpuslice-dra: %s\\n"):
        "the text is the error of the Kubernetes API client or the kubelet's gRPC server, built elsewhere",
    ("dra/kubelet/socket_file.c", "gpuslice-dra: %s: %s\\n"):
        "a path and strerror, nothing else",
    ("dra/main.c", "ResourceSlice of node %s published"): "information, not an error",
    ("dra/main.c", "gpuslice-dra %s: node %s, claims in %s, serving %s"): "information: the start line",
    ("dra/main.c", "gpuslice-dra: see gpuslice-dra --help"): "a usage error's pointer to --help",
    ("dra/prepare.c", "gpuslice-dra: claim %s/%s: tenant %s %s\\n"): "information: a claim prepared",
    ("dra/prepare.c", "gpuslice-dra: claim %s/%s: tenant %s removed"): "information: a claim unprepared",
    ("dra/kubelet/registration.c", "the kubelet registered driver"): "information: registration succeeded",
}

CONVERSION = re.compile(r"%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|j|z|t|L)?[diouxXeEfFgGaAcspn]")
RUN_MIN = 16


# --- reading the docs -------------------------------------------------------

def sections(text):
    """{heading title: its lines}, for every heading, up to the next heading
    of the same or a higher level."""
    lines = text.splitlines()
    heads = []
    for i, line in enumerate(lines):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if m:
            heads.append((i, len(m.group(1)), m.group(2)))
    out = {}
    for n, (i, level, title) in enumerate(heads):
        end = len(lines)
        for j, lv, _ in heads[n + 1:]:
            if lv <= level:
                end = j
                break
        out[title] = lines[i + 1:end]
    return out


def tables(lines):
    """Each table of lines as (its header's first cell, the first cell of
    each of its rows)."""
    out, prev = [], False
    for line in lines:
        is_row = line.startswith("|")
        if is_row:
            cell = re.split(r"(?<!\\)\|", line)[1].strip()
            if not prev:
                out.append((cell, []))
            elif not re.fullmatch(r"[-:]+", cell):
                out[-1][1].append(cell)
        prev = is_row
    return out


def first_cells(lines):
    """The first cell of every table row of lines, headers left out."""
    return [cell for _, cells in tables(lines) for cell in cells]


def code_words(cell):
    return re.findall(r"`([^`]*)`", cell)


def options_in(cell):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", cell))


# --- what the programs know --------------------------------------------------

def run(*argv):
    return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True,
                          timeout=30).stdout


def tenant_keys(server):
    text = run(server, "--help-tenant-file")
    keys = re.findall(r"^  ([a-z_]+) = ", text.split("Keys:", 1)[1].split("\n\n", 1)[0], re.M)
    # config.c's table is the source of the help: the two agree.
    src = open(os.path.join(ROOT, "tokenserver", "config.c"), encoding="utf-8").read()
    table = src.split("config_keys[] = {", 1)[1].split("};", 1)[0]
    from_src = re.findall(r'^\s*\{"([a-z_]+)",', table, re.M)
    if keys != from_src:
        sys.exit("FAIL: --help-tenant-file lists the keys %s, config_keys[] in tokenserver/config.c %s"
                 % (keys, from_src))
    return keys


def long_options(program):
    text = run(program, "--help")
    found = []
    for m in re.finditer(r"^ {1,8}(?:-\w, +)?(--[a-z][a-z0-9-]*)", text, re.M):
        if m.group(1) not in found:
            found.append(m.group(1))
    return found


# --- the messages in the sources ---------------------------------------------

def blank_comments(src):
    """src with comments turned to spaces (newlines kept); strings intact."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("/*", i):
            j = src.index("*/", i + 2) + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src[i] in "\"'":
            j = i + 1
            while src[j] != src[i]:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


def call_args(src, i):
    """The arguments of the call whose '(' is at src[i], as texts."""
    depth, cur, args = 0, [], []
    while True:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while src[j] != c:
                j += 2 if src[j] == "\\" else 1
            cur.append(src[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1


def unescape(body):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def format_pieces(arg):
    """The format argument as literal texts and None for what is not a
    literal (a macro such as PRIu64); None if it is no literal at all."""
    pieces, pos = [], 0
    for m in STRING.finditer(arg):
        if arg[pos:m.start()].strip():
            pieces.append(None)
        pieces.append(unescape(m.group(0)[1:-1]))
        pos = m.end()
    if not pieces or arg[pos:].strip():
        return None
    return pieces


def runs_of(pieces):
    runs = []
    for p in pieces:
        if p is None:
            runs.append("")
            continue
        runs.extend(CONVERSION.split(p.replace("%%", "\0")))
    out = []
    for r in runs:
        r = re.sub(r"\s+", " ", r.replace("\0", "%")).strip(" :;,\n")
        if r:
            out.append(r)
    return out


def stable_run(runs):
    for r in runs:
        if len(r) >= RUN_MIN:
            return r
    return max(runs, key=len) if runs else ""


# (function, index of its level or None, index of its format, program, folder)
CALLS = [
    ("slog", 0, 1, "gpuslice-server", "tokenserver"),
    ("slog_limited", 1, 2, "gpuslice-server", "tokenserver"),
    ("slog_refusal", None, 2, "gpuslice-server", "tokenserver"),   # always warn
    ("gs_log", 0, 1, "the shim", "shim"),
    ("die", None, 0, "gpuslice-hook", "hook"),                     # always an error
    ("fprintf", None, 1, "gpuslice-dra", "dra"),
]
WARN_OR_ERROR = re.compile(r"\b(LOG_WARN|LOG_ERR|GS_LOG_WARN|GS_LOG_ERROR)\b")
QUIET = re.compile(r"\b(LOG_INFO|LOG_DEBUG|GS_LOG_INFO|GS_LOG_DEBUG)\b")


class Message:
    def __init__(self, program, where, fmt, run):
        self.program, self.where, self.fmt, self.run = program, where, fmt, run

    def __repr__(self):
        return "%s (%s): %r" % (self.where, self.program, self.fmt)


def messages():
    """The warnings and errors of the sources, and the problems of reading
    them (a level or a format the check cannot tell)."""
    found, problems, excluded_used = [], [], set()
    for name, level_i, fmt_i, program, folder in CALLS:
        for top, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(".c"):
                    continue
                path = os.path.join(top, f)
                rel = os.path.relpath(path, ROOT)
                src = blank_comments(open(path, encoding="utf-8").read())
                mask = STRING.sub(lambda m: " " * len(m.group(0)), src)
                for m in re.finditer(r"(?<![\w.>])%s\s*\(" % name, mask):
                    before = mask[max(0, m.start() - 40):m.start()]
                    if re.search(r"\b(void|int)\s*$", before):
                        continue  # the definition
                    args = call_args(src, m.end() - 1)
                    where = "%s:%d" % (rel, src.count("\n", 0, m.start()) + 1)
                    if name == "fprintf" and args[0] != "stderr":
                        continue
                    if level_i is not None:
                        level = args[level_i]
                        if not WARN_OR_ERROR.search(level):
                            if not QUIET.search(level):
                                problems.append("%s: cannot tell the level of %s(%s, ...): "
                                                "list it in EXCLUDED with a reason" % (where, name, level))
                            continue
                    fmt = args[fmt_i] if fmt_i < len(args) else ""
                    skip = [k for k in EXCLUDED if k[0] in (None, rel) and k[1] in fmt]
                    if skip:
                        excluded_used.update(skip)
                        continue
                    pieces = format_pieces(fmt)
                    if pieces is None:
                        problems.append("%s: the format of %s(...) is not a string literal: %s" % (where, name, fmt))
                        continue
                    if name == "fprintf":
                        if not pieces[0] or not pieces[0].startswith("gpuslice-dra: "):
                            continue  # not one of gpuslice-dra's lines
                        pieces[0] = pieces[0][len("gpuslice-dra: "):]
                    run_ = stable_run(runs_of(pieces))
                    if len(run_) < 8:
                        problems.append("%s: %s(%s) has no stable text (%r): list it in EXCLUDED with a reason"
                                        % (where, name, fmt, run_))
                        continue
                    found.append(Message(program, where, fmt, run_))
    for k in sorted(set(EXCLUDED) - excluded_used, key=str):
        problems.append("EXCLUDED names %s %r, which no call has any more" % k)
    return found, problems


# --- the checks ---------------------------------------------------------------

def missing_keys(keys, tenants_text):
    table = sections(tenants_text).get("Tenant files", [])
    listed = set()
    for cell in first_cells(table):
        listed.update(code_words(cell))
    return [k for k in keys if k not in listed]


def missing_options(options, tenants_text, section):
    lines = sections(tenants_text).get(section, [])
    listed = set()
    for cell in first_cells(lines):
        listed |= options_in(cell)
    return [o for o in options if o not in NOT_SETTINGS and o not in listed]


def doc_text(text):
    """What a message is looked for in: table cells unescaped, spaces
    collapsed."""
    return re.sub(r"\s+", " ", text.replace("\\|", "|"))


def missing_messages(msgs, trouble_text):
    text = doc_text(trouble_text)
    return [m for m in msgs if m.run not in text]


def elsewhere(keys, options, page_of_record):
    """Settings that a table of another docs/operating page lists too (a
    key in a table of keys, an option in any table)."""
    notes = []
    for f in sorted(os.listdir(OPERATING)):
        path = os.path.join(OPERATING, f)
        if not f.endswith(".md") or path in (page_of_record, TROUBLE_MD):
            continue
        for header, cells in tables(open(path, encoding="utf-8").read().splitlines()):
            for cell in cells:
                found = sorted(options_in(cell) & set(options))
                if header == "key":
                    found += sorted(set(code_words(cell)) & set(keys))
                for s in found:
                    notes.append("WARNING: %s is listed in a table of docs/operating/%s too (row: %s); "
                                 "tenants.md is its one place" % (s, f, cell))
    return notes


def main():
    server = os.path.join(BUILD, "tokenserver", "gpuslice-server")
    ctl = os.path.join(BUILD, "tokenserver", "gpuslicectl")
    tenants = open(TENANTS_MD, encoding="utf-8").read()
    trouble = open(TROUBLE_MD, encoding="utf-8").read()
    failures = []

    keys = tenant_keys(server)
    for k in missing_keys(keys, tenants):
        failures.append("tenant-file key '%s' has no row in the keys table of docs/operating/tenants.md "
                        "(\"### Tenant files\")" % k)
    programs = [("gpuslice-server", long_options(server), "The server's options"),
                ("gpuslicectl", long_options(ctl), "gpuslicectl's options")]
    for prog, opts, section in programs:
        for o in missing_options(opts, tenants, section):
            failures.append("%s's option %s has no row in docs/operating/tenants.md (\"### %s\")" % (prog, o, section))
    for note in elsewhere(keys, [o for _, opts, _ in programs for o in opts if o not in NOT_SETTINGS], TENANTS_MD):
        print(note)

    msgs, problems = messages()
    failures += problems
    for m in missing_messages(msgs, trouble):
        failures.append("%s: the %s message %r is not in docs/operating/troubleshooting.md (its stable text: %r)"
                        % (m.where, m.program, m.fmt, m.run))

    # Negative controls: the checks see one thing taken out, and only it.
    row = [line for line in tenants.splitlines() if line.startswith("| `quantum_ms`")]
    cut = tenants.replace(row[0] + "\n", "") if row else tenants
    got = [k for k in missing_keys(keys, cut) if k not in missing_keys(keys, tenants)]
    if got != ["quantum_ms"]:
        failures.append("negative control: without the quantum_ms row the keys check reports %s" % got)
    for prog, opts, section in programs:
        victim = [o for o in opts if o not in NOT_SETTINGS][-1]
        rows = [line for line in sections(tenants)[section] if line.startswith("|") and victim in options_in(line.split("|")[1])]
        cut = tenants
        for r in rows:
            cut = cut.replace(r + "\n", "")
        expect = [victim] + [o for o in opts if o != victim and o not in NOT_SETTINGS
                             and any(o in options_in(r.split("|")[1]) for r in rows)]
        before = missing_options(opts, tenants, section)
        got = [o for o in missing_options(opts, cut, section) if o not in before]
        if not rows or sorted(got) != sorted(expect) or victim not in got:
            failures.append("negative control: without %s's row for %s the options check reports %s"
                            % (prog, victim, got))
    runs = [m.run for m in msgs]
    present = doc_text(trouble)
    victim = next((m for m in msgs if runs.count(m.run) == 1 and m.run in present
                   and not any(m.run in r for r in runs if r != m.run)
                   and not any(r in m.run for r in runs if r != m.run)), None)
    if victim:
        cut = doc_text(trouble).replace(victim.run, "")
        before = missing_messages(msgs, trouble)
        got = [m for m in missing_messages(msgs, cut) if m not in before]
        if got != [victim]:
            failures.append("negative control: without %r the messages check reports %s" % (victim.run, got))
    elif msgs:
        failures.append("negative control: no message has a stable text of its own")

    print("negative controls: key quantum_ms, options %s, message %s"
          % (", ".join([o for o in opts if o not in NOT_SETTINGS][-1] for _, opts, _ in programs),
             victim.where if victim else "none"))
    print("%d tenant-file keys, %d options (%s), %d messages at warn or error (%d excluded: %s)"
          % (len(keys), sum(len([o for o in opts if o not in NOT_SETTINGS]) for _, opts, _ in programs),
             ", ".join("%s %d" % (p, len([o for o in opts if o not in NOT_SETTINGS])) for p, opts, _ in programs),
             len(msgs), len(EXCLUDED), "; ".join("%s %s: %s" % (k[0] or "any file", k[1], v)
                                                 for k, v in sorted(EXCLUDED.items(), key=str))))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        print("%d failures" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
