/* `grpo verify` end to end: 400 R1-style lines from the math-verify fixture plus bad lines, run
 * with 1 and 3 jobs. Output order equals input order, bad lines carry an "error" and the run goes
 * on, results do not depend on the job count, and the math verdicts agree with math-verify's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common_int.h"

#define N_GOOD 400

static char tmpdir[256];

static int
sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Writes the input file; returns the math-verify verdicts of the good lines. */
static void
write_input(const char *path, int *mv, bool with_bad)
{
    char src[1024];
    snprintf(src, sizeof src, "%s/tests/data/math/r1_pairs.jsonl", getenv("GRPO_SOURCE_DIR"));
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(grpo__read_file(src, 0, &text, &n), GRPO_OK);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    int k = 0;
    for (char *line = strtok(text, "\n"); line && k < N_GOOD; line = strtok(NULL, "\n"), k++) {
        cJSON *r = cJSON_Parse(line);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", k);
        cJSON_AddStringToObject(o, "task", "math");
        cJSON_AddStringToObject(o, "completion", cJSON_GetObjectItem(r, "completion")->valuestring);
        cJSON_AddStringToObject(o, "answer", cJSON_GetObjectItem(r, "gold")->valuestring);
        mv[k] = cJSON_GetObjectItem(r, "mv")->valueint;
        char *s = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", s);
        if (with_bad && k % 100 == 50)
            fprintf(f, "{\"id\": \"bad%d\", \"completion\": 12}\n{not json\n\n", k);
        free(s);
        cJSON_Delete(o);
        cJSON_Delete(r);
    }
    fclose(f);
    free(text);
}

typedef struct outrow {
    char id[32];
    double reward;
    char verdict[32];
    int error;
} outrow;

static int
read_output(const char *path, outrow *rows, int cap)
{
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(grpo__read_file(path, 0, &text, &n), GRPO_OK);
    int k = 0;
    for (char *line = strtok(text, "\n"); line && k < cap; line = strtok(NULL, "\n"), k++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        outrow *r = &rows[k];
        memset(r, 0, sizeof *r);
        cJSON *id = cJSON_GetObjectItem(o, "id");
        if (cJSON_IsNumber(id))
            snprintf(r->id, sizeof r->id, "%d", id->valueint);
        else if (cJSON_IsString(id))
            snprintf(r->id, sizeof r->id, "%s", id->valuestring);
        r->error = cJSON_GetObjectItem(o, "error") != NULL;
        if (!r->error) {
            r->reward = cJSON_GetObjectItem(o, "reward")->valuedouble;
            cJSON *v0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "verdicts"), 0);
            snprintf(r->verdict, sizeof r->verdict, "%s",
                     cJSON_GetObjectItem(v0, "verdict")->valuestring);
        }
        cJSON_Delete(o);
    }
    free(text);
    return k;
}

