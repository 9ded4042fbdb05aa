/* The bridge's conversation on a plain stream socket beside the NNG socket: TCP for tcp://, an
 * abstract unix socket for ipc://.
 *
 * Through NNG 1.5.2 a request and its reply pass through NNG's threads (about 20 context switches
 * a round trip on a 2-core machine, which bounds batches of 1 MiB and less), and a batch costs,
 * besides the two copies through the kernel, a zero-filled message and a copy into it on each side
 * (NNG frees what it sends and exports no shared message). On a stream a trainer's GET and ACK
 * requests are read and answered by one publisher thread of its own, and a batch goes from the
 * publisher's kept bytes straight into the socket and from the socket straight into the trainer's
 * buffer.
 *
 * The publisher listens on an ephemeral port of the host its URL names (tcp://), or on an abstract
 * unix socket of a random name (ipc://), and announces it, with a random token, in its READY reply
 * (JSON {"stream": {"port" or "unix", "token"}}). A trainer connects and sends 32 bytes, the
 * token then 16 zero bytes; the publisher answers with a READY message. From then on both sides
 * send the bridge's own messages (the 32-byte GRPB header, JSON, payload; docs/bridge.md,
 * "Protocol"), each after its u64 little-endian length; only GET and ACK are taken, each answered
 * in order (over ipc:// a GET asking {"shm": 1} is answered with a memfd reference, as over NNG).
 * A trainer may send its next GET before it has read the reply to the last (a prefetch: the
 * replies come in order). A stream that fails on either side is closed and that trainer talks over
 * NNG until it finds the stream again. */
#include "trainer_bridge/bridge_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define STREAMS_MAX 16 /* trainers with a stream at once; more talk over NNG */
#define HELLO_MS 2000  /* a connection that has not sent its 32 bytes by then is dropped */
#define STALL_MS 10000 /* a stream on which no byte moves for this long is given up */
#define REQ_MAX ((uint64_t)64 << 20) /* a request (its ack and held lists) */
#define MSG_MAX ((uint64_t)1 << 40)

struct grpo_bridge__stream_out {
    grpo_bridge__streams *owner;
    int fd;     /* -1: free */
    int broken; /* a reply could not be written */
    pthread_t thr;
    int started, exited; /* the thread was started / has returned (join it) */
};

struct grpo_bridge__streams {
    grpo_bridge__stream_host h;
    pthread_mutex_t mu; /* the table */
    int lfd;
    int port;           /* tcp:// */
    char unix_name[64]; /* ipc://: the abstract socket's name (without its leading NUL) */
    uint8_t token[16];
    pthread_t acc;
    int acc_started, stop;
    grpo_bridge__stream_out st[STREAMS_MAX];
};

/* Waits up to ms for fd to be ready for events; 1 ready, 0 timed out, -1 error. */
static int
wait_fd(int fd, short events, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    for (;;) {
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        return r > 0 ? 1 : 0;
    }
}

/* Writes the n pieces of iov (changed on the way); -1 when the peer went away or nothing moved
 * for the socket's SO_SNDTIMEO. Blocking: the kernel wakes the writer only when a good part of
 * its buffer is free again, where a poll loop would wake at every segment. */
static int
send_iov(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        size_t left = (size_t)r;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* One message: its u64 length, the GRPB header, json, then the payload pieces. */
static int
send_msg(int fd, int type, int64_t a, int64_t b, const char *json, const void *p1, size_t n1,
         const void *p2, size_t n2)
{
    uint8_t pre[8 + GRPB_HDR];
    size_t jl = json ? strlen(json) : 0;
    grpo_bridge__put_u64(pre, GRPB_HDR + jl + n1 + n2);
    grpo_bridge__msg_header(pre + 8, type, a, b, jl);
    struct iovec iov[4] = {
        {pre, sizeof pre}, {(void *)json, jl}, {(void *)p1, n1}, {(void *)p2, n2}};
    struct iovec packed[4];
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (iov[i].iov_len)
            packed[n++] = iov[i];
    return send_iov(fd, packed, n);
}

/* Reads exactly n bytes into buf; -1 on EOF, error, or no byte for the socket's SO_RCVTIMEO. */
static int
recv_all(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)buf + got, n - got, MSG_WAITALL);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return -1;
    }
    return 0;
}

/* TCP keepalive probes after 30 s idle, every 10 s, 3 of them (a no-op on unix sockets). */
static void
keepalive(int fd)
{
    int on = 1, idle = 30, intvl = 10, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* A blocking socket whose sends and receives give up after ms without progress. */
static void
set_timeouts(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

static void
nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* a no-op on unix sockets */
}

/* The abstract unix socket address of name (no file: nothing is left behind by a crash). */
static socklen_t
unix_addr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n > sizeof sa->sun_path - 1)
        n = sizeof sa->sun_path - 1;
    memcpy(sa->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static int
listen_unix(char *name, size_t cap)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        return -1;
    snprintf(name, cap, "grpo-bridge-%d-%016" PRIx64, (int)getpid(), r);
    struct sockaddr_un sa;
    socklen_t sl = unix_addr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&sa, sl) != 0 || listen(fd, 8) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* host and port of a tcp:// URL ("*" or empty host: every interface, host NULL); 0 when the URL
 * is not tcp:// or malformed. */
