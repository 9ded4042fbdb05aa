/* The NNG transport in one process: ordered delivery with acknowledgements, the window as
 * backpressure, redelivery to a restarted trainer, resume from the spool after a publisher
 * restart, idempotent ids, staleness, end of stream, and weight updates (path and inline).
 *
 * `bridge_transport_test publish ARGS` is the C publisher of the multi-process integration test
 * (tests/bridge_integration.py): see publisher_main below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common_int.h"
#include "grpo/bridge.h"
#include "trainer_bridge/bridge_int.h"
#include "tests/bridge_test_util.h"

/* The deterministic batch of id k, stamped with a policy version. tests/bridge_consumer.py
 * checks the same formula. */
static grpo_batch *
make_batch(const char *run, int64_t k, int64_t version)
{
    size_t B = 2 + (size_t)(k % 3), T = 0;
    for (size_t i = 0; i < B; i++)
        T += (size_t)(3 + (k + (int64_t)i) % 4) + (size_t)(2 + (k * 7 + (int64_t)i) % 5);
    grpo_batch *b = NULL;
    if (grpo_batch_create(&b, run, B, T, GRPO_BATCH_HAS_VERSIONS) != GRPO_OK)
        return NULL;
    b->batch_id = k;
    b->step = k;
    b->policy_version = version;
    size_t t = 0;
    for (size_t i = 0; i < B; i++) {
        int32_t pl = (int32_t)(3 + (k + (int64_t)i) % 4),
                cl = (int32_t)(2 + (k * 7 + (int64_t)i) % 5);
        b->seq_offsets[i] = (int64_t)t;
        b->prompt_lens[i] = pl;
        b->group_ids[i] = k * 10 + (int64_t)i / 2;
        b->sample_idx[i] = (int32_t)(i % 2);
        b->rewards[i] = (float)(i % 2);
        b->advantages[i] = (float)i - (float)(B - 1) / 2.0f;
        b->policy_versions[i] = version;
        for (int32_t j = 0; j < pl + cl; j++, t++) {
            b->tokens[t] = (int32_t)((k * 1000 + (int64_t)i * 37 + j) % 50000);
            b->loss_mask[t] = j >= pl;
            b->logprobs[t] = j >= pl ? -0.01f * (float)(j + 1) : 0.0f;
        }
    }
    b->seq_offsets[B] = (int64_t)t;
    return b;
}

static char tmpdir[256];
static int url_seq;

static void
fresh_url(char *url, size_t cap)
{
    snprintf(url, cap, "ipc://%s/s%d.ipc", tmpdir, url_seq++);
}

static int
setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/grpo_bridge_test_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int
teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void
publish(grpo_bridge_publisher *p, int64_t k, int64_t version, int timeout_ms, grpo_err want)
{
    grpo_batch *b = make_batch("r1", k, version);
    assert_non_null(b);
    grpo_err err = grpo_bridge_publish(p, b, timeout_ms);
    if (err != want)
        fprintf(stderr, "publish %" PRId64 ": %d %s\n", k, err, grpo_error_last());
    assert_int_equal(err, want);
    grpo_batch_destroy(b);
}

static int64_t
receive(grpo_bridge_consumer *c)
{
    const void *bytes = NULL;
    size_t len = 0;
    int64_t id = -1;
    grpo_err err = grpo_bridge_consumer_next(c, &bytes, &len, &id, 5000);
    if (err != GRPO_OK)
        fprintf(stderr, "next: %s\n", grpo_error_last());
    assert_int_equal(err, GRPO_OK);
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
    grpo_batch *want = make_batch("r1", id, b->policy_version);
    assert_int_equal(b->batch_id, id);
    assert_int_equal(b->n_tok, want->n_tok);
    assert_memory_equal(b->tokens, want->tokens, want->n_tok * 4);
    grpo_batch_destroy(want);
    grpo_batch_destroy(b);
    return id;
}