static void
test_cli(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0)
        skip();
    static int mv[N_GOOD];
    static outrow a[N_GOOD + 20], b[N_GOOD + 20];
    char in[300], o1[300], o3[300], cmd[4096];
    snprintf(in, sizeof in, "%s/in.jsonl", tmpdir);
    snprintf(o1, sizeof o1, "%s/o1.jsonl", tmpdir);
    snprintf(o3, sizeof o3, "%s/o3.jsonl", tmpdir);
    write_input(in, mv, true);
    snprintf(cmd, sizeof cmd, "%s verify --input %s --output %s --jobs 1 2>/dev/null", bin, in, o1);
    assert_int_equal(sh(cmd), 1); /* some lines have errors */
    snprintf(cmd, sizeof cmd, "%s verify --input %s --output %s --jobs 3 2>/dev/null", bin, in, o3);
    assert_int_equal(sh(cmd), 1);
    int na = read_output(o1, a, N_GOOD + 20), nb = read_output(o3, b, N_GOOD + 20);
    assert_int_equal(na, N_GOOD + 8); /* 4 x (wrong type + not json) */
    assert_int_equal(na, nb);
    int good = 0, agree = 0, errors = 0;
    for (int k = 0; k < na; k++) {
        assert_string_equal(a[k].id, b[k].id);
        assert_int_equal(a[k].error, b[k].error);
        assert_true(a[k].reward == b[k].reward);
        assert_string_equal(a[k].verdict, b[k].verdict);
        if (a[k].error) {
            errors++;
            continue;
        }
        assert_int_equal(atoi(a[k].id), good); /* input order */
        agree += (strcmp(a[k].verdict, "correct") == 0) == (mv[good] == 1);
        good++;
    }
    assert_int_equal(good, N_GOOD);
    assert_int_equal(errors, 8);
    assert_true(agree * 100 >= 95 * N_GOOD);
    /* a code task goes to the code verifier (no code block: a verdict without the sandbox) */
    snprintf(cmd, sizeof cmd,
             "printf '%%s\\n' '{\"id\": 1, \"task\": \"code\", \"completion\": "
             "\"<think>x</think>no code here\", \"tests\": {\"inputs\": [\"\"], \"outputs\": "
             "[\"1\"]}}' > %s/code.jsonl && %s verify --input %s/code.jsonl --output %s/code.out "
             "2>/dev/null && grep -q '\"verifier\":\"code\"' %s/code.out && "
             "grep -q '\"verifier\":\"format\",\"version\":\"1.0.0\",\"verdict\":\"ok\"' "
             "%s/code.out",
             tmpdir, bin, tmpdir, tmpdir, tmpdir, tmpdir);
    assert_int_equal(sh(cmd), 0);
    /* a clean file exits 0; a usage error exits 2 */
    write_input(in, mv, false);
    snprintf(cmd, sizeof cmd, "%s verify --input %s --output %s 2>/dev/null", bin, in, o1);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s verify --jobs 0 --input %s 2>/dev/null", bin, in);
    assert_int_equal(sh(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s verify --input %s/none.jsonl 2>/dev/null", bin, tmpdir);
    assert_int_equal(sh(cmd), 1);
    /* a bad reward config is a clear error */
    snprintf(cmd, sizeof cmd,
             "echo '{\"tasks\": {\"math\": \"2*nope\"}}' > %s/r.json && "
             "%s verify --input %s --config %s/r.json 2>%s/err.txt",
             tmpdir, bin, in, tmpdir, tmpdir);
    assert_int_equal(sh(cmd), 1);
    snprintf(cmd, sizeof cmd, "grep -q 'r.json: task \"math\" uses verifier \"nope\"' %s/err.txt",
             tmpdir);
    assert_int_equal(sh(cmd), 0);
}

/* Runs `grpo verify ARGS`; returns its exit status and checks that stderr holds exactly one line
 * containing want. */
static int
usage_case(const char *bin, const char *args, const char *want)
{
    char cmd[2048], err[300];
    snprintf(err, sizeof err, "%s/usage_err.txt", tmpdir);
    snprintf(cmd, sizeof cmd, "%s verify %s 2>%s", bin, args, err);
    int rc = sh(cmd);
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(grpo__read_file(err, 0, &text, &n), GRPO_OK);
    if (strstr(text, want) == NULL)
        fail_msg("`grpo verify %s`: stderr \"%s\" lacks \"%s\"", args, text, want);
    assert_true(n > 0 && text[n - 1] == '\n' && memchr(text, '\n', n) == text + n - 1);
    free(text);
    return rc;
}

/* Usage errors name the real problem and exit 2: a positional argument is unexpected (not "needs
 * a value"), an unknown option is unknown, a known option at the end needs a value. */
static void
test_usage(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0)
        skip();
    assert_int_equal(usage_case(bin, "foo", "unexpected argument foo"), 2);
    assert_int_equal(usage_case(bin, "--input x.jsonl foo", "unexpected argument foo"), 2);
    assert_int_equal(usage_case(bin, "foo --input x.jsonl", "unexpected argument foo"), 2);
    assert_int_equal(usage_case(bin, "- --input x.jsonl", "unexpected argument -"), 2);
    assert_int_equal(usage_case(bin, "--bogus", "unknown option --bogus"), 2);
    assert_int_equal(usage_case(bin, "--bogus 1 --input x.jsonl", "unknown option --bogus"), 2);
    assert_int_equal(usage_case(bin, "--input", "--input needs a value"), 2);
    assert_int_equal(usage_case(bin, "--input x.jsonl --jobs", "--jobs needs a value"), 2);
    assert_int_equal(usage_case(bin, "--jobs 2", "--input is required"), 2);
    assert_int_equal(usage_case(bin, "--input x.jsonl --plugin-config {}",
                                "--plugin-config must follow a --plugin"),
                     2);
    assert_int_equal(
        usage_case(bin, "--input x.jsonl --plugin nope", "--plugin wants NAME=PATH, not \"nope\""),
        2);
    assert_int_equal(usage_case(bin, "--input x.jsonl --deadline-ms -1",
                                "--deadline-ms must be in (0, 3600000], not \"-1\""),
                     2);
}

