/* Reward composition: the built-in verifier registry, the JSON reward config (task -> weighted
 * verifiers, plugins, DAPO overlong shaping) and the rewarder that scores samples with it.
 * A rewarder's state is read-only after create, so grpo_rewarder_score() runs on many threads. */
#include "grpo/verify.h"

#include "common/json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TASKS 64
#define MAX_VERIFIERS 32

const grpo_verifier_api *
grpo_verifier_builtin(const char *name)
{
    if (name == NULL)
        return NULL;
    if (strcmp(name, "math") == 0)
        return grpo_verifier_math();
    if (strcmp(name, "format") == 0)
        return grpo_verifier_format();
    if (strcmp(name, "code") == 0)
        return grpo_verifier_code(); /* verifiers/code */
    return NULL;
}

const char *
grpo_verdict_kind_name(grpo_verdict_kind k)
{
    static const char *const n[] = {"pass", "fail", "skip", "timeout", "error"};
    return (unsigned)k < 5 ? n[k] : "error";
}

/* ---- config ------------------------------------------------------------------------------- */

typedef struct rterm {
    char name[32];
    double weight;
} rterm;

typedef struct rtask {
    char name[64];
    int n;
    rterm t[GRPO_REWARD_MAX_TERMS];
} rtask;

typedef struct rverif {
    char name[32];
    char *config_json; /* the verifier's "config" object, or NULL */
    char *plugin;      /* shared object path, or NULL for a built-in */
    int in_process;
} rverif;

struct grpo_reward_config {
    rtask tasks[MAX_TASKS];
    int ntasks;
    rverif verifs[MAX_VERIFIERS];
    int nverifs;
    int32_t ol_max_tokens, ol_buffer; /* ol_buffer > 0: overlong shaping on */
    double ol_penalty;
    double deadline_ms;
    bool ol_on;
    char where[256]; /* the file it came from, for messages ("" for the defaults) */
};

void
grpo_reward_config_destroy(grpo_reward_config *cfg)
{
    if (cfg == NULL)
        return;
    for (int k = 0; k < cfg->nverifs; k++) {
        free(cfg->verifs[k].config_json);
        free(cfg->verifs[k].plugin);
    }
    free(cfg);
}

