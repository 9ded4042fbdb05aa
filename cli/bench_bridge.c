/* `grpo bench bridge`: batches/s and GB/s through the trainer bridge (publisher -> NNG -> C
 * consumer, with acknowledgements and the window) over ipc:// and tcp://, beside a plain loopback
 * socket carrying the same bytes with a one-byte acknowledgement per batch, in the same run. */
#include "cli/cli.h"
#include "grpo/bridge.h"

#include <inttypes.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct {
    const char *url;
    int in_messages; /* ipc-msg, tcp-msg: the batches in NNG messages (no shared memory, no
                      * stream) */
    int prefetch;    /* the consumer's early GET (grpo_bridge_consumer_set_prefetch) */
    int count;
    int64_t bytes;
    grpo_err err;
    char msg[512];
} consumer_arg;

static void *
consume(void *arg)
{
    consumer_arg *a = arg;
    grpo_bridge_consumer *c = NULL;
    a->err = grpo_bridge_consumer_create(&c, a->url, "bench", 10000);
    if (a->err == GRPO_OK && a->in_messages) {
        grpo_bridge_consumer_set_shm(c, 0);
        grpo_bridge_consumer_set_stream(c, 0);
    }
    if (a->err == GRPO_OK)
        grpo_bridge_consumer_set_prefetch(c, a->prefetch);
    for (int i = 0; i < a->count && a->err == GRPO_OK; i++) {
        const void *bytes = NULL;
        size_t len = 0;
        int64_t id;
        if ((a->err = grpo_bridge_consumer_next(c, &bytes, &len, &id, 60000)) == GRPO_OK)
            a->err = grpo_bridge_consumer_ack(c, id, i == a->count - 1);
        a->bytes += (int64_t)len;
    }
    if (a->err != GRPO_OK)
        snprintf(a->msg, sizeof a->msg, "%s", grpo_error_last());
    grpo_bridge_consumer_destroy(c);
    return NULL;
}

/* A batch whose encoding is about `size` bytes, shaped like a GRPO group with DeepSeek-V3 routes:
 * 64 samples of one 64-token prompt (its routes carried once), completions long enough for the
 * size, each token's 58 MoE layers x 8 expert ids as uint8 (464 B) beside its token, mask and
 * logprob (9 B). */
#define B_SEQ 64
#define B_PROMPT 64
#define B_LAYERS 58
#define B_K 8
static grpo_batch *
sized_batch(uint64_t size)
{
    const uint64_t per = 9 + B_LAYERS * B_K, fixed = (uint64_t)B_PROMPT * (per + 4) * 2;
    size_t C = size > fixed ? (size_t)((size - fixed) / (B_SEQ * per)) : 0;
    C = C < 2 ? 2 : C;
    size_t T = (size_t)B_SEQ * (B_PROMPT + C), nc = (size_t)B_SEQ * (C - 1);
    grpo_batch *b = NULL;
    if (grpo_batch_create(&b, "bench", B_SEQ, T, 0) != GRPO_OK)
        return NULL;
    if (grpo_batch_set_routes(b, 256, B_LAYERS, B_K, B_PROMPT, nc) != GRPO_OK) {
        grpo_batch_destroy(b);
        return NULL;
    }
    uint8_t *rp = b->route_prompt, *rc = b->route_completion;
    for (size_t t = 0; t < (size_t)B_PROMPT + nc; t++) /* k distinct ids per token and layer */
        for (int l = 0; l < B_LAYERS; l++)
            for (int k = 0; k < B_K; k++) {
                uint8_t id = (uint8_t)((t * 7 + (size_t)l * 13) % 248 + (size_t)k);
                if (t < B_PROMPT)
                    rp[(t * B_LAYERS + (size_t)l) * B_K + (size_t)k] = id;
                else
                    rc[((t - B_PROMPT) * B_LAYERS + (size_t)l) * B_K + (size_t)k] = id;
            }
    size_t t = 0;
    for (size_t i = 0; i < B_SEQ; i++) {
        b->seq_offsets[i] = (int64_t)t;
        b->prompt_lens[i] = B_PROMPT;
        b->route_prompt_offsets[i] = 0; /* one group: every sample shares the prompt */
        b->group_ids[i] = 0;
        b->sample_idx[i] = (int32_t)i;
        for (size_t j = 0; j < B_PROMPT + C; j++, t++) {
            size_t v = j < B_PROMPT ? j : t;
            b->tokens[t] = (int32_t)((v * 2654435761u) % 129280);
            b->loss_mask[t] = j >= B_PROMPT;
            b->logprobs[t] = j >= B_PROMPT ? -0.5f : 0.0f;
        }
    }
    b->seq_offsets[B_SEQ] = (int64_t)t;
    return b;
}

