/* common/codec: the byte layout of every field (pinned), round trips of edge values (NaN payloads,
 * INT32_MIN, UINT64_MAX, empty and NULL strings), a decode of every truncation of an encoding (in
 * a buffer of exactly that size, so ASan sees any read past it) and writer/reader out-of-memory.
 * Linked with -Wl,--wrap=realloc,--wrap=malloc (tests/common.cmake) to fail allocations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/codec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation failures on demand */

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static int fail_allocs; /* the next this many malloc/realloc calls fail */

void *
__wrap_realloc(void *p, size_t n)
{
    if (fail_allocs > 0) {
        fail_allocs--;
        return NULL;
    }
    return __real_realloc(p, n);
}

void *
__wrap_malloc(size_t n)
{
    if (fail_allocs > 0) {
        fail_allocs--;
        return NULL;
    }
    return __real_malloc(n);
}

/* ---- one record with every kind of field */

static void
put_record(grpo_wr *w)
{
    grpo__put_u32(w, 0xA1B2C3D4u);
    grpo__put_u64(w, UINT64_MAX);
    grpo__put_i32(w, INT32_MIN);
    grpo__put_f32(w, (grpo_f32_bits){.u = 0x7FA00001u}.f); /* a signalling NaN with a payload */
    grpo__put_f64(w, (grpo_f64_bits){.u = 0xFFF80000DEADBEEFull}.f);
    grpo__put_str(w, NULL);
    grpo__put_str(w, "");
    grpo__put_bytes(w, NULL, 0);
    grpo__put_strn(w, "a\0b", 3);
    grpo__put_str(w, "h\xC3\xA9");
}

/* The record's bytes, field by field. */
static const char record_hex[] = "d4c3b2a1"
                                 "ffffffffffffffff"
                                 "00000080"
                                 "0100a07f"
                                 "efbeadde0000f8ff"
                                 "ffffffff"
                                 "00000000"
                                 "00000000"
                                 "03000000610062"
                                 "0300000068c3a9";

/* Reads the record back; returns the number of fields that came back as written (10 = all). */
static int
get_record(grpo_rd *r)
{
    size_t n = 99;
    int ok = 0;
    ok += grpo__get_u32(r) == 0xA1B2C3D4u;
    ok += grpo__get_u64(r) == UINT64_MAX;
    ok += grpo__get_i32(r) == INT32_MIN;
    ok += (grpo_f32_bits){.f = grpo__get_f32(r)}.u == 0x7FA00001u;
    ok += (grpo_f64_bits){.f = grpo__get_f64(r)}.u == 0xFFF80000DEADBEEFull;
    char *s = grpo__get_str(r, &n);
    ok += s == NULL && n == 0 && !r->bad;
    s = grpo__get_str(r, &n);
    ok += s != NULL && n == 0 && s[0] == '\0';
    free(s);
    const char *p = grpo__get_bytes(r, &n);
    ok += p != NULL && n == 0;
    s = grpo__get_str(r, &n);
    ok += s != NULL && n == 3 && memcmp(s, "a\0b", 4) == 0;
    free(s);
    p = grpo__get_bytes(r, &n);
    ok += p != NULL && n == 3 && memcmp(p, "h\xC3\xA9", 3) == 0;
    return ok;
}

static void
to_hex(const char *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)p[i]);
    out[2 * n] = '\0';
}

/* The reader took all of w's bytes without a failure; frees w's buffer. */
static void
read_all(const grpo_rd *r, grpo_wr *w)
{
    assert_false(r->bad);
    assert_int_equal(grpo__rd_left(r), 0);
    grpo__buf_fini(&w->b);
}

static void
test_layout_and_round_trip(void **state)
{
    (void)state;
    grpo_wr w = {0};
    put_record(&w);
    assert_false(w.oom);
    char hex[2 * sizeof record_hex];
    assert_int_equal(w.b.len * 2, strlen(record_hex));
    to_hex(w.b.data, w.b.len, hex);
    assert_string_equal(hex, record_hex);
    grpo_rd r = {w.b.data, w.b.len, 0, false};
    assert_int_equal(get_record(&r), 10);
    read_all(&r, &w);
}

