"""Memory caps against what the device really holds: each process's true
device memory by fakecuda's meter, CUDA error codes, and the server's count.
One section per way an application's memory escaped the count or stayed in
it after the device let it go."""
import time

from testlib import Checks, Machine, MemScript, Server

MIB, GIB = 1 << 20, 1 << 30
QUIET_S = 0.15  # idle headroom goes back and pools are read again within 40 ms
checks = Checks()


def truth(machine, pids):
    """The tenant's true device memory: its processes' by the meter."""
    return sum(p["mem_used"] for p in machine.meter()["processes"] if p["pid"] in pids)


def physically_free(machine):
    d = machine.meter()["devices"][0]
    return d["mem_total"] - d["mem_used"]


def count(server, tenant):
    for t in server.status()["tenants"]:
        if t["name"] == tenant:
            return t["devices"][0]["mem_used"] if t["devices"] else 0
    return 0


def quiet_count(server, tenant):
    time.sleep(QUIET_S)
    return count(server, tenant)


# ---- a context's own memory is counted ----------------------------------------
machine = Machine(memory="4G", FAKECUDA_CONTEXT_BYTES="300M")
server = Server(machine, {"t": "memory = 512M\n"})
app = MemScript(server.tenant_env("t"))
checks.expect(app.rc("init") == "CUDA_SUCCESS", "the primary context is created under a 512 MiB cap")
rc = app.rc("alloc 0 %d" % (256 * MIB))
held = truth(machine, {app.pid})
checks.expect(rc == "CUDA_ERROR_OUT_OF_MEMORY" and held <= 512 * MIB,
              "with 300 MiB in the context, 256 MiB more is refused and the process holds at most the cap "
              "(%s, %d MiB held)" % (rc, held // MIB))
rc = app.rc("alloc 0 %d" % (200 * MIB))
checks.expect(rc == "CUDA_SUCCESS" and quiet_count(server, "t") == truth(machine, {app.pid}) == 500 * MIB,
              "200 MiB fits; the server counts the context and the allocation, 500 MiB, as the device holds "
              "(%s, count %d MiB)" % (rc, count(server, "t") // MIB))
# A second context, created while the first is current, is measured from
# the driver: the estimate below is wrong on purpose.
app.close()
app = MemScript(server.tenant_env("t", GPUSLICE_CONTEXT_BYTES="100M"))
app.rc("init")
before = quiet_count(server, "t")
rc = app.rc("ctx 1")
after = quiet_count(server, "t")
checks.expect(rc == "CUDA_SUCCESS" and before == 100 * MIB and after - before == 300 * MIB and
              after <= truth(machine, {app.pid}),
              "a context created while another of its device is current is counted as measured: 300 MiB, "
              "not the 100 MiB estimate (%s, %d -> %d MiB)" % (rc, before // MIB, after // MIB))
rc = app.rc("ctx_destroy 1")
checks.expect(rc == "CUDA_SUCCESS" and quiet_count(server, "t") == before,
              "its destruction gives the 300 MiB back (%d MiB counted)" % (count(server, "t") // MIB))
app.close()
server.stop()

# ---- memory a pool keeps after cuMemFreeAsync is counted ------------------------
machine = Machine(memory="4G")
server = Server(machine, {"t": "memory = 1G\n"})
app = MemScript(server.tenant_env("t"))
app.rc("init")
ok = [app.rc("pool 0 max"), app.rc("async 0 %d 0" % (512 * MIB)), app.rc("free_async 0"), app.rc("sync")]
kept = int(app.do("reserved 0")["reserved"])
checks.expect(ok == ["CUDA_SUCCESS"] * 4 and kept == 512 * MIB,
              "a pool with release threshold UINT64_MAX keeps 512 MiB after cuMemFreeAsync (%s, %d MiB)" % (ok, kept // MIB))
checks.expect(quiet_count(server, "t") == truth(machine, {app.pid}) == 512 * MIB,
              "the server counts what the pool keeps (%d MiB)" % (count(server, "t") // MIB))
rc = app.rc("alloc 1 %d" % (768 * MIB))
checks.expect(rc == "CUDA_ERROR_OUT_OF_MEMORY" and truth(machine, {app.pid}) <= GIB,
              "768 MiB more is refused: the device would hold 1.25 GiB (%s)" % rc)
rc = app.rc("async 2 %d 0" % (256 * MIB))
checks.expect(rc == "CUDA_SUCCESS" and truth(machine, {app.pid}) == 512 * MIB,
              "an allocation the pool holds already costs nothing more (%s)" % rc)
app.rc("free_async 2")
app.rc("sync")
rc = app.rc("async 3 %d 0" % (768 * MIB))
checks.expect(rc == "CUDA_ERROR_OUT_OF_MEMORY" and truth(machine, {app.pid}) == 512 * MIB,
              "a pool that would grow past the cap fails with CUDA_ERROR_OUT_OF_MEMORY before the device "
              "memory is taken (%s, %d MiB held)" % (rc, truth(machine, {app.pid}) // MIB))
ok = [app.rc("trim 0 0"), app.rc("alloc 1 %d" % (768 * MIB))]
checks.expect(ok == ["CUDA_SUCCESS"] * 2 and quiet_count(server, "t") == truth(machine, {app.pid}) == 768 * MIB,
              "cuMemPoolTrimTo gives the pool's memory back, and 768 MiB fits (%s)" % ok)
ok = [app.rc("free 1"), app.rc("default_threshold max"), app.rc("async 4 %d -1" % (300 * MIB)),
      app.rc("free_async 4"), app.rc("sync")]
checks.expect(ok == ["CUDA_SUCCESS"] * 5 and quiet_count(server, "t") == truth(machine, {app.pid}) == 300 * MIB,
              "the default pool's kept memory is counted too (%s, %d MiB)" % (ok, count(server, "t") // MIB))
ok = [app.rc("default_threshold 0"), app.rc("async 4 %d -1" % MIB), app.rc("free_async 4"), app.rc("sync")]
checks.expect(quiet_count(server, "t") == truth(machine, {app.pid}) == 0,
              "a pool that lets memory go is counted down to what it holds (%s, %d MiB)" % (ok, count(server, "t") // MIB))
app.close()
server.stop()

# ---- cuMemCreate memory stays until its last unmap -------------------------------
machine = Machine(memory="4G")
server = Server(machine, {"t": "memory = 1G\n"})
app = MemScript(server.tenant_env("t"))
app.rc("init")
ok = [app.rc("vmm 0 %d" % (512 * MIB)), app.rc("map 0"), app.rc("release 0")]
checks.expect(ok == ["CUDA_SUCCESS"] * 3 and truth(machine, {app.pid}) == 512 * MIB and
              quiet_count(server, "t") == 512 * MIB,
              "memory released while mapped is still on the device, and still counted (%s, %d MiB counted)"
              % (ok, count(server, "t") // MIB))
rc = app.rc("alloc 1 %d" % (768 * MIB))
checks.expect(rc == "CUDA_ERROR_OUT_OF_MEMORY" and truth(machine, {app.pid}) <= GIB,
              "so 768 MiB more is refused (%s)" % rc)
ok = [app.rc("unmap 0"), app.rc("alloc 1 %d" % (768 * MIB))]
checks.expect(ok == ["CUDA_SUCCESS"] * 2 and quiet_count(server, "t") == truth(machine, {app.pid}) == 768 * MIB,
              "its last unmap frees it, and 768 MiB fits (%s)" % ok)
ok = [app.rc("free 1"), app.rc("vmm 2 %d" % (256 * MIB)), app.rc("map 2"), app.rc("unmap 2"), app.rc("release 2")]
checks.expect(ok == ["CUDA_SUCCESS"] * 5 and quiet_count(server, "t") == truth(machine, {app.pid}) == 0,
              "unmapped before its release, it goes at the release (%s)" % ok)
app.close()
server.stop()

# ---- a destroyed context's allocations are given back ----------------------------
machine = Machine(memory="4G")
server = Server(machine, {"t": "memory = 1G\n"})
app = MemScript(server.tenant_env("t"))
app.rc("init")
ok = [app.rc("ctx 1"), app.rc("alloc 0 %d" % (768 * MIB)), app.rc("ctx_destroy 1")]
rc = app.rc("alloc 1 %d" % (768 * MIB))
checks.expect(ok == ["CUDA_SUCCESS"] * 3 and rc == "CUDA_SUCCESS" and
              quiet_count(server, "t") == truth(machine, {app.pid}) == 768 * MIB,
              "cuCtxDestroy frees what the context held: 768 MiB fits again (%s %s, %d MiB counted)"
              % (ok, rc, count(server, "t") // MIB))
ok = [app.rc("reset"), app.rc("init")]
rc = app.rc("alloc 2 %d" % (900 * MIB))
checks.expect(ok == ["CUDA_SUCCESS"] * 2 and rc == "CUDA_SUCCESS" and
              quiet_count(server, "t") == truth(machine, {app.pid}) == 900 * MIB,
              "cuDevicePrimaryCtxReset frees what the primary context held: 900 MiB fits (%s %s, %d MiB counted)"
              % (ok, rc, count(server, "t") // MIB))
app.close()
server.stop()

# ---- graph allocation nodes: taken at the first launch, kept until trimmed -------
machine = Machine(memory="4G")
server = Server(machine, {"t": "memory = 1G\n"})
app = MemScript(server.tenant_env("t"))
app.rc("init")
rc = app.rc("graph 0 %d" % (512 * MIB))
checks.expect(rc == "CUDA_SUCCESS" and truth(machine, {app.pid}) == 0 and quiet_count(server, "t") == 0,
              "a captured graph that allocates 512 MiB holds nothing before its launch (%s)" % rc)
ok = [app.rc("launch 0"), app.rc("launch 0")]
checks.expect(ok == ["CUDA_SUCCESS"] * 2 and truth(machine, {app.pid}) == 512 * MIB and
              quiet_count(server, "t") == 512 * MIB,
              "launched, it holds 512 MiB on the device, and the server counts them (%s, %d MiB)"
              % (ok, count(server, "t") // MIB))
rc = app.rc("alloc 1 %d" % (768 * MIB))
checks.expect(rc == "CUDA_ERROR_OUT_OF_MEMORY" and truth(machine, {app.pid}) == 512 * MIB,
              "so 768 MiB more is refused (%s)" % rc)
ok = [app.rc("exec_destroy 0")]
checks.expect(ok == ["CUDA_SUCCESS"] and truth(machine, {app.pid}) == 512 * MIB and
              quiet_count(server, "t") == 512 * MIB,
              "a destroyed graph's memory stays cached on the device until trimmed, and counted (%d MiB)"
              % (count(server, "t") // MIB))
ok = [app.rc("graph_trim"), app.rc("alloc 1 %d" % (768 * MIB))]
checks.expect(ok == ["CUDA_SUCCESS"] * 2 and quiet_count(server, "t") == truth(machine, {app.pid}) == 768 * MIB,
              "cuDeviceGraphMemTrim gives it back, and 768 MiB fits (%s)" % ok)
ok = [app.rc("graph 2 %d" % (512 * MIB))]
rc = app.rc("launch 2")
checks.expect(ok == ["CUDA_SUCCESS"] and rc == "CUDA_ERROR_OUT_OF_MEMORY" and
              truth(machine, {app.pid}) == 768 * MIB,
              "a graph launch whose allocation nodes would pass the cap fails with CUDA_ERROR_OUT_OF_MEMORY "
              "before the device memory is taken (%s, %d MiB held)" % (rc, truth(machine, {app.pid}) // MIB))
app.close()
server.stop()

# ---- cuMemGetInfo never reports more free memory than the GPU has ---------------
machine = Machine(memory="4G")
server = Server(machine, {"a": "memory = 3G\n", "b": "memory = 3G\n"})
a = MemScript(server.tenant_env("a"))
b = MemScript(server.tenant_env("b"))
a.rc("init")
b.rc("init")
ok = [a.rc("alloc %d %d" % (i, 512 * MIB)) for i in range(5)]
info = b.do("info")
phys = physically_free(machine)
checks.expect(ok == ["CUDA_SUCCESS"] * 5 and int(info["free"]) <= phys and int(info["total"]) == 3 * GIB,
              "with the neighbour holding 2.5 GiB of 4, cuMemGetInfo's free (%d MiB) is at most what is "
              "physically free (%d MiB), total the cap" % (int(info["free"]) // MIB, phys // MIB))
# vLLM sizes its cache to what cuMemGetInfo reports, in one allocation.
before_a = truth(machine, {a.pid})
grab = b.do("grab 0")
checks.expect(grab["rc"] == "CUDA_SUCCESS" and truth(machine, {a.pid}) == before_a and
              truth(machine, {b.pid}) == int(grab["free"]),
              "allocating all of it in one go succeeds (%s, %d MiB), and the neighbour keeps its %d MiB"
              % (grab["rc"], int(grab["free"]) // MIB, before_a // MIB))
a.close()
b.close()
server.stop()

checks.finish()
