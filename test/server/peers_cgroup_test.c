/*
 * The server's reading of who a client is (tokenserver/peers.c): container
 * IDs and pod UIDs from the /proc/PID/cgroup texts that docker, podman,
 * containerd and CRI-O produce, under both cgroup drivers and cgroup
 * versions, and SO_PEERCRED on a real socket.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "server.h"

#define ID "3c3bd527054f9fce028a5a4b381e452500440aaa46fd8747d39925160cb18d4e"
#define UID "8b4a3c2d-1e0f-4a5b-9c8d-7e6f5a4b3c2d"
#define UID_ "8b4a3c2d_1e0f_4a5b_9c8d_7e6f5a4b3c2d"

static void expect(const char *text, const char *id, const char *pod, const char *what)
{
    struct peer p;
    memset(&p, 0x55, sizeof p);
    peer_parse_cgroup(text, &p);
    bool ok = strcmp(p.container_id, id) == 0 && strcmp(p.pod_uid, pod) == 0;
    if (!ok)
        printf("%s: container '%s' pod '%s', expected '%s' '%s'\n", what, p.container_id, p.pod_uid, id, pod);
    EXPECT(ok);
}

int main(void)
{
    expect("12:memory:/docker/" ID "\n11:cpu:/docker/" ID "\n", ID, "", "docker, cgroupfs, v1");
    expect("0::/system.slice/docker-" ID ".scope\n", ID, "", "docker, systemd, v2");
    expect("0::/libpod_parent/libpod-" ID "\n", ID, "", "podman, cgroupfs");
    expect("1:name=systemd:/machine.slice/libpod-" ID ".scope\n0::/\n", ID, "", "podman, systemd, hybrid");
    expect("0::/\n4:memory:/libpod_parent/libpod-" ID "\n", ID, "", "empty unified line, v1 controllers");
    expect("0::/kubepods/besteffort/pod" UID "/" ID "\n", ID, UID, "containerd, cgroupfs");
    expect("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_ ".slice/cri-containerd-" ID
           ".scope\n", ID, UID, "containerd, systemd");
    expect("0::/kubepods.slice/kubepods-pod" UID_ ".slice/crio-" ID ".scope\n", ID, UID, "CRI-O, systemd");
    expect("0::/kubepods/pod" UID "/crio-" ID "\n", ID, UID, "CRI-O, cgroupfs");
    expect("0::/../../kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" ID ".scope\n", ID, UID,
           "seen from another cgroup namespace");
    expect("0::/system.slice/cron.service\n", "", "", "a host process");
    expect("0::/x/" ID "0\n", "", "", "65 hex digits are no container id");
    expect("0::/x/a" ID "\n", "", "", "hex glued to a letter is no container id");
    expect("0::/kubepods/besteffort/pod" UID "\n", "", UID, "a pod's own cgroup, no container");
    expect("", "", "", "empty");

    /* SO_PEERCRED: this process, as the kernel sees it. */
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
    struct peer p;
    peer_identify(sv[0], &p);
    EXPECT(p.pid == (uint32_t)getpid() && p.uid == (uint32_t)getuid());
    close(sv[0]);
    close(sv[1]);
    return check_finish();
}
