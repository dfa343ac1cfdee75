"""Helpers for the tests of gpuslice-server's /metrics endpoint: a free
TCP port, a scrape over a raw socket (so that the test sees the bytes the
server sent, chunks and all), a parser of the text exposition format, and
a server started with --metrics on a port of its own."""
import os
import re
import shutil
import socket
import sys
import time

from testlib import Server

SKIP = 77  # meson: the test was skipped


def need(tool, package):
    """Exits as skipped if tool is missing (scripts/test installs package)."""
    if shutil.which(tool) is None:
        print("%s not found: install %s (scripts/test does); skipped" % (tool, package))
        sys.exit(SKIP)
    return shutil.which(tool)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class MetricsServer(Server):
    """A Server with /metrics on 127.0.0.1 at a free port."""

    def __init__(self, machine, tenants, args=(), **kw):
        self.port = free_port()
        super().__init__(machine, tenants, args=["--metrics", "127.0.0.1:%d" % self.port] + list(args), **kw)
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("no metrics listener: " + self.log()[-2000:])
                time.sleep(0.02)


def request(port, raw, timeout=10.0):
    """Sends raw bytes, returns everything the server sent until it closed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(raw)
    chunks = []
    while True:
        data = s.recv(1 << 16)
        if not data:
            break
        chunks.append(data)
    s.close()
    return b"".join(chunks)


def split_response(data):
    """(status code, {header: value}, body bytes); a chunked body is joined,
    and must end with its last (empty) chunk."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    code = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        joined, rest = [], body
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                if rest != b"\r\n":
                    raise ValueError("chunked body does not end with CRLF after the last chunk")
                break
            joined.append(rest[:size])
            if rest[size:size + 2] != b"\r\n":
                raise ValueError("chunk not followed by CRLF")
            rest = rest[size + 2:]
        body = b"".join(joined)
    return code, headers, body


def scrape(port, version="1.1"):
    """The body of GET /metrics, checked to be a 200 in the 0.0.4 format."""
    raw = request(port, ("GET /metrics HTTP/%s\r\nHost: 127.0.0.1\r\n\r\n" % version).encode())
    code, headers, body = split_response(raw)
    if code != 200 or "version=0.0.4" not in headers.get("content-type", ""):
        raise ValueError("bad scrape: %r" % raw[:300])
    return body.decode()


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse(text):
    """{"help": {family: text}, "type": {family: type}, "samples":
    [(name, {label: value}, float)]} of an exposition; raises on a line
    that is none of HELP, TYPE or a sample."""
    out = {"help": {}, "type": {}, "samples": []}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            out["help"][name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            out["type"][name] = kind
        elif line.startswith("#") or not line:
            continue
        else:
            m = SAMPLE.match(line)
            if not m:
                raise ValueError("not a sample: %r" % line)
            labels = {}
            if m.group(3):
                pos = 0
                for lm in LABEL.finditer(m.group(3)):
                    if lm.start() != pos:
                        raise ValueError("bad labels: %r" % line)
                    labels[lm.group(1)] = lm.group(2)
                    pos = lm.end()
                if pos != len(m.group(3)):
                    raise ValueError("bad labels: %r" % line)
            out["samples"].append((m.group(1), labels, float(m.group(4))))
    return out


def family_of(name, types):
    """The family a sample name belongs to (histograms add suffixes)."""
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
            return name[:-len(suffix)]
    return None


def values(parsed, name, **match):
    """{frozenset(labels): value} of the samples of name whose labels include match."""
    return {frozenset(l.items()): v for n, l, v in parsed["samples"]
            if n == name and all(l.get(k) == str(x) for k, x in match.items())}


def value(parsed, name, **match):
    """The one sample of name matching, or None."""
    found = values(parsed, name, **match)
    return next(iter(found.values())) if len(found) == 1 else None


HANDOFF = None


def handoff_latencies(server, holder_tenant, launcher_tenant, rounds):
    """Handoff latencies in us, as server_bench.py measures them: a bare
    protocol client of holder_tenant holds the GPU 20 ms at a time, a CUDA
    process of launcher_tenant launches every 9 ms; each blocked launch is
    paired with the release just before it (test/bench/handoff_bench.c)."""
    from testlib import BUILD
    bench = os.path.join(BUILD, "test", "bench", "handoff_bench")
    machine = server.machine
    launcher = machine.spawn([bench, "launcher", str(rounds * 4)], env=server.tenant_env(launcher_tenant))
    time.sleep(0.3)
    holder = machine.spawn([bench, "holder", server.socket(holder_tenant), str(rounds)])
    releases = [int(l.split()[1]) for l in holder.communicate()[0].splitlines() if l.startswith("released")]
    launcher.kill()
    returns = [tuple(map(int, l.split()[1:])) for l in launcher.communicate()[0].splitlines()
               if l.startswith("returned")]
    samples = []
    for t1, blocked in returns:
        before = [r for r in releases if r <= t1]
        if blocked > 500000 and before and t1 - before[-1] < 3000000:
            samples.append((t1 - before[-1]) / 1000.0)
    return samples


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def populated_server(machine, ntenants, ngpus, extra=None):
    """A MetricsServer with ntenants tenants, each with one process that
    declared ngpus GPUs, holds memory on each and had a slice on each:
    every figure of every (tenant, GPU) pair is there. Returns (server,
    clients)."""
    import gsproto
    tenants = {"t%03d" % i: "share = %d\nmemory = 4G\n" % (1 + i % 4) for i in range(ntenants)}
    tenants.update(extra or {})
    server = MetricsServer(machine, tenants)
    clients = []
    for i in range(ntenants):
        c = gsproto.Client(server.socket("t%03d" % i))
        for slot in range(ngpus):
            c.device(slot, gsproto.uuid_bytes(slot))
            c.lease_granted(slot, slot + 1, (1 + slot) << 20)
            c.grant_latency(slot)
        clients.append(c)
    return server, clients


def server_run_ns(server):
    """CPU time the server has run so far, in ns (/proc/PID/schedstat)."""
    with open("/proc/%d/schedstat" % server.proc.pid) as f:
        return int(f.read().split()[0])
