/* The code verifier: extracts the program from a completion, runs it on the task's tests inside
 * the sandbox (Python through the pre-warmed zygote pool, C/C++ compiled with gcc/g++ inside the
 * sandbox and run once per test) and scores the fraction of tests passed. The harness decides
 * what passed: outputs are compared here, outside the sandbox, against expected values the
 * program never sees.
 *
 * init() config (JSON, all optional): time_limit_ms (per test, 4000), memory_mb (per test, 512),
 * compile_time_limit_ms (20000), compile_memory_mb (2048), max_tests (0 = all),
 * sample_time_limit_ms (60000: all tests of one sample; the tests not run then count as failed),
 * stop_on_first_failure (false), float_tolerance (1e-6), require_isolation (array of names,
 * default all of "user","pid","net","mount","ipc","uts","seccomp","nnp"). */
#include "verifiers/code/code_int.h"
#include "common/json.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SNIP 200

typedef struct runner {
    grpo_sandbox_pool *py;
    grpo_sandbox *sb;
    struct runner *next;
} runner;

typedef struct code_state {
    uint32_t time_ms, compile_ms;
    uint64_t mem, compile_mem;
    int64_t max_tests;
    bool stop_first;
    uint32_t budget_ms; /* all tests of one sample together */
    double tol;
    uint32_t require;
    pthread_mutex_t mu;
    runner *free_list;
} code_state;

typedef struct outcome {
    int passed, total, failed_test;
    double t0;               /* when the sample's tests started */
    bool budget_exhausted;   /* stopped early: the sample's time budget ran out */
    const char *fail_status; /* "wrong-answer", "timeout", "runtime-error", ... */
    grpo_buf expected, got, stderr_;
} outcome;

static uint32_t
iso_bit(const char *name)
{
    static const char *const names[] = {"user", "pid", "net",     "mount",
                                        "ipc",  "uts", "seccomp", "nnp"};
    for (int i = 0; i < 8; i++)
        if (strcmp(name, names[i]) == 0)
            return 1u << i;
    return 0;
}

static grpo_err
parse_config(code_state *s, const char *json)
{
    cJSON *c = NULL;
    grpo_err err = GRPO_OK;
    int64_t t = 4000, ct = 20000, mem = 512, cmem = 2048, budget = 60000;
    bool stop = false;
    double tol = 1e-6;
    const char *w = "code config";
    static const char *const keys[] = {"time_limit_ms",
                                       "compile_time_limit_ms",
                                       "memory_mb",
                                       "compile_memory_mb",
                                       "max_tests",
                                       "sample_time_limit_ms",
                                       "stop_on_first_failure",
                                       "float_tolerance",
                                       "require_isolation",
                                       NULL};
    s->max_tests = 0;
    s->require = GRPO_SANDBOX_ISO_ALL;
    if (json && *json) {
        if ((err = grpo__json_parse(json, strlen(json), w, &c)) != GRPO_OK)
            return err;
        if ((err = grpo__json_check_keys(c, w, keys)) != GRPO_OK)
            goto done;
        if ((err = grpo__json_int_opt(c, "time_limit_ms", w, 1, 600000, &t)) != GRPO_OK ||
            (err = grpo__json_int_opt(c, "compile_time_limit_ms", w, 1, 600000, &ct)) != GRPO_OK ||
            (err = grpo__json_int_opt(c, "memory_mb", w, 16, 65536, &mem)) != GRPO_OK ||
            (err = grpo__json_int_opt(c, "compile_memory_mb", w, 64, 65536, &cmem)) != GRPO_OK ||
            (err = grpo__json_int_opt(c, "max_tests", w, 0, 1000000, &s->max_tests)) != GRPO_OK ||
            (err = grpo__json_int_opt(c, "sample_time_limit_ms", w, 1, 3600000, &budget)) !=
                GRPO_OK ||
            (err = grpo__json_bool_opt(c, "stop_on_first_failure", w, &stop)) != GRPO_OK ||
            (err = grpo__json_num_opt(c, "float_tolerance", w, &tol)) != GRPO_OK)
            goto done;
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(c, "require_isolation");
        if (req) {
            const cJSON *it;
            s->require = 0;
            if (!cJSON_IsArray(req)) {
                err = grpo__fail(GRPO_EFORMAT, "%s: \"require_isolation\" must be an array", w);
                goto done;
            }
            cJSON_ArrayForEach(it, req)
            {
                uint32_t b = cJSON_IsString(it) ? iso_bit(it->valuestring) : 0;
                if (b == 0) {
                    err = grpo__fail(GRPO_EFORMAT,
                                     "%s: \"require_isolation\": unknown facility "
                                     "(expected user, pid, net, mount, ipc, uts, "
                                     "seccomp, nnp)",
                                     w);
                    goto done;
                }
                s->require |= b;
            }
            if (s->require == 0)
                s->require = 0x100; /* explicitly nothing */
        }
    }
    s->time_ms = (uint32_t)t;
    s->compile_ms = (uint32_t)ct;
    s->mem = (uint64_t)mem << 20;
    s->compile_mem = (uint64_t)cmem << 20;
    s->stop_first = stop;
    s->budget_ms = (uint32_t)budget;
    s->tol = tol;
done:
    cJSON_Delete(c);
    return err;
}

