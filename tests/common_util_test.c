/* common/: error messages, SHA-256 against FIPS 180-4 vectors, arena, deterministic parallel-for,
 * JSON helpers and UTF-8 validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/json.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void
test_error_message(void **state)
{
    (void)state;
    grpo_error_clear();
    assert_string_equal(grpo_error_last(), "");
    grpo_err e = grpo__fail(GRPO_EFORMAT, "%s: \"%s\" is %d", "cfg.json", "k", 3);
    assert_int_equal(e, GRPO_EFORMAT);
    assert_string_equal(grpo_error_last(), "cfg.json: \"k\" is 3");
    assert_string_equal(grpo_err_name(GRPO_EFORMAT), "EFORMAT");
    assert_string_equal(grpo_err_name(GRPO_OK), "OK");
    assert_string_equal(grpo_err_name((grpo_err)-999), "EUNKNOWN");
}

static void
hex_of(const char *msg, size_t n, char out[65])
{
    grpo_sha256_hex(msg, n, out);
}

static void
test_sha256_vectors(void **state)
{
    (void)state;
    char h[65];
    hex_of("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m2, strlen(m2), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a', fed in uneven pieces */
    grpo_sha256 s;
    uint8_t d[32];
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    grpo_sha256_init(&s);
    size_t off = 0, step = 1;
    while (off < 1000000) {
        size_t take = step < 1000000 - off ? step : 1000000 - off;
        grpo_sha256_update(&s, a + off, take);
        off += take;
        step = step * 3 % 1001 + 1;
    }
    grpo_sha256_final(&s, d);
    free(a);
    static const uint8_t want[4] = {0xcd, 0xc7, 0x6e, 0x5c};
    assert_memory_equal(d, want, 4);
    /* the streamed digest as hex (FIPS 180-2 "abc" vector) */
    char hx[65];
    grpo_sha256_init(&s);
    grpo_sha256_update(&s, "a", 1);
    grpo_sha256_update(&s, "bc", 2);
    grpo_sha256_final_hex(&s, hx);
    assert_string_equal(hx, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* JSON string literals: cJSON (an independent parser) reads back exactly the bytes written. */
static void
test_json_str(void **state)
{
    (void)state;
    const char *cases[] = {"",
                           "plain",
                           "q\"uote \\ back/slash",
                           "\x01\x1f\t\n\r ctl",
                           "h\xc3\xa9llo \xf0\x9f\x98\x80",
                           "\x7f del"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grpo_buf b = {0};
        assert_int_equal(grpo__buf_json_str(&b, cases[i]), GRPO_OK);
        cJSON *j = cJSON_ParseWithLength(b.data, b.len);
        assert_non_null(j);
        assert_true(cJSON_IsString(j));
        assert_string_equal(j->valuestring, cases[i]);
        cJSON_Delete(j);
        grpo__buf_fini(&b);
    }
    /* the strict text parse: UTF-8 and no \u0000 (an escaped backslash before "u0000" is fine) */
    cJSON *t = NULL;
    const char ok[] = "{\"k\": \"a\\\\u0000 \\\"\"}";
    assert_int_equal(grpo__json_parse_text(ok, strlen(ok), "t.json", &t), GRPO_OK);
    assert_string_equal(cJSON_GetObjectItem(t, "k")->valuestring, "a\\u0000 \"");
    cJSON_Delete(t);
    const char nul[] = "{\"k\": \"a\\u0000b\"}";
    assert_int_equal(grpo__json_parse_text(nul, strlen(nul), "t.json", &t), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "t.json"));
    assert_non_null(strstr(grpo_error_last(), "at byte 8"));
    assert_null(t);
    const char bad[] = "{\"k\": \"\xc3(\"}";
    assert_int_equal(grpo__json_parse_text(bad, strlen(bad), "t.json", &t), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "invalid UTF-8 at byte 7"));
    grpo_buf b = {0};
    assert_int_equal(grpo__buf_json_str(&b, "a\"\x01"), GRPO_OK);
    assert_string_equal(b.data, "\"a\\\"\\u0001\"");
    grpo__buf_fini(&b);
}

