/* `grpo verify`: scores a JSONL file of completions with the reward config's verifiers, in
 * parallel, with a hard per-item deadline (grpo_run_ordered in run/), writing one output line per
 * input line in input order. A bad line becomes an output line with an "error" field; the run
 * goes on. */
#include "cli/cli.h"
#include "grpo/run.h"

#include "common/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const USAGE =
    "usage: grpo verify --input FILE.jsonl [--output FILE.jsonl] [--config rewards.json]\n"
    "                   [--plugin NAME=PATH [--plugin-config JSON]]... [--jobs N]\n"
    "                   [--deadline-ms MS]\n"
    "\n"
    "Scores completions with the verifiers of a reward config and writes each input line back\n"
    "with \"reward\" and \"verdicts\" added, in input order.\n"
    "\n"
    "  --input FILE     JSONL, one object per line: \"id\", \"task\" (math | code | format | a\n"
    "                   task of the config; default math), \"completion\", \"answer\" (gold,\n"
    "                   for math) or \"tests\" (for code), and optionally \"prompt\",\n"
    "                   \"prompt_opens_think\" (bool), \"language\", \"n_tokens\", "
    "\"max_tokens\",\n"
    "                   \"truncated\" (bool). \"-\" reads standard input.\n"
    "  --output FILE    where to write (default: standard output). Each line is the input\n"
    "                   object plus \"reward\" (number), \"skipped\" (true when a verifier could\n"
    "                   not score it, e.g. unparseable gold: leave it out of advantages),\n"
    "                   \"overlong\" (penalty added) and \"verdicts\": [{verifier, version,\n"
    "                   verdict, kind, score, weight, ms}]. A line that cannot be read or scored\n"
    "                   gets an \"error\" field instead, and the run goes on.\n"
    "  --config FILE    reward config (JSON; see docs/verify.md). Default: math = 1.0*math +\n"
    "                   0.2*format, code = 1.0*code + 0.2*format, format = 1.0*format.\n"
    "  --plugin NAME=PATH  load a verifier plugin (shared object, run in a sandboxed worker)\n"
    "                   and add the task NAME = 1.0*NAME (lines with \"task\": \"NAME\").\n"
    "                   Repeatable. Same as describing it under \"verifiers\" in the config.\n"
    "  --plugin-config JSON  the init config (a JSON object) of the last --plugin.\n"
    "  --jobs N         worker threads (default: the number of CPUs).\n"
    "  --deadline-ms MS per-item budget (default: the config's deadline_ms, 10000). An item\n"
    "                   past it plus a margin of max(2 s, 20%) is written with\n"
    "                   \"error\": \"deadline exceeded\".\n"
    "\n"
    "A progress line is shown when standard error is a terminal. Exit status: 0 when every line\n"
    "was scored, 1 when some line has an \"error\" (all lines are still written), 2 on usage\n"
    "errors.\n";

typedef struct item {
    const char *line;
    size_t len;
    int lineno;
} item;

/* What the scoring threads share (grpo_run_ordered's ctx). */
typedef struct run {
    grpo_rewarder *rw;
    item *items;
    size_t n;
    FILE *out;
    long errors;
    int write_failed;
    double t0;
} run;

/* The input object (or a stub for unparseable lines) with an "error" field. */
static char *
error_line(cJSON *obj, int lineno, const char *raw, size_t rawlen, const char *msg)
{
    cJSON *o = obj ? obj : cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    if (obj == NULL) {
        cJSON_AddNumberToObject(o, "line", lineno);
        char *r = strndup(raw, rawlen > 200 ? 200 : rawlen);
        if (r) {
            cJSON_AddStringToObject(o, "input", r);
            free(r);
        }
    }
    cJSON_DeleteItemFromObjectCaseSensitive(o, "error");
    cJSON_AddStringToObject(o, "error", msg);
    char *s = grpo__json_print_utf8(o);
    cJSON_Delete(o);
    return s;
}

static const char *
opt_str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int32_t
opt_int(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2e9
               ? (int32_t)v->valuedouble
               : 0;
}

