/* The verifier plugin host: the example plugin gives the same verdicts in-process and in its
 * sandboxed worker; unknown ABIs and non-plugins are refused with a clear message; a plugin that
 * segfaults, loops, leaks, exits or tries to escape is contained, reported as an ERROR verdict,
 * and the next call works. */
#include "grpo/verify.h"

#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

static const char *example, *evil, *badabi, *noentry;

static grpo_verdict
score(const grpo_verifier_api *api, void *st, const char *completion, const char *answer)
{
    grpo_verifier_sample s;
    grpo_verdict v;
    memset(&s, 0, sizeof s);
    s.completion = completion;
    s.completion_len = strlen(completion);
    s.answer = answer;
    assert_int_equal(api->score(st, &s, &v), 0);
    return v;
}

static void
t_example_same_both_ways(void **state)
{
    (void)state;
    const char *cases[] = {"<think>maybe QED</think> no", "<think>x</think> so QED.", "QED", "",
                           "qed"};
    grpo_plugin *in, *sb;
    void *s1, *s2;
    char *err = NULL;
    assert_int_equal(grpo_plugin_load(&in, example, 1), GRPO_OK);
    assert_int_equal(grpo_plugin_load(&sb, example, 0), GRPO_OK);
    const grpo_verifier_api *a = grpo_plugin_api(in), *b = grpo_plugin_api(sb);
    assert_string_equal(a->name, "keyword");
    assert_string_equal(b->name, "keyword");
    assert_string_equal(b->version, a->version);
    assert_int_equal(a->init("{\"keyword\": \"QED\", \"reward\": 0.5}", &s1, &err), 0);
    assert_int_equal(b->init("{\"keyword\": \"QED\", \"reward\": 0.5}", &s2, &err), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grpo_verdict x = score(a, s1, cases[i], NULL), y = score(b, s2, cases[i], NULL);
        assert_int_equal(x.kind, y.kind);
        assert_true(x.score == y.score);
        assert_string_equal(x.label, y.label);
        assert_string_equal(x.details_json, y.details_json);
        /* the plugin's own rule, checked independently here */
        const char *ans =
            strstr(cases[i], "</think>") ? strstr(cases[i], "</think>") + 8 : cases[i];
        assert_int_equal(x.kind, strstr(ans, "QED") ? GRPO_VERDICT_PASS : GRPO_VERDICT_FAIL);
        free(x.details_json);
        free(y.details_json);
    }
    /* a bad config is the plugin's error, passed through */
    void *s3;
    assert_int_not_equal(b->init("{}", &s3, &err), 0);
    assert_non_null(err);
    assert_non_null(strstr(err, "keyword"));
    free(err);
    a->fini(s1);
    b->fini(s2);
    grpo_plugin_destroy(in);
    grpo_plugin_destroy(sb);
}

static void
t_refused(void **state)
{
    (void)state;
    grpo_plugin *p = NULL;
    for (int in = 0; in <= 1; in++) {
        assert_int_equal(grpo_plugin_load(&p, badabi, in), GRPO_EVERSION);
        assert_null(p);
        assert_non_null(strstr(grpo_error_last(), "ABI 2.0 is not supported"));
        assert_int_equal(grpo_plugin_load(&p, noentry, in), GRPO_EVERSION);
        assert_non_null(strstr(grpo_error_last(), "grpo_verifier_entry"));
        assert_int_not_equal(grpo_plugin_load(&p, "/nonexistent/plugin.so", in), GRPO_OK);
    }
}

/* Scores with a "mode" state and expects an ERROR verdict with the label; then a fresh "ok"
 * state on the same plugin must work (the worker was restarted). */
static void
contained(grpo_plugin *p, const char *mode, const char *label_prefix)
{
    const grpo_verifier_api *api = grpo_plugin_api(p);
    void *bad, *ok;
    char *err = NULL;
    assert_int_equal(api->init(mode, &bad, &err), 0);
    assert_int_equal(api->init("ok", &ok, &err), 0);
    grpo_verdict v = score(api, bad, "x", NULL);
    fprintf(stderr, "  %-6s -> kind %d label %s details %s\n", mode, v.kind, v.label,
            v.details_json ? v.details_json : "");
    assert_int_equal(v.kind, GRPO_VERDICT_ERROR);
    assert_true(strncmp(v.label, label_prefix, strlen(label_prefix)) == 0);
    free(v.details_json);
    v = score(api, ok, "abcd", NULL);
    assert_int_equal(v.kind, GRPO_VERDICT_PASS);
    assert_true(v.score == 4.0 / 7.0);
    assert_string_equal(v.label, "evil-ok");
    free(v.details_json);
    api->fini(bad);
    api->fini(ok);
}

