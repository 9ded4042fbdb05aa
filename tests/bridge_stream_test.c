/* The bridge's conversation on a plain stream socket (trainer_bridge/stream.c), over tcp://
 * (batches inline) and ipc:// (an abstract unix socket, batches as memfd references, or inline
 * when the trainer turns shared memory off), every test run over each: batches arrive in id order
 * byte for byte with the stream's prefetch on and off and with the stream turned off; the window,
 * acknowledgements and end of stream behave as over NNG; a trainer that dies holding a batch gets
 * it redelivered; a publisher restart breaks the stream, the trainer goes on over NNG by itself and
 * finds the new publisher's stream a second later; two trainers (one on the stream, one over NNG)
 * racing over the same batches leave nothing unacknowledged; and the stream's listener refuses what
 * it must (a wrong token, requests other than GET and ACK, malformed ids, an oversized message). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/common_int.h"
#include "grpo/bridge.h"
#include "trainer_bridge/bridge_int.h"
#include "tests/bridge_test_util.h"

enum { TCP, IPC, IPC_INLINE }; /* the transports the tests run over */
static int kind;
static int url_seq;

static void
fresh_url(char *url, size_t cap)
{
    if (kind == TCP)
        snprintf(url, cap, "tcp://127.0.0.1:%d", free_port());
    else
        snprintf(url, cap, "ipc:///tmp/grpo-stream-test-%d-%d.ipc", (int)getpid(), url_seq++);
}

static grpo_bridge_publisher *
start(const char *url, int window, const grpo_bridge_persist *persist)
{
    return start_publisher(url, window, persist, NULL);
}

/* Batch k: T tokens (1 MB ones among small ones when big), its tokens a function of k. */
static grpo_batch *
batch_of(int64_t k, int big)
{
    grpo_batch *b = NULL;
    size_t T = big && k % 2 ? (size_t)1 << 17 : 300 + (size_t)k;
    assert_int_equal(grpo_batch_create(&b, "r1", 1, T, 0), GRPO_OK);
    b->batch_id = k;
    b->seq_offsets[1] = (int64_t)T;
    for (size_t t = 0; t < T; t++)
        b->tokens[t] = (int32_t)((t + (size_t)k) * 2654435761u % 129280), b->loss_mask[t] = 1;
    return b;
}

static grpo_bridge_consumer *
consumer(const char *url, int stream, int prefetch)
{
    grpo_bridge_consumer *c = NULL;
    grpo_err err = grpo_bridge_consumer_create(&c, url, "r1", 5000);
    if (err != GRPO_OK)
        fprintf(stderr, "%s\n", grpo_error_last());
    assert_int_equal(err, GRPO_OK);
    grpo_bridge_consumer_set_stream(c, stream);
    grpo_bridge_consumer_set_prefetch(c, prefetch);
    if (kind == IPC_INLINE)
        grpo_bridge_consumer_set_shm(c, 0);
    return c;
}

/* The next batch must be k, byte for byte as encoded (want). */
static void
expect(grpo_bridge_consumer *c, int64_t k, const void *want, size_t wlen)
{
    const void *got = NULL;
    size_t len = 0;
    int64_t id = -1;
    grpo_err err = grpo_bridge_consumer_next(c, &got, &len, &id, 5000);
    if (err != GRPO_OK)
        fprintf(stderr, "next: %s\n", grpo_error_last());
    assert_int_equal(err, GRPO_OK);
    assert_int_equal(id, k);
    assert_int_equal(len, wlen);
    assert_memory_equal(got, want, wlen);
}

static void
expect_end(grpo_bridge_consumer *c)
{
    const void *bytes = NULL;
    size_t len = 0;
    int64_t id;
    assert_int_equal(grpo_bridge_consumer_next(c, &bytes, &len, &id, 5000), GRPO_ECANCELED);
}

