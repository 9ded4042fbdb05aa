/* A REP socket served through NNG contexts, with no NNG timer anywhere (private to the modules
 * that link NNG: grpo serve's worker endpoint and the trainer bridge's publisher).
 *
 * Why not nng_recvmsg/nng_sendmsg on the socket: with NNG 1.5.2 (Debian 12) a receive or send
 * under NNG_OPT_RECVTIMEO/SENDTIMEO sometimes never completes (the expiry is lost); and the
 * socket-level REP context allows one reply in flight, so a reply queued behind a busy pipe either
 * waits on exactly that timer or, sent non-blocking, is dropped (docs/workers.md, "The NNG
 * hang"). Here each context has its own receive and send aio with an infinite timeout: a received
 * request goes to a queue this module owns (a mutex and a condition variable on CLOCK_MONOTONIC,
 * so the caller's wait is the kernel's, not NNG's), and a reply is handed to NNG without waiting.
 * A reply stuck behind a slow peer holds only its own context. */
#ifndef GRPO_COMMON_NET_REP_H
#define GRPO_COMMON_NET_REP_H

#include "grpo/common.h"

#include <nng/nng.h>

#include <stddef.h>
#include <stdint.h>

typedef struct grpo_rep grpo_rep;

/* Opens a REP socket with n_ctx contexts (1..1024), not yet listening. max_msg bounds a request
 * (0 = no bound). url and what ("workers", "bridge") name the endpoint in errors. */
grpo_err grpo__rep_open(grpo_rep **out, const char *url, size_t max_msg, int n_ctx,
                        const char *what);

/* The socket, for options and pipe notifications set before grpo__rep_listen. */
nng_socket grpo__rep_socket(const grpo_rep *r);

/* Starts listening on url; on failure the caller closes r. */
grpo_err grpo__rep_listen(grpo_rep *r, const char *url, const char *what);

/* Waits up to timeout_ms (-1 = forever) for a request. On 0, *msg is the caller's (free it with
 * nng_msg_free) and *token names the request for grpo__rep_reply, which must follow exactly once
 * (or grpo__rep_drop). Returns 0, NNG_ETIMEDOUT, or NNG_ECLOSED after grpo__rep_close began. */
int grpo__rep_recv(grpo_rep *r, nng_msg **msg, uint32_t *token, int timeout_ms);

/* Sends msg as the reply to token without waiting; msg is consumed in every case. Only the first
 * reply (or drop) of a request counts; later ones are discarded, as NNG discards a reply to a
 * peer that went away. */
void grpo__rep_reply(grpo_rep *r, uint32_t token, nng_msg *msg);

/* Answers nothing to token (a no-op once it was answered); its context takes the next request.
 * The peer's REQ resends. */
void grpo__rep_drop(grpo_rep *r, uint32_t token);

/* Closes the socket (pending replies may be lost), waits for NNG's callbacks, frees everything.
 * NULL is a no-op. */
void grpo__rep_close(grpo_rep *r);

/* Runs fn(arg) on a helper thread and waits at most timeout_ms for it. Returns 1 when it
 * finished, 0 when it did not: the thread is then left to finish (or not) on its own and fn's
 * data must stay allocated. For NNG teardown: nng_close in NNG 1.5.2 can wait forever on its
 * reaper (seen with 16 workers connected, docs/workers.md); a process on its way out must not. */
int grpo__net_bounded(void (*fn)(void *), void *arg, int timeout_ms, const char *what);

/* nng_close(s) under grpo__net_bounded. */
void grpo__nng_close_bounded(nng_socket s, int timeout_ms, const char *what);

/* grpo__rep_close under grpo__net_bounded; 0 when it was abandoned (r stays allocated). */
int grpo__rep_close_bounded(grpo_rep *r, int timeout_ms, const char *what);

#endif