static grpo_bridge_publisher *
start(const char *url, int window, const grpo_bridge_persist *persist)
{
    return start_publisher(url, window, persist, tmpdir);
}

static void
test_order_window_end(void **state)
{
    (void)state;
    char url[300];
    fresh_url(url, sizeof url);
    grpo_bridge_publisher *p = start(url, 3, NULL);
    grpo_bridge_consumer *c = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&c, url, "r1", 5000), GRPO_OK);
    for (int k = 0; k < 3; k++)
        publish(p, k, 0, 1000, GRPO_OK);
    /* window full: the fourth waits, then times out */
    publish(p, 3, 0, 100, GRPO_ETIMEOUT);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.unacked, 3);
    /* held-but-unacknowledged batches do not free the window */
    assert_int_equal(receive(c), 0);
    assert_int_equal(receive(c), 1);
    publish(p, 3, 0, 100, GRPO_ETIMEOUT);
    assert_int_equal(grpo_bridge_consumer_ack(c, 0, 1), GRPO_OK);
    publish(p, 3, 0, 1000, GRPO_OK);
    publish(p, 3, 0, 1000, GRPO_OK); /* same id again: accepted once */
    assert_int_equal(grpo_bridge_consumer_ack(c, 1, 0), GRPO_OK);
    assert_int_equal(receive(c), 2);
    assert_int_equal(grpo_bridge_consumer_ack(c, 2, 0), GRPO_OK);
    assert_int_equal(receive(c), 3);
    assert_int_equal(grpo_bridge_consumer_ack(c, 3, 0), GRPO_OK);
    grpo_bridge_finish(p);
    const void *bytes = NULL;
    size_t len = 0;
    int64_t id;
    assert_int_equal(grpo_bridge_consumer_next(c, &bytes, &len, &id, 5000), GRPO_ECANCELED);
    assert_int_equal(grpo_bridge_flush(p, 1000), GRPO_OK);
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.published, 4);
    assert_int_equal(st.acked, 4);
    assert_int_equal(st.unacked, 0);
    publish(p, 9, 0, 100, GRPO_ESTATE); /* after finish */
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

static void
test_redelivery_and_resume(void **state)
{
    (void)state;
    char url[300], dir[300];
    fresh_url(url, sizeof url);
    snprintf(dir, sizeof dir, "%s/spool", tmpdir);
    grpo_bridge_spool *sp = NULL;
    grpo_bridge_persist per;
    assert_int_equal(grpo_bridge_spool_open(&sp, dir), GRPO_OK);
    grpo_bridge_spool_persist(sp, &per);
    grpo_bridge_publisher *p = start(url, 8, &per);
    for (int k = 0; k < 5; k++)
        publish(p, k, 0, 1000, GRPO_OK);
    grpo_bridge_consumer *c = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&c, url, NULL, 5000), GRPO_OK);
    /* one request at a time, so the counts below are exact (a prefetched batch that a dying
     * consumer held would count as redelivered too; test_prefetch covers the prefetch) */
    grpo_bridge_consumer_set_prefetch(c, 0);
    assert_int_equal(receive(c), 0);
    assert_int_equal(receive(c), 1);
    assert_int_equal(grpo_bridge_consumer_ack(c, 0, 1), GRPO_OK);
    /* trainer "restarts" holding 1 unacknowledged: the new one gets 1 again */
    grpo_bridge_consumer_destroy(c);
    assert_int_equal(grpo_bridge_consumer_create(&c, url, "r1", 5000), GRPO_OK);
    grpo_bridge_consumer_set_prefetch(c, 0);
    assert_int_equal(receive(c), 1);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.redelivered, 1);
    assert_int_equal(st.handshakes, 2);
    assert_int_equal(grpo_bridge_consumer_ack(c, 1, 1), GRPO_OK);
    /* publisher restarts: 2, 3, 4 come back from the spool; 0 and 1 are known as acknowledged */
    grpo_bridge_publisher_destroy(p);
    assert_int_equal(grpo_bridge_spool_max_id(sp), 4);
    p = start(url, 8, &per);
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.unacked, 3);
    publish(p, 1, 0, 1000, GRPO_OK); /* already acknowledged: no-op */
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.unacked, 3);
    assert_int_equal(st.published, 0);
    for (int k = 2; k < 5; k++) { /* the old consumer reconnects by itself */
        assert_int_equal(receive(c), k);
        assert_int_equal(grpo_bridge_consumer_ack(c, k, 0), GRPO_OK);
    }
    grpo_bridge_finish(p);
    const void *bytes = NULL;
    size_t len = 0;
    int64_t id;
    assert_int_equal(grpo_bridge_consumer_next(c, &bytes, &len, &id, 5000), GRPO_ECANCELED);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
    /* nothing left unacknowledged in the spool */
    p = start(url, 8, &per);
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.unacked, 0);
    grpo_bridge_publisher_destroy(p);
    grpo_bridge_spool_close(sp);
}