static void
t_crash_loop_exit(void **state)
{
    (void)state;
    grpo_plugin *p;
    setenv("GRPO_PLUGIN_TIMEOUT_MS", "1000", 1);
    assert_int_equal(grpo_plugin_load(&p, evil, 0), GRPO_OK);
    contained(p, "segv", "plugin-crashed");
    contained(p, "loop", "plugin-timeout");
    contained(p, "exit", "plugin-crashed");
    contained(p, "badkind", "plugin-bad-reply");
    grpo_plugin_destroy(p);
    unsetenv("GRPO_PLUGIN_TIMEOUT_MS");
}

/* abort() in the sandboxed worker is SIGABRT in the verdict (it was SIGSEGV while the worker was
 * PID 1 of its namespace, where its own SIGABRT is ignored and glibc falls back on a crash). */
static void
t_abort_signal(void **state)
{
    (void)state;
    grpo_plugin *p;
    void *bad;
    char *err = NULL;
    assert_int_equal(grpo_plugin_load(&p, evil, 0), GRPO_OK);
    const grpo_verifier_api *api = grpo_plugin_api(p);
    assert_int_equal(api->init("abort", &bad, &err), 0);
    grpo_verdict v = score(api, bad, "x", NULL);
    fprintf(stderr, "  abort -> %s %s\n", v.label, v.details_json ? v.details_json : "");
    assert_string_equal(v.label, "plugin-crashed");
    assert_non_null(v.details_json);
    assert_non_null(strstr(v.details_json, "\"status\":\"signaled\""));
    assert_non_null(strstr(v.details_json, "\"signal\":6,"));
    free(v.details_json);
    api->fini(bad);
    grpo_plugin_destroy(p);
}

static void
t_leak(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    /* RLIMIT_AS cannot apply to an ASan process (terabytes of shadow mappings): the worker's
     * memory limit is off in this build, see sandbox/rlimits.c. */
    skip();
#else
    grpo_plugin *p;
    setenv("GRPO_PLUGIN_MEMORY_MB", "256", 1);
    assert_int_equal(grpo_plugin_load(&p, evil, 0), GRPO_OK);
    const grpo_verifier_api *api = grpo_plugin_api(p);
    void *leak;
    char *err = NULL;
    assert_int_equal(api->init("leak", &leak, &err), 0);
    int errors = 0;
    for (int i = 0; i < 8; i++) { /* 64 MiB a call against a 256 MiB limit */
        grpo_verdict v = score(api, leak, "x", NULL);
        if (v.kind == GRPO_VERDICT_ERROR) {
            fprintf(stderr, "  leak call %d -> %s %s\n", i, v.label, v.details_json);
            assert_string_equal(v.label, "plugin-memory");
            errors++;
        }
        free(v.details_json);
    }
    assert_true(errors >= 1);
    api->fini(leak);
    contained(p, "segv", "plugin-crashed"); /* and it still serves */
    grpo_plugin_destroy(p);
    unsetenv("GRPO_PLUGIN_MEMORY_MB");
#endif
}

static void
t_escape(void **state)
{
    (void)state;
    grpo_plugin *p;
    char canary[64], answer[128];
    snprintf(canary, sizeof canary, "/tmp/grpo-plugin-canary-%d", (int)getpid());
    FILE *f = fopen(canary, "w");
    fputs("secret", f);
    fclose(f);
    struct sockaddr_in sa = {0};
    socklen_t sl = sizeof sa;
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    listen(lfd, 2);
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    snprintf(answer, sizeof answer, "%s %d", canary, ntohs(sa.sin_port));
    assert_int_equal(grpo_plugin_load(&p, evil, 0), GRPO_OK);
    const grpo_verifier_api *api = grpo_plugin_api(p);
    void *st;
    char *err = NULL;
    assert_int_equal(api->init("escape", &st, &err), 0);
    grpo_verdict v = score(api, st, "x", answer);
    assert_int_equal(v.kind, GRPO_VERDICT_PASS);
    assert_string_equal(v.details_json, "{\"read\":0,\"write\":0,\"connect\":0,\"kill\":0}");
    free(v.details_json);
    assert_true(accept(lfd, NULL, NULL) < 0 && errno == EAGAIN);
    assert_int_equal(access("/usr/plugin_escape", F_OK), -1);
    api->fini(st);
    grpo_plugin_destroy(p);
    close(lfd);
    unlink(canary);
}

int
main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: plugin_host_test EXAMPLE.so EVIL.so BADABI.so NOENTRY.so\n");
        return 2;
    }
    example = argv[1];
    evil = argv[2];
    badabi = argv[3];
    noentry = argv[4];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_example_same_both_ways),
        cmocka_unit_test(t_refused),
        cmocka_unit_test(t_crash_loop_exit),
        cmocka_unit_test(t_abort_signal),
        cmocka_unit_test(t_leak),
        cmocka_unit_test(t_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