/* The optional input fields and the JSON types each may have (null or absent always may). */
enum { T_STR = 1, T_NUM = 2, T_BOOL = 4, T_ARR = 8, T_OBJ = 16, T_INT = 32 };
static const struct {
    const char *key;
    int types;
    const char *expected;
} optional_fields[] = {
    {"task", T_STR, "a string"},
    {"prompt", T_STR, "a string"},
    {"language", T_STR, "a string"},
    {"answer", T_STR | T_NUM, "a string or a number"},
    {"tests", T_STR | T_ARR | T_OBJ, "a string, an array or an object"},
    {"prompt_opens_think", T_BOOL, "true or false"},
    {"truncated", T_BOOL, "true or false"},
    {"n_tokens", T_INT, "an integer in [0, 2e9)"},
    {"max_tokens", T_INT, "an integer in [0, 2e9)"},
};

static int
type_of(const cJSON *v)
{
    if (cJSON_IsNumber(v))
        return v->valuedouble >= 0 && v->valuedouble < 2e9 &&
                       v->valuedouble == floor(v->valuedouble)
                   ? T_NUM | T_INT
                   : T_NUM;
    return cJSON_IsString(v) ? T_STR : cJSON_IsBool(v) ? T_BOOL : cJSON_IsArray(v) ? T_ARR : T_OBJ;
}

/* 0 when every optional field present has an allowed type; else -1 with msg naming the field
 * (a wrong type is refused, not read as absent: "truncated": "yes" is no false). */
static int
check_types(const cJSON *o, int lineno, char *msg, size_t cap)
{
    for (size_t k = 0; k < sizeof optional_fields / sizeof optional_fields[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, optional_fields[k].key);
        if (v == NULL || cJSON_IsNull(v) || (type_of(v) & optional_fields[k].types) != 0)
            continue;
        snprintf(msg, cap, "line %d: \"%s\" must be %s", lineno, optional_fields[k].key,
                 optional_fields[k].expected);
        return -1;
    }
    return 0;
}

static void
add_result(cJSON *o, const grpo_reward_result *res)
{
    const char *keys[] = {"reward", "skipped", "overlong", "verdicts", "error"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        cJSON_DeleteItemFromObjectCaseSensitive(o, keys[k]);
    cJSON_AddNumberToObject(o, "reward", res->reward);
    if (res->skipped)
        cJSON_AddTrueToObject(o, "skipped");
    if (res->overlong != 0)
        cJSON_AddNumberToObject(o, "overlong", res->overlong);
    cJSON *arr = cJSON_AddArrayToObject(o, "verdicts");
    for (int k = 0; arr && k < res->n_terms; k++) {
        const grpo_reward_term *t = &res->terms[k];
        cJSON *v = cJSON_CreateObject();
        if (v == NULL)
            break;
        cJSON_AddStringToObject(v, "verifier", t->verifier);
        cJSON_AddStringToObject(v, "version", t->version);
        cJSON_AddStringToObject(v, "verdict", t->label);
        cJSON_AddStringToObject(v, "kind", grpo_verdict_kind_name(t->kind));
        cJSON_AddNumberToObject(v, "score", t->score);
        cJSON_AddNumberToObject(v, "weight", t->weight);
        cJSON_AddNumberToObject(v, "ms", t->ms);
        if (t->details_json) {
            cJSON *d = cJSON_Parse(t->details_json);
            if (d)
                cJSON_AddItemToObject(v, "details", d);
        }
        cJSON_AddItemToArray(arr, v);
    }
}

/* Scores one line; returns the output line (malloc'd). *error is set for error lines. */
static char *
score_line(grpo_rewarder *rw, const item *it, int *error)
{
    cJSON *o = cJSON_ParseWithLength(it->line, it->len);
    char msg[300];
    *error = 1;
    if (o == NULL || !cJSON_IsObject(o)) {
        snprintf(msg, sizeof msg, "line %d: not a JSON object", it->lineno);
        cJSON_Delete(o);
        return error_line(NULL, it->lineno, it->line, it->len, msg);
    }
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(o, "completion");
    if (!cJSON_IsString(comp)) {
        snprintf(msg, sizeof msg, "line %d: \"completion\" is missing or not a string", it->lineno);
        return error_line(o, it->lineno, NULL, 0, msg);
    }
    if (check_types(o, it->lineno, msg, sizeof msg) != 0)
        return error_line(o, it->lineno, NULL, 0, msg);
    grpo_verifier_sample s = {0};
    s.task = opt_str(o, "task");
    s.prompt = opt_str(o, "prompt");
    s.completion = comp->valuestring;
    s.completion_len = strlen(comp->valuestring);
    s.language = opt_str(o, "language");
    char *numbuf = NULL; /* a numeric gold as cJSON prints it (shortest round-trip form) */
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(o, "answer");
    if (cJSON_IsString(ans))
        s.answer = ans->valuestring;
    else if (cJSON_IsNumber(ans))
        s.answer = numbuf = cJSON_PrintUnformatted(ans);
    const cJSON *tests = cJSON_GetObjectItemCaseSensitive(o, "tests");
    char *tests_json =
        tests ? (cJSON_IsString(tests) ? strdup(tests->valuestring) : cJSON_PrintUnformatted(tests))
              : NULL;
    s.tests_json = tests_json;
    s.prompt_opens_think = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "prompt_opens_think"));
    s.truncated = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "truncated"));
    s.n_tokens = opt_int(o, "n_tokens");
    s.max_tokens = opt_int(o, "max_tokens");
    char *extra = cJSON_PrintUnformatted(o);
    s.extra_json = extra;
    grpo_reward_result res;
    grpo_err err = grpo_rewarder_score(rw, &s, &res);
    char *out;
    if (err != GRPO_OK) {
        snprintf(msg, sizeof msg, "line %d: %s", it->lineno, grpo_error_last());
        out = error_line(o, it->lineno, NULL, 0, msg);
    } else {
        add_result(o, &res);
        out = grpo__json_print_utf8(o);
        cJSON_Delete(o);
        *error = 0;
    }
    grpo_reward_result_fini(&res);
    free(tests_json);
    free(extra);
    free(numbuf);
    return out;
}