static int
url_host(const char *url, char *host, size_t cap, char *port, size_t pcap)
{
    if (strncmp(url, "tcp://", 6) != 0)
        return 0;
    const char *h = url + 6, *colon = strrchr(h, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= pcap)
        return 0;
    size_t n = (size_t)(colon - h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') { /* [v6] */
        h++;
        n -= 2;
    }
    if (n >= cap)
        return 0;
    memcpy(host, h, n);
    host[n] = '\0';
    snprintf(port, pcap, "%s", colon + 1);
    return 1;
}

/* One message (its length, then header, json and payload) into buf (memory reused), at most max
 * bytes; -1 on a broken or stalled stream or an oversized message. */
static int
recv_msg(int fd, grpo_buf *buf, uint64_t max)
{
    uint8_t pre[8];
    if (recv_all(fd, pre, sizeof pre) != 0)
        return -1;
    uint64_t n = grpo_bridge__get_u64(pre);
    if (n < GRPB_HDR || n > max)
        return -1;
    /* the memory grows with the bytes that came, 16 MiB at a time: a length alone reserves
     * nothing (once grown, a buffer is reused) */
    for (buf->len = 0; buf->len < n;) {
        size_t step = n - buf->len < ((size_t)16 << 20) ? (size_t)(n - buf->len) : (size_t)16 << 20;
        if (grpo__buf_reserve(buf, step) != GRPO_OK ||
            recv_all(fd, buf->data + buf->len, step) != 0)
            return -1;
        buf->len += step;
    }
    return 0;
}

/* ---- publisher side ------------------------------------------------------------------------ */

int
grpo_bridge__stream_reply(grpo_bridge__stream_out *out, int type, int64_t a, int64_t b,
                          const char *json, const void *payload, size_t plen)
{
    if (!out->broken && send_msg(out->fd, type, a, b, json, payload, plen, NULL, 0) != 0)
        out->broken = 1;
    return out->broken ? -1 : 0;
}

/* One trainer's requests, answered in order, until its stream fails or the publisher stops. */
static void *
conversation(void *arg)
{
    grpo_bridge__stream_out *out = arg;
    grpo_bridge__streams *ss = out->owner;
    grpo_buf req = {0};
    while (!out->broken) {
        grpb_msg m;
        /* a trainer may take its time between requests (a training step): only a message that
         * stops half way is given up */
        if (wait_fd(out->fd, POLLIN, -1) != 1 || recv_msg(out->fd, &req, REQ_MAX) != 0 ||
            grpo_bridge__msg_parse(req.data, req.len, &m) != GRPO_OK) {
            out->broken = 1;
            break;
        }
        if (m.type == GRPB_GET || m.type == GRPB_ACK)
            ss->h.serve(ss->h.ctx, &m, out);
        else
            grpo_bridge__stream_reply(out, GRPB_ERROR, 0, 0,
                                      "{\"error\":\"only GET and ACK are taken on a stream\"}",
                                      NULL, 0);
    }
    grpo__buf_fini(&req);
    pthread_mutex_lock(&ss->mu);
    shutdown(out->fd, SHUT_RDWR);
    out->exited = 1; /* admit() reclaims it */
    pthread_mutex_unlock(&ss->mu);
    return NULL;
}

/* With ss->mu held: a free entry (joining a thread that has returned), or NULL. */
static grpo_bridge__stream_out *
free_entry(grpo_bridge__streams *ss)
{
    for (int i = 0; i < STREAMS_MAX; i++) {
        grpo_bridge__stream_out *s = &ss->st[i];
        if (s->fd >= 0 && s->exited) {
            pthread_join(s->thr, NULL); /* it has returned: does not block */
            close(s->fd);
            s->fd = -1;
            s->started = s->exited = 0;
        }
        if (s->fd < 0)
            return s;
    }
    return NULL;
}

/* A new connection: its 32 bytes (token, 16 zero bytes) within HELLO_MS, READY, then a thread
 * for its requests. */