static void
test_staleness(void **state)
{
    (void)state;
    char url[300];
    fresh_url(url, sizeof url);
    grpo_bridge_opts o;
    grpo_bridge_opts_default(&o);
    o.run_id = "r1";
    o.max_staleness = 1;
    grpo_bridge_publisher *p = NULL;
    assert_int_equal(grpo_bridge_publisher_create(&p, url, &o), GRPO_OK);
    grpo_bridge_set_policy_version(p, 5);
    publish(p, 0, 4, 1000, GRPO_OK);
    publish(p, 1, 3, 1000, GRPO_ESTATE);
    assert_non_null(strstr(grpo_error_last(), "max staleness"));
    grpo_bridge_publisher_destroy(p);
}

/* A tiny valid safetensors file with one F32 tensor of 4 values equal to v. */
static void
write_weights(const char *path, float v, int overlap)
{
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr,
                     overlap ? "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                               "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}"
                             : "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    uint8_t buf[256];
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, hdr, (size_t)n);
    float w[4] = {v, v, v, v};
    memcpy(buf + 8 + n, w, 16);
    assert_int_equal(grpo__write_file_atomic(path, buf, (size_t)(8 + n + 16)), GRPO_OK);
}

/* Over ipc:// the batches travel through the publisher's memfd slots (every reply a reference)
 * and arrive byte for byte as encoded; a consumer that turns it off gets the same bytes in the
 * messages; over tcp:// nothing is shared. Batches of 2 MB reuse the slots of acknowledged ones.
 * In messages, batches over the consumer's part size come in parts, put together exactly. */
static void
shared_run(const char *url, int shm, size_t chunk, int64_t n, int64_t *shared, int64_t *sent)
{
    grpo_bridge_publisher *p = start(url, 2, NULL);
    grpo_bridge_consumer *c = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&c, url, "r1", 5000), GRPO_OK);
    if (!shm)
        grpo_bridge_consumer_set_shm(c, 0);
    grpo_bridge_consumer_set_chunk(c, chunk);
    for (int64_t k = 0; k < n; k++) {
        grpo_batch *b = make_batch("r1", k, 0);
        if (k % 3 == 2) { /* a large one: its slot grows, later ones reuse the pages */
            grpo_batch *big = NULL;
            size_t T = (size_t)1 << 18;
            assert_int_equal(grpo_batch_create(&big, "r1", 1, T, 0), GRPO_OK);
            big->batch_id = k;
            big->seq_offsets[1] = (int64_t)T;
            for (size_t t = 0; t < T; t++)
                big->tokens[t] = (int32_t)(t * 2654435761u % 129280), big->loss_mask[t] = 1;
            grpo_batch_destroy(b);
            b = big;
        }
        void *want = NULL;
        size_t wlen = 0;
        assert_int_equal(grpo_batch_encode(b, &want, &wlen), GRPO_OK);
        assert_int_equal(grpo_bridge_publish(p, b, 5000), GRPO_OK);
        const void *got = NULL;
        size_t len = 0;
        int64_t id = -1;
        assert_int_equal(grpo_bridge_consumer_next(c, &got, &len, &id, 5000), GRPO_OK);
        assert_int_equal(id, k);
        assert_int_equal(len, wlen);
        assert_memory_equal(got, want, wlen);
        assert_int_equal(grpo_bridge_consumer_ack(c, id, k == n - 1), GRPO_OK);
        free(want);
        grpo_batch_destroy(b);
    }
    assert_int_equal(grpo_bridge_flush(p, 5000), GRPO_OK);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    *shared = st.shared;
    *sent = st.sent;
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