static char *
work(void *ctx, size_t i, int *error)
{
    run *r = ctx;
    return score_line(r->rw, &r->items[i], error);
}

/* An item past the deadline: written with an "error" field. */
static char *
late(void *ctx, size_t i, double deadline_ms)
{
    const item *it = &((run *)ctx)->items[i];
    char msg[160];
    snprintf(msg, sizeof msg, "line %d: deadline exceeded (%.0f ms)", it->lineno, deadline_ms);
    cJSON *o = cJSON_ParseWithLength(it->line, it->len);
    char *line = error_line(cJSON_IsObject(o) ? o : NULL, it->lineno, it->line, it->len, msg);
    if (o && !cJSON_IsObject(o))
        cJSON_Delete(o);
    return line;
}

static int
deliver(void *ctx, size_t i, char *line, int error)
{
    run *r = ctx;
    (void)i;
    r->errors += error;
    int bad = line == NULL || fputs(line, r->out) == EOF || fputc('\n', r->out) == EOF;
    free(line);
    r->write_failed |= bad;
    return bad;
}

static void
progress(void *ctx, size_t done, size_t n)
{
    run *r = ctx;
    double dt = grpo_now() - r->t0;
    if (!isatty(2))
        return;
    fprintf(stderr, "\rgrpo verify: %zu/%zu lines, %.1f lines/s%s", done, n,
            dt > 0 ? done / dt : 0.0, done == n ? "\n" : "");
    fflush(stderr);
}

