/* `grpo generate` against transformers' greedy continuation (expected.json of the tiny models),
 * and its usage and load errors. Needs GRPO_BIN (set by ctest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/model_testutil.h"

#include <sys/wait.h>

/* Runs cmd; stdout into out (NUL-terminated); returns the exit status. */
static int
run(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
greedy_matches(const char *name)
{
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || *bin == 0)
        skip();
    char dir[1024], p[2048], cmd[8192], out[4096], ids[1024] = "";
    tm_dir(name, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/expected.json", dir);
    cJSON *j = NULL;
    assert_int_equal(grpo__json_parse_file(p, 1 << 20, &j), GRPO_OK);
    const cJSON *pr = cJSON_GetObjectItem(j, "greedy_prompt"),
                *gt = cJSON_GetObjectItem(j, "greedy_tokens");
    for (int i = 0; i < cJSON_GetArraySize(pr); i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? " " : "",
                 cJSON_GetArrayItem(pr, i)->valueint);
    snprintf(cmd, sizeof cmd,
             "%s generate --model %s --prompt-ids \"%s\" --max-new-tokens %d "
             "--no-eos-stop --threads 2 2>/dev/null",
             bin, dir, ids, cJSON_GetArraySize(gt));
    assert_int_equal(run(cmd, out, sizeof out), 0);
    char want[1024] = "";
    for (int i = 0; i < cJSON_GetArraySize(gt); i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", i ? " " : "",
                 cJSON_GetArrayItem(gt, i)->valueint);
    strcat(want, "\n");
    printf("    %s: %s", name, out);
    assert_string_equal(out, want);
    cJSON_Delete(j);
}

static void
generate_bf16(void **s)
{
    (void)s;
    greedy_matches("bf16");
}
static void
generate_fp8(void **s)
{
    (void)s;
    greedy_matches("fp8");
}

static void
generate_errors(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || *bin == 0)
        skip();
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "%s generate --prompt-ids 1 2>&1", bin);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--model"));
    snprintf(cmd, sizeof cmd, "%s generate --model /nonexistent/m --prompt-ids 1 2>&1", bin);
    assert_int_equal(run(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "/nonexistent/m/config.json"));
    char dir[1024];
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-ids \"1 x\" 2>&1", bin,
             tm_dir("bf16", dir, sizeof dir));
    assert_int_equal(run(cmd, out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-ids 99999 2>&1", bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "vocabulary"));
    /* --prompt needs a tokenizer: the tiny model directory has none */
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt hi 2>&1", bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "tokenizer.json"));
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt hi --prompt-ids 1 2>&1", bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    /* unknown flags and out-of-range numbers are usage errors naming the flag */
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-ids 1 --frob 2>&1", bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "unknown option \"--frob\""));
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-ids 1 --threads 100000 2>&1", bin,
             dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-ids 1 --max-new-tokens \"\" 2>&1",
             bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    /* 1 + 1280 tokens do not fit max_position_embeddings = 1280 (config.json) */
    snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt-ids 1 --max-new-tokens 1280 2>&1",
             bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "max_position_embeddings"));
    /* an unwritable --logits-out names the file and the reason */
    snprintf(cmd, sizeof cmd,
             "%s generate --model %s --prompt-ids 1 --logits-out /nonexistent/l.bin 2>&1", bin,
             dir);
    assert_int_equal(run(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "/nonexistent/l.bin: cannot open for writing"));
    snprintf(cmd, sizeof cmd, "%s generate --help", bin);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "--temperature"));
    assert_non_null(strstr(out, "--chat"));
}

/* `grpo bench forward` runs and prints its table (timings are not checked). */
static void
bench_smoke(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || *bin == 0)
        skip();
    char dir[1024], cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd,
             "%s bench forward --model %s --batches 1,3 --prompt-len 5 --steps 2 "
             "--memcpy-mb 1 --threads 2 2>&1",
             bin, tm_dir("fp8", dir, sizeof dir));
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "decode tok/s"));
    assert_non_null(strstr(out, "memcpy"));
    snprintf(cmd, sizeof cmd, "%s bench forward --model %s --batches x 2>&1", bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(generate_bf16),
        cmocka_unit_test(generate_fp8),
        cmocka_unit_test(generate_errors),
        cmocka_unit_test(bench_smoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