static void
test_edge_values(void **state)
{
    (void)state;
    const uint32_t f32s[] = {0x7FC00000u, 0x7F800001u, 0xFFC12345u,
                             0x80000000u, 0x7F800000u, 0x00000001u};
    const uint64_t f64s[] = {0x7FF8000000000000ull, 0x7FF0000000000001ull, 0xFFF8DEADBEEF0001ull,
                             0x8000000000000000ull, 0xFFF0000000000000ull, 1};
    const int32_t i32s[] = {INT32_MIN, -1, 0, INT32_MAX};
    const uint64_t u64s[] = {0, 1, UINT64_MAX, 0x8000000000000000ull};
    grpo_wr w = {0};
    for (size_t i = 0; i < 6; i++) {
        grpo__put_f32(&w, (grpo_f32_bits){.u = f32s[i]}.f);
        grpo__put_f64(&w, (grpo_f64_bits){.u = f64s[i]}.f);
    }
    for (size_t i = 0; i < 4; i++) {
        grpo__put_i32(&w, i32s[i]);
        grpo__put_u64(&w, u64s[i]);
        grpo__put_u32(&w, (uint32_t)i32s[i]);
    }
    grpo_rd r = {w.b.data, w.b.len, 0, false};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal((grpo_f32_bits){.f = grpo__get_f32(&r)}.u, f32s[i]);
        assert_int_equal((grpo_f64_bits){.f = grpo__get_f64(&r)}.u, f64s[i]);
    }
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(grpo__get_i32(&r), i32s[i]);
        assert_int_equal(grpo__get_u64(&r), u64s[i]);
        assert_int_equal(grpo__get_u32(&r), (uint32_t)i32s[i]);
    }
    read_all(&r, &w);
}

/* Every proper prefix of the record, copied into a buffer of exactly its size: the decode fails,
 * never reads past the prefix, and stays failed. */
static void
test_every_truncation(void **state)
{
    (void)state;
    grpo_wr w = {0};
    put_record(&w);
    for (size_t k = 0; k <= w.b.len; k++) {
        char *buf = k ? malloc(k) : NULL;
        if (k)
            memcpy(buf, w.b.data, k);
        grpo_rd r = {buf, k, 0, false};
        int ok = get_record(&r);
        assert_true(r.off <= k);
        if (k == w.b.len) {
            assert_int_equal(ok, 10);
            assert_false(r.bad);
        } else {
            assert_true(ok < 10);
            assert_true(r.bad);
            assert_int_equal(grpo__get_u32(&r), 0);
            assert_null(grpo__get_raw(&r, 0));
        }
        free(buf);
    }
    grpo__buf_fini(&w.b);
}

static void
test_lengths(void **state)
{
    (void)state;
    /* a length beyond the end: nothing is read, the reader fails */
    const char big[] = {0x05, 0, 0, 0, 'a', 'b'};
    grpo_rd r = {big, sizeof big, 0, false};
    size_t n = 7;
    assert_null(grpo__get_bytes(&r, &n));
    assert_int_equal(n, 0);
    assert_true(r.bad);
    assert_int_equal(r.off, 4);
    /* the NULL marker is not a failure, and reads nothing more */
    const char null[] = {(char)0xFF, (char)0xFF, (char)0xFF, (char)0xFF};
    grpo_rd r2 = {null, sizeof null, 0, false};
    assert_null(grpo__get_bytes(&r2, &n));
    assert_false(r2.bad);
    assert_int_equal(grpo__rd_left(&r2), 0);
    /* an empty reader over NULL */
    grpo_rd r3 = {NULL, 0, 0, false};
    assert_non_null(grpo__get_raw(&r3, 0));
    assert_null(grpo__get_str(&r3, &n));
    assert_true(r3.bad);
    /* a caller's own failure stops the reads that follow */
    grpo_rd r4 = {big, sizeof big, 0, false};
    r4.bad = true;
    assert_int_equal(grpo__get_u32(&r4), 0);
    assert_int_equal(r4.off, 0);
    /* a field too long for its u32 length fails the writer before it reads the bytes */
    grpo_wr w = {0};
    grpo__put_bytes(&w, "x", (size_t)GRPO_CODEC_NULL);
    assert_true(w.oom);
    assert_int_equal(w.b.len, 0);
    grpo__buf_fini(&w.b);
}

static void
test_out_of_memory(void **state)
{
    (void)state;
    /* the first allocation fails: the writer remembers, and later puts write nothing */
    grpo_wr w = {0};
    fail_allocs = 1;
    grpo__put_u32(&w, 1);
    assert_true(w.oom);
    grpo__put_str(&w, "after");
    assert_int_equal(w.b.len, 0);
    grpo__buf_fini(&w.b);
    /* growing past the first block fails: what came before stays, nothing after */
    grpo_wr w2 = {0};
    grpo__put_u32(&w2, 7);
    char blob[600] = {0};
    fail_allocs = 1;
    grpo__put_bytes(&w2, blob, sizeof blob);
    assert_true(w2.oom);
    grpo__put_u64(&w2, 9);
    assert_true(w2.b.len <= 8);
    /* a copy the reader cannot allocate fails the reader */
    grpo_rd r = {"\x02\0\0\0hi", 6, 0, false};
    fail_allocs = 1;
    assert_null(grpo__get_str(&r, NULL));
    fail_allocs = 0;
    assert_true(r.bad);
    grpo__buf_fini(&w2.b);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_and_round_trip), cmocka_unit_test(test_edge_values),
        cmocka_unit_test(test_every_truncation),      cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