/* Splits text into non-blank lines. */
static item *
split_lines(char *text, size_t len, size_t *n_out)
{
    size_t cap = 1024, n = 0;
    item *v = malloc(cap * sizeof *v);
    int lineno = 0;
    for (size_t i = 0; v && i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        lineno++;
        size_t k = i;
        while (k < j && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r'))
            k++;
        if (k < j) {
            if (n == cap) {
                item *nv = realloc(v, 2 * cap * sizeof *v);
                if (nv == NULL) {
                    free(v);
                    return NULL;
                }
                v = nv;
                cap *= 2;
            }
            v[n].line = text + i;
            v[n].len = j - i;
            v[n].lineno = lineno;
            n++;
        }
        i = j + 1;
    }
    *n_out = n;
    return v;
}

static grpo_err
read_input(const char *path, char **text, size_t *len)
{
    if (strcmp(path, "-") != 0)
        return grpo__read_file(path, (size_t)1 << 34, text, len);
    grpo_buf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (grpo__buf_append(&b, chunk, got) != GRPO_OK) {
            grpo__buf_fini(&b);
            return GRPO_ENOMEM;
        }
    if (grpo__buf_append(&b, "", 1) != GRPO_OK) {
        grpo__buf_fini(&b);
        return GRPO_ENOMEM;
    }
    *text = b.data;
    *len = b.len - 1;
    return GRPO_OK;
}

#define MAX_PLUGINS 16

typedef struct plugin_arg {
    char name[32];
    const char *path, *config;
} plugin_arg;

/* The reward config: the file (or the defaults) plus the --plugin verifiers and their tasks. */
static grpo_err
build_config(grpo_reward_config **out, const char *path, const plugin_arg *pl, int npl)
{
    if (npl == 0)
        return path ? grpo_reward_config_load(out, path) : grpo_reward_config_default(out);
    cJSON *j = NULL;
    grpo_err err = GRPO_OK;
    if (path && (err = grpo__json_parse_file(path, 1 << 20, &j)) != GRPO_OK)
        return err;
    if (j == NULL)
        j = cJSON_CreateObject();
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", path);
    }
    cJSON *tasks = cJSON_GetObjectItemCaseSensitive(j, "tasks");
    if (tasks == NULL)
        tasks = cJSON_AddObjectToObject(j, "tasks");
    cJSON *verifs = cJSON_GetObjectItemCaseSensitive(j, "verifiers");
    if (verifs == NULL)
        verifs = cJSON_AddObjectToObject(j, "verifiers");
    for (int k = 0; k < npl && err == GRPO_OK; k++) {
        cJSON *v = cJSON_CreateObject();
        cJSON_AddStringToObject(v, "plugin", pl[k].path);
        if (pl[k].config) {
            cJSON *c = cJSON_Parse(pl[k].config);
            if (c == NULL || !cJSON_IsObject(c)) {
                cJSON_Delete(c);
                cJSON_Delete(v);
                err = grpo__fail(GRPO_EINVAL, "--plugin-config for \"%s\": not a JSON object",
                                 pl[k].name);
                break;
            }
            cJSON_AddItemToObject(v, "config", c);
        }
        cJSON_DeleteItemFromObjectCaseSensitive(verifs, pl[k].name);
        cJSON_AddItemToObject(verifs, pl[k].name, v);
        if (cJSON_GetObjectItemCaseSensitive(tasks, pl[k].name) == NULL) {
            char terms[sizeof pl[0].name * 32];
            snprintf(terms, sizeof terms, "1.0*%s", pl[k].name);
            cJSON_AddStringToObject(tasks, pl[k].name, terms);
        }
    }
    char *text = err == GRPO_OK ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (err == GRPO_OK && text == NULL)
        err = grpo__fail(GRPO_ENOMEM, "verify: out of memory");
    if (err == GRPO_OK)
        err = grpo_reward_config_parse(out, text, strlen(text), path ? path : "--plugin");
    free(text);
    return err;
}

/* True for the options grpo verify knows (all of them take a value). */
static bool
is_flag(const char *a)
{
    static const char *const flags[] = {"--input",         "--output", "--config",     "--plugin",
                                        "--plugin-config", "--jobs",   "--deadline-ms"};
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
        if (strcmp(a, flags[k]) == 0)
            return true;
    return false;
}

typedef struct verify_args {
    const char *in_path, *out_path, *cfg_path;
    plugin_arg pl[MAX_PLUGINS];
    int npl;
    long jobs;
    double deadline_ms;
} verify_args;

/* "--plugin NAME=PATH" */
static int
add_plugin(verify_args *a, const char *v)
{
    const char *eq = strchr(v, '=');
    if (eq == NULL || eq == v || (size_t)(eq - v) >= sizeof a->pl[0].name || eq[1] == 0)
        return cli_usage("verify", "--plugin wants NAME=PATH, not \"%s\"", v);
    if (a->npl == MAX_PLUGINS)
        return cli_usage("verify", "at most %d --plugin options", MAX_PLUGINS);
    plugin_arg *p = &a->pl[a->npl++];
    memcpy(p->name, v, (size_t)(eq - v));
    p->name[eq - v] = 0;
    p->path = eq + 1;
    p->config = NULL;
    return 0;
}

/* One "--flag value" pair; 0 or CLI_USAGE (printed). */
static int
parse_opt(verify_args *a, const char *f, const char *v)
{
    char *end;
    if (strcmp(f, "--input") == 0)
        a->in_path = v;
    else if (strcmp(f, "--output") == 0)
        a->out_path = v;
    else if (strcmp(f, "--config") == 0)
        a->cfg_path = v;
    else if (strcmp(f, "--plugin") == 0)
        return add_plugin(a, v);
    else if (strcmp(f, "--plugin-config") == 0) {
        if (a->npl == 0)
            return cli_usage("verify", "--plugin-config must follow a --plugin");
        a->pl[a->npl - 1].config = v;
    } else if (strcmp(f, "--jobs") == 0) {
        a->jobs = strtol(v, &end, 10);
        if (*end || a->jobs < 1 || a->jobs > 1024)
            return cli_usage("verify", "--jobs must be an integer in 1..1024, not \"%s\"", v);
    } else if (strcmp(f, "--deadline-ms") == 0) {
        a->deadline_ms = strtod(v, &end);
        if (*end || !(a->deadline_ms > 0) || a->deadline_ms > 3.6e6)
            return cli_usage("verify", "--deadline-ms must be in (0, 3600000], not \"%s\"", v);
    } else
        return cli_usage("verify", "unknown option %s", f);
    return 0;
}