static rtask *
task_slot(grpo_reward_config *c, const char *name)
{
    for (int k = 0; k < c->ntasks; k++)
        if (strcmp(c->tasks[k].name, name) == 0)
            return &c->tasks[k];
    if (c->ntasks == MAX_TASKS)
        return NULL;
    rtask *t = &c->tasks[c->ntasks++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

static grpo_err
add_term(rtask *t, const char *name, size_t nlen, double w, const char *where)
{
    if (nlen == 0 || nlen >= sizeof t->t[0].name)
        return grpo__fail(GRPO_EFORMAT, "%s: task \"%s\": bad verifier name", where, t->name);
    if (t->n == GRPO_REWARD_MAX_TERMS)
        return grpo__fail(GRPO_EFORMAT, "%s: task \"%s\": more than %d verifiers", where, t->name,
                          GRPO_REWARD_MAX_TERMS);
    if (!isfinite(w))
        return grpo__fail(GRPO_EFORMAT, "%s: task \"%s\": weight is not finite", where, t->name);
    memcpy(t->t[t->n].name, name, nlen);
    t->t[t->n].name[nlen] = 0;
    t->t[t->n].weight = w;
    t->n++;
    return GRPO_OK;
}

static const char *
skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

/* "1.0*math + 0.2*format", "math", "0.5 * code + -0.1*len": terms joined by '+', each an
 * optional weight and '*' before a verifier name. Anything else - a dangling '+', "+ +", a
 * weight without a name - is refused, naming the task and the expression. */
static grpo_err
parse_terms(rtask *t, const char *expr, const char *where)
{
    grpo_err err;
    const char *s = skip_space(expr);
    t->n = 0;
    if (*s == 0)
        return grpo__fail(GRPO_EFORMAT, "%s: tasks.%s: no verifiers", where, t->name);
    for (;;) {
        double w = 1.0;
        char *end;
        double v = strtod(s, &end);
        if (end != s) {
            w = v;
            s = skip_space(end);
            if (*s != '*')
                return grpo__fail(GRPO_EFORMAT,
                                  "%s: tasks.%s: expected '*' after weight %g in \"%s\"", where,
                                  t->name, v, expr);
            s = skip_space(s + 1);
        }
        const char *b = s;
        while (*s && (isalnum((unsigned char)*s) || *s == '_' || *s == '-' || *s == '.'))
            s++;
        if (s == b)
            return grpo__fail(GRPO_EFORMAT,
                              "%s: tasks.%s: expected a verifier name at offset %d of \"%s\"",
                              where, t->name, (int)(b - expr), expr);
        if ((err = add_term(t, b, (size_t)(s - b), w, where)) != GRPO_OK)
            return err;
        s = skip_space(s);
        if (*s == 0)
            return GRPO_OK;
        if (*s != '+')
            return grpo__fail(GRPO_EFORMAT, "%s: tasks.%s: unexpected '%c' at offset %d of \"%s\"",
                              where, t->name, *s, (int)(s - expr), expr);
        s = skip_space(s + 1);
    }
}

static grpo_err
parse_task(grpo_reward_config *c, const cJSON *item, const char *where)
{
    rtask *t = task_slot(c, item->string);
    grpo_err err;
    if (t == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: more than %d tasks", where, MAX_TASKS);
    if (cJSON_IsString(item))
        return parse_terms(t, item->valuestring, where);
    if (!cJSON_IsArray(item))
        return grpo__fail(GRPO_EFORMAT,
                          "%s: task \"%s\": expected a string like \"1.0*math + 0.2*format\" or "
                          "an array of {verifier, weight}",
                          where, item->string);
    t->n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, item)
    {
        const char *name;
        double w = 1.0;
        char w2[160];
        static const char *const keys[] = {"verifier", "weight", NULL};
        snprintf(w2, sizeof w2, "%s: tasks.%s[%d]", where, item->string, t->n);
        if ((err = grpo__json_check_keys(e, w2, keys)) != GRPO_OK ||
            (err = grpo__json_str(e, "verifier", w2, &name)) != GRPO_OK ||
            (err = grpo__json_num_opt(e, "weight", w2, &w)) != GRPO_OK ||
            (err = add_term(t, name, strlen(name), w, where)) != GRPO_OK)
            return err;
    }
    if (t->n == 0)
        return grpo__fail(GRPO_EFORMAT, "%s: task \"%s\": no verifiers", where, t->name);
    return GRPO_OK;
}

/* A built-in verifier's config is checked where it is read (unknown keys, types, ranges) by the
 * verifier's own init, run once here and undone, so the message can name the file and the key's
 * path. A plugin's config is the plugin's own: its init checks it when the rewarder opens it. */
static grpo_err
check_builtin_config(const rverif *v, const char *w2)
{
    const grpo_verifier_api *api = grpo_verifier_builtin(v->name);
    char prefix[64], *e = NULL;
    void *state = NULL;
    if (api == NULL || v->config_json == NULL || api->init == NULL)
        return GRPO_OK;
    if (api->init(v->config_json, &state, &e) == 0) {
        if (api->fini)
            api->fini(state);
        return GRPO_OK;
    }
    /* the verifier's message starts with its own "NAME config: " */
    snprintf(prefix, sizeof prefix, "%s config: ", v->name);
    const char *m = e ? e : "invalid";
    if (strncmp(m, prefix, strlen(prefix)) == 0)
        m += strlen(prefix);
    grpo_err err = grpo__fail(GRPO_EFORMAT, "%s.config: %s", w2, m);
    free(e);
    return err;
}

static grpo_err
parse_verifier(grpo_reward_config *c, const cJSON *item, const char *where)
{
    char w2[160];
    const char *plugin = NULL;
    bool inproc = false;
    grpo_err err;
    snprintf(w2, sizeof w2, "%s: verifiers.%s", where, item->string);
    if (!cJSON_IsObject(item))
        return grpo__fail(GRPO_EFORMAT, "%s: expected an object", w2);
    if (strlen(item->string) >= sizeof c->verifs[0].name)
        return grpo__fail(GRPO_EFORMAT, "%s: name too long", w2);
    if (c->nverifs == MAX_VERIFIERS)
        return grpo__fail(GRPO_EFORMAT, "%s: more than %d verifiers", where, MAX_VERIFIERS);
    static const char *const keys[] = {"plugin", "in_process", "config", NULL};
    if ((err = grpo__json_check_keys(item, w2, keys)) != GRPO_OK ||
        (err = grpo__json_str_opt(item, "plugin", w2, &plugin)) != GRPO_OK ||
        (err = grpo__json_bool_opt(item, "in_process", w2, &inproc)) != GRPO_OK)
        return err;
    rverif *v = &c->verifs[c->nverifs++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", item->string);
    v->in_process = inproc;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(item, "config");
    if (cfg && !cJSON_IsNull(cfg)) {
        /* an object is handed over as JSON text; a string as it is (plugins with their own
         * config syntax) */
        if (!cJSON_IsObject(cfg) && !cJSON_IsString(cfg))
            return grpo__fail(GRPO_EFORMAT, "%s: \"config\" must be an object or a string", w2);
        v->config_json = cJSON_IsString(cfg) ? strdup(cfg->valuestring) : grpo__json_print(cfg);
        if (v->config_json == NULL)
            return grpo__fail(GRPO_ENOMEM, "%s: out of memory", w2);
    }
    if (plugin && (v->plugin = strdup(plugin)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", w2);
    return plugin ? GRPO_OK : check_builtin_config(v, w2);
}

static grpo_err
parse_overlong(grpo_reward_config *c, const cJSON *o, const char *where)
{
    char w2[160];
    int64_t mx = 0, buf = 0;
    double pen = 1.0;
    grpo_err err;
    static const char *const keys[] = {"max_tokens", "buffer", "penalty", NULL};
    snprintf(w2, sizeof w2, "%s: overlong", where);
    if (!cJSON_IsObject(o))
        return grpo__fail(GRPO_EFORMAT, "%s: expected an object", w2);
    if ((err = grpo__json_check_keys(o, w2, keys)) != GRPO_OK)
        return err;
    if ((err = grpo__json_int_opt(o, "max_tokens", w2, 0, INT32_MAX, &mx)) != GRPO_OK ||
        (err = grpo__json_int(o, "buffer", w2, 1, INT32_MAX, &buf)) != GRPO_OK ||
        (err = grpo__json_num_opt(o, "penalty", w2, &pen)) != GRPO_OK)
        return err;
    if (mx > 0 && buf > mx)
        return grpo__fail(GRPO_EFORMAT, "%s: \"buffer\" (%lld) exceeds \"max_tokens\" (%lld)", w2,
                          (long long)buf, (long long)mx);
    if (!(pen >= 0) || !isfinite(pen))
        return grpo__fail(GRPO_EFORMAT, "%s: \"penalty\" must be a non-negative number", w2);
    c->ol_on = true;
    c->ol_max_tokens = (int32_t)mx;
    c->ol_buffer = (int32_t)buf;
    c->ol_penalty = pen;
    return GRPO_OK;
}

static void
set_defaults(grpo_reward_config *c)
{
    memset(c, 0, sizeof *c);
    c->deadline_ms = 10000;
    parse_terms(task_slot(c, "math"), "1.0*math + 0.2*format", "defaults");
    parse_terms(task_slot(c, "code"), "1.0*code + 0.2*format", "defaults");
    parse_terms(task_slot(c, "format"), "1.0*format", "defaults");
}

static const rverif *
find_verif(const grpo_reward_config *c, const char *name)
{
    for (int k = 0; k < c->nverifs; k++)
        if (strcmp(c->verifs[k].name, name) == 0)
            return &c->verifs[k];
    return NULL;
}

static bool
is_builtin_name(const char *n)
{
    return strcmp(n, "math") == 0 || strcmp(n, "format") == 0 || strcmp(n, "code") == 0;
}

grpo_err
grpo_reward_config_default(grpo_reward_config **out)
{
    grpo_reward_config *c = malloc(sizeof *c);
    *out = NULL;
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "reward config: out of memory");
    set_defaults(c);
    *out = c;
    return GRPO_OK;
}

grpo_err
grpo_reward_config_parse(grpo_reward_config **out, const char *json, size_t n, const char *where)
{
    grpo_reward_config *c = NULL;
    cJSON *j = NULL;
    grpo_err err;
    const cJSON *it;
    *out = NULL;
    where = where ? where : "reward config";
    if ((err = grpo__json_parse(json, n, where, &j)) != GRPO_OK)
        goto done;
    if (!cJSON_IsObject(j)) {
        err = grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", where);
        goto done;
    }
    if ((err = grpo_reward_config_default(&c)) != GRPO_OK)
        goto done;
    snprintf(c->where, sizeof c->where, "%s", where);
    cJSON_ArrayForEach(it, j)
    {
        if (strcmp(it->string, "tasks") != 0 && strcmp(it->string, "verifiers") != 0 &&
            strcmp(it->string, "overlong") != 0 && strcmp(it->string, "deadline_ms") != 0) {
            err = grpo__fail(GRPO_EFORMAT,
                             "%s: unknown key \"%s\" (expected tasks, verifiers, "
                             "overlong, deadline_ms)",
                             where, it->string);
            goto done;
        }
    }
    const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(j, "tasks");
    if (tasks && !cJSON_IsObject(tasks)) {
        err = grpo__fail(GRPO_EFORMAT, "%s: \"tasks\" must be an object", where);
        goto done;
    }
    cJSON_ArrayForEach(it, tasks)
    {
        if ((err = parse_task(c, it, where)) != GRPO_OK)
            goto done;
    }
    const cJSON *verifs = cJSON_GetObjectItemCaseSensitive(j, "verifiers");
    if (verifs && !cJSON_IsObject(verifs)) {
        err = grpo__fail(GRPO_EFORMAT, "%s: \"verifiers\" must be an object", where);
        goto done;
    }
    cJSON_ArrayForEach(it, verifs)
    {
        if ((err = parse_verifier(c, it, where)) != GRPO_OK)
            goto done;
    }
    const cJSON *ol = cJSON_GetObjectItemCaseSensitive(j, "overlong");
    if (ol && !cJSON_IsNull(ol) && (err = parse_overlong(c, ol, where)) != GRPO_OK)
        goto done;
    if ((err = grpo__json_num_opt(j, "deadline_ms", where, &c->deadline_ms)) != GRPO_OK)
        goto done;
    if (!(c->deadline_ms > 0) || c->deadline_ms > 3.6e6) {
        err = grpo__fail(GRPO_EFORMAT, "%s: \"deadline_ms\" must be in (0, 3600000]", where);
        goto done;
    }
    /* every verifier a task names is built in or a described plugin */
    for (int t = 0; t < c->ntasks; t++)
        for (int k = 0; k < c->tasks[t].n; k++) {
            const char *nm = c->tasks[t].t[k].name;
            const rverif *v = find_verif(c, nm);
            if (!is_builtin_name(nm) && (v == NULL || v->plugin == NULL)) {
                err = grpo__fail(GRPO_EFORMAT,
                                 "%s: task \"%s\" uses verifier \"%s\", which is not built in "
                                 "(math, format, code) and has no \"plugin\" path under "
                                 "\"verifiers\"",
                                 where, c->tasks[t].name, nm);
                goto done;
            }
        }
done:
    cJSON_Delete(j);
    if (err != GRPO_OK) {
        grpo_reward_config_destroy(c);
        c = NULL;
    }
    *out = c;
    return err;
}

grpo_err
grpo_reward_config_load(grpo_reward_config **out, const char *path)
{
    char *text = NULL;
    size_t n = 0;
    grpo_err err;
    *out = NULL;
    if ((err = grpo__read_file(path, 1 << 20, &text, &n)) != GRPO_OK)
        return err;
    err = grpo_reward_config_parse(out, text, n, path);
    free(text);
    return err;
}

/* DAPO soft overlong punishment: 0 up to L_max - L_cache, then linear down to -penalty at L_max,
 * -penalty beyond it (or when truncated). max_tokens 0 in the config means the sample's limit. */
static double
overlong(const grpo_reward_config *c, int32_t n, int32_t max_sample, int32_t truncated)
{
    if (!c->ol_on)
        return 0.0;
    int32_t lmax = c->ol_max_tokens > 0 ? c->ol_max_tokens : max_sample;
    if (truncated)
        return -c->ol_penalty;
    if (lmax <= 0)
        return 0.0;
    int32_t start = lmax - c->ol_buffer;
    if (n <= start)
        return 0.0;
    if (n > lmax)
        return -c->ol_penalty;
    return -c->ol_penalty * (double)(n - start) / (double)c->ol_buffer;
}

double
grpo_reward_config_deadline_ms(const grpo_reward_config *cfg)
{
    return cfg ? cfg->deadline_ms : 0.0;
}

double
grpo_reward_hard_deadline_ms(double deadline_ms)
{
    double margin = deadline_ms * 0.2;
    return deadline_ms + (margin > 2000.0 ? margin : 2000.0);
}

double
grpo_reward_overlong(const grpo_reward_config *cfg, int32_t n_tokens, int32_t truncated)
{
    return cfg ? overlong(cfg, n_tokens, 0, truncated) : 0.0;
}

/* ---- rewarder ----------------------------------------------------------------------------- */

typedef struct rinst {
    char name[32];
    const grpo_verifier_api *api; /* NULL: not available in this build (error verdicts) */
    void *state;
    grpo_plugin *plugin;
    char why[160];
} rinst;

struct grpo_rewarder {
    const grpo_reward_config *cfg;
    rinst inst[MAX_VERIFIERS + 3];
    int ninst;
};

void
grpo_rewarder_destroy(grpo_rewarder *r)
{
    if (r == NULL)
        return;
    for (int k = 0; k < r->ninst; k++) {
        rinst *in = &r->inst[k];
        if (in->api && in->api->fini && in->state)
            in->api->fini(in->state);
        if (in->plugin)
            grpo_plugin_destroy(in->plugin);
    }
    free(r);
}

static rinst *
find_inst(grpo_rewarder *r, const char *name)
{
    for (int k = 0; k < r->ninst; k++)
        if (strcmp(r->inst[k].name, name) == 0)
            return &r->inst[k];
    return NULL;
}

static grpo_err
open_inst(grpo_rewarder *r, const char *name)
{
    if (find_inst(r, name))
        return GRPO_OK;
    if (r->ninst == (int)(sizeof r->inst / sizeof r->inst[0]))
        return grpo__fail(GRPO_EINVAL, "rewarder: too many verifiers");
    rinst *in = &r->inst[r->ninst++];
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "%s", name);
    const rverif *v = find_verif(r->cfg, name);
    if (v && v->plugin) {
        grpo_err err = grpo_plugin_load(&in->plugin, v->plugin, v->in_process);
        if (err != GRPO_OK)
            return err;
        in->api = grpo_plugin_api(in->plugin);
    } else {
        in->api = grpo_verifier_builtin(name);
        if (in->api == NULL) {
            snprintf(in->why, sizeof in->why, "verifier \"%s\" is not built in this build", name);
            return GRPO_OK;
        }
    }
    char *e = NULL;
    if (in->api->init && in->api->init(v ? v->config_json : NULL, &in->state, &e) != 0) {
        grpo_err err = r->cfg->where[0]
                           ? grpo__fail(GRPO_EINVAL, "%s: verifiers.%s.config: init failed: %s",
                                        r->cfg->where, name, e ? e : "(no message)")
                           : grpo__fail(GRPO_EINVAL, "verifier \"%s\": init failed: %s", name,
                                        e ? e : "(no message)");
        free(e);
        in->api = NULL;
        return err;
    }
    return GRPO_OK;
}

grpo_err
grpo_rewarder_create(grpo_rewarder **out, const grpo_reward_config *cfg)
{
    grpo_rewarder *r = calloc(1, sizeof *r);
    grpo_err err = GRPO_OK;
    *out = NULL;
    if (r == NULL)
        return grpo__fail(GRPO_ENOMEM, "rewarder: out of memory");
    r->cfg = cfg;
    for (int t = 0; t < cfg->ntasks && err == GRPO_OK; t++)
        for (int k = 0; k < cfg->tasks[t].n && err == GRPO_OK; k++)
            err = open_inst(r, cfg->tasks[t].t[k].name);
    if (err != GRPO_OK) {
        grpo_rewarder_destroy(r);
        return err;
    }
    *out = r;
    return GRPO_OK;
}

void
grpo_reward_result_fini(grpo_reward_result *res)
{
    if (res == NULL)
        return;
    for (int k = 0; k < res->n_terms && k < GRPO_REWARD_MAX_TERMS; k++) {
        free(res->terms[k].details_json);
        res->terms[k].details_json = NULL;
    }
    res->n_terms = 0;
}

/* Replaces *v with an ERROR verdict labelled label whose details say why. */
static void
error_verdict(grpo_verdict *v, const char *label, const char *why)
{
    free(v->details_json);
    memset(v, 0, sizeof *v);
    v->kind = GRPO_VERDICT_ERROR;
    snprintf(v->label, sizeof v->label, "%s", label);
    cJSON *d = cJSON_CreateObject();
    if (d) {
        cJSON_AddStringToObject(d, "error", why);
        v->details_json = cJSON_PrintUnformatted(d);
        cJSON_Delete(d);
    }
}

/* What a verifier (built in or a plugin) returned is checked before it can become a reward: a
 * kind outside pass..error (the store would refuse the whole group) or a score outside
 * [GRPO_VERDICT_SCORE_MIN, GRPO_VERDICT_SCORE_MAX] or not finite is an ERROR verdict; a label
 * that is not UTF-8 gets U+FFFD for its bad bytes. */
static void
check_verdict(grpo_verdict *v)
{
    char why[128];
    v->label[sizeof v->label - 1] = '\0';
    grpo__utf8_sanitize_buf(v->label, sizeof v->label);
    if ((unsigned)v->kind > (unsigned)GRPO_VERDICT_ERROR) {
        snprintf(why, sizeof why, "verdict kind %ld is not one of pass..error (0..4)",
                 (long)v->kind);
        error_verdict(v, "bad-verdict-kind", why);
    } else if (!(v->score >= GRPO_VERDICT_SCORE_MIN && v->score <= GRPO_VERDICT_SCORE_MAX)) {
        snprintf(why, sizeof why, "score %g is outside [%g, %g]", v->score,
                 (double)GRPO_VERDICT_SCORE_MIN, (double)GRPO_VERDICT_SCORE_MAX);
        error_verdict(v, "bad-score", why);
    }
}

static void
run_term(rinst *in, const rterm *t, const grpo_verifier_sample *s, grpo_reward_term *out)
{
    grpo_verdict v;
    memset(&v, 0, sizeof v);
    snprintf(out->verifier, sizeof out->verifier, "%s", t->name);
    out->weight = t->weight;
    double t0 = grpo_now();
    if (in->api == NULL) {
        v.kind = GRPO_VERDICT_ERROR;
        snprintf(v.label, sizeof v.label, "not-built");
        cJSON *d = cJSON_CreateObject();
        if (d) {
            cJSON_AddStringToObject(d, "error", in->why);
            v.details_json = cJSON_PrintUnformatted(d);
            cJSON_Delete(d);
        }
    } else {
        snprintf(out->version, sizeof out->version, "%s", in->api->version ? in->api->version : "");
        if (in->api->score(in->state, s, &v) != 0) {
            free(v.details_json);
            memset(&v, 0, sizeof v);
            v.kind = GRPO_VERDICT_ERROR;
            snprintf(v.label, sizeof v.label, "verifier-failed");
        } else {
            check_verdict(&v);
        }
    }
    out->ms = (grpo_now() - t0) * 1000.0;
    out->kind = v.kind;
    v.label[sizeof v.label - 1] = 0;
    snprintf(out->label, sizeof out->label, "%s", v.label);
    out->score = (v.kind == GRPO_VERDICT_PASS || v.kind == GRPO_VERDICT_FAIL) && isfinite(v.score)
                     ? v.score
                     : 0.0;
    out->details_json = v.details_json;
}

grpo_err
grpo_rewarder_score(grpo_rewarder *r, const grpo_verifier_sample *s, grpo_reward_result *out)
{
    const char *task = s->task ? s->task : "math";
    const rtask *t = NULL;
    double t0 = grpo_now();
    memset(out, 0, sizeof *out);
    for (int k = 0; k < r->cfg->ntasks; k++)
        if (strcmp(r->cfg->tasks[k].name, task) == 0)
            t = &r->cfg->tasks[k];
    if (t == NULL)
        return grpo__fail(GRPO_ENOTFOUND, "rewarder: no task \"%s\" in the reward config", task);
    for (int k = 0; k < t->n; k++) {
        rinst *in = find_inst(r, t->t[k].name);
        if (in == NULL)
            return grpo__fail(GRPO_EINTERNAL, "rewarder: verifier \"%s\" not opened", t->t[k].name);
        grpo_reward_term *term = &out->terms[out->n_terms++];
        run_term(in, &t->t[k], s, term);
        if (term->kind == GRPO_VERDICT_SKIP && term->weight != 0.0)
            out->skipped = 1;
        out->reward += term->weight * term->score;
    }
    out->overlong = overlong(r->cfg, s->n_tokens, s->max_tokens, s->truncated);
    out->reward += out->overlong;
    if (out->skipped)
        out->reward = 0.0;
    out->ms = (grpo_now() - t0) * 1000.0;
    return GRPO_OK;
}
