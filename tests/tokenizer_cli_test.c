/* `grpo tokenize`, the exact interface other tools parse: ids on one line separated by single
 * spaces, --decode writing the exact bytes with no newline, --chat printing the ids of the
 * rendered conversation (--jsonl: one conversation per line); all checked against the HF /
 * jinja2 fixtures. Runs $GRPO_BIN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer_fixtures.h"
#include <cjson/cJSON.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[512];

/* Runs `$GRPO_BIN tokenize ARGS < in` and returns its stdout; *rc gets the exit status. */
static char *
run(const char *args, const void *in, size_t inlen, size_t *outlen, int *rc)
{
    char inpath[600], cmd[8192];
    snprintf(inpath, sizeof inpath, "%s/in", tmpdir);
    assert_int_equal(grpo__write_file_atomic(inpath, in, inlen), GRPO_OK);
    snprintf(cmd, sizeof cmd, "'%s' tokenize %s < '%s' 2>'%s/err'", getenv("GRPO_BIN"), args,
             inpath, tmpdir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    grpo_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
        assert_int_equal(grpo__buf_append(&b, chunk, n), GRPO_OK);
    int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (b.data == NULL)
        assert_int_equal(grpo__buf_append(&b, "", 0), GRPO_OK);
    *outlen = b.len;
    return b.data;
}

static void
ids_line(grpo_buf *b, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(grpo__buf_printf(b, i ? " %d" : "%d", ids[i]), GRPO_OK);
    assert_int_equal(grpo__buf_append(b, "\n", 1), GRPO_OK);
}

static int
setup(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0 || access(bin, X_OK) != 0) {
        fprintf(stderr, "FATAL: GRPO_BIN (%s) is not an executable grpo\n", bin ? bin : "unset");
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/grpo_tok_cli_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) != NULL && fx_v3_path() != NULL ? 0 : -1;
}

static int
teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void
test_encode_decode(void **state)
{
    (void)state;
    fx_file corpus, enc;
    assert_int_equal(fx_load(&corpus, "corpus.bin", 'C'), 0);
    assert_int_equal(fx_load(&enc, "encode_v3.bin", 'E'), 0);
    char args[4200];
    snprintf(args, sizeof args, "--tokenizer '%s'", fx_v3_path());
    /* a spread of the corpus: specials, scripts, whitespace runs, a long line */
    size_t picks[] = {5, 2600, 9000, 15000, 19500, corpus.n - 1};
    for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++) {
        const fx_item *s = &corpus.items[picks[k]], *want = &enc.items[picks[k]];
        size_t n;
        int rc;
        char *out = run(args, s->text, s->len, &n, &rc);
        assert_int_equal(rc, 0);
        grpo_buf w = {0};
        ids_line(&w, want->ids, want->n);
        assert_int_equal(n, w.len);
        assert_memory_equal(out, w.data, n);
        /* and back: --decode gives the exact bytes, no newline added */
        char dargs[4300];
        snprintf(dargs, sizeof dargs, "%s --decode", args);
        size_t dn;
        char *text = run(dargs, w.data, w.len, &dn, &rc);
        assert_int_equal(rc, 0);
        assert_int_equal(dn, s->len);
        assert_memory_equal(text, s->text, dn);
        free(text);
        free(out);
        grpo__buf_fini(&w);
    }
    fx_free(&enc);
    fx_free(&corpus);
}

static void
test_bos_and_errors(void **state)
{
    (void)state;
    char args[4200];
    size_t n;
    int rc;
    snprintf(args, sizeof args, "--tokenizer '%s' --bos", fx_v3_path());
    char *out = run(args, "", 0, &n, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "0\n");
    free(out);
    out = run("--decode", "", 0, &n, &rc); /* no --tokenizer: usage error */
    assert_int_equal(rc, 2);
    free(out);
    out = run("--tokenizer /nonexistent.json", "x", 1, &n, &rc);
    assert_int_equal(rc, 1);
    free(out);
    snprintf(args, sizeof args, "--tokenizer '%s' --decode", fx_v3_path());
    out = run(args, "5 banana", 8, &n, &rc);
    assert_int_equal(rc, 1);
    free(out);
    /* stdin that is not UTF-8 is refused (HF takes only str), and nothing goes to stdout */
    snprintf(args, sizeof args, "--tokenizer '%s'", fx_v3_path());
    out = run(args, "ab\xff", 3, &n, &rc);
    assert_int_equal(rc, 1);
    assert_int_equal(n, 0);
    free(out);
    /* --messages without --chat is a usage error, not silently ignored */
    snprintf(args, sizeof args, "--tokenizer '%s' --messages /nonexistent.json", fx_v3_path());
    out = run(args, "x", 1, &n, &rc);
    assert_int_equal(rc, 2);
    free(out);
}

