/* grpo_env_find_action: marker pairs found as the text grows token by token, markers split
 * across tokens, what lies before scan_from ignored, repeated begins, stray ends, several pairs,
 * and arbitrary bytes. Expected offsets are counted from the literal texts. */
#include "grpo/env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static const grpo_env_marker fence[] = {{GRPO_ENV_FENCE_BEGIN, GRPO_ENV_FENCE_END}};
static const grpo_env_marker both[] = {{GRPO_ENV_FENCE_BEGIN, GRPO_ENV_FENCE_END},
                                       {GRPO_ENV_DSV3_BEGIN, GRPO_ENV_DSV3_END}};

/* Calls find over the whole text with new_from = the start of its last `tail` bytes. */
static int
find(const grpo_env_marker *m, int n, const char *t, size_t scan_from, size_t tail, size_t *b,
     size_t *e)
{
    size_t len = strlen(t);
    return grpo_env_find_action(m, n, t, len, scan_from, len - tail, b, e);
}

/* Feeds t in pieces of `step` bytes; returns the length at which an action was first found. */
static size_t
feed(const grpo_env_marker *m, int n, const char *t, size_t step, int *which, size_t *b, size_t *e)
{
    size_t len = strlen(t);
    for (size_t have = 0; have < len;) {
        size_t from = have;
        have = have + step < len ? have + step : len;
        *which = grpo_env_find_action(m, n, t, have, 0, from, b, e);
        if (*which >= 0)
            return have;
    }
    return 0;
}

static void
t_simple(void **s)
{
    (void)s;
    const char *t = "Let me compute.\n```python\nprint(1)\n```";
    size_t b, e;
    assert_int_equal(find(fence, 1, t, 0, 1, &b, &e), 0);
    assert_int_equal(b, 16);
    assert_int_equal(e, strlen(t));
    /* the end marker came before the new bytes: nothing new */
    const char *u = "```python\nx\n``` and more";
    assert_int_equal(find(fence, 1, u, 0, 4, &b, &e), -1);
    /* no new bytes at all */
    assert_int_equal(grpo_env_find_action(fence, 1, t, strlen(t), 0, strlen(t), &b, &e), -1);
}

static void
t_split_across_tokens(void **s)
{
    (void)s;
    const char *t = "x ```python\na = 1\n``` tail";
    size_t b, e;
    int which;
    /* every token size, so new_from falls everywhere inside the end marker */
    for (size_t step = 1; step <= 8; step++) {
        size_t at = feed(fence, 1, t, step, &which, &b, &e);
        assert_int_equal(which, 0);
        assert_int_equal(b, 2);
        assert_int_equal(e, 21);
        assert_true(at >= 21 && at < 21 + step);
    }
    /* new_from in the middle of the end marker: the marker still counts */
    assert_int_equal(grpo_env_find_action(fence, 1, t, 21, 0, 19, &b, &e), 0);
    assert_int_equal(e, 21);
    assert_int_equal(grpo_env_find_action(fence, 1, t, 21, 0, 20, &b, &e), 0);
    /* only a part of the end marker so far */
    assert_int_equal(grpo_env_find_action(fence, 1, t, 20, 0, 19, &b, &e), -1);
}

static void
t_scan_from(void **s)
{
    (void)s;
    /* an earlier action and its observation lie before scan_from */
    const char *t = "```python\n1\n```\n```output\n1\n```\nthen ```python\n2\n```";
    size_t obs_end = strlen("```python\n1\n```\n```output\n1\n```\n");
    size_t b, e;
    assert_int_equal(find(fence, 1, t, obs_end, 3, &b, &e), 0);
    assert_int_equal(b, obs_end + 5);
    assert_int_equal(e, strlen(t));
    /* a begin marker before scan_from is not one */
    const char *u = "```python\nx = 1\n```";
    assert_int_equal(find(fence, 1, u, 2, 3, &b, &e), -1);
    /* scan_from past the text */
    assert_int_equal(grpo_env_find_action(fence, 1, u, strlen(u), strlen(u) + 1, 0, &b, &e), -1);
}

static void
t_two_pairs(void **s)
{
    (void)s;
    const char *d = "I will call. " GRPO_ENV_DSV3_BEGIN "calls" GRPO_ENV_DSV3_END;
    size_t b, e;
    assert_int_equal(find(both, 2, d, 0, 1, &b, &e), 1);
    assert_int_equal(b, 13);
    assert_int_equal(e, strlen(d));
    /* the first pair in array order wins when both complete in the same bytes */
    const char *t = GRPO_ENV_DSV3_BEGIN "a" GRPO_ENV_DSV3_END "```python\nb\n```";
    assert_int_equal(find(both, 2, t, 0, strlen(t), &b, &e), 0);
    assert_int_equal(b, strlen(GRPO_ENV_DSV3_BEGIN "a" GRPO_ENV_DSV3_END));
    /* the fenced block not closed yet: the DeepSeek-V3 block */
    assert_int_equal(grpo_env_find_action(both, 2, t, strlen(t) - 3, 0, 0, &b, &e), 1);
    assert_int_equal(b, 0);
    assert_int_equal(e, strlen(GRPO_ENV_DSV3_BEGIN "a" GRPO_ENV_DSV3_END));
}