/* With batches queued ahead, each GET for the next batch goes out while this one is read (the
 * prefetch), and parts come two in flight: every batch still arrives once, in id order, byte for
 * byte, over shared memory, whole messages and parts, with the prefetch on and off. */
static void
prefetch_run(const char *url, int shm, size_t chunk, int prefetch)
{
    enum { N = 7 };
    grpo_bridge_publisher *p = start(url, N + 1, NULL);
    void *want[N];
    size_t wlen[N];
    for (int64_t k = 0; k < N; k++) {
        grpo_batch *b = NULL;
        size_t T = k % 2 ? (size_t)1 << 17 : 300; /* 1 MB ones (parts) among small ones */
        assert_int_equal(grpo_batch_create(&b, "r1", 1, T, 0), GRPO_OK);
        b->batch_id = k;
        b->seq_offsets[1] = (int64_t)T;
        for (size_t t = 0; t < T; t++)
            b->tokens[t] = (int32_t)((t + (size_t)k) * 2654435761u % 129280), b->loss_mask[t] = 1;
        assert_int_equal(grpo_batch_encode(b, &want[k], &wlen[k]), GRPO_OK);
        assert_int_equal(grpo_bridge_publish(p, b, 5000), GRPO_OK);
        grpo_batch_destroy(b);
    }
    grpo_bridge_consumer *c = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&c, url, "r1", 5000), GRPO_OK);
    grpo_bridge_consumer_set_shm(c, shm);
    grpo_bridge_consumer_set_chunk(c, chunk);
    grpo_bridge_consumer_set_prefetch(c, prefetch);
    for (int64_t k = 0; k < N; k++) {
        const void *got = NULL;
        size_t len = 0;
        int64_t id = -1;
        assert_int_equal(grpo_bridge_consumer_next(c, &got, &len, &id, 5000), GRPO_OK);
        assert_int_equal(id, k);
        assert_int_equal(len, wlen[k]);
        assert_memory_equal(got, want[k], wlen[k]);
        assert_int_equal(grpo_bridge_consumer_ack(c, id, 0), GRPO_OK);
        free(want[k]);
    }
    grpo_bridge_finish(p);
    const void *bytes = NULL;
    size_t len = 0;
    int64_t id;
    assert_int_equal(grpo_bridge_consumer_next(c, &bytes, &len, &id, 5000), GRPO_ECANCELED);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.sent, N);
    assert_int_equal(st.redelivered, 0);
    assert_int_equal(st.unacked, 0);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

static void
test_prefetch(void **state)
{
    (void)state;
    char url[300];
    for (int prefetch = 1; prefetch >= 0; prefetch--) {
        fresh_url(url, sizeof url);
        prefetch_run(url, 1, 0, prefetch); /* ipc://: memfd references */
        fresh_url(url, sizeof url);
        prefetch_run(url, 0, 0, prefetch); /* whole messages */
        fresh_url(url, sizeof url);
        prefetch_run(url, 0, 4096, prefetch); /* parts */
        fresh_url(url, sizeof url);
        prefetch_run(url, 0, 1000, prefetch); /* parts that do not divide the batch */
    }
}