/* N batches queued ahead, consumed and acknowledged one by one, then the end. */
static void
queued_run(int stream, int prefetch)
{
    enum { N = 9 };
    char url[64];
    fresh_url(url, sizeof url);
    grpo_bridge_publisher *p = start(url, N + 1, NULL);
    void *want[N];
    size_t wlen[N];
    for (int64_t k = 0; k < N; k++) {
        grpo_batch *b = batch_of(k, 1);
        assert_int_equal(grpo_batch_encode(b, &want[k], &wlen[k]), GRPO_OK);
        assert_int_equal(grpo_bridge_publish(p, b, 5000), GRPO_OK);
        grpo_batch_destroy(b);
    }
    grpo_bridge_consumer *c = consumer(url, stream, prefetch);
    for (int64_t k = 0; k < N; k++) {
        expect(c, k, want[k], wlen[k]);
        assert_int_equal(grpo_bridge_consumer_ack(c, k, 0), GRPO_OK);
        free(want[k]);
    }
    grpo_bridge_finish(p);
    expect_end(c);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.sent, N);
    assert_int_equal(st.streamed, stream ? N : 0);    /* every reply on the stream, or none */
    assert_int_equal(st.shared, kind == IPC ? N : 0); /* ipc://: memfd references */
    assert_int_equal(st.redelivered, 0);
    assert_int_equal(st.acked, N);
    assert_int_equal(st.unacked, 0);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

static void
test_queued(void **state)
{
    (void)state;
    queued_run(1, 1);
    queued_run(1, 0);
    queued_run(0, 1); /* over NNG: the same stream of batches */
}

/* Published one at a time while the trainer waits (long polls on the stream), the window holding
 * the publisher back until acknowledgements come. */
static void
test_window_and_wait(void **state)
{
    (void)state;
    char url[64];
    fresh_url(url, sizeof url);
    grpo_bridge_publisher *p = start(url, 2, NULL);
    grpo_bridge_consumer *c = consumer(url, 1, 1);
    const void *bytes = NULL;
    size_t len = 0;
    int64_t id;
    /* nothing yet: a timeout, and the GET still out is answered later */
    assert_int_equal(grpo_bridge_consumer_next(c, &bytes, &len, &id, 120), GRPO_ETIMEOUT);
    for (int64_t k = 0; k < 6; k++) {
        grpo_batch *b = batch_of(k, 0);
        void *want = NULL;
        size_t wlen = 0;
        assert_int_equal(grpo_batch_encode(b, &want, &wlen), GRPO_OK);
        assert_int_equal(grpo_bridge_publish(p, b, 5000), GRPO_OK);
        if (k >= 1) /* the window of 2 is full until the trainer acknowledges */
            assert_int_equal(grpo_bridge_publish(p, b, 0), GRPO_OK); /* a duplicate: no-op */
        expect(c, k, want, wlen);
        assert_int_equal(grpo_bridge_consumer_ack(c, k, k == 5), GRPO_OK);
        free(want);
        grpo_batch_destroy(b);
    }
    assert_int_equal(grpo_bridge_flush(p, 5000), GRPO_OK);
    grpo_bridge_finish(p);
    expect_end(c);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.published, 6);
    assert_int_equal(st.acked, 6);
    assert_int_equal(st.streamed, 6);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

/* A trainer that dies holding batch 1 (and the prefetched 2): a new one gets them again; then the
 * publisher restarts from its spool, the trainer's stream breaks, and it goes on over NNG. */