static void
admit(grpo_bridge__streams *ss, int fd)
{
    uint8_t hello[32];
    nodelay(fd);
    set_timeouts(fd, HELLO_MS);
    static const uint8_t zero[16];
    if (recv_all(fd, hello, sizeof hello) != 0 || memcmp(hello, ss->token, 16) != 0 ||
        memcmp(hello + 16, zero, 16) != 0) {
        close(fd);
        return;
    }
    /* Receives: STALL_MS inside a message. Sends: no bound, since a reply to a prefetched GET
     * waits in the socket until the trainer's step is done and it reads (a trainer gone for good
     * is found by keepalive, and the publisher's close shuts the socket). */
    set_timeouts(fd, STALL_MS);
    struct timeval forever = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &forever, sizeof forever);
    keepalive(fd);
    if (send_msg(fd, GRPB_READY, 0, 0, NULL, NULL, 0, NULL, 0) != 0) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&ss->mu);
    grpo_bridge__stream_out *s = ss->stop ? NULL : free_entry(ss);
    if (s != NULL) {
        s->fd = fd;
        s->broken = 0;
        s->started = pthread_create(&s->thr, NULL, conversation, s) == 0;
        if (!s->started)
            s->fd = -1;
    }
    int admitted = s != NULL && s->started;
    pthread_mutex_unlock(&ss->mu);
    if (!admitted)
        close(fd); /* the trainer's first request fails: it talks over NNG */
}

