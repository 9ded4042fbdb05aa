/* Receiving and sending on an NNG socket with every wait done by poll(2), never by NNG's timers.
 *
 * Why: with NNG 1.5.2 (Debian 12) a blocking nng_recvmsg under NNG_OPT_RECVTIMEO sometimes never
 * returns: the timeout does not fire and the message that arrives is not delivered. gdb showed
 * grpo serve's main thread parked in nng_recvmsg's aio wait with both "nng:aio:expire" threads
 * idle while its workers timed out waiting for replies (docs/workers.md, "The NNG hang"). NNG's
 * non-blocking calls never arm an expiry timer, so here every operation is a non-blocking attempt,
 * and the waits between attempts are poll(2) on the socket's RECVFD/SENDFD with a short cap, so a
 * missed notification costs at most one slice.
 *
 * Header-only (static inline): included only by the modules that link NNG, so grpo_common itself
 * does not depend on it. Error codes are NNG's; NNG_ETIMEDOUT when timeout_ms passes. */
#ifndef GRPO_COMMON_NET_NNG_IO_H
#define GRPO_COMMON_NET_NNG_IO_H

#include <nng/nng.h>

#include <poll.h>
#include <stdint.h>
#include <time.h>

#define GRPO__NNG_SLICE_MS 50 /* longest single poll(2): a lost wake-up costs at most this */

static inline int64_t
grpo__nng_ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until opt's descriptor (NNG_OPT_RECVFD or NNG_OPT_SENDFD) is readable or the deadline
 * (-1 = none) passes, at most one slice. Returns 0, or NNG_ETIMEDOUT once the deadline passed. */
static inline int
grpo__nng_wait(nng_socket s, const char *opt, int64_t deadline)
{
    int64_t now = grpo__nng_ms_now();
    if (deadline >= 0 && now >= deadline)
        return NNG_ETIMEDOUT;
    int64_t left = deadline < 0 ? GRPO__NNG_SLICE_MS : deadline - now;
    int fd = -1;
    struct pollfd pfd;
    if (nng_socket_get_int(s, opt, &fd) != 0 || fd < 0) {
        struct timespec ts = {0, 1000000}; /* no descriptor: plain short sleeps */
        nanosleep(&ts, NULL);
        return 0;
    }
    pfd.fd = fd, pfd.events = POLLIN, pfd.revents = 0;
    poll(&pfd, 1, (int)(left < GRPO__NNG_SLICE_MS ? left : GRPO__NNG_SLICE_MS));
    return 0;
}

/* nng_recvmsg that waits at most timeout_ms (-1 = forever, 0 = one try). */
static inline int
grpo__nng_recv(nng_socket s, nng_msg **msg, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : grpo__nng_ms_now() + timeout_ms;
    for (;;) {
        int rv = nng_recvmsg(s, msg, NNG_FLAG_NONBLOCK);
        if (rv != NNG_EAGAIN)
            return rv;
        if ((rv = grpo__nng_wait(s, NNG_OPT_RECVFD, deadline)) != 0)
            return rv;
    }
}

/* nng_sendmsg that waits at most timeout_ms for the socket to take msg. On success msg belongs
 * to NNG; on failure it is still the caller's. */
static inline int
grpo__nng_send(nng_socket s, nng_msg *msg, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : grpo__nng_ms_now() + timeout_ms;
    for (;;) {
        int rv = nng_sendmsg(s, msg, NNG_FLAG_NONBLOCK);
        if (rv != NNG_EAGAIN)
            return rv;
        if ((rv = grpo__nng_wait(s, NNG_OPT_SENDFD, deadline)) != 0)
            return rv;
    }
}

#endif