static void
test_redelivery_and_restart(void **state)
{
    (void)state;
    char url[64], dir[] = "/tmp/grpo_stream_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fresh_url(url, sizeof url);
    grpo_bridge_spool *sp = NULL;
    grpo_bridge_persist per;
    assert_int_equal(grpo_bridge_spool_open(&sp, dir), GRPO_OK);
    grpo_bridge_spool_persist(sp, &per);
    grpo_bridge_publisher *p = start(url, 8, &per);
    void *want[5];
    size_t wlen[5];
    for (int64_t k = 0; k < 5; k++) {
        grpo_batch *b = batch_of(k, 1);
        assert_int_equal(grpo_batch_encode(b, &want[k], &wlen[k]), GRPO_OK);
        assert_int_equal(grpo_bridge_publish(p, b, 5000), GRPO_OK);
        grpo_batch_destroy(b);
    }
    grpo_bridge_consumer *c = consumer(url, 1, 1);
    expect(c, 0, want[0], wlen[0]);
    assert_int_equal(grpo_bridge_consumer_ack(c, 0, 0), GRPO_OK);
    expect(c, 1, want[1], wlen[1]);
    grpo_bridge_consumer_destroy(c); /* holding 1, and 2 prefetched */
    c = consumer(url, 1, 1);
    expect(c, 1, want[1], wlen[1]);
    assert_int_equal(grpo_bridge_consumer_ack(c, 1, 1), GRPO_OK);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_true(st.redelivered >= 1); /* 1, and 2 if its prefetch was answered before the end */
    grpo_bridge_publisher_destroy(p);
    p = start(url, 8, &per); /* 2, 3, 4 from the spool; the stream to the old one is gone */
    for (int64_t k = 2; k < 5; k++) {
        expect(c, k, want[k], wlen[k]);
        assert_int_equal(grpo_bridge_consumer_ack(c, k, 0), GRPO_OK);
    }
    grpo_bridge_publisher_stats(p, &st);
    /* 3, or 2 when the old publisher's answer to the prefetch (batch 2) was still in the socket
     * and was read before the stream broke: the same bytes, acknowledged to the new one */
    assert_true(st.sent == 3 || st.sent == 2);
    /* a second later the trainer finds the new publisher's stream (a new HELLO) */
    usleep(1200 * 1000);
    grpo_batch *b5 = batch_of(5, 0);
    void *w5 = NULL;
    size_t l5 = 0;
    assert_int_equal(grpo_batch_encode(b5, &w5, &l5), GRPO_OK);
    assert_int_equal(grpo_bridge_publish(p, b5, 5000), GRPO_OK);
    expect(c, 5, w5, l5);
    assert_int_equal(grpo_bridge_consumer_ack(c, 5, 0), GRPO_OK);
    int64_t streamed_before = st.streamed;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.streamed, streamed_before + 1);
    assert_int_equal(st.handshakes, 1); /* the new publisher's: the HELLO that found its stream */
    free(w5);
    grpo_batch_destroy(b5);
    grpo_bridge_finish(p);
    expect_end(c);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
    for (int k = 0; k < 5; k++)
        free(want[k]);
    p = start(url, 8, &per); /* nothing left unacknowledged */
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.unacked, 0);
    grpo_bridge_publisher_destroy(p);
    grpo_bridge_spool_close(sp);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Two trainers, one on the stream and one over NNG, take from the same queue until the end: the
 * publisher answers each with the first batch it does not hold, so the same batch may go to both
 * and be acknowledged by one while the other's reply is still being written (its bytes pinned). */
typedef struct {
    const char *url;
    int stream;
    int64_t got, seen[64];
    int failures;
} racer;

static void *
race(void *arg)
{
    racer *r = arg; /* no cmocka assertions off the main thread: failures are counted */
    grpo_bridge_consumer *c = NULL;
    if (grpo_bridge_consumer_create(&c, r->url, "r1", 5000) != GRPO_OK) {
        r->failures++;
        return NULL;
    }
    grpo_bridge_consumer_set_stream(c, r->stream);
    if (kind == IPC_INLINE)
        grpo_bridge_consumer_set_shm(c, 0);
    for (;;) {
        const void *bytes = NULL;
        size_t len = 0;
        int64_t id = -1;
        grpo_err err = grpo_bridge_consumer_next(c, &bytes, &len, &id, 10000);
        if (err == GRPO_ECANCELED)
            break;
        grpo_batch *b = NULL;
        if (err != GRPO_OK || grpo_batch_decode(&b, bytes, len) != GRPO_OK || b->batch_id != id ||
            id < 0 || id >= 64) { /* whole and valid */
            fprintf(stderr, "trainer %d: %s\n", r->stream, grpo_error_last());
            grpo_batch_destroy(b);
            r->failures++;
            break;
        }
        grpo_batch_destroy(b);
        r->seen[id]++;
        r->got++;
        if (grpo_bridge_consumer_ack(c, id, 0) != GRPO_OK)
            r->failures++;
    }
    grpo_bridge_consumer_destroy(c);
    return NULL;
}

