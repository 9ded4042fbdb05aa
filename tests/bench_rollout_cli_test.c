/* `grpo bench rollout` plumbing on the tiny models (no timing is checked): the three grpo rows,
 * and the HF transformers peer's row run with the same workload (G*L prefill tokens, N forwards)
 * on a BF16 and an FP8 (dequantized) model, or a "skipped" line when python3 cannot import torch;
 * --no-hf leaves the peer out; --scenarios runs only the rows it names and refuses unknown names;
 * --speculative K adds each scenario's row with K MTP drafts and the ratio lines, and fails on a
 * model without an MTP module.
 * Needs GRPO_BIN (set by ctest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define SHAPE "--prompt-len 8 --group 2 --new 4 --threads 1"

static char out[1 << 16];

/* Runs `grpo bench rollout` on tests/data/tiny_models/MODEL with extra args; stdout into out. */
static int
bench(const char *model, const char *extra)
{
    const char *bin = getenv("GRPO_BIN"), *src = getenv("GRPO_SOURCE_DIR");
    if (bin == NULL || *bin == 0 || src == NULL)
        return -2;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s bench rollout --model %s/tests/data/tiny_models/%s " SHAPE " %s",
             bin, src, model, extra);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t k = fread(out, 1, sizeof out - 1, p);
    out[k] = 0;
    int st = pclose(p);
    printf("%s", out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int
have_torch(void)
{
    return system("python3 -c 'import torch, transformers, safetensors' >/dev/null 2>&1") == 0;
}

static void
grpo_rows(void)
{
    assert_non_null(strstr(out, "| 1 prompt x G (shared prefill + pages) |"));
    assert_non_null(strstr(out, "| G independent prompts x 1 |"));
    assert_non_null(strstr(out, "| 1 prompt x G, batch-1 decode |"));
}

static void
with_peer(const char *model)
{
    int rc = bench(model, "");
    if (rc == -2)
        skip();
    assert_int_equal(rc, 0);
    grpo_rows();
    if (!have_torch()) {
        assert_non_null(strstr(out, "transformers generate: skipped ("));
        print_message("python3 cannot import torch, transformers and safetensors: the transformers "
                      "row is not checked\n");
        return;
    }
    const char *row = strstr(out, "| transformers generate (G sequences) | ");
    assert_non_null(row);
    double tps = 0, secs = 0;
    unsigned prefill = 0, forwards = 0;
    assert_int_equal(sscanf(row, "| transformers generate (G sequences) | %lf | %lf | %u | %u |",
                            &tps, &secs, &prefill, &forwards),
                     4);
    assert_true(tps > 0 && secs > 0);
    assert_int_equal(prefill, 2 * 8); /* generate repeats the prompt for each of the G samples */
    assert_int_equal(forwards, 4);    /* exactly --new tokens: EOS ended nothing early */
    assert_non_null(strstr(out, "grpo shared-prefix vs transformers: "));
}

static void
peer_bf16(void **s)
{
    (void)s;
    with_peer("bf16");
}

static void
peer_fp8(void **s)
{
    (void)s;
    with_peer("fp8");
}

static void
no_hf(void **s)
{
    (void)s;
    int rc = bench("bf16", "--no-hf");
    if (rc == -2)
        skip();
    assert_int_equal(rc, 0);
    grpo_rows();
    assert_null(strstr(out, "transformers"));
}

static void
scenarios_subset(void **s)
{
    (void)s;
    int rc = bench("bf16", "--no-hf --scenarios independent,shared");
    if (rc == -2)
        skip();
    assert_int_equal(rc, 0);
    const char *sh = strstr(out, "| 1 prompt x G (shared prefill + pages) |");
    const char *in = strstr(out, "| G independent prompts x 1 |");
    assert_non_null(sh);
    assert_non_null(in);
    assert_true(sh < in); /* the table keeps its own order, not the list's */
    assert_null(strstr(out, "| 1 prompt x G, batch-1 decode |"));
    assert_int_equal(bench("bf16", "--no-hf --scenarios batch1"), 0);
    assert_non_null(strstr(out, "| 1 prompt x G, batch-1 decode |"));
    assert_null(strstr(out, "| G independent prompts x 1 |"));
    assert_null(strstr(out, "| 1 prompt x G (shared prefill + pages) |"));
}

static void
scenarios_bad(void **s)
{
    (void)s;
    static const char *const bad[] = {"--scenarios shared,bogus", "--scenarios ''",
                                      "--scenarios shared,", "--scenarios sharedx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, "--no-hf %s 2>/dev/null", bad[i]);
        int rc = bench("bf16", extra);
        if (rc == -2)
            skip();
        assert_int_equal(rc, 2); /* a usage error, before any scenario runs */
        assert_null(strstr(out, "| scenario |"));
    }
}

static void
speculative(void **s)
{
    (void)s;
    int rc = bench("bf16", "--no-hf --scenarios shared,batch1 --speculative 2");
    if (rc == -2)
        skip();
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "| 1 prompt x G (shared prefill + pages) |"));
    assert_non_null(strstr(out, "| 1 prompt x G (shared prefill + pages), speculative 2 ("));
    assert_non_null(strstr(out, "| 1 prompt x G, batch-1 decode, speculative 2 ("));
    assert_non_null(strstr(out, "tokens per verify) |"));
    assert_non_null(strstr(out, "speculative 2 vs off, shared: "));
    assert_non_null(strstr(out, "speculative 2 vs off, batch1: "));
    assert_int_equal(bench("fp8", "--no-hf --scenarios shared --speculative 2 2>/dev/null"), 1);
    assert_int_equal(bench("bf16", "--no-hf --speculative 5 2>/dev/null"), 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(peer_bf16),     cmocka_unit_test(peer_fp8),
        cmocka_unit_test(no_hf),         cmocka_unit_test(scenarios_subset),
        cmocka_unit_test(scenarios_bad), cmocka_unit_test(speculative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
