"""Three processes of one tenant under a 1 GiB cap, each making a random mix
of plain, pitched, managed, stream-ordered (default and created pools, kept
or let go, trimmed or not) and VMM allocations (mapped, unmapped and
released in either order), graphs with allocation nodes (launched,
destroyed, trimmed), in contexts created and destroyed on the way.
The tenant's true device memory, by fakecuda's meter, never exceeds the cap
at any sample; at every quiet point the server's count equals the truth
within one context's footprint.

  random_test.py [SEED]"""
import random
import sys
import time

from testlib import Checks, Machine, MemScript, Server, run_paced

MIB, GIB = 1 << 20, 1 << 30
CTX = 64 * MIB
ROUNDS, OPS = 6, 150
seed = int(sys.argv[1]) if len(sys.argv) > 1 else int(time.time())
print("seed", seed)
checks = Checks()
machine = Machine(memory="4G", FAKECUDA_CONTEXT_BYTES="64M")
server = Server(machine, {"t": "memory = 1G\n"})


class Actor:
    """One process and the objects it holds, driven by random operations."""

    def __init__(self, index):
        self.rng = random.Random(seed * 10 + index)
        self.app = MemScript(server.tenant_env("t"))
        self.ptrs = {}         # id -> "plain" | "async"
        self.vmm = {}          # id -> {"mapped": bool, "released": bool}
        self.ctx = None        # the created context that is current, if any
        self.ctx_ptrs = set()  # plain allocations made in it
        self.execs = set()     # executable graphs
        self.next_id = 0
        self.ooms = self.calls = 0
        self.errors = []
        for line in ["init", "pool 0 %s" % self.rng.choice(["0", "max"]),
                     "default_threshold %s" % self.rng.choice(["0", "max"])]:
            self.expect(line, ("CUDA_SUCCESS",))

    def expect(self, line, allowed=("CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY")):
        rc = self.app.rc(line)
        self.calls += 1
        if rc == "CUDA_ERROR_OUT_OF_MEMORY":
            self.ooms += 1
        if rc not in allowed:
            self.errors.append("%s -> %s" % (line, rc))
        return rc

    def new_id(self):
        self.next_id = (self.next_id + 1) % 250 + 1
        while self.next_id in self.ptrs or self.next_id in self.vmm:
            self.next_id = self.next_id % 250 + 1
        return self.next_id

    def step(self):
        r = self.rng.random()
        size = self.rng.choice([1, 2, 8, 16, 32, 64, 96]) * MIB
        if r < 0.30 and len(self.ptrs) + len(self.vmm) < 200:
            i = self.new_id()
            kind = self.rng.choice(["alloc", "managed", "pitch", "async -1", "async 0"])
            if kind == "pitch":
                line = "pitch %d %d %d" % (i, self.rng.choice([1000, 4096, 5000]), size // 4096)
            elif kind.startswith("async"):
                line = "async %d %d %s" % (i, size, kind.split()[1])
            else:
                line = "%s %d %d" % (kind, i, size)
            if self.expect(line) == "CUDA_SUCCESS":
                self.ptrs[i] = "async" if kind.startswith("async") else "plain"
                if self.ctx is not None and self.ptrs[i] == "plain":
                    self.ctx_ptrs.add(i)
        elif r < 0.55 and self.ptrs:
            i = self.rng.choice(sorted(self.ptrs))
            self.expect("free_async %d" % i if self.ptrs[i] == "async" else "free %d" % i, ("CUDA_SUCCESS",))
            del self.ptrs[i]
            self.ctx_ptrs.discard(i)
        elif r < 0.62:
            i = self.new_id()
            if self.expect("vmm %d %d" % (i, self.rng.choice([2, 32, 64]) * MIB)) == "CUDA_SUCCESS":
                self.vmm[i] = {"mapped": False, "released": False}
        elif r < 0.75 and self.vmm:
            i = self.rng.choice(sorted(self.vmm))
            v = self.vmm[i]
            if not v["mapped"] and not v["released"] and self.rng.random() < 0.7:
                v["mapped"] = self.expect("map %d" % i, ("CUDA_SUCCESS",)) == "CUDA_SUCCESS"
            elif v["mapped"] and (v["released"] or self.rng.random() < 0.5):
                self.expect("unmap %d" % i, ("CUDA_SUCCESS",))
                v["mapped"] = False
            elif not v["released"]:
                self.expect("release %d" % i, ("CUDA_SUCCESS",))
                v["released"] = True
            if v["released"] and not v["mapped"]:
                del self.vmm[i]
        elif r < 0.80:
            self.expect("trim %d %d" % (self.rng.choice([-1, 0]), self.rng.choice([0, 64 * MIB])), ("CUDA_SUCCESS",))
        elif r < 0.85:
            self.expect("sync", ("CUDA_SUCCESS",))
        elif r < 0.88 and self.ctx is None:  # graphs live in the primary context
            if self.execs and self.rng.random() < 0.5:
                i = self.rng.choice(sorted(self.execs))
                self.expect("exec_destroy %d" % i, ("CUDA_SUCCESS",))
                self.execs.discard(i)
            elif self.rng.random() < 0.3:
                self.expect("graph_trim", ("CUDA_SUCCESS",))
            elif len(self.execs) < 8:
                i = self.rng.randrange(1, 200)
                if i not in self.execs and self.expect("graph %d %d" % (i, size)) == "CUDA_SUCCESS":
                    self.execs.add(i)
                    self.expect("launch %d" % i)
        elif r < 0.92:
            if self.ctx is None:
                if self.expect("ctx 1") == "CUDA_SUCCESS":
                    self.ctx = 1
            else:
                self.expect("ctx_destroy 1", ("CUDA_SUCCESS",))
                for i in self.ctx_ptrs:
                    del self.ptrs[i]
                self.ctx, self.ctx_ptrs = None, set()

    def quiesce(self):
        self.expect("sync", ("CUDA_SUCCESS",))


actors = [Actor(i) for i in range(3)]
pids = {a.app.pid for a in actors}


def truth():
    return sum(p["mem_used"] for p in machine.meter()["processes"] if p["pid"] in pids)


def count():
    devices = server.status()["tenants"][0]["devices"]
    return devices[0]["mem_used"] if devices else 0


# Samples of the truth by count: SAMPLES_PER_ROUND while the actors run,
# spread over the round (testlib.run_paced), however slow either side is.
SAMPLES_PER_ROUND, SAMPLE_WAIT_S = 6, 60.0
samples, over, mismatches, stalled = 0, [], [], []
for rnd in range(ROUNDS):
    def sample():
        held = truth()
        if held > GIB:
            over.append(held)

    taken, stalls = run_paced([lambda step, a=a: a.step() for a in actors], OPS, sample, SAMPLES_PER_ROUND,
                              SAMPLE_WAIT_S)
    samples += taken
    stalled += [(rnd,) + s for s in stalls]
    for a in actors:
        a.quiesce()
    time.sleep(0.15)
    held, counted = truth(), count()
    print("round %d: %d samples; truth %d MiB, count %d MiB, ooms %s" % (rnd, taken, held // MIB, counted // MIB,
                                                                       [a.ooms for a in actors]))
    if abs(counted - held) > CTX:
        mismatches.append((rnd, held, counted))

errors = [e for a in actors for e in a.errors]
checks.expect(not errors, "every call returns success or CUDA_ERROR_OUT_OF_MEMORY (%s)" % errors[:5])
checks.expect(not stalled, "the sampler kept pace with the actors (stalled at %s)" % stalled[:3])
checks.expect(samples >= SAMPLES_PER_ROUND * ROUNDS and not over,
              "the tenant's true device memory never exceeded 1 GiB in %d samples taken while the actors ran "
              "(over: %s)" % (samples, [o // MIB for o in over[:5]]))
checks.expect(sum(a.ooms for a in actors) > 0, "allocations past the cap were refused (%d)" % sum(a.ooms for a in actors))
checks.expect(not mismatches, "at every quiet point the server's count equals the truth within one context "
              "footprint (%s)" % [(r, h // MIB, c // MIB) for r, h, c in mismatches])
for a in actors:
    a.app.close()
time.sleep(0.1)
checks.expect(count() == 0, "the count is 0 once the processes are gone (%d)" % count())
server.stop()
checks.finish()