static void
test_two_trainers(void **state)
{
    (void)state;
    enum { N = 40 };
    char url[64];
    fresh_url(url, sizeof url);
    grpo_bridge_publisher *p = start(url, 6, NULL);
    racer a = {url, 1, 0, {0}, 0}, b = {url, 0, 0, {0}, 0};
    pthread_t ta, tb;
    grpo_bridge_stats st0;
    pthread_create(&ta, NULL, race, &a);
    pthread_create(&tb, NULL, race, &b);
    for (int64_t k = 0; k < N; k++) {
        grpo_batch *bt = batch_of(k, 1);
        assert_int_equal(grpo_bridge_publish(p, bt, 10000), GRPO_OK);
        grpo_batch_destroy(bt);
    }
    assert_int_equal(grpo_bridge_flush(p, 20000), GRPO_OK);
    grpo_bridge_finish(p);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.failures + b.failures, 0);
    for (int k = 0; k < N; k++) /* every batch reached a trainer */
        assert_true(a.seen[k] + b.seen[k] >= 1);
    assert_true(a.got > 0);
    grpo_bridge_publisher_stats(p, &st0);
    assert_true(st0.streamed >= a.got); /* a's replies came on its stream */
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.acked, N);
    assert_int_equal(st.unacked, 0);
    grpo_bridge_publisher_destroy(p);
}

/* ---- the listener's refusals ------------------------------------------------------------------
 */

/* The stream READY announces (a port, or an abstract unix socket's name), read with a HELLO over
 * NNG. */
static void
announced(const char *url, int *port, char name[64], char token[33])
{
    nng_socket s;
    assert_int_equal(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
    assert_int_equal(nng_dial(s, url, NULL, 0), 0);
    uint8_t hdr[GRPB_HDR];
    grpo_bridge__msg_header(hdr, GRPB_HELLO, 0, 0, 0);
    assert_int_equal(nng_send(s, hdr, sizeof hdr, 0), 0);
    nng_msg *m = NULL;
    assert_int_equal(nng_recvmsg(s, &m, 0), 0);
    grpb_msg r;
    assert_int_equal(grpo_bridge__msg_parse(nng_msg_body(m), nng_msg_len(m), &r), GRPO_OK);
    assert_int_equal(r.type, GRPB_READY);
    cJSON *j = cJSON_ParseWithLength(r.json, r.json_len);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stream");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(st, "port");
    const cJSON *un = cJSON_GetObjectItemCaseSensitive(st, "unix");
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(st, "token");
    assert_true(cJSON_IsString(tk));
    assert_true(kind == TCP ? cJSON_IsNumber(pt) && !un : cJSON_IsString(un) && !pt);
    *port = kind == TCP ? (int)pt->valuedouble : 0;
    snprintf(name, 64, "%s", kind == TCP ? "" : un->valuestring);
    snprintf(token, 33, "%s", tk->valuestring);
    cJSON_Delete(j);
    nng_msg_free(m);
    nng_close(s);
}

/* 1 when the publisher closed fd within 3 s (EOF), 0 when it is still open. */
static int
closed_by_peer(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 3000) != 1)
        return 0;
    char c;
    return recv(fd, &c, 1, 0) <= 0;
}

static int
raw_connect(int port, const char *name)
{
    int fd = socket(port ? AF_INET : AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (port) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                 .sin_port = htons((uint16_t)port)};
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    } else { /* abstract: a NUL, then the name */
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t n = strlen(name);
        assert_true(n + 1 < sizeof sa.sun_path);
        memcpy(sa.sun_path + 1, name, n);
        socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sl), 0);
    }
    return fd;
}

/* Sends one framed request (length, header, payload) on a registered stream. */
static void
send_req(grpo_bridge__stream_in *in, int type, int64_t a, int64_t b, const void *pl, size_t n)
{
    assert_int_equal(grpo_bridge__stream_send(in, type, a, b, NULL, pl, n, NULL, 0), GRPO_OK);
}