/* A publisher of run "bench" with the given window at url; NULL when it cannot listen. */
static grpo_bridge_publisher *
bench_publisher(const char *url, int window)
{
    grpo_bridge_opts o;
    grpo_bridge_opts_default(&o);
    o.run_id = "bench";
    o.window = window;
    grpo_bridge_publisher *p = NULL;
    return grpo_bridge_publisher_create(&p, url, &o) == GRPO_OK ? p : NULL;
}

/* Publishes b as batches 0 .. n-1 (each within publish_ms), then waits up to flush_ms for
 * every acknowledgement. */
static grpo_err
publish_all(grpo_bridge_publisher *p, grpo_batch *b, int n, int publish_ms, int flush_ms)
{
    grpo_err err = GRPO_OK;
    for (int i = 0; i < n && err == GRPO_OK; i++) {
        b->batch_id = i;
        err = grpo_bridge_publish(p, b, publish_ms);
    }
    return err == GRPO_OK ? grpo_bridge_flush(p, flush_ms) : err;
}

/* Bridge: publish `count` batches (encode + store in memory + send), consumer acks each. */
static int
run_bridge(const char *url, int in_messages, int prefetch, grpo_batch *b, int count, int window,
           double *secs, size_t *len)
{
    grpo_bridge_publisher *p = bench_publisher(url, window);
    if (p == NULL)
        return -1;
    consumer_arg ca = {url, in_messages, prefetch, count, 0, GRPO_OK, ""};
    pthread_t th;
    double t0 = grpo_now();
    pthread_create(&th, NULL, consume, &ca);
    grpo_err err = publish_all(p, b, count, 60000, 120000);
    pthread_join(th, NULL);
    *secs = grpo_now() - t0;
    *len = count ? (size_t)(ca.bytes / count) : 0;
    grpo_bridge_publisher_destroy(p);
    if (err == GRPO_OK && ca.err != GRPO_OK) {
        fprintf(stderr, "consumer: %s\n", ca.msg);
        err = ca.err;
    }
    return err == GRPO_OK ? 0 : -1;
}

/* ---- plain socket: length-prefixed bytes one way, one byte back per batch ----------------------
 */

typedef struct {
    int fd;
    int count;
    size_t len;
} sink_arg;

static int
read_full(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int
write_full(int fd, const void *buf, size_t n)
{
    for (size_t put = 0; put < n;) {
        ssize_t r = write(fd, (const char *)buf + put, n - put);
        if (r <= 0)
            return -1;
        put += (size_t)r;
    }
    return 0;
}

static void *
sink(void *arg)
{
    sink_arg *a = arg;
    char *buf = malloc(a->len);
    for (int i = 0; buf && i < a->count; i++) {
        uint64_t n;
        if (read_full(a->fd, &n, 8) != 0 || n > a->len || read_full(a->fd, buf, n) != 0 ||
            write_full(a->fd, "a", 1) != 0)
            break;
    }
    free(buf);
    return NULL;
}

static int
plain_pair(int unix_domain, int fds[2])
{
    if (unix_domain)
        return socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fds[0], (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    fds[1] = accept(ls, NULL, NULL);
    close(ls);
    setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fds[1] < 0 ? -1 : 0;
}

/* The same bytes, the same count, one acknowledgement per batch, window of 1 (a bound). */
static int
run_plain(int unix_domain, const void *bytes, size_t len, int count, double *secs)
{
    int fds[2];
    if (plain_pair(unix_domain, fds) != 0)
        return -1;
    sink_arg sa = {fds[1], count, len};
    pthread_t th;
    double t0 = grpo_now();
    pthread_create(&th, NULL, sink, &sa);
    int rc = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        uint64_t n = len;
        char ack;
        rc = write_full(fds[0], &n, 8) || write_full(fds[0], bytes, len) ||
             read_full(fds[0], &ack, 1);
    }
    pthread_join(th, NULL);
    *secs = grpo_now() - t0;
    close(fds[0]);
    close(fds[1]);
    return rc;
}

/* CPU seconds this process has used so far, every thread (NNG's included). */
static double
cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
}

/* 1 when the comma-separated list holds name exactly. */
static int
list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