static const char *plugin_path;

/* A plugin named on the command line and one described in the config (in process), composed with
 * the format verifier: rewards follow the plugin's documented rule (keyword after </think>). */
static void
test_plugin(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0 || plugin_path == NULL)
        skip();
    char cmd[4096], out[300];
    snprintf(out, sizeof out, "%s/kw.out", tmpdir);
    snprintf(cmd, sizeof cmd,
             "printf '%%s\\n' '{\"id\":1,\"task\":\"kw\",\"completion\":\"<think>a</think> QED\"}' "
             "'{\"id\":2,\"task\":\"kw\",\"completion\":\"<think>QED</think> no\"}' > %s/kw.jsonl"
             " && %s verify --input %s/kw.jsonl --output %s --plugin kw=%s "
             "--plugin-config '{\"keyword\": \"QED\"}' 2>/dev/null",
             tmpdir, bin, tmpdir, out, plugin_path);
    assert_int_equal(sh(cmd), 0);
    outrow r[4];
    assert_int_equal(read_output(out, r, 4), 2);
    assert_true(r[0].reward == 1.0 && strcmp(r[0].verdict, "keyword-found") == 0);
    assert_true(r[1].reward == 0.0 && strcmp(r[1].verdict, "keyword-missing") == 0);
    snprintf(cmd, sizeof cmd,
             "echo '{\"tasks\":{\"kw\":\"0.5*kw + 0.25*format\"},\"verifiers\":{\"kw\":"
             "{\"plugin\":\"%s\",\"in_process\":true,\"config\":{\"keyword\":\"QED\"}}}}'"
             " > %s/kw.json && %s verify --input %s/kw.jsonl --output %s --config %s/kw.json"
             " 2>/dev/null",
             plugin_path, tmpdir, bin, tmpdir, out, tmpdir);
    assert_int_equal(sh(cmd), 0);
    assert_int_equal(read_output(out, r, 4), 2);
    assert_true(r[0].reward == 0.75 && r[1].reward == 0.25);
}

static const char *evil_path;

/* The hard per-item deadline: an in-process plugin that never returns is written as a deadline
 * error, the lines around it are scored, order is kept, and the run ends. */
static void
test_deadline(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0 || evil_path == NULL)
        skip();
    char cmd[4096], out[300];
    snprintf(out, sizeof out, "%s/dl.out", tmpdir);
    snprintf(
        cmd, sizeof cmd,
        "printf '%%s\\n' '{\"id\":1,\"task\":\"format\",\"completion\":\"<think>a</think>b\"}' "
        "'{\"id\":2,\"task\":\"evil\",\"completion\":\"x\"}' "
        "'{\"id\":3,\"task\":\"format\",\"completion\":\"<think>a</think>b\"}' > %s/dl.jsonl"
        " && echo '{\"tasks\":{\"evil\":\"evil\"},\"verifiers\":{\"evil\":{\"plugin\":"
        "\"%s\",\"in_process\":true,\"config\":\"loop\"}}}' > %s/dl.json && "
        "%s verify --input %s/dl.jsonl --output %s --config %s/dl.json --jobs 1 "
        "--deadline-ms 3000 2>/dev/null",
        tmpdir, evil_path, tmpdir, bin, tmpdir, out, tmpdir);
    assert_int_equal(sh(cmd), 1);
    outrow r[4];
    assert_int_equal(read_output(out, r, 4), 3);
    assert_string_equal(r[0].id, "1");
    assert_string_equal(r[1].id, "2");
    assert_string_equal(r[2].id, "3");
    assert_true(!r[0].error && r[0].reward == 1.0);
    assert_true(r[1].error);
    assert_true(!r[2].error && r[2].reward == 1.0); /* scored by the replacement worker */
}