static void
test_shared_memory(void **state)
{
    (void)state;
    char url[300];
    int64_t shared = -1, sent = -1;
    fresh_url(url, sizeof url);
    shared_run(url, 1, 1 << 20, 9, &shared, &sent);
    assert_int_equal(sent, 9);
    assert_int_equal(shared, 9);
    fresh_url(url, sizeof url);
    shared_run(url, 0, 1 << 20, 4, &shared, &sent); /* the 2 MB one in two parts */
    assert_int_equal(sent, 4);
    assert_int_equal(shared, 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", free_port());
    shared_run(url, 1, 1 << 20, 4, &shared, &sent);
    assert_int_equal(sent, 4);
    assert_int_equal(shared, 0);
    /* parts of 4096 (and 1000: a size that divides nothing), and whole messages */
    size_t chunks[3] = {4096, 1000, 0};
    for (int i = 0; i < 3; i++) {
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", free_port());
        shared_run(url, 0, chunks[i], 4, &shared, &sent);
        assert_int_equal(sent, 4);
    }
}

/* The reader of a slot refuses what it must: a rewritten slot (ESTATE: ask again), a wrong
 * token or an fd that is not there (EIO: fall back to messages), a malformed reference or one
 * over the size bound (EFORMAT); a reply without a reference reads nothing. The same through
 * pread and through mappings kept across reads (a slot grown past its mapping is mapped again). */
static void
shm_refusals(grpo_bridge__shm_maps *maps)
{
    grpo_bridge__shm_slot s;
    assert_int_equal(grpo_bridge__shm_open(&s), GRPO_OK);
    const char a[] = "first payload", b2[] = "the second, longer payload";
    assert_int_equal(grpo_bridge__shm_write(&s, a, sizeof a), GRPO_OK);
    char js[256], old[256];
    grpo_bridge__shm_ref(&s, js, sizeof js);
    grpo_buf out = {0};
    int ref = -1;
    assert_int_equal(grpo_bridge__shm_read(js, strlen(js), 0, maps, &out, &ref), GRPO_OK);
    assert_int_equal(ref, 1);
    assert_int_equal(out.len, sizeof a);
    assert_memory_equal(out.data, a, sizeof a);
    snprintf(old, sizeof old, "%s", js);
    assert_int_equal(grpo_bridge__shm_write(&s, b2, sizeof b2), GRPO_OK);
    assert_int_equal(grpo_bridge__shm_read(old, strlen(old), 0, maps, &out, &ref), GRPO_ESTATE);
    grpo_bridge__shm_ref(&s, js, sizeof js);
    assert_int_equal(grpo_bridge__shm_read(js, strlen(js), 0, maps, &out, &ref), GRPO_OK);
    assert_memory_equal(out.data, b2, sizeof b2);
    assert_int_equal(grpo_bridge__shm_read(js, strlen(js), 8, maps, &out, &ref), GRPO_EFORMAT);
    char *tok = strstr(js, "\"token\":\"") + 9;
    tok[0] = tok[0] == '0' ? '1' : '0'; /* another slot's token */
    assert_int_equal(grpo_bridge__shm_read(js, strlen(js), 0, maps, &out, &ref), GRPO_EIO);
    char gone[256];
    snprintf(gone, sizeof gone,
             "{\"shm\":{\"pid\":%d,\"fd\":999999,\"token\":\"%032d\",\"gen\":2,\"len\":4}}",
             (int)getpid(), 0);
    assert_int_equal(grpo_bridge__shm_read(gone, strlen(gone), 0, maps, &out, &ref), GRPO_EIO);
    const char *bad[] = {
        "{\"shm\":{}}",
        "{\"shm\":{\"pid\":1,\"fd\":3,\"token\":\"zz\",\"gen\":2,"
        "\"len\":4}}",
        "{\"shm\":{\"pid\":-4,\"fd\":3,\"token\":\"00000000000000000000000000000000\","
        "\"gen\":2,\"len\":4}}"};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(grpo_bridge__shm_read(bad[i], strlen(bad[i]), 0, maps, &out, &ref),
                         GRPO_EFORMAT);
    assert_int_equal(grpo_bridge__shm_read("{}", 2, 0, maps, &out, &ref), GRPO_OK);
    assert_int_equal(ref, 0);
    assert_int_equal(grpo_bridge__shm_read(NULL, 0, 0, maps, &out, &ref), GRPO_OK);
    assert_int_equal(ref, 0);
    static char big[10000]; /* past the slot's first page: it grows, and is mapped again */
    memset(big, 7, sizeof big);
    assert_int_equal(grpo_bridge__shm_write(&s, big, sizeof big), GRPO_OK);
    grpo_bridge__shm_ref(&s, js, sizeof js);
    assert_int_equal(grpo_bridge__shm_read(js, strlen(js), 0, maps, &out, &ref), GRPO_OK);
    assert_int_equal(out.len, sizeof big);
    assert_memory_equal(out.data, big, sizeof big);
    grpo__buf_fini(&out);
    grpo_bridge__shm_close(&s);
}

static void
test_shm_refusals(void **state)
{
    (void)state;
    shm_refusals(NULL); /* pread */
    grpo_bridge__shm_maps maps = {0};
    shm_refusals(&maps); /* copied out of the slots mapped once (they are sealed) */
    int used = 0;
    for (int i = 0; i < GRPO_BRIDGE__SHM_MAPS; i++)
        used += maps.m[i].map != NULL;
    assert_true(used >= 1);
    grpo_bridge__shm_maps_fini(&maps);
}

static void
test_weights(void **state)
{
    (void)state;
    char url[300], path[300], bad[300], hex[65];
    fresh_url(url, sizeof url);
    grpo_bridge_publisher *p = start(url, 4, NULL);
    grpo_bridge_consumer *c = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&c, url, NULL, 5000), GRPO_OK);
    grpo_weights_update u;
    assert_int_equal(grpo_bridge_poll_weights(p, &u), 0);
    snprintf(path, sizeof path, "%s/w1.safetensors", tmpdir);
    write_weights(path, 1.0f, 0);
    assert_int_equal(grpo_sha256_file(path, hex), GRPO_OK);
    assert_int_equal(grpo_bridge_consumer_send_weights_path(c, 1, path, hex), GRPO_OK);
    assert_int_equal(grpo_bridge_poll_weights(p, &u), 1);
    assert_int_equal(u.version, 1);
    assert_string_equal(u.sha256, hex);
    assert_string_equal(u.path, path);
    assert_int_equal(grpo_bridge_poll_weights(p, &u), 0);
    /* the same version again (a resent request) is acknowledged without a new update */
    assert_int_equal(grpo_bridge_consumer_send_weights_path(c, 1, path, hex), GRPO_OK);
    assert_int_equal(grpo_bridge_poll_weights(p, &u), 0);
    /* wrong hash and overlapping tensors are refused with a message */
    char zeros[65];
    memset(zeros, '0', 64);
    zeros[64] = '\0';
    assert_int_equal(grpo_bridge_consumer_send_weights_path(c, 2, path, zeros), GRPO_ESTATE);
    assert_non_null(strstr(grpo_error_last(), "sha256"));
    snprintf(bad, sizeof bad, "%s/bad.safetensors", tmpdir);
    write_weights(bad, 2.0f, 1);
    assert_int_equal(grpo_sha256_file(bad, hex), GRPO_OK);
    assert_int_equal(grpo_bridge_consumer_send_weights_path(c, 2, bad, hex), GRPO_ESTATE);
    assert_non_null(strstr(grpo_error_last(), "overlap"));
    assert_int_equal(grpo_bridge_weights_verify(bad, NULL, NULL), GRPO_EFORMAT);
    /* inline, in 7-byte chunks */
    write_weights(path, 3.0f, 0);
    assert_int_equal(grpo_bridge_consumer_send_weights_inline(c, 3, path, 7), GRPO_OK);
    assert_int_equal(grpo_bridge_poll_weights(p, &u), 1);
    assert_int_equal(u.version, 3);
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(grpo__read_file(path, 0, &a, &la), GRPO_OK);
    assert_int_equal(grpo__read_file(u.path, 0, &b, &lb), GRPO_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    grpo_bridge_stats st;
    grpo_bridge_publisher_stats(p, &st);
    assert_int_equal(st.weights_version, 3);
    grpo_bridge_consumer_destroy(c);
    grpo_bridge_publisher_destroy(p);
}