static void
help(void)
{
    printf(
        "usage: grpo bench bridge [--sizes 1M,64M] [--seconds S] [--window K] [--transports "
        "ipc,tcp]\n                         [--prefetch on|off|both]\n\n"
        "Publishes batches through the trainer bridge (encode, queue, requests and replies,\n"
        "decode-free C consumer that acknowledges each batch) and prints batches/s and GB/s,\n"
        "beside a plain loopback socket (unix socketpair for ipc, TCP for tcp) moving the same\n"
        "bytes with a one-byte acknowledgement per batch, measured in the same run; also the CPU\n"
        "time per batch of each (all threads), steadier than wall time on a shared machine. Each\n"
        "batch is a GRPO group with DeepSeek-V3 routes: 64 samples of one 64-token prompt, 464\n"
        "bytes of expert ids per token.\n\n"
        "  --sizes LIST        batch sizes (bytes, K/M/G suffixes), default 1M,64M\n"
        "  --seconds S         about this long per row (batch count from a first estimate), "
        "default 2\n"
        "  --window K          the bridge's window of unacknowledged batches, default 4\n"
        "  --transports LIST   ipc, ipc-msg, tcp and/or tcp-msg, default ipc,tcp (ipc: the\n"
        "                      trainer reads each batch from the publisher's memory; ipc-msg:\n"
        "                      over ipc:// in NNG messages, as a trainer that cannot open it;\n"
        "                      tcp: requests and batches on the publisher's plain TCP stream;\n"
        "                      tcp-msg: over tcp:// in NNG messages, as a trainer that cannot\n"
        "                      reach the stream's port)\n"
        "  --prefetch MODE     on (default): the consumer sends the GET for the next batch while\n"
        "                      it reads this one; off: one request at a time; both: each row\n"
        "                      twice, the second (marked /1req) without, in the same run\n"
        "  --serve URL         only publish, at URL, --batches N batches of the first size (run\n"
        "                      id \"bench\") for a consumer in another process (bench/\n"
        "                      bridge_python.py), then end the stream once all are acknowledged\n");
}

#define N_TRANSPORTS 4
static const char *const transport_names[N_TRANSPORTS] = {"ipc", "ipc-msg", "tcp", "tcp-msg"};

/* One row of the table: the bridge over transport t (transport_names) for about `seconds`, then
 * the plain socket with the same count of the same bytes. */
