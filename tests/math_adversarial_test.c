/* Hostile inputs to the math verifier: each must come back with a verdict, within its step budget
 * (the step budget is deterministic, so these checks do not depend on timing). Also the known
 * math-verify false positive 1/2004! = 1/2006!, decided exactly here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verifiers/math/math_int.h"

static mverdict
grade(const char *gold, const char *pred, size_t plen, int64_t steps)
{
    mgrade_opts o;
    mgrade_opts_default(&o);
    o.timeout_s = 60; /* the step budget decides, not the clock */
    if (steps)
        o.max_steps = steps;
    return mgrade(gold, strlen(gold), pred, plen, &o, NULL, 0);
}

static mverdict
g2(const char *gold, const char *pred)
{
    return grade(gold, pred, strlen(pred), 0);
}

static void
test_exact_big(void **state)
{
    (void)state;
    assert_int_equal(g2("\\frac{1}{2004!}", "\\boxed{\\frac{1}{2006!}}"), MV_WRONG);
    assert_int_equal(g2("\\frac{1}{2004!}", "\\boxed{\\frac{2005 \\cdot 2006}{2006!}}"),
                     MV_CORRECT);
    assert_int_equal(g2("9999!", "\\boxed{9999!}"), MV_CORRECT);
    assert_int_equal(g2("9999!", "\\boxed{9998!}"), MV_WRONG);
    assert_int_equal(g2("2^{100}", "\\boxed{1267650600228229401496703205376}"), MV_CORRECT);
    assert_int_equal(g2("2^{100}", "\\boxed{1267650600228229401496703205377}"), MV_WRONG);
    /* decimals: six places (math-verify's float_rounding), relative sanity for tiny values, an
     * integer gold exactly */
    assert_int_equal(g2("\\frac{1}{3}", "\\boxed{0.333333}"), MV_CORRECT);
    assert_int_equal(g2("\\frac{1}{3}", "\\boxed{0.333}"), MV_WRONG);
    assert_int_equal(g2("\\sqrt{2}", "\\boxed{1.414214}"), MV_CORRECT);
    assert_int_equal(g2("0.00000001", "\\boxed{0.00000002}"), MV_WRONG);
    assert_int_equal(g2("5", "\\boxed{5.0000001}"), MV_WRONG);
    assert_int_equal(g2("5", "\\boxed{5.000}"), MV_CORRECT);
    /* overflowing towers: never "inf == inf" */
    assert_int_equal(g2("10^{10^{10}}", "\\boxed{10^{10^{10}}}"), MV_CORRECT);
    assert_int_equal(g2("10^{10^{10}}", "\\boxed{10^{10^{11}}}"), MV_WRONG);
    assert_int_equal(g2("10^{10^{10}}", "\\boxed{10^{10^{10}}+1}"), MV_WRONG);
}

/* A quantity with a unit, the whole answer: the unit goes, as math-verify 0.9 reads it (each
 * verdict below is math-verify's too but the last: it drops m from 2 \cdot 3m as well). A
 * one-letter unit must be m, s, h or g and stand right after a number that is the whole rest of
 * the answer; other letters, or more around it, keep the product. */
