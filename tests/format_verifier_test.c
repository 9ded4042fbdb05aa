/* The think-format verifier against the R1 format rules: hand-written cases (labels taken from the
 * rules in the issue, not from the code) and a randomized comparison with an independent
 * reference that tokenizes the text into tags first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpo/verify.h"

static grpo_verdict
run(const char *text, size_t n, int prompt_open, const char *cfg)
{
    const grpo_verifier_api *api = grpo_verifier_format();
    void *st = NULL;
    char *err = NULL;
    assert_int_equal(api->init(cfg, &st, &err), 0);
    grpo_verifier_sample s = {0};
    s.task = "format";
    s.completion = text;
    s.completion_len = n;
    s.prompt_opens_think = prompt_open;
    grpo_verdict v;
    assert_int_equal(api->score(st, &s, &v), 0);
    free(v.details_json);
    api->fini(st);
    return v;
}

static void
expect(const char *text, int prompt_open, const char *label)
{
    grpo_verdict v = run(text, strlen(text), prompt_open, NULL);
    if (strcmp(v.label, label) != 0)
        fail_msg("\"%s\" (prompt_open=%d): got %s, want %s", text, prompt_open, v.label, label);
    assert_int_equal(v.kind, strcmp(label, "ok") == 0 ? GRPO_VERDICT_PASS : GRPO_VERDICT_FAIL);
    assert_true(v.score == (strcmp(label, "ok") == 0 ? 1.0 : 0.0));
}

static void
test_cases(void **state)
{
    (void)state;
    expect("<think>\nreason\n</think>\n\nThe answer is 4.", 0, "ok");
    expect("reason\n</think>\nanswer", 1, "ok");
    expect("  <think>r</think>a", 0, "ok");
    expect("no tags at all", 0, "no-think");
    expect("no tags at all", 1, "unclosed-think");
    expect("<think>never closed", 0, "unclosed-think");
    expect("<think>a<think>b</think>c", 0, "nested-think");
    expect("<think>a</think>b</think>c", 0, "stray-close");
    expect("<think>a</think>b<think>c</think>d", 0, "extra-think");
    expect("r</think>a<think>", 1, "extra-think");
    expect("<think>r</think>a", 1, "nested-think");
    expect("hello <think>r</think>a", 0, "text-before-think");
    expect("<think> \n </think>answer", 0, "empty-reasoning");
    expect("<think>reason</think> \n ", 0, "empty-answer");
    expect("</think>answer", 0, "stray-close");
    expect("", 0, "no-think");
    expect("", 1, "unclosed-think");
    expect("<thin>r</thin>a", 0, "no-think");
}

static void
test_partial(void **state)
{
    (void)state;
    const char *t = "<think>reason</think>   ";
    grpo_verdict v = run(t, strlen(t), 0, "{\"partial\": true}");
    assert_string_equal(v.label, "empty-answer");
    assert_true(v.score == 0.75); /* opened, closed once, reasoning; no answer */
    t = "<think>reason";
    v = run(t, strlen(t), 0, "{\"partial\": true}");
    assert_true(v.score == 0.25);
    /* a bad config is an init error with a message */
    void *st = NULL;
    char *err = NULL;
    assert_int_not_equal(grpo_verifier_format()->init("{\"partial\": 3}", &st, &err), 0);
    assert_non_null(err);
    assert_non_null(strstr(err, "partial"));
    free(err);
}

/* Independent reference: split into a tag sequence, then check the rules on the sequence. */
static int
ref_ok(const char *s, size_t n, int prompt_open)
{
    int seq[64], ns = 0; /* 1 = open, 2 = close */
    size_t pos[64];
    for (size_t i = 0; i < n && ns < 64;) {
        if (n - i >= 7 && memcmp(s + i, "<think>", 7) == 0) {
            pos[ns] = i;
            seq[ns++] = 1;
            i += 7;
        } else if (n - i >= 8 && memcmp(s + i, "</think>", 8) == 0) {
            pos[ns] = i;
            seq[ns++] = 2;
            i += 8;
        } else
            i++;
    }
    size_t body0;
    int close_idx;
    if (prompt_open) {
        if (ns != 1 || seq[0] != 2)
            return 0;
        body0 = 0;
        close_idx = 0;
    } else {
        if (ns != 2 || seq[0] != 1 || seq[1] != 2)
            return 0;
        for (size_t i = 0; i < pos[0]; i++)
            if (s[i] != ' ' && s[i] != '\n')
                return 0;
        body0 = pos[0] + 7;
        close_idx = 1;
    }
    int body = 0, ans = 0;
    for (size_t i = body0; i < pos[close_idx]; i++)
        body |= s[i] != ' ' && s[i] != '\n';
    for (size_t i = pos[close_idx] + 8; i < n; i++)
        ans |= s[i] != ' ' && s[i] != '\n';
    return body && ans;
}

static void
test_random(void **state)
{
    (void)state;
    static const char *const parts[] = {"<think>", "</think>", "x",  " ", "\n",
                                        "<",       "think>",   "</", "ab"};
    uint64_t rng = 0x1234567;
    char buf[512];
    for (int it = 0; it < 20000; it++) {
        size_t n = 0;
        int len = 1 + (int)(rng % 9);
        for (int k = 0; k < len; k++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *p = parts[(rng >> 33) % 9];
            memcpy(buf + n, p, strlen(p));
            n += strlen(p);
        }
        buf[n] = 0;
        int po = (int)((rng >> 20) & 1);
        grpo_verdict v = run(buf, n, po, NULL);
        int ok = v.kind == GRPO_VERDICT_PASS;
        if (ok != ref_ok(buf, n, po))
            fail_msg("\"%s\" prompt_open=%d: verifier %s, reference %d", buf, po, v.label,
                     ref_ok(buf, n, po));
    }
}

static void
test_huge(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    char *s = malloc(n);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(i % 251 + 1); /* invalid UTF-8 and stray '<' bytes included */
    memcpy(s + n / 2, "</think>", 8);
    grpo_verdict v = run(s, n, 1, NULL);
    assert_int_equal(v.kind, GRPO_VERDICT_PASS);
    free(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_partial),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_huge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