static int
parse_args(verify_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int rc;
        if (f[0] != '-' || f[1] == 0)
            return cli_usage("verify", "unexpected argument %s", f);
        if (!is_flag(f))
            return cli_usage("verify", "unknown option %s", f);
        if (i + 1 >= argc)
            return cli_usage("verify", "%s needs a value", f);
        if ((rc = parse_opt(a, f, argv[++i])) != 0)
            return rc;
    }
    return a->in_path == NULL ? cli_usage("verify", "--input is required") : 0;
}

/* Scores every line (grpo_run_ordered: a hard deadline per line, output in input order), then
 * reports; returns the exit code. *stuck: threads left inside a verifier past the deadline
 * (then r and the rewarder must outlive this process's return). */
static int
finish(run *r, const char *out_path, double deadline_ms, int jobs, size_t *stuck)
{
    grpo_run_ordered_fns fns = {work, late, deliver, progress};
    r->t0 = grpo_now();
    grpo_err err =
        grpo_run_ordered(r->n, jobs, grpo_reward_hard_deadline_ms(deadline_ms), &fns, r, stuck);
    if (err == GRPO_OK)
        progress(r, r->n, r->n);
    if (err != GRPO_OK && !r->write_failed)
        return cli_fail("verify");
    if (r->write_failed || fflush(r->out) != 0 || (r->out != stdout && fclose(r->out) != 0)) {
        fprintf(stderr, "grpo verify: %s: write failed: %s\n", out_path ? out_path : "stdout",
                strerror(errno));
        return CLI_FAIL;
    }
    if (r->errors > 0)
        fprintf(stderr, "grpo verify: %ld of %zu lines have an \"error\" field\n", r->errors, r->n);
    return r->errors > 0 ? CLI_FAIL : CLI_OK;
}

/* A verifier thread still stuck past its deadline uses the rewarder, its config and the input:
 * they are kept (reachable) for as long as the process lives instead of freed under it. */
static struct {
    grpo_reward_config *cfg;
    grpo_rewarder *rw;
    char *text;
    item *items;
} kept_for_stuck;

int
grpo_cmd_verify(int argc, char **argv)
{
    verify_args a;
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return CLI_OK;
    }
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    rc = CLI_FAIL;
    grpo_reward_config *cfg = NULL;
    grpo_rewarder *rw = NULL;
    char *text = NULL;
    size_t len = 0, stuck = 0;
    FILE *out = NULL;
    run r = {0};
    int jobs = (int)(a.jobs > 0 ? a.jobs : grpo_cpu_count());
    if (build_config(&cfg, a.cfg_path, a.pl, a.npl) != GRPO_OK ||
        grpo_rewarder_create(&rw, cfg) != GRPO_OK ||
        read_input(a.in_path, &text, &len) != GRPO_OK) {
        rc = cli_fail("verify");
        goto done;
    }
    if ((r.items = split_lines(text, len, &r.n)) == NULL) {
        fprintf(stderr, "grpo verify: out of memory\n");
        goto done;
    }
    if ((out = a.out_path ? fopen(a.out_path, "w") : stdout) == NULL) {
        fprintf(stderr, "grpo verify: %s: cannot open for writing: %s\n", a.out_path,
                strerror(errno));
        goto done;
    }
    r.rw = rw, r.out = out;
    rc = finish(&r, a.out_path,
                a.deadline_ms > 0 ? a.deadline_ms : grpo_reward_config_deadline_ms(cfg), jobs,
                &stuck);
    out = NULL; /* closed by finish */
done:
    if (out && out != stdout)
        fclose(out);
    if (stuck > 0) { /* see kept_for_stuck */
        kept_for_stuck.cfg = cfg, kept_for_stuck.rw = rw;
        kept_for_stuck.text = text, kept_for_stuck.items = r.items;
        fflush(NULL);
        return rc;
    }
    free(r.items);
    free(text);
    grpo_rewarder_destroy(rw);
    grpo_reward_config_destroy(cfg);
    return rc;
}