/* A sandboxed plugin that loops: the plugin-timeout verdict, not a deadline error, although the
 * plugin's timeout equals the item budget. */
static void
test_plugin_timeout_wins(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0 || evil_path == NULL)
        skip();
    char cmd[4096], out[300];
    snprintf(out, sizeof out, "%s/pt.out", tmpdir);
    snprintf(cmd, sizeof cmd,
             "echo '{\"id\":1,\"task\":\"evil\",\"completion\":\"x\"}' > %s/pt.jsonl && "
             "echo '{\"tasks\":{\"evil\":\"evil\"},\"verifiers\":{\"evil\":{\"plugin\":"
             "\"%s\",\"config\":\"loop\"}}}' > %s/pt.json && GRPO_PLUGIN_TIMEOUT_MS=2000 %s "
             "verify --input %s/pt.jsonl --output %s --config %s/pt.json --deadline-ms 2000 "
             "2>/dev/null",
             tmpdir, evil_path, tmpdir, bin, tmpdir, out, tmpdir);
    assert_int_equal(sh(cmd), 0);
    outrow r[2];
    assert_int_equal(read_output(out, r, 2), 1);
    assert_false(r[0].error);
    assert_string_equal(r[0].verdict, "plugin-timeout");
}

/* Bytes that are not UTF-8 in a completion and in a plugin's label: every output line is valid
 * UTF-8 JSON, each bad byte one U+FFFD, the valid text around it unchanged. */
static void
test_invalid_utf8(void **state)
{
    (void)state;
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == 0 || evil_path == NULL)
        skip();
    char cmd[4096], in[300], out[300];
    snprintf(in, sizeof in, "%s/u8.jsonl", tmpdir);
    snprintf(out, sizeof out, "%s/u8.out", tmpdir);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    fputs("{\"id\":1,\"task\":\"format\",\"completion\":\"<think>\xff\xfe</"
          "think>a\xc0\xaf\xe2\x82\"}\n"
          "{\"id\":2,\"task\":\"evil\",\"completion\":\"\xed\xa0\x80 caf\xc3\xa9\"}\n"
          "{\"id\":3,\"completion\":\"\xf4\x90\x80\x80\", \"answer\": 1}\n"
          "{\"id\":\"\xff\", \"completion\": 7}\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "echo '{\"tasks\":{\"evil\":\"evil\"},\"verifiers\":{\"evil\":{\"plugin\":"
             "\"%s\",\"config\":\"badlabel\"}}}' > %s/u8.json && %s verify --input %s "
             "--output %s --config %s/u8.json 2>/dev/null",
             evil_path, tmpdir, bin, in, out, tmpdir);
    assert_int_equal(sh(cmd), 1); /* line 4 is an error line */
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(grpo__read_file(out, 0, &text, &n), GRPO_OK);
    if (!grpo__utf8_valid(text, n))
        fail_msg("output is not UTF-8 at byte %zu: %s", grpo__utf8_valid_len(text, n), text);
    outrow r[5];
    assert_int_equal(read_output(out, r, 5), 4);
    assert_non_null(strstr(text, "<think>\xef\xbf\xbd\xef\xbf\xbd</think>a\xef\xbf\xbd\xef\xbf\xbd"
                                 "\xef\xbf\xbd\xef\xbf\xbd\""));
    assert_non_null(strstr(text, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd caf\xc3\xa9"));
    assert_non_null(strstr(text, "bad\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz"));
    assert_true(r[3].error);
    free(text);
}

static int
setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/grpo_verify_cli_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int
teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return sh(cmd) == 0 ? 0 : -1;
}

int
main(int argc, char **argv)
{
    plugin_path = argc > 1 ? argv[1] : NULL;
    evil_path = argc > 2 ? argv[2] : NULL;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cli),
                                       cmocka_unit_test(test_usage),
                                       cmocka_unit_test(test_plugin),
                                       cmocka_unit_test(test_deadline),
                                       cmocka_unit_test(test_plugin_timeout_wins),
                                       cmocka_unit_test(test_invalid_utf8)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