static void
test_chat(void **state)
{
    (void)state;
    char path[4096], *json;
    size_t n;
    fx_path(path, sizeof path, "chat_cases.json");
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    cJSON *cases = cJSON_Parse(json);
    int done = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        if (!cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")) || done >= 4)
            continue;
        const char *fam = cJSON_GetObjectItem(c, "family")->valuestring;
        char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
        char mpath[600], args[5000];
        snprintf(mpath, sizeof mpath, "%s/messages.json", tmpdir);
        assert_int_equal(grpo__write_file_atomic(mpath, msgs, strlen(msgs)), GRPO_OK);
        snprintf(args, sizeof args, "--tokenizer '%s' --chat %s --messages '%s'", fx_v3_path(), fam,
                 mpath);
        size_t on;
        int rc;
        char *out = run(args, "", 0, &on, &rc);
        assert_int_equal(rc, 0);
        grpo_buf w = {0};
        cJSON *ids = cJSON_GetObjectItem(c, "ids");
        for (int k = 0; k < cJSON_GetArraySize(ids); k++)
            grpo__buf_printf(&w, k ? " %d" : "%d", cJSON_GetArrayItem(ids, k)->valueint);
        grpo__buf_append(&w, "\n", 1);
        assert_string_equal(out, w.data);
        grpo__buf_fini(&w);
        free(out);
        free(msgs);
        done++;
    }
    assert_int_equal(done, 4);
    cJSON_Delete(cases);
    free(json);
}

/* --jsonl: every conversation of chat_random.json for one family with the generation prompt, in
 * one run; each output line equals the fixture (ids from HF on the jinja2 rendering) or, where
 * jinja2 fails, is {"error": ...}; any failed line makes the exit status 1. */
static void
test_chat_jsonl(void **state)
{
    (void)state;
    char path[4096], *json;
    size_t n;
    fx_path(path, sizeof path, "chat_random.json");
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    cJSON *cases = cJSON_Parse(json), *c, *want = cJSON_CreateArray();
    grpo_buf in = {0};
    cJSON_ArrayForEach(c, cases)
    {
        if (strcmp(cJSON_GetObjectItem(c, "family")->valuestring, "v3") != 0 ||
            !cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")))
            continue;
        char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
        assert_int_equal(grpo__buf_printf(&in, "%s\n", msgs), GRPO_OK);
        cJSON_AddItemReferenceToArray(want, c);
        free(msgs);
    }
    char mpath[600], args[5000];
    snprintf(mpath, sizeof mpath, "%s/messages.jsonl", tmpdir);
    assert_int_equal(grpo__write_file_atomic(mpath, in.data, in.len), GRPO_OK);
    snprintf(args, sizeof args, "--tokenizer '%s' --chat v3 --messages '%s' --jsonl", fx_v3_path(),
             mpath);
    size_t on;
    int rc, lines = 0, errors = 0;
    char *out = run(args, "", 0, &on, &rc), *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *got = cJSON_Parse(line), *w = cJSON_GetArrayItem(want, lines++);
        assert_non_null(got);
        assert_non_null(w);
        const cJSON *err = cJSON_GetObjectItem(w, "error");
        if (err != NULL && !cJSON_IsNull(err)) {
            assert_non_null(cJSON_GetObjectItem(got, "error"));
            errors++;
        } else {
            assert_string_equal(cJSON_GetObjectItem(got, "text")->valuestring,
                                cJSON_GetObjectItem(w, "text")->valuestring);
            assert_true(
                cJSON_Compare(cJSON_GetObjectItem(got, "ids"), cJSON_GetObjectItem(w, "ids"), 1));
        }
        cJSON_Delete(got);
    }
    assert_int_equal(lines, cJSON_GetArraySize(want));
    assert_true(errors > 0 && errors < lines); /* the fixture holds both kinds */
    assert_int_equal(rc, 1);
    free(out);
    grpo__buf_fini(&in);
    cJSON_Delete(want);
    cJSON_Delete(cases);
    free(json);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_decode),
        cmocka_unit_test(test_bos_and_errors),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_chat_jsonl),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