static int
code_init(const char *config_json, void **state, char **err_out)
{
    code_state *s = calloc(1, sizeof *s);
    grpo_err err;
    *state = NULL;
    if (err_out)
        *err_out = NULL;
    if (s == NULL)
        return GRPO_ENOMEM;
    if ((err = parse_config(s, config_json)) != GRPO_OK) {
        if (err_out)
            *err_out = strdup(grpo_error_last());
        free(s);
        return err;
    }
    pthread_mutex_init(&s->mu, NULL);
    *state = s;
    return 0;
}

static void
runner_free(runner *r)
{
    if (r == NULL)
        return;
    grpo_sandbox_pool_destroy(r->py);
    grpo_sandbox_destroy(r->sb);
    free(r);
}

static void
code_fini(void *state)
{
    code_state *s = state;
    if (s == NULL)
        return;
    for (runner *r = s->free_list, *n; r; r = n) {
        n = r->next;
        runner_free(r);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Takes a runner off the free list (or makes one); concurrent score() calls each get their own. */
static runner *
runner_get(code_state *s)
{
    runner *r;
    pthread_mutex_lock(&s->mu);
    r = s->free_list;
    if (r)
        s->free_list = r->next;
    pthread_mutex_unlock(&s->mu);
    return r ? r : calloc(1, sizeof(runner));
}

static void
runner_put(code_state *s, runner *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    r->next = s->free_list;
    s->free_list = r;
    pthread_mutex_unlock(&s->mu);
}

static void
snip(grpo_buf *b, const char *p, size_t n)
{
    b->len = 0;
    grpo__buf_append(b, p, n > SNIP ? SNIP : n);
    grpo__buf_append(b, "", 1);
}

static const char *
fail_status_of(const grpo_sandbox_result *r)
{
    switch (r->status) {
    case GRPO_SANDBOX_TIMEOUT:
        return "timeout";
    case GRPO_SANDBOX_MEMORY:
        return "memory-limit";
    case GRPO_SANDBOX_OUTPUT:
        return "output-limit";
    case GRPO_SANDBOX_SECCOMP:
        return "seccomp-killed";
    case GRPO_SANDBOX_SIGNALED:
        return "runtime-error";
    case GRPO_SANDBOX_EXITED:
        return r->exit_code == 0 ? NULL : "runtime-error";
    }
    return "runtime-error";
}

static void
record(outcome *o, int i, const char *status, const char *want, size_t want_n, const char *got,
       size_t got_n, const grpo_sandbox_result *r)
{
    if (status == NULL) {
        o->passed++;
        return;
    }
    if (o->failed_test >= 0)
        return;
    o->failed_test = i;
    o->fail_status = status;
    snip(&o->expected, want ? want : "", want ? want_n : 0);
    snip(&o->got, got ? got : "", got ? got_n : 0);
    snip(&o->stderr_, r && r->err ? r->err : "", r && r->err ? r->err_len : 0);
}

/* True when the sample has used its time budget and tests remain: they count as failed. */
static bool
over_budget(const code_state *s, outcome *o, int next, int n)
{
    if (next >= n || (grpo_now() - o->t0) * 1000.0 < (double)s->budget_ms)
        return false;
    o->budget_exhausted = true;
    if (o->failed_test < 0) {
        o->failed_test = next;
        o->fail_status = "sample-time-budget";
    }
    return true;
}

/* Room for the expected output: a correct answer of several MB must not hit the stdout cap. */
static void
fit_output(grpo_sandbox_limits *l, const char *expected)
{
    uint64_t want = expected ? 2 * (uint64_t)strlen(expected) + 65536 : 0;
    if (want > l->stdout_max)
        l->stdout_max = want;
    if (l->output_kill < 4 * l->stdout_max)
        l->output_kill = 4 * l->stdout_max;
}

static void
limits_for(const code_state *s, grpo_sandbox_limits *l)
{
    grpo_sandbox_limits_default(l);
    l->wall_ms = s->time_ms;
    l->cpu_ms = s->time_ms;
    l->mem_bytes = s->mem;
}

/* Python: one pool call per test. */
static grpo_err
run_python(code_state *s, runner *rn, const char *code, const code_tests *t, int n, outcome *o)
{
    grpo_err err = GRPO_OK;
    grpo_sandbox_limits l;
    cJSON *args = NULL;
    char *args_json = NULL, *ret = NULL;
    limits_for(s, &l);
    if (rn->py == NULL) {
        grpo_sandbox_opts opts = {s->require, NULL};
        if ((err = grpo_sandbox_pool_create(&rn->py, &opts, grpo_code__harness_py)) != GRPO_OK)
            return err;
    }
    for (int i = 0; i < n; i++) {
        grpo_sandbox_result r;
        args = cJSON_CreateObject();
        if (args == NULL || !cJSON_AddStringToObject(args, "code", code))
            goto oom;
        if (t->call_based) {
            if (!cJSON_AddStringToObject(args, "fn_name", t->fn_name) ||
                !cJSON_AddItemToObject(args, "args", cJSON_Duplicate(t->args[i], true)))
                goto oom;
        }
        if ((args_json = cJSON_PrintUnformatted(args)) == NULL)
            goto oom;
        const char *in = t->call_based ? "" : t->inputs[i];
        limits_for(s, &l);
        if (!t->call_based)
            fit_output(&l, t->outputs[i]);
        err = grpo_sandbox_pool_call(rn->py, t->call_based ? "call" : "stdio", args_json, in,
                                     strlen(in), &l, &r, &ret);
        if (err != GRPO_OK)
            goto done;
        const char *st = fail_status_of(&r);
        if (t->call_based) {
            cJSON *rv = NULL;
            char *want = cJSON_PrintUnformatted(t->expected[i]);
            if (st == NULL) {
                rv = ret ? cJSON_Parse(ret) : NULL;
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(rv, "v");
                const cJSON *e = t->expected[i];
                if (rv == NULL || cJSON_GetObjectItemCaseSensitive(rv, "bad"))
                    st = rv ? "bad-return-type" : "no-result";
                else if (!grpo_code__json_equal(v, e, s->tol) &&
                         !(cJSON_IsArray(e) && cJSON_GetArraySize(e) > 0 &&
                           grpo_code__json_equal(v, cJSON_GetArrayItem(e, 0), s->tol)))
                    st = "wrong-answer";
            }
            record(o, i, st, want, want ? strlen(want) : 0, ret, ret ? strlen(ret) : 0, &r);
            free(want);
            cJSON_Delete(rv);
        } else {
            if (st == NULL && !grpo_code__stdout_match(r.out, r.out_len, t->outputs[i], s->tol))
                st = "wrong-answer";
            record(o, i, st, t->outputs[i], strlen(t->outputs[i]), r.out, r.out_len, &r);
        }
        grpo_sandbox_result_fini(&r);
        free(ret);
        free(args_json);
        cJSON_Delete(args);
        ret = args_json = NULL;
        args = NULL;
        if ((s->stop_first && o->failed_test >= 0) || over_budget(s, o, i + 1, n))
            break;
    }
    goto done;
oom:
    err = grpo__fail(GRPO_ENOMEM, "code verifier: out of memory");
done:
    free(ret);
    free(args_json);
    cJSON_Delete(args);
    return err;
}

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* A host directory the sandbox may write (bound at /work): owned by the sandbox's host uid. */
static grpo_err
make_workdir(char *dir, size_t n)
{
    snprintf(dir, n, "%s/grpo-code-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "code verifier: mkdtemp %s", dir);
    uid_t u = (uid_t)grpo_sandbox_host_uid();
    if (geteuid() == 0 && chown(dir, u, (gid_t)u) != 0)
        return grpo__fail_errno(GRPO_EIO, errno, "code verifier: chown %s", dir);
    return GRPO_OK;
}

static grpo_err
compile(code_state *s, runner *rn, code_lang lang, const char *dir, grpo_sandbox_result *r)
{
    const char *cc[] = {"/usr/bin/gcc", "-O2",          "-std=gnu17", "-pipe", "-o",
                        "/work/prog",   "/work/main.c", "-lm",        NULL};
    const char *cxx[] = {"/usr/bin/g++", "-O2",        "-std=gnu++17",   "-pipe",
                         "-o",           "/work/prog", "/work/main.cpp", NULL};
    grpo_sandbox_bind b = {dir, "/work", 1};
    grpo_sandbox_cmd cmd;
    memset(&cmd, 0, sizeof cmd);
    cmd.argv = lang == CODE_C ? cc : cxx;
    cmd.binds = &b;
    cmd.n_binds = 1;
    grpo_sandbox_limits_default(&cmd.limits);
    cmd.limits.wall_ms = s->compile_ms;
    cmd.limits.cpu_ms = s->compile_ms;
    cmd.limits.mem_bytes = s->compile_mem;
    cmd.limits.nproc = 16;
    cmd.limits.nofile = 256;
    cmd.limits.stderr_max = 16384;
    cmd.limits.tmp_bytes = 256ull << 20;
    cmd.limits.fsize_bytes = 256ull << 20;
    return grpo_sandbox_run(rn->sb, &cmd, r);
}

static grpo_err
run_native(code_state *s, runner *rn, code_lang lang, const char *code, const code_tests *t, int n,
           outcome *o, bool *compile_error, grpo_buf *diag)
{
    char dir[256], path[300];
    grpo_err err;
    grpo_sandbox_result r;
    *compile_error = false;
    if (t->call_based)
        return grpo__fail(GRPO_EUNSUPPORTED, "code verifier: call-based tests need Python");
    if (rn->sb == NULL) {
        grpo_sandbox_opts opts = {s->require, NULL};
        if ((err = grpo_sandbox_create(&rn->sb, &opts)) != GRPO_OK)
            return err;
    }
    if ((err = make_workdir(dir, sizeof dir)) != GRPO_OK)
        return err;
    snprintf(path, sizeof path, "%s/%s", dir, lang == CODE_C ? "main.c" : "main.cpp");
    if ((err = grpo__write_file_atomic(path, code, strlen(code))) != GRPO_OK)
        goto done;
    chmod(path, 0644);
    if ((err = compile(s, rn, lang, dir, &r)) != GRPO_OK)
        goto done;
    if (r.status != GRPO_SANDBOX_EXITED || r.exit_code != 0) {
        *compile_error = true;
        snip(diag, r.err, r.err_len);
        grpo_sandbox_result_fini(&r);
        goto done;
    }
    grpo_sandbox_result_fini(&r);
    for (int i = 0; i < n; i++) {
        const char *argv[] = {"/work/prog", NULL};
        grpo_sandbox_bind b = {dir, "/work", 0};
        grpo_sandbox_cmd cmd;
        memset(&cmd, 0, sizeof cmd);
        cmd.argv = argv;
        cmd.binds = &b;
        cmd.n_binds = 1;
        cmd.stdin_data = t->inputs[i];
        cmd.stdin_len = strlen(t->inputs[i]);
        limits_for(s, &cmd.limits);
        fit_output(&cmd.limits, t->outputs[i]);
        if ((err = grpo_sandbox_run(rn->sb, &cmd, &r)) != GRPO_OK)
            goto done;
        const char *st = fail_status_of(&r);
        if (st == NULL && !grpo_code__stdout_match(r.out, r.out_len, t->outputs[i], s->tol))
            st = "wrong-answer";
        record(o, i, st, t->outputs[i], strlen(t->outputs[i]), r.out, r.out_len, &r);
        grpo_sandbox_result_fini(&r);
        if ((s->stop_first && o->failed_test >= 0) || over_budget(s, o, i + 1, n))
            break;
    }
done:
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return err;
}

static void
set_label(grpo_verdict *v, const char *label)
{
    snprintf(v->label, sizeof v->label, "%s", label);
}

static char *
details(const outcome *o, code_lang lang, uint32_t iso, const char *extra_key, const char *extra)
{
    cJSON *d = cJSON_CreateObject();
    char isobuf[96], *out;
    cJSON_AddStringToObject(d, "language", grpo_code__lang_name(lang));
    if (o) {
        cJSON_AddNumberToObject(d, "passed", o->passed);
        cJSON_AddNumberToObject(d, "total", o->total);
        if (o->budget_exhausted)
            cJSON_AddTrueToObject(d, "budget_exhausted");
        if (o->failed_test >= 0) {
            cJSON *f = cJSON_AddObjectToObject(d, "first_failure");
            cJSON_AddNumberToObject(f, "test", o->failed_test);
            cJSON_AddStringToObject(f, "status", o->fail_status);
            cJSON_AddStringToObject(f, "expected", o->expected.data ? o->expected.data : "");
            cJSON_AddStringToObject(f, "got", o->got.data ? o->got.data : "");
            cJSON_AddStringToObject(f, "stderr", o->stderr_.data ? o->stderr_.data : "");
        }
    }
    if (extra_key)
        cJSON_AddStringToObject(d, extra_key, extra ? extra : "");
    if (iso)
        cJSON_AddStringToObject(d, "isolation", grpo_sandbox_iso_str(iso, isobuf, sizeof isobuf));
    out = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    return out;
}

/* A verdict reached before anything runs: kind, label and details (status, msg may be NULL). */
static void
verdict_early(grpo_verdict *v, grpo_verdict_kind kind, const char *label, code_lang lang,
              const char *status, const char *msg)
{
    v->kind = kind;
    set_label(v, label);
    v->details_json = details(NULL, lang, 0, status, msg);
}

/* The checks before anything runs, in order: the language, the tests, the program extracted from
 * the completion, its encoding, call-based tests outside Python. Returns the program (the caller
 * frees it), or NULL with the verdict in *v (an outcome, not an error). */
static char *
code_prepare(const grpo_verifier_sample *smp, int lang, code_tests *t, grpo_verdict *v)
{
    if (lang < 0) {
        verdict_early(v, GRPO_VERDICT_SKIP, "bad-language", CODE_PY, "error", "unknown language");
        return NULL;
    }
    if (grpo_code__tests_parse(smp->tests_json, t) != GRPO_OK) {
        verdict_early(v, GRPO_VERDICT_SKIP, smp->tests_json ? "bad-tests" : "no-tests",
                      (code_lang)lang, "error", grpo_error_last());
        return NULL;
    }
    char *code = grpo_code__extract(smp->completion, smp->completion ? smp->completion_len : 0,
                                    (code_lang)lang, smp->prompt_opens_think != 0);
    if (code == NULL) {
        verdict_early(v, GRPO_VERDICT_FAIL, "no-code", (code_lang)lang, NULL, NULL);
        return NULL;
    }
    const char *why = NULL, *label = NULL;
    grpo_verdict_kind kind = GRPO_VERDICT_FAIL;
    if (!grpo__utf8_valid(code, strlen(code))) { /* no compiler or interpreter takes it */
        label = "invalid-source", why = "source is not valid UTF-8";
    } else if (lang != CODE_PY && t->call_based) {
        kind = GRPO_VERDICT_SKIP, label = "bad-tests";
        why = "call-based tests (fn_name) need language python";
    }
    if (label != NULL) {
        verdict_early(v, kind, label, (code_lang)lang, "error", why);
        free(code);
        return NULL;
    }
    return code;
}

static int
code_score(void *state, const grpo_verifier_sample *smp, grpo_verdict *v)
{
    code_state *s = state;
    code_tests t;
    outcome o;
    grpo_err err = GRPO_OK;
    runner *rn = NULL;
    bool compile_error = false;
    grpo_buf diag = {0};
    int lang = grpo_code__lang(smp->language);
    memset(v, 0, sizeof *v);
    memset(&o, 0, sizeof o);
    memset(&t, 0, sizeof t);
    o.failed_test = -1;
    char *code = code_prepare(smp, lang, &t, v);
    if (code == NULL)
        goto done;
    v->kind = GRPO_VERDICT_FAIL; /* until the tests pass */
    int n = (s->max_tests > 0 && t.n > s->max_tests) ? (int)s->max_tests : t.n;
    o.total = n;
    o.t0 = grpo_now();
    if ((rn = runner_get(s)) == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "code verifier: out of memory");
        goto done;
    }
    if (lang == CODE_PY)
        err = run_python(s, rn, code, &t, n, &o);
    else
        err = run_native(s, rn, (code_lang)lang, code, &t, n, &o, &compile_error, &diag);
    if (err != GRPO_OK)
        goto done;
    uint32_t iso =
        lang == CODE_PY ? grpo_sandbox_pool_isolation(rn->py) : grpo_sandbox_isolation(rn->sb);
    if (compile_error) {
        set_label(v, "compile-error");
        v->details_json = details(NULL, (code_lang)lang, iso, "compiler", diag.data);
        goto done;
    }
    v->score = n > 0 ? (double)o.passed / n : 0.0;
    v->kind = o.passed == n ? GRPO_VERDICT_PASS : GRPO_VERDICT_FAIL;
    set_label(v, o.passed == n ? "correct" : "failed-tests");
    v->details_json = details(&o, (code_lang)lang, iso, NULL, NULL);
done:
    if (err != GRPO_OK) { /* the machinery failed: the verdict says so, the run goes on */
        v->kind = GRPO_VERDICT_ERROR;
        v->score = 0;
        set_label(v, "sandbox-error");
        free(v->details_json);
        v->details_json =
            details(NULL, (code_lang)(lang < 0 ? 0 : lang), 0, "error", grpo_error_last());
        runner_free(rn); /* a broken runner is not reused */
        rn = NULL;
    }
    runner_put(s, rn);
    grpo__buf_fini(&o.expected);
    grpo__buf_fini(&o.got);
    grpo__buf_fini(&o.stderr_);
    grpo__buf_fini(&diag);
    grpo_code__tests_fini(&t);
    free(code);
    return 0;
}

static const grpo_verifier_api code_api = {
    GRPO_VERIFIER_ABI_MAJOR,
    GRPO_VERIFIER_ABI_MINOR,
    sizeof(grpo_verifier_api),
    "code",
    "1.0.0",
    code_init,
    code_score,
    code_fini,
};

const grpo_verifier_api *
grpo_verifier_code(void)
{
    return &code_api;
}