static int
bench_row(int t, int prefetch, grpo_batch *b, const void *bytes, size_t len, double seconds,
          int window)
{
    char tr[32];
    snprintf(tr, sizeof tr, "%s%s", transport_names[t], prefetch ? "" : "/1req");
    int ipc = t < 2, in_messages = t == 1 || t == 3;
    char url[256];
    if (ipc)
        snprintf(url, sizeof url, "ipc:///tmp/grpo-bench-bridge-%d.ipc", (int)getpid());
    else
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
    /* a short first run sizes the count for about `seconds` */
    double secs;
    size_t got;
    if (run_bridge(url, in_messages, prefetch, b, 3, window, &secs, &got) != 0)
        return cli_fail("bench bridge");
    int count = (int)(seconds / (secs / 3));
    count = count < 5 ? 5 : count > 20000 ? 20000 : count;
    double c0 = cpu_now();
    if (run_bridge(url, in_messages, prefetch, b, count, window, &secs, &got) != 0)
        return cli_fail("bench bridge");
    double psecs, c1 = cpu_now();
    if (run_plain(ipc, bytes, len, count, &psecs) != 0) {
        fprintf(stderr, "grpo bench bridge: plain socket failed: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    double gbs = (double)len * count / secs / 1e9, pgbs = (double)len * count / psecs / 1e9;
    double cb = (c1 - c0) * 1e3 / count, cp = (cpu_now() - c1) * 1e3 / count;
    printf("%-11s %8.1fM %8d %11.1f %9.3f %13.3f %9.2f %10.2f %10.2f\n", tr,
           (double)len / (1 << 20), count, count / secs, gbs, pgbs, gbs / pgbs, cb, cp);
    fflush(stdout);
    return CLI_OK;
}

/* --serve URL: a publisher of n batches of the given size (run id "bench") for a consumer in
 * another process (bench/bridge_python.py): it publishes them, waits for every acknowledgement
 * and ends the stream. */
static int
serve_only(const char *url, uint64_t size, int n, int window)
{
    grpo_batch *b = sized_batch(size);
    grpo_bridge_publisher *p = b ? bench_publisher(url, window) : NULL;
    if (p == NULL) {
        grpo_batch_destroy(b);
        return cli_fail("bench bridge --serve");
    }
    double t0 = grpo_now();
    grpo_err err = publish_all(p, b, n, 600000, 600000);
    grpo_bridge_finish(p);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    fprintf(stderr, "served %d batches in %.2f s (%" PRId64 " on streams, %" PRId64 " shared)\n", n,
            grpo_now() - t0, st.streamed, st.shared);
    grpo_bridge_publisher_destroy(p);
    grpo_batch_destroy(b);
    return err == GRPO_OK ? CLI_OK : cli_fail("bench bridge --serve");
}

typedef struct {
    const char *sizes, *transports, *prefetch, *serve;
    double seconds;
    int window, n_serve;
} bridge_opts;

/* The options (CLI_OK), or a usage error's status. */
static int
parse_opts(int argc, char **argv, bridge_opts *o)
{
    *o = (bridge_opts){"1M,64M", "ipc,tcp", "on", NULL, 2, 4, 0};
    for (int i = 1; i < argc; i++) {
        const char *known[] = {"--sizes",    "--seconds", "--window", "--transports",
                               "--prefetch", "--serve",   "--batches"};
        bool ok = false;
        for (size_t k = 0; k < 7; k++)
            ok = ok || strcmp(argv[i], known[k]) == 0;
        if (!ok)
            return cli_usage("bench bridge", "unknown option \"%s\"", argv[i]);
        if (i + 1 >= argc)
            return cli_usage("bench bridge", "%s needs a value", argv[i]);
        if (strcmp(argv[i], "--sizes") == 0)
            o->sizes = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0)
            o->seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--window") == 0)
            o->window = atoi(argv[++i]);
        else if (strcmp(argv[i], "--prefetch") == 0)
            o->prefetch = argv[++i];
        else if (strcmp(argv[i], "--serve") == 0)
            o->serve = argv[++i];
        else if (strcmp(argv[i], "--batches") == 0)
            o->n_serve = atoi(argv[++i]);
        else
            o->transports = argv[++i];
    }
    if (o->seconds <= 0 || o->window < 1)
        return cli_usage("bench bridge", "--seconds must be > 0 and --window >= 1");
    if (strcmp(o->prefetch, "on") != 0 && strcmp(o->prefetch, "off") != 0 &&
        strcmp(o->prefetch, "both"))
        return cli_usage("bench bridge", "--prefetch is on, off or both, not \"%s\"", o->prefetch);
    char trs[256];
    snprintf(trs, sizeof trs, "%s", o->transports);
    for (char *save = NULL, *t = strtok_r(trs, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcmp(t, "ipc") != 0 && strcmp(t, "ipc-msg") != 0 && strcmp(t, "tcp") != 0 &&
            strcmp(t, "tcp-msg") != 0)
            return cli_usage("bench bridge",
                             "--transports: unknown transport \"%s\" (ipc, ipc-msg, tcp, "
                             "tcp-msg)",
                             t);
    char check[256];
    snprintf(check, sizeof check, "%s", o->sizes);
    for (char *save = NULL, *s = strtok_r(check, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (cli_parse_size(s, &v) != 0 || v < 64)
            return cli_usage("bench bridge", "bad size \"%s\"", s);
    }
    if (o->serve != NULL && o->n_serve < 1)
        return cli_usage("bench bridge", "--serve needs --batches N >= 1");
    return CLI_OK;
}

int
grpo_bench_bridge(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        help();
        return CLI_OK;
    }
    bridge_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc != CLI_OK)
        return rc;
    if (o.serve != NULL) { /* the first size */
        uint64_t size;
        char first[64];
        snprintf(first, sizeof first, "%.*s", (int)strcspn(o.sizes, ","), o.sizes);
        if (cli_parse_size(first, &size) != 0)
            return cli_usage("bench bridge", "bad size \"%s\"", first);
        return serve_only(o.serve, size, o.n_serve, o.window);
    }
    int pf_on = strcmp(o.prefetch, "off") != 0, pf_off = strcmp(o.prefetch, "on") != 0;
    printf("%-11s %9s %8s %11s %9s %13s %9s %10s %10s\n", "transport", "batch", "batches",
           "batches/s", "GB/s", "plain GB/s", "bridge/plain", "cpu ms/b", "plain cpu");
    char sz_list[256];
    snprintf(sz_list, sizeof sz_list, "%s", o.sizes);
    for (char *save = NULL, *s = strtok_r(sz_list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        uint64_t size;
        if (cli_parse_size(s, &size) != 0)
            return cli_usage("bench bridge", "bad size \"%s\"", s);
        grpo_batch *b = sized_batch(size);
        void *bytes = NULL;
        size_t len = 0;
        if (b == NULL || grpo_batch_encode(b, &bytes, &len) != GRPO_OK)
            return cli_fail("bench bridge");
        for (int t = 0; t < N_TRANSPORTS && rc == CLI_OK; t++)
            for (int pf = 1; pf >= 0 && rc == CLI_OK; pf--)
                if (list_has(o.transports, transport_names[t]) && (pf ? pf_on : pf_off))
                    rc = bench_row(t, pf, b, bytes, len, o.seconds, o.window);
        free(bytes);
        grpo_batch_destroy(b);
        if (rc != CLI_OK)
            return rc;
    }
    return CLI_OK;
}
