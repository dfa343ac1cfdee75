/*
 * Remote calls to gpuslice-server (gs_rpc.c): a request sent on the
 * connection (gs_conn.c), and its answer waited for on gs_gate_cv with the
 * gate lock released meanwhile: the gate thread, or a launcher reading the
 * socket, receives it. Each takes the gate lock itself; the caller holds
 * no lock at all (gs_locks.h: nothing is held across a round trip).
 */
#ifndef GPUSLICE_RPC_H
#define GPUSLICE_RPC_H

#include "gs_dev.h"

#include "gpuslice/protocol.h"

/* MEM_QUERY for d: its tenant's cap and count there. 0 with *result filled,
 * or -1 when the server is unreachable and the policy is open (the caller
 * goes on without the server's figures). Under the wait policy it waits
 * for the server. */
int gs_rpc_mem_query(struct gs_dev *d, struct gs_msg_mem_result *result);

/* MEM_LEASE for d (need, at most want): 0 with *out filled (what is
 * granted is in the lease ledger already, counted as it arrived by the
 * thread that read it: gs_gate_thread.c), or -1 when the server is unreachable and the policy is open. */
int gs_rpc_lease(struct gs_dev *d, uint64_t need, uint64_t want, struct gs_msg_mem_leased *out);

/* USAGE_QUERY for the GPU of uuid: 0 with *out filled; -1 when there is no
 * connection and none can be made at once (the socket refuses), none within
 * 2 s, or no answer within 2 s: whatever the server-down policy. */
int gs_rpc_usage(const uint8_t uuid[16], struct gs_msg_usage *out);

#endif