static void *
acceptor(void *arg)
{
    grpo_bridge__streams *ss = arg;
    for (;;) {
        pthread_mutex_lock(&ss->mu);
        int stop = ss->stop;
        pthread_mutex_unlock(&ss->mu);
        if (stop)
            break;
        if (wait_fd(ss->lfd, POLLIN, 100) != 1)
            continue;
        int fd = accept4(ss->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            admit(ss, fd);
    }
    return NULL;
}

static int
listen_on(const char *url, int *port)
{
    char host[256], sport[16];
    if (!url_host(url, host, sizeof host, sport, sizeof sport))
        return -1;
    int wild = host[0] == '\0' || strcmp(host, "*") == 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *res = NULL;
    if (getaddrinfo(wild ? NULL : host, "0", &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 8) != 0)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        *port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    else if (fd >= 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

grpo_err
grpo_bridge__streams_open(grpo_bridge__streams **out, const char *url,
                          const grpo_bridge__stream_host *h)
{
    *out = NULL;
    int port = 0, lfd = -1;
    char name[64] = "";
    if (strncmp(url, "tcp://", 6) == 0)
        lfd = listen_on(url, &port);
    else if (strncmp(url, "ipc://", 6) == 0)
        lfd = listen_unix(name, sizeof name);
    if (lfd < 0)
        return GRPO_OK;
    grpo_bridge__streams *ss = calloc(1, sizeof *ss);
    if (ss == NULL) {
        close(lfd);
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    }
    ss->h = *h;
    ss->lfd = lfd;
    ss->port = port;
    snprintf(ss->unix_name, sizeof ss->unix_name, "%s", name);
    pthread_mutex_init(&ss->mu, NULL);
    for (int i = 0; i < STREAMS_MAX; i++) {
        ss->st[i].owner = ss;
        ss->st[i].fd = -1;
    }
    if (getrandom(ss->token, sizeof ss->token, 0) != (ssize_t)sizeof ss->token ||
        pthread_create(&ss->acc, NULL, acceptor, ss) != 0) {
        grpo_bridge__streams_close(ss);
        return GRPO_OK; /* trainers talk over NNG */
    }
    ss->acc_started = 1;
    *out = ss;
    return GRPO_OK;
}

void
grpo_bridge__streams_close(grpo_bridge__streams *ss)
{
    if (ss == NULL)
        return;
    pthread_mutex_lock(&ss->mu);
    ss->stop = 1;
    for (int i = 0; i < STREAMS_MAX; i++)
        if (ss->st[i].fd >= 0)
            shutdown(ss->st[i].fd, SHUT_RDWR); /* a thread in recv() or send() returns */
    pthread_mutex_unlock(&ss->mu);
    if (ss->acc_started)
        pthread_join(ss->acc, NULL);
    for (int i = 0; i < STREAMS_MAX; i++) {
        grpo_bridge__stream_out *s = &ss->st[i];
        if (s->started)
            pthread_join(s->thr, NULL);
        if (s->fd >= 0)
            close(s->fd);
    }
    close(ss->lfd);
    pthread_mutex_destroy(&ss->mu);
    free(ss);
}

int
grpo_bridge__streams_port(const grpo_bridge__streams *ss, const char **unix_name,
                          char token_hex[33])
{
    token_hex[0] = '\0';
    *unix_name = NULL;
    if (ss == NULL)
        return 0;
    for (int i = 0; i < 16; i++)
        snprintf(token_hex + 2 * i, 3, "%02x", ss->token[i]);
    if (ss->unix_name[0])
        *unix_name = ss->unix_name;
    return ss->unix_name[0] ? 1 : ss->port;
}

/* ---- trainer side -------------------------------------------------------------------------- */

static int
connect_unix(const char *name, int timeout_ms)
{
    struct sockaddr_un sa;
    socklen_t sl = unix_addr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), soerr = 0;
    socklen_t el = sizeof soerr;
    if (fd < 0)
        return -1;
    int rc = connect(fd, (struct sockaddr *)&sa, sl);
    if (rc != 0 && (errno == EINPROGRESS || errno == EAGAIN) &&
        wait_fd(fd, POLLOUT, timeout_ms) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) == 0 && soerr == 0)
        rc = 0;
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int
connect_to(const char *url, int port, int timeout_ms)
{
    char host[256], sport[16], p[16];
    if (!url_host(url, host, sizeof host, sport, sizeof sport))
        return -1;
    if (host[0] == '\0' || strcmp(host, "*") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    snprintf(p, sizeof p, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, p, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        int rc = connect(fd, a->ai_addr, a->ai_addrlen), soerr = 0;
        socklen_t sl = sizeof soerr;
        if (rc != 0 && errno == EINPROGRESS && wait_fd(fd, POLLOUT, timeout_ms) == 1 &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
            rc = 0;
        if (rc != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

grpo_err
grpo_bridge__stream_connect(grpo_bridge__stream_in *in, const char *url, int port,
                            const char *unix_name, const char *token_hex, int timeout_ms,
                            int stall_ms)
{
    uint8_t hello[32] = {0};
    in->fd = -1;
    if ((unix_name == NULL && (port <= 0 || port > 65535)) || token_hex == NULL ||
        strlen(token_hex) != 32)
        return grpo__fail(GRPO_EFORMAT, "bridge %s: malformed stream announcement", url);
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        if (sscanf(token_hex + 2 * i, "%2x", &v) != 1)
            return grpo__fail(GRPO_EFORMAT, "bridge %s: malformed stream token", url);
        hello[i] = (uint8_t)v;
    }
    char where[96];
    if (unix_name)
        snprintf(where, sizeof where, "@%s", unix_name);
    else
        snprintf(where, sizeof where, "port %d", port);
    int fd = unix_name ? connect_unix(unix_name, timeout_ms) : connect_to(url, port, timeout_ms);
    if (fd < 0)
        return grpo__fail_errno(GRPO_ENET, errno, "bridge %s: connecting its stream (%s)", url,
                                where);
    nodelay(fd);
    keepalive(fd); /* a publisher's host gone for good, while a reply is awaited */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    set_timeouts(fd, timeout_ms > 0 ? timeout_ms : STALL_MS);
    struct iovec iov = {hello, sizeof hello};
    grpo_buf r = {0};
    grpb_msg m;
    int ok = send_iov(fd, &iov, 1) == 0 && recv_msg(fd, &r, 4096) == 0 &&
             grpo_bridge__msg_parse(r.data, r.len, &m) == GRPO_OK && m.type == GRPB_READY;
    grpo__buf_fini(&r);
    if (!ok) {
        close(fd);
        return grpo__fail(GRPO_ENET, "bridge %s: its stream (%s) refused this trainer", url, where);
    }
    set_timeouts(fd, stall_ms);
    in->fd = fd;
    return GRPO_OK;
}

grpo_err
grpo_bridge__stream_send(grpo_bridge__stream_in *in, int type, int64_t a, int64_t b,
                         const char *json, const void *p1, size_t n1, const void *p2, size_t n2)
{
    if (in->fd < 0 || send_msg(in->fd, type, a, b, json, p1, n1, p2, n2) != 0)
        return grpo__fail(GRPO_ENET, "bridge: sending on the stream: %s",
                          in->fd < 0 ? "not connected" : strerror(errno));
    return GRPO_OK;
}

int
grpo_bridge__stream_wait(grpo_bridge__stream_in *in, int timeout_ms)
{
    if (in->fd < 0)
        return -1;
    for (;;) { /* in slices: poll's timeout is an int of milliseconds */
        int slice = timeout_ms < 0 || timeout_ms > 1000 ? 1000 : timeout_ms;
        int r = wait_fd(in->fd, POLLIN, slice);
        if (r != 0 || timeout_ms == slice)
            return r;
        if (timeout_ms > 0)
            timeout_ms -= slice;
    }
}

grpo_err
grpo_bridge__stream_recv(grpo_bridge__stream_in *in, grpo_buf *msg)
{
    errno = 0;
    if (in->fd < 0 || recv_msg(in->fd, msg, MSG_MAX) != 0)
        return grpo__fail(GRPO_ENET, "bridge: the stream broke off (%s)",
                          in->fd < 0 ? "not connected"
                          : errno    ? strerror(errno)
                                     : "closed by the publisher");
    return GRPO_OK;
}

void
grpo_bridge__stream_close(grpo_bridge__stream_in *in)
{
    if (in->fd >= 0)
        close(in->fd);
    in->fd = -1;
}