static void
test_units(void **state)
{
    (void)state;
    static const struct {
        const char *gold, *pred;
        mverdict want;
    } cases[] = {
        {"60", "\\boxed{60m}", MV_CORRECT},
        {"60", "\\boxed{60 m}", MV_CORRECT},
        {"5", "\\boxed{5s}", MV_CORRECT},
        {"3", "\\boxed{3h}", MV_CORRECT},
        {"2", "\\boxed{2g}", MV_CORRECT},
        {"3.5", "\\boxed{3.5m}", MV_CORRECT},
        {"-2", "\\boxed{-2m}", MV_CORRECT},
        {"1/2", "\\boxed{\\frac{1}{2}m}", MV_CORRECT},
        {"8", "\\boxed{8min}", MV_CORRECT},
        {"8", "\\boxed{8 min}", MV_CORRECT},
        {"60", "\\boxed{60cm}", MV_CORRECT},
        {"4", "\\boxed{4kg}", MV_CORRECT},
        {"60m", "\\boxed{60m}", MV_CORRECT},
        {"2", "\\boxed{2x}", MV_WRONG},
        {"3", "\\boxed{3n}", MV_WRONG},
        {"3", "\\boxed{3y}", MV_WRONG},
        {"2", "\\boxed{2a}", MV_WRONG},
        {"3", "\\boxed{2m}", MV_WRONG},
        {"2", "\\boxed{2m+1}", MV_WRONG},
        {"2m+1", "\\boxed{2m+1}", MV_CORRECT},
        {"2", "\\boxed{\\min(2, 3)}", MV_CORRECT},
        {"6", "\\boxed{2 \\cdot 3m}", MV_WRONG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mverdict v = g2(cases[i].gold, cases[i].pred);
        if (v != cases[i].want)
            fail_msg("gold %s, answer %s: verdict %d, want %d", cases[i].gold, cases[i].pred, v,
                     cases[i].want);
    }
}

static void
test_hostile(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    char *big = malloc(n + 64);
    assert_non_null(big);
    /* 1 MB of reasoning then an answer */
    for (size_t i = 0; i < n; i++)
        big[i] = "abc {}$\\x "[i % 10];
    strcpy(big + n, "</think> so \\boxed{42}");
    assert_int_equal(grade("42", big, strlen(big), 0), MV_CORRECT);
    /* 1 MB of "\boxed{" never closed */
    for (size_t i = 0; i + 7 <= n; i += 7)
        memcpy(big + i, "\\boxed{", 7);
    big[n] = 0;
    mverdict v = grade("42", big, n, 0);
    assert_true(v == MV_NO_ANSWER || v == MV_BAD_ANSWER || v == MV_TIMEOUT);
    /* 1 MB of unclosed "\frac{" and "$$" with the answer at the end: still found */
    for (size_t i = 0; i + 8 <= n; i += 8)
        memcpy(big + i, i % 16 ? "\\frac{12" : "$$ \\( xy", 8);
    strcpy(big + n, "</think> \\boxed{7}");
    assert_int_equal(grade("7", big, strlen(big), 0), MV_CORRECT);
    /* 10,000 nested braces inside a box */
    size_t k = 0;
    memcpy(big, "\\boxed{", 7);
    k = 7;
    for (int i = 0; i < 10000; i++)
        big[k++] = '{';
    big[k++] = '1';
    for (int i = 0; i < 10000; i++)
        big[k++] = '}';
    big[k++] = '}';
    big[k] = 0;
    v = grade("1", big, k, 0);
    assert_true(v == MV_BAD_ANSWER || v == MV_TIMEOUT);
    /* deep parentheses, a deep power tower, a long sum */
    k = 0;
    memcpy(big, "\\boxed{", 7);
    k = 7;
    for (int i = 0; i < 5000; i++)
        big[k++] = '(';
    big[k++] = '2';
    for (int i = 0; i < 5000; i++)
        big[k++] = ')';
    big[k++] = '}';
    big[k] = 0;
    v = grade("2", big, k, 0);
    assert_true(v == MV_BAD_ANSWER || v == MV_CORRECT || v == MV_TIMEOUT);
    k = 7;
    for (int i = 0; i < 3000; i++) {
        memcpy(big + k, "2^{", 3);
        k += 3;
    }
    big[k++] = '2';
    for (int i = 0; i < 3000; i++)
        big[k++] = '}';
    big[k++] = '}';
    big[k] = 0;
    v = grade("2", big, k, 0);
    assert_true(v == MV_BAD_ANSWER || v == MV_WRONG || v == MV_TIMEOUT);
    /* a 60x60 matrix against itself with one entry changed */
    k = 0;
    k += (size_t)sprintf(big + k, "\\boxed{\\begin{pmatrix}");
    for (int r = 0; r < 60; r++)
        for (int c = 0; c < 60; c++)
            k += (size_t)sprintf(big + k, "%d%s", r * 60 + c,
                                 c == 59 ? (r == 59 ? "" : "\\\\") : "&");
    k += (size_t)sprintf(big + k, "\\end{pmatrix}}");
    char *gold = strdup(big + 7);
    gold[strlen(gold) - 1] = 0;
    v = grade(gold, big, k, 0);
    assert_true(v == MV_CORRECT || v == MV_TIMEOUT);
    char *p = strstr(big, "&1234&");
    assert_non_null(p);
    p[1] = '9';
    v = grade(gold, big, k, 0);
    assert_true(v == MV_WRONG || v == MV_TIMEOUT);
    free(gold);
    /* invalid UTF-8 around and inside the answer */
    const char bad[] = "<think>\xff\xfe\xc0\x80</think> \\boxed{\xe2\x28\xa1} \xf8\x88\x80\x80\x80";
    v = grade("1", bad, sizeof bad - 1, 0);
    assert_true(v == MV_BAD_ANSWER || v == MV_NO_ANSWER);
    v = grade("\xff\xfe", "\\boxed{1}", 9, 0);
    assert_int_equal(v, MV_BAD_GOLD);
    /* an unclosed box falls back to nothing, and an empty completion has no answer */
    v = g2("5", "</think> the answer is \\boxed{5");
    assert_true(v == MV_NO_ANSWER || v == MV_BAD_ANSWER);
    assert_int_equal(g2("5", "</think> \\boxed{5"), MV_NO_ANSWER);
    assert_int_equal(g2("5", ""), MV_NO_ANSWER);
    free(big);
}

static void
test_budget(void **state)
{
    (void)state;
    /* with a tiny step budget, big work is cut off as a timeout verdict */
    size_t n = 1 << 20;
    char *big = malloc(n + 32);
    assert_non_null(big);
    memset(big, 'a', n);
    strcpy(big + n, "\\boxed{1}");
    assert_int_equal(grade("1", big, strlen(big), 5000), MV_TIMEOUT);
    assert_int_equal(grade("1", big, strlen(big), 0), MV_CORRECT);
    assert_int_equal(grade("20000!", "\\boxed{20000!}", 14, 20000), MV_TIMEOUT);
    free(big);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_big),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