static int
reply_type(grpo_bridge__stream_in *in, grpo_buf *buf)
{
    grpb_msg m;
    assert_int_equal(grpo_bridge__stream_wait(in, 5000), 1);
    assert_int_equal(grpo_bridge__stream_recv(in, buf), GRPO_OK);
    assert_int_equal(grpo_bridge__msg_parse(buf->data, buf->len, &m), GRPO_OK);
    return m.type;
}

static void
test_refusals(void **state)
{
    (void)state;
    char url[64], token[33], bad[33], name[64];
    fresh_url(url, sizeof url);
    grpo_bridge_publisher *p = start(url, 4, NULL);
    int port = 0;
    announced(url, &port, name, token);
    const char *un = port ? NULL : name;
    /* a wrong token: the connection is closed */
    int fd = raw_connect(port, name);
    uint8_t hello[32] = {0};
    assert_int_equal(send(fd, hello, sizeof hello, 0), (ssize_t)sizeof hello);
    assert_true(closed_by_peer(fd));
    close(fd);
    snprintf(bad, sizeof bad, "%s", token);
    bad[0] = bad[0] == '0' ? '1' : '0';
    grpo_bridge__stream_in in;
    assert_int_not_equal(grpo_bridge__stream_connect(&in, url, port, un, bad, 2000, 2000), GRPO_OK);
    /* the right token: PART is not taken on a stream, malformed ids are refused, the
     * conversation goes on after both, and an ACK is answered OK */
    assert_int_equal(grpo_bridge__stream_connect(&in, url, port, un, token, 2000, 5000), GRPO_OK);
    grpo_buf buf = {0};
    send_req(&in, GRPB_PART, 0, 0, NULL, 0);
    assert_int_equal(reply_type(&in, &buf), GRPB_ERROR);
    uint8_t ids[8] = {0};
    send_req(&in, GRPB_GET, 5, 0, ids, sizeof ids); /* 5 acks in 8 bytes */
    assert_int_equal(reply_type(&in, &buf), GRPB_ERROR);
    send_req(&in, GRPB_ACK, 1, 0, ids, sizeof ids);
    assert_int_equal(reply_type(&in, &buf), GRPB_OK);
    /* an oversized length prefix: the publisher ends the conversation */
    uint8_t huge[8];
    grpo_bridge__put_u64(huge, (uint64_t)1 << 40);
    assert_int_equal(send(in.fd, huge, sizeof huge, MSG_NOSIGNAL), 8);
    assert_true(closed_by_peer(in.fd));
    grpo_bridge__stream_close(&in);
    /* and the publisher still serves a trainer on a stream of its own */
    grpo_batch *b = batch_of(0, 0);
    void *want = NULL;
    size_t wlen = 0;
    assert_int_equal(grpo_batch_encode(b, &want, &wlen), GRPO_OK);
    assert_int_equal(grpo_bridge_publish(p, b, 5000), GRPO_OK);
    grpo_bridge_consumer *c = consumer(url, 1, 1);
    expect(c, 0, want, wlen);
    free(want);
    grpo_batch_destroy(b);
    grpo__buf_fini(&buf);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

static int
over_tcp(void **state)
{
    (void)state;
    kind = TCP;
    return 0;
}

static int
over_ipc(void **state)
{
    (void)state;
    kind = IPC;
    return 0;
}

static int
over_ipc_inline(void **state)
{
    (void)state;
    kind = IPC_INLINE;
    return 0;
}

#define OVER(setup)                                                                                \
    cmocka_unit_test_setup(test_queued, setup),                                                    \
        cmocka_unit_test_setup(test_window_and_wait, setup),                                       \
        cmocka_unit_test_setup(test_redelivery_and_restart, setup),                                \
        cmocka_unit_test_setup(test_two_trainers, setup),                                          \
        cmocka_unit_test_setup(test_refusals, setup)

int
main(void)
{
    const struct CMUnitTest tests[] = {OVER(over_tcp), OVER(over_ipc), OVER(over_ipc_inline)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128]; /* NNG's ipc:// socket files */
    snprintf(cmd, sizeof cmd, "rm -f /tmp/grpo-stream-test-%d-*.ipc", (int)getpid());
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