static void
t_no_begin(void **s)
{
    (void)s;
    size_t b = 99, e = 99;
    /* an end marker without a begin marker is stray text */
    assert_int_equal(find(fence, 1, "just ``` quotes ```", 0, 3, &b, &e), -1);
    assert_int_equal(find(fence, 1, "no markers at all", 0, 5, &b, &e), -1);
    /* the begin marker is not followed by its end yet */
    assert_int_equal(find(fence, 1, "```python\nprint(1)", 0, 3, &b, &e), -1);
    /* a stray end, then a pair: found */
    const char *t = "``` ```python\nx\n```";
    assert_int_equal(find(fence, 1, t, 0, 3, &b, &e), 0);
    assert_int_equal(b, 4);
    /* a pair whose begin is empty starts at scan_from */
    const grpo_env_marker plain[] = {{NULL, "</action>"}};
    const char *u = "obs...move e2e4</action>";
    assert_int_equal(find(plain, 1, u, 6, 2, &b, &e), 0);
    assert_int_equal(b, 6);
    assert_int_equal(e, strlen(u));
    /* ...but only the first end after scan_from */
    const char *v = "a</action>b</action>";
    assert_int_equal(find(plain, 1, v, 0, 3, &b, &e), -1);
    assert_int_equal(find(plain, 1, v, 10, 3, &b, &e), 0);
    assert_int_equal(b, 10);
    /* an end marker missing from a pair: no action */
    const grpo_env_marker none[] = {{"<a>", NULL}, {"<a>", ""}};
    assert_int_equal(find(none, 2, "<a>x", 0, 4, &b, &e), -1);
}

static void
t_repeated_begins(void **s)
{
    (void)s;
    /* the action starts at the last begin marker before the end marker */
    const char *t = "```python\nfirst\n```python\nsecond\n```";
    size_t b, e;
    int which;
    assert_int_equal(find(fence, 1, t, 0, 3, &b, &e), 0);
    assert_int_equal(b, 16);
    /* token by token, the "```" of the second begin marker closed the first block already */
    assert_int_equal(feed(fence, 1, t, 1, &which, &b, &e), 19);
    assert_int_equal(b, 0);
    assert_int_equal(e, 19);
    const grpo_env_marker tags[] = {{"<run>", "</run>"}};
    const char *u = "<run>a <run>b</run>";
    assert_int_equal(find(tags, 1, u, 0, 6, &b, &e), 0);
    assert_int_equal(b, 7);
    assert_int_equal(e, strlen(u));
    /* two pairs in one new chunk: the first */
    const char *v = "<run>a</run><run>b</run>";
    assert_int_equal(find(tags, 1, v, 0, strlen(v), &b, &e), 0);
    assert_int_equal(b, 0);
    assert_int_equal(e, 12);
    /* a closed pair before the new bytes; the new end has no begin of its own */
    const char *w = "<run>a</run> x</run>";
    assert_int_equal(find(tags, 1, w, 0, 6, &b, &e), -1);
    /* two ends in the new bytes: the second one's begin lies between them */
    const char *y = "x</run> <run>y</run>";
    assert_int_equal(find(tags, 1, y, 0, strlen(y), &b, &e), 0);
    assert_int_equal(b, 8);
}

static void
t_bytes(void **s)
{
    (void)s;
    /* invalid UTF-8 and NUL bytes inside and around the action */
    const char t[] = "\xff\xfe```python\n\x80\x00\xc3(\n```\xff";
    size_t len = sizeof t - 1, b, e;
    assert_int_equal(grpo_env_find_action(fence, 1, t, len - 1, 0, len - 2, &b, &e), 0);
    assert_int_equal(b, 2);
    assert_int_equal(e, len - 1);
    /* a multi-byte marker cut in the middle of a character */
    const char *d = GRPO_ENV_DSV3_BEGIN "x" GRPO_ENV_DSV3_END;
    size_t dl = strlen(d);
    assert_int_equal(grpo_env_find_action(both, 2, d, dl - 2, 0, 0, &b, &e), -1);
    assert_int_equal(grpo_env_find_action(both, 2, d, dl, 0, dl - 2, &b, &e), 1);
    /* random bytes never read out of bounds (ASan) and an action lies inside the text */
    srand(7);
    char buf[256];
    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)(rand() % 64);
        for (size_t i = 0; i < n; i++)
            buf[i] = "`p\nython<>/ab"[rand() % 13];
        memcpy(buf + n, "```python\n", rand() % 2 ? 10 : 0);
        size_t len2 = n + (size_t)(rand() % 8);
        size_t sf = len2 ? (size_t)rand() % (len2 + 1) : 0, nf = len2 ? (size_t)rand() % len2 : 0;
        const grpo_env_marker tags[] = {{"<a>", "</a>"}, {NULL, "``"}};
        char *heap = malloc(len2 ? len2 : 1);
        memcpy(heap, buf, len2);
        int k = grpo_env_find_action(tags, 2, heap, len2, sf, nf, &b, &e);
        if (k >= 0) {
            assert_true(b >= sf && b < e && e <= len2 && e > nf);
        }
        free(heap);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_simple),    cmocka_unit_test(t_split_across_tokens),
        cmocka_unit_test(t_scan_from), cmocka_unit_test(t_two_pairs),
        cmocka_unit_test(t_no_begin),  cmocka_unit_test(t_repeated_begins),
        cmocka_unit_test(t_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