static void
test_arena(void **state)
{
    (void)state;
    grpo_arena *a;
    assert_int_equal(grpo_arena_create(&a, 128), GRPO_OK);
    char *p = grpo_arena_alloc(a, 10);
    assert_non_null(p);
    assert_true(((uintptr_t)p & 15) == 0);
    char *big = grpo_arena_alloc(a, 10000); /* larger than a block */
    assert_non_null(big);
    memset(big, 7, 10000);
    char *s = grpo_arena_strdup(a, "hello");
    assert_string_equal(s, "hello");
    assert_true(grpo_arena_used(a) >= 10016);
    grpo_arena_reset(a);
    assert_int_equal(grpo_arena_used(a), 0);
    assert_non_null(grpo_arena_alloc(a, 64));
    grpo_arena_destroy(a);
    grpo_arena_destroy(NULL);
}

typedef struct {
    int *owner;
    size_t calls;
} pf_ctx;

static void
mark(void *ctx, size_t b, size_t e, int worker)
{
    pf_ctx *c = ctx;
    for (size_t i = b; i < e; i++)
        c->owner[i] = worker;
    __atomic_fetch_add(&c->calls, 1, __ATOMIC_RELAXED);
}

static void
test_pool_deterministic(void **state)
{
    (void)state;
    grpo_pool *p;
    assert_int_equal(grpo_pool_create(&p, 3), GRPO_OK);
    assert_int_equal(grpo_pool_size(p), 3);
    int owner[1000], first[1000];
    for (int round = 0; round < 50; round++) {
        pf_ctx c = {owner, 0};
        memset(owner, -1, sizeof owner);
        grpo_pool_parallel_for(p, 1000, mark, &c);
        assert_int_equal(c.calls, 3);
        for (int i = 0; i < 1000; i++)
            assert_true(owner[i] >= 0 && owner[i] < 3);
        if (round == 0)
            memcpy(first, owner, sizeof owner);
        assert_memory_equal(first, owner, sizeof owner); /* same split every time */
    }
    pf_ctx c2 = {owner, 0};
    grpo_pool_parallel_for(p, 2, mark, &c2); /* fewer items than threads */
    assert_int_equal(c2.calls, 2);
    grpo_pool_destroy(p);
    grpo_pool_destroy(NULL);
}

static void
test_json_helpers(void **state)
{
    (void)state;
    const char *t = "{\"a\": 3, \"b\": 2.5, \"c\": true, \"d\": \"x\", \"e\": null}";
    cJSON *j;
    assert_int_equal(grpo__json_parse(t, strlen(t), "t.json", &j), GRPO_OK);
    int64_t i = 0;
    double d = 0;
    bool b = false;
    const char *s = NULL;
    assert_int_equal(grpo__json_int(j, "a", "t.json", 0, 10, &i), GRPO_OK);
    assert_int_equal(i, 3);
    assert_int_equal(grpo__json_int(j, "a", "t.json", 4, 10, &i), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "t.json: \"a\" is 3"));
    assert_int_equal(grpo__json_int(j, "b", "t.json", 0, 10, &i), GRPO_EFORMAT);
    assert_int_equal(grpo__json_num(j, "b", "t.json", &d), GRPO_OK);
    assert_true(d == 2.5);
    assert_int_equal(grpo__json_bool(j, "c", "t.json", &b), GRPO_OK);
    assert_true(b);
    assert_int_equal(grpo__json_str(j, "d", "t.json", &s), GRPO_OK);
    assert_string_equal(s, "x");
    assert_int_equal(grpo__json_str(j, "zz", "t.json", &s), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "\"zz\" is missing"));
    i = 42;
    assert_int_equal(grpo__json_int_opt(j, "e", "t.json", 0, 1, &i), GRPO_OK);
    assert_int_equal(i, 42);
    assert_int_equal(grpo__json_str_opt(j, "a", "t.json", &s), GRPO_EFORMAT);
    cJSON_Delete(j);
    assert_int_equal(grpo__json_parse("{\"a\":", 5, "bad.json", &j), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "bad.json: invalid JSON"));
}

