"""A configuration directory that is a symlink, or under one, swapped to
another directory (as deployment tools do): the server must follow it
without a SIGHUP, and watch the new directory. Also the Kubernetes
ConfigMap layout (NAME.conf -> ..data/NAME.conf, ..data swapped)."""
import os
import time

from testlib import Checks, Machine, Server, wait_for

checks = Checks()
machine = Machine()


def swap(link, target):
    tmp = link + ".tmp"
    os.symlink(target, tmp)
    os.rename(tmp, link)


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def names(server):
    return sorted(t["name"] for t in server.status()["tenants"])


def share(server, name):
    return {t["name"]: t["share"] for t in server.status()["tenants"]}.get(name)


# The directory is a symlink.
a_dir, b_dir = os.path.join(machine.dir, "conf-a"), os.path.join(machine.dir, "conf-b")
os.makedirs(a_dir)
os.makedirs(b_dir)
write(os.path.join(a_dir, "a.conf"), "share = 1\n")
write(os.path.join(b_dir, "b.conf"), "share = 2\n")
link = os.path.join(machine.dir, "tenants.d")
os.symlink(a_dir, link)
server = Server(machine, {}, conf=link)
checks.expect(names(server) == ["a"], "the directory the symlink leads to is read (%s)" % names(server))
swap(link, b_dir)
checks.expect(wait_for(lambda: names(server) == ["b"], 3.0),
              "the symlink swapped: the new directory is read within 3 s, without SIGHUP (%s)" % names(server))
write(os.path.join(link, "c.conf"), "share = 3\n")
checks.expect(wait_for(lambda: names(server) == ["b", "c"], 2.0),
              "and watched: a file added there applies (%s)" % names(server))
write(os.path.join(a_dir, "d.conf"), "share = 1\n")
time.sleep(0.5)
checks.expect(names(server) == ["b", "c"], "the old directory is watched no more (%s)" % names(server))
server.stop()

# The directory is under a symlink.
machine = Machine()
p1, p2 = os.path.join(machine.dir, "etc-1"), os.path.join(machine.dir, "etc-2")
for p, name in ((p1, "x"), (p2, "y")):
    os.makedirs(os.path.join(p, "tenants.d"))
    write(os.path.join(p, "tenants.d", name + ".conf"), "share = 1\n")
parent = os.path.join(machine.dir, "etc")
os.symlink(p1, parent)
server = Server(machine, {}, conf=os.path.join(parent, "tenants.d"))
checks.expect(names(server) == ["x"], "a directory under a symlink is read (%s)" % names(server))
swap(parent, p2)
checks.expect(wait_for(lambda: names(server) == ["y"], 3.0),
              "the parent symlink swapped: the new directory is read within 3 s (%s)" % names(server))
server.stop()

# A Kubernetes ConfigMap volume.
machine = Machine()
cm = os.path.join(machine.dir, "configmap")
os.makedirs(os.path.join(cm, "..2024_01"))
os.makedirs(os.path.join(cm, "..2024_02"))
write(os.path.join(cm, "..2024_01", "a.conf"), "share = 1\n")
write(os.path.join(cm, "..2024_02", "a.conf"), "share = 3\n")
os.symlink("..2024_01", os.path.join(cm, "..data"))
os.symlink("..data/a.conf", os.path.join(cm, "a.conf"))
server = Server(machine, {}, conf=cm)
checks.expect(share(server, "a") == 1, "a ConfigMap's files are read through its symlinks")
swap(os.path.join(cm, "..data"), "..2024_02")
checks.expect(wait_for(lambda: share(server, "a") == 3, 2.0), "a ConfigMap update (..data swapped) applies (share %s)"
              % share(server, "a"))
server.stop()
checks.finish()
