/*
 * What the server does with one message a client sent, decoded: HELLO
 * first and once (answered with WELCOME), DEVICE to devices.c's admission,
 * USAGE_QUERY answered by usage.c without a scheduler step, anything else
 * turned into a scheduler event (sched_wire.c) and stepped (dispatch.c);
 * what breaks these rules drops the client (client_out.c). No socket, no
 * clock, no state of its own: clients.c reads the socket and calls it,
 * and the simulation (test/sim/sim_server.c) links it unchanged.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>

void client_message(struct client *c, const struct gs_msg *msg, uint64_t sent_ns, int passed)
{
    struct sched_event ev = {.slot = NULL};
    if (!c->greeted && msg->type != GS_MSG_HELLO) {
        client_drop(c, "first message was not HELLO");
        return;
    }
    switch (msg->type) {
    case GS_MSG_HELLO: {
        if (c->greeted) {
            client_drop(c, "second HELLO");
            return;
        }
        c->greeted = true;
        if (!c->pid) /* SO_PEERCRED could not say */
            c->pid = msg->u.hello.pid;
        c->hello_pid = msg->u.hello.pid;
        c->pidns = usage_pid_namespace(c->peer.pid);
        struct gs_msg welcome = {.type = GS_MSG_WELCOME};
        snprintf(welcome.u.welcome.tenant, sizeof welcome.u.welcome.tenant, "%s", c->tenant->name);
        client_send(c, &welcome);
        slog(LOG_DEBUG, "tenant %s: pid %u connected", c->tenant->name, c->pid);
        break;
    }
    case GS_MSG_DEVICE: {
        const struct sched_slot *s = &c->slots[msg->u.device.slot];
        if (s->device && (s->wants || s->holds) && memcmp(s->device->uuid, msg->u.device.uuid, 16) != 0) {
            client_drop(c, "re-declared a device slot it is using");
            return;
        }
        const char *why = NULL;
        if (!device_declare(c, (int)msg->u.device.slot, msg->u.device.uuid, passed, &why)) {
            client_drop(c, why);
            return;
        }
        uint64_t cap = c->tenant->sched.config.memory, total = msg->u.device.total_bytes;
        if (cap && total && cap > total)
            client_cap_above_memory(c, msg->u.device.uuid, cap, total);
        break;
    }
    case GS_MSG_USAGE_QUERY: /* read-only: no scheduler step */
        usage_answer(c, &msg->u.usage_query);
        return;
    default:
        if (!sched_wire_event(msg, c->slots, sent_ns, &ev)) {
            char what[64];
            snprintf(what, sizeof what, "unexpected %s message", gs_msg_type_str(msg->type));
            client_drop(c, what);
            return;
        }
    }
    if (!ev.slot)
        return;
    if (!ev.slot->device) {
        char what[64];
        snprintf(what, sizeof what, "%s for an undeclared device", gs_msg_type_str(msg->type));
        client_drop(c, what);
        return;
    }
    sched_run(&ev);
}