static void
test_utf8(void **state)
{
    (void)state;
    assert_true(grpo__utf8_valid("", 0));
    assert_true(grpo__utf8_valid("h\xc3\xa9llo \xe4\xb8\xad \xf0\x9f\x98\x80", 16));
    assert_false(grpo__utf8_valid("\xc3", 1));             /* truncated */
    assert_false(grpo__utf8_valid("\xc0\xaf", 2));         /* overlong */
    assert_false(grpo__utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    assert_false(grpo__utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    assert_false(grpo__utf8_valid("\x80", 1));
    assert_false(grpo__utf8_valid("\xe4\xb8", 2));
    /* the valid prefix: where an error message points */
    assert_int_equal(grpo__utf8_valid_len("", 0), 0);
    assert_int_equal(grpo__utf8_valid_len("h\xc3\xa9llo", 6), 6);
    assert_int_equal(grpo__utf8_valid_len("ab\xff", 3), 2);
    assert_int_equal(grpo__utf8_valid_len("\xc3\xa9\xc3", 3), 2);           /* truncated tail */
    assert_int_equal(grpo__utf8_valid_len("a\xed\xa0\x80\x62", 5), 1);      /* surrogate, b */
    assert_int_equal(grpo__utf8_valid_len("xy\xe4\xb8\xad\xc0\xaf", 7), 5); /* overlong */
    /* sanitizing: each byte that does not begin a well-formed sequence becomes U+FFFD */
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"", ""},
        {"h\xc3\xa9llo \xf0\x9f\x98\x80", "h\xc3\xa9llo \xf0\x9f\x98\x80"},
        {"a\xff"
         "b",
         "a\xef\xbf\xbd"
         "b"},
        {"\xc3", "\xef\xbf\xbd"},                                   /* truncated */
        {"\xe4\xb8", "\xef\xbf\xbd\xef\xbf\xbd"},                   /* truncated, 2 bytes */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                   /* overlong */
        {"\xed\xa0\x80x", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx"}, /* surrogate */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\x80\xe4\xb8\xad", "\xef\xbf\xbd\xe4\xb8\xad"}, /* stray continuation */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = 99;
        char *c = grpo__utf8_sanitize(cases[i].in, strlen(cases[i].in), &len);
        assert_non_null(c);
        assert_string_equal(c, cases[i].out);
        assert_int_equal(len, strlen(cases[i].out));
        free(c);
    }
    char *z = grpo__utf8_sanitize("a\0\xff", 3, NULL); /* a NUL byte is valid UTF-8 */
    assert_memory_equal(z, "a\0\xef\xbf\xbd", 6);
    free(z);
    /* in a fixed buffer: cut at a character boundary */
    char lab[8] = "ab\xff\xff\xff";
    grpo__utf8_sanitize_buf(lab, sizeof lab);
    assert_string_equal(lab, "ab\xef\xbf\xbd"); /* a second U+FFFD would not fit */
    char ok[8] = "h\xc3\xa9";
    grpo__utf8_sanitize_buf(ok, sizeof ok);
    assert_string_equal(ok, "h\xc3\xa9");
}

static void
test_files(void **state)
{
    (void)state;
    char path[] = "/tmp/grpo_common_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(grpo__write_file_atomic(path, "abc", 3), GRPO_OK);
    char *buf;
    size_t n;
    assert_int_equal(grpo__read_file(path, 0, &buf, &n), GRPO_OK);
    assert_int_equal(n, 3);
    assert_string_equal(buf, "abc");
    free(buf);
    assert_int_equal(grpo__read_file(path, 2, &buf, &n), GRPO_EFORMAT);
    char h[65];
    assert_int_equal(grpo_sha256_file(path, h), GRPO_OK);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    assert_int_equal(grpo__read_file(path, 0, &buf, &n), GRPO_ENOTFOUND);
    assert_non_null(strstr(grpo_error_last(), path));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_message), cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_arena),         cmocka_unit_test(test_pool_deterministic),
        cmocka_unit_test(test_json_helpers),  cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_files),         cmocka_unit_test(test_json_str),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
