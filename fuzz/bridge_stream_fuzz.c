/* libFuzzer target: the publisher's end of the bridge stream (trainer_bridge/stream.c, and the
 * GET/ACK handling of publisher.c behind it) on arbitrary bytes from a trainer that knows the
 * token. One publisher (tcp://127.0.0.1, poll_ms 0, a few batches kept queued) serves the whole
 * run; each input is written on a fresh stream connection, whose write side is then shut.
 * Invariants beyond "no crash, no leak": every reply is one whole message that
 * grpo_bridge__msg_parse accepts, of a reply type, and the publisher ends the conversation (EOF)
 * within 3 s of the input's end, so no input can hold one of its threads. Seeds:
 * fuzz/seeds/bridge_stream_fuzz (a GET, an ACK, a GET with JSON options, framed). */
#include "common/common_int.h"
#include "grpo/bridge.h"
#include "trainer_bridge/bridge_int.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static grpo_bridge_publisher *pub;
static char url[64], token[33];
static int port;
static int64_t next_id;

/* The stream READY announces, from a HELLO over NNG. */
static void
announced(void)
{
    nng_socket s;
    nng_msg *m = NULL;
    uint8_t hdr[GRPB_HDR];
    grpb_msg r;
    grpo_bridge__msg_header(hdr, GRPB_HELLO, 0, 0, 0);
    if (nng_req0_open(&s) != 0 || nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000) != 0 ||
        nng_dial(s, url, NULL, 0) != 0 || nng_send(s, hdr, sizeof hdr, 0) != 0 ||
        nng_recvmsg(s, &m, 0) != 0 ||
        grpo_bridge__msg_parse(nng_msg_body(m), nng_msg_len(m), &r) != GRPO_OK)
        abort();
    cJSON *j = cJSON_ParseWithLength(r.json, r.json_len);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stream");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(st, "port");
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(st, "token");
    if (!cJSON_IsNumber(pt) || !cJSON_IsString(tk))
        abort();
    port = (int)pt->valuedouble;
    snprintf(token, sizeof token, "%s", tk->valuestring);
    cJSON_Delete(j);
    nng_msg_free(m);
    nng_close(s);
}

/* Keeps a few small batches queued, so that GETs find some. */
static void
refill(void)
{
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(pub, &st);
    for (size_t k = st.unacked; k < 4; k++) {
        grpo_batch *b = NULL;
        if (grpo_batch_create(&b, "fuzz", 1, 8, 0) != GRPO_OK)
            abort();
        b->batch_id = next_id++;
        b->seq_offsets[1] = 8;
        for (int t = 0; t < 8; t++)
            b->tokens[t] = t, b->loss_mask[t] = t >= 4;
        b->prompt_lens[0] = 4;
        if (grpo_bridge_publish(pub, b, 5000) != GRPO_OK)
            abort();
        grpo_batch_destroy(b);
    }
}

static void
setup(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        abort();
    close(fd);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
    grpo_bridge_opts o;
    grpo_bridge_opts_default(&o);
    o.run_id = "fuzz";
    o.window = 64;
    o.poll_ms = 0; /* a GET is answered at once */
    if (grpo_bridge_publisher_create(&pub, url, &o) != GRPO_OK)
        abort();
    announced();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (pub == NULL)
        setup();
    refill();
    grpo_bridge__stream_in in;
    if (grpo_bridge__stream_connect(&in, url, port, NULL, token, 3000, 3000) != GRPO_OK)
        abort(); /* the listener must keep admitting trainers */
    size_t put = 0;
    while (put < size) {
        ssize_t w = send(in.fd, data + put, size - put, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the publisher ended the conversation early: allowed */
        put += (size_t)w;
    }
    shutdown(in.fd, SHUT_WR);
    double t0 = grpo_now();
    grpo_buf msg = {0};
    for (;;) {
        int r = grpo_bridge__stream_wait(&in, 3000);
        if (r == 0 || grpo_now() - t0 > 3.0)
            abort(); /* the conversation did not end */
        if (r < 0 || grpo_bridge__stream_recv(&in, &msg) != GRPO_OK)
            break; /* EOF (or a reset): the end */
        grpb_msg m;
        if (grpo_bridge__msg_parse(msg.data, msg.len, &m) != GRPO_OK || m.type < GRPB_READY ||
            m.type > GRPB_PARTDATA)
            abort();
    }
    grpo__buf_fini(&msg);
    grpo_bridge__stream_close(&in);
    return 0;
}