/* ---- the integration test's publisher --------------------------------------------------------
 * publish URL SPOOL_DIR N WINDOW WEIGHTS_DIR: publishes batches 0..N-1 (resuming after the
 * largest id in the spool), loads every weight update it is sent (checks the tensor "w" holds
 * the version) and stamps later batches with that version; then finishes, waits for every
 * acknowledgement and exits 0. */
static int64_t
load_weights(const grpo_weights_update *u)
{
    char *buf = NULL;
    size_t len = 0;
    if (grpo__read_file(u->path, 0, &buf, &len) != GRPO_OK || len < 12)
        return -1;
    float w;
    memcpy(&w, buf + len - 4, 4); /* the last value of the only tensor */
    free(buf);
    return (int64_t)w == u->version ? u->version : -1;
}

static int
publisher_main(int argc, char **argv)
{
    if (argc != 7)
        return 2;
    const char *url = argv[2];
    int64_t n = atoll(argv[4]), version = 0;
    grpo_bridge_spool *sp = NULL;
    grpo_bridge_persist per;
    grpo_bridge_opts o;
    grpo_bridge_publisher *p = NULL;
    if (grpo_bridge_spool_open(&sp, argv[3]) != GRPO_OK)
        goto fail;
    grpo_bridge_spool_persist(sp, &per);
    grpo_bridge_opts_default(&o);
    o.run_id = "integration";
    o.window = atoi(argv[5]);
    o.persist = &per;
    o.weights_dir = argv[6];
    o.poll_ms = 100;
    int64_t next = grpo_bridge_spool_max_id(sp) + 1;
    if (grpo_bridge_publisher_create(&p, url, &o) != GRPO_OK)
        goto fail;
    /* a restarted publisher resumes the version it had: the newest weights file it kept */
    char vpath[512];
    snprintf(vpath, sizeof vpath, "%s/loaded_version", argv[6]);
    char *vs = NULL;
    size_t vl = 0;
    if (grpo__read_file(vpath, 0, &vs, &vl) == GRPO_OK)
        version = atoll(vs);
    free(vs);
    fprintf(stderr, "publisher: start at %" PRId64 ", version %" PRId64 "\n", next, version);
    for (int64_t k = next; k < n; k++) {
        grpo_weights_update u;
        if (grpo_bridge_poll_weights(p, &u) && load_weights(&u) == u.version) {
            char s[32];
            int sl = snprintf(s, sizeof s, "%" PRId64, u.version);
            version = u.version;
            grpo_bridge_set_policy_version(p, version);
            grpo__write_file_atomic(vpath, s, (size_t)sl);
            fprintf(stderr, "publisher: loaded weights v%" PRId64 " before batch %" PRId64 "\n",
                    version, k);
        }
        grpo_batch *b = make_batch("integration", k, version);
        grpo_err err = b ? grpo_bridge_publish(p, b, -1) : GRPO_ENOMEM;
        grpo_batch_destroy(b);
        if (err != GRPO_OK)
            goto fail;
    }
    grpo_bridge_finish(p);
    if (grpo_bridge_flush(p, -1) != GRPO_OK)
        goto fail;
    grpo_bridge_publisher_destroy(p);
    grpo_bridge_spool_close(sp);
    return 0;
fail:
    fprintf(stderr, "publisher: %s\n", grpo_error_last());
    grpo_bridge_publisher_destroy(p);
    grpo_bridge_spool_close(sp);
    return 1;
}

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "publish") == 0)
        return publisher_main(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_window_end), cmocka_unit_test(test_redelivery_and_resume),
        cmocka_unit_test(test_staleness),        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_shared_memory),    cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_shm_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
