/* `grpo serve`: the coordinator of rollout workers (issue 11). It owns the prompt stream, the store
 * (the single writer), the advantages and the trainer bridge; workers (`grpo worker`) pull prompt
 * groups as leases, generate and verify them, and send the groups back.
 *
 * One thread: receive a request, answer it, expire lapsed leases, poll the bridge for weights.
 * No request waits on a worker, so one slow or dead worker never holds the others up. */
#include "cli/cli.h"
#include "cli/run_common.h"
#include "common/common_int.h"
#include "grpo/bridge.h"
#include "grpo/rollout.h"
#include "grpo/run.h"
#include "grpo/store.h"
#include "grpo/workers.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define CMD "serve"
#define MAX_WORKERS 4096 /* distinct worker ids remembered for the progress line */

typedef struct args {
    const char *prompts, *db, *listen, *publish, *template_name;
    int new_run, window, max_staleness, max_leases;
    double lease_timeout, linger, backup_after;
    cli_gen_args gen; /* --group, sampling, --seed, stops, --logprobs, --on-bad-line */
} args;

typedef struct worker_info {
    char id[GRPO_WORKERS_MAX_ID + 1];
    double last_seen, tokens_per_s;
    uint64_t groups;
} worker_info;

typedef struct conn {
    uint32_t pipe;
    uint32_t worker; /* index in workers[] */
} conn;

#define MAX_CONNS 65536

/* A batch already stored (with its group) that waits for room in the publisher's window. */
typedef struct held_batch {
    void *bytes;
    size_t len;
} held_batch;

typedef struct serve {
    const args *a;
    grpo_prompt_set ps;
    int64_t *prompt_ids; /* store ids, per item */
    double *issued_at;   /* wall clock of the current lease, per item */
    grpo_store *store;
    int64_t run_id;
    char run_id_str[32];
    grpo_lease_table *leases;
    grpo_wserver *srv;
    grpo_bridge_publisher *pub;
    grpo_run_persist persist;
    grpo_run_lock *lock; /* the run is this process's */
    grpo_wpolicy policy;
    char weights_path[4096], weights_sha[65];
    grpo_wparams params;
    worker_info *workers;
    size_t n_workers;
    conn *conns; /* open connections and the worker on each */
    size_t n_conns;
    uint64_t recorded, duplicates, stale, refused, requests;
    held_batch *held; /* recorded groups' batches the publisher's full window did not take yet */
    size_t n_held, cap_held;
    uint64_t held_total; /* batches that waited in held[] */
} serve;

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: grpo serve --prompts FILE --db FILE --listen URL [options]\n\n"
        "Coordinates rollout workers (grpo worker): hands out prompt groups as leases with\n"
        "deadlines, records the groups the workers return (once each) with their advantages,\n"
        "re-issues the lease of a worker that died or went silent, and optionally publishes\n"
        "batches to a trainer. Restarted with the same options it resumes the run from the store:\n"
        "groups already recorded are not redone.\n\n"
        "  --prompts FILE       prompts JSONL, or git:REPO_PATH@REV:path/in/repo.jsonl\n"
        "  --db FILE            SQLite store (default grpo.db); the coordinator is its only "
        "writer\n"
        "  --listen URL         where workers connect: tcp://0.0.0.0:PORT between hosts,\n"
        "                       ipc:///path on one host (default $GRPO_LISTEN_URL, else\n"
        "                       tcp://0.0.0.0:5555)\n"
        "  --publish URL        publish one batch per group to a trainer (as grpo rollout does);\n"
        "                       new weights the trainer announces go to the workers\n"
        "  --publish-window K   unacknowledged batches before new leases wait (default 4)\n"
        "  --max-staleness K    refuse groups sampled from a policy more than K versions behind\n"
        "                       (they are re-issued); -1 = any (default 1). Workers drop their\n"
        "                       in-flight groups on a new version when K is 0, else finish them\n"
        "  --lease-timeout S    a lease lapses S seconds after its last heartbeat (default 30)\n"
        "  --max-leases N       leases one worker may hold at once (default 8)\n"
        "  --backup-after S     at the run's tail (nothing left to hand out), give an idle worker\n"
        "                       a second lease on the group leased longest ago (at least S\n"
        "                       seconds) to another worker; the first result is recorded.\n"
        "                       Off by default\n"
        "  --linger S           after the last group, answer \"stop\" for S seconds so workers\n"
        "                       exit cleanly (default 2)\n"
        "  --new-run            start a new run even if the store holds an unfinished run with\n"
        "                       the same options\n"
        "Generation (sent to the workers; as in grpo rollout):\n");
    cli_gen_help_sampling(f);
    fputs(
        "  --seed S             run seed (default 0); completions depend on it, the prompt id and\n"
        "                       the sample index only, never on which worker made them\n",
        f);
    cli_gen_help_stops(f);
    fputs("  --template NAME      chat template: r1, v3, none (default: the worker's, r1)\n", f);
    cli_gen_help_logprobs(f);
    fputs("  --on-bad-line MODE   fail (default) or skip a bad prompts line\n"
          "  --help               this text\n\n"
          "exit codes: 0 success, 1 runtime failure, 2 usage error\n",
          f);
}

static int
num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

enum {
    O_PROMPTS = 256,
    O_DB,
    O_LISTEN,
    O_PUBLISH,
    O_WINDOW,
    O_STALE,
    O_LEASE,
    O_MAXLEASES,
    O_LINGER,
    O_BACKUP,
    O_NEWRUN,
    O_TEMPLATE
};

static const struct option long_opts[] = {
    {"prompts", required_argument, 0, O_PROMPTS},
    {"db", required_argument, 0, O_DB},
    {"listen", required_argument, 0, O_LISTEN},
    {"publish", required_argument, 0, O_PUBLISH},
    {"publish-window", required_argument, 0, O_WINDOW},
    {"max-staleness", required_argument, 0, O_STALE},
    {"lease-timeout", required_argument, 0, O_LEASE},
    {"max-leases", required_argument, 0, O_MAXLEASES},
    {"linger", required_argument, 0, O_LINGER},
    {"backup-after", required_argument, 0, O_BACKUP},
    {"new-run", no_argument, 0, O_NEWRUN},
    {"template", required_argument, 0, O_TEMPLATE},
    CLI_GEN_LONG_OPTS,
    {0, 0, 0, 0},
};

static int
parse_opt(void *ctx, int c, const char *v)
{
    args *a = ctx;
    double d;
    switch (c) {
    case O_PROMPTS:
        a->prompts = v;
        return 0;
    case O_DB:
        a->db = v;
        return 0;
    case O_LISTEN:
        a->listen = v;
        return 0;
    case O_PUBLISH:
        a->publish = v;
        return 0;
    case O_TEMPLATE:
        a->template_name = v;
        return 0;
    case O_NEWRUN:
        a->new_run = 1;
        return 0;
    case O_WINDOW:
    case O_MAXLEASES:
        if (num(v, 1, c == O_WINDOW ? 1 << 20 : GRPO_WORKERS_MAX_LEASES, &d) || d != (int)d)
            return cli_usage(CMD, "--%s %s: expected a positive integer",
                             c == O_WINDOW ? "publish-window" : "max-leases (at most 64)", v);
        *(c == O_WINDOW ? &a->window : &a->max_leases) = (int)d;
        return 0;
    case O_STALE:
        if (num(v, -1, 1 << 20, &d) || d != (int)d)
            return cli_usage(CMD, "--max-staleness %s: expected an integer >= -1", v);
        a->max_staleness = (int)d;
        return 0;
    case O_BACKUP:
        if (num(v, 0, 86400, &d))
            return cli_usage(CMD, "--backup-after %s: expected seconds", v);
        a->backup_after = d;
        return 0;
    case O_LEASE:
    case O_LINGER:
        if (num(v, c == O_LEASE ? 0.1 : 0, 86400, &d))
            return cli_usage(CMD, "--%s %s: expected seconds",
                             c == O_LEASE ? "lease-timeout" : "linger", v);
        *(c == O_LEASE ? &a->lease_timeout : &a->linger) = d;
        return 0;
    default:
        return cli_gen_is_opt(c) ? cli_gen_parse_opt(CMD, &a->gen, c, v)
                                 : cli_usage(CMD, "unknown option");
    }
}

static int
parse_args(args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    cli_gen_defaults(&a->gen);
    a->db = "grpo.db";
    a->window = 4, a->max_staleness = 1, a->max_leases = 8, a->lease_timeout = 30, a->linger = 2;
    a->backup_after = -1;
    a->listen = getenv("GRPO_LISTEN_URL");
    if (a->listen == NULL || a->listen[0] == '\0')
        a->listen = "tcp://0.0.0.0:5555";
    int rc = cli_getopt(CMD, argc, argv, long_opts, parse_opt, a);
    if (rc != 0)
        return rc;
    if (a->prompts == NULL)
        return cli_usage(CMD, "--prompts is required");
    return 0;
}

/* What identifies a run: a restarted coordinator with the same options resumes it. */
static char *
config_json(const args *a)
{
    cJSON *o = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->gen.seed);
    cJSON_AddStringToObject(o, "command", "serve");
    cJSON_AddStringToObject(o, "prompts", a->prompts);
    cli_gen_json_config(o, &a->gen);
    cJSON_AddStringToObject(o, "seed", seed);
    cJSON_AddStringToObject(o, "template", a->template_name ? a->template_name : "");
    cJSON_AddNumberToObject(o, "logprobs", a->gen.logprobs);
    cli_gen_json_stops(o, &a->gen);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static char *
sampling_json(const args *a, const grpo_prompt *p)
{
    cJSON *o = cJSON_CreateObject();
    cli_gen_json_sampling(o, &a->gen, p->id);
    if (a->template_name)
        cJSON_AddStringToObject(o, "template", a->template_name);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static double
wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- setup ---- */

static grpo_err
open_run(serve *c, int argc, char **argv)
{
    const args *a = c->a;
    grpo_err err;
    char *cfg = config_json(a), *cmdline = NULL;
    if (cfg == NULL)
        return grpo__fail(GRPO_ENOMEM, "serve: out of memory");
    if ((err = grpo_store_open(&c->store, a->db, NULL)) != GRPO_OK)
        goto done;
    if (!a->new_run && (err = grpo_store_run_find(&c->run_id, c->store, cfg)) != GRPO_OK)
        goto done;
    if (c->run_id > 0) {
        if ((err = grpo_run_lock_take(&c->lock, a->db, c->run_id)) == GRPO_OK)
            fprintf(stderr, "grpo serve: resuming run %lld from %s\n", (long long)c->run_id, a->db);
        if (err == GRPO_OK)
            err = grpo_store_run_reopen(c->store, c->run_id);
        goto done;
    }
    if ((cmdline = cli_join_argv(argc, argv)) == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "serve: out of memory");
        goto done;
    }
    err = grpo_run_store_begin(&c->run_id, c->store, cmdline, cfg, &c->ps, a->prompts);
    if (err == GRPO_OK)
        err = grpo_run_lock_take(&c->lock, a->db, c->run_id);
    if (err == GRPO_OK) /* version 0 is whatever --model the workers were started with */
        err = grpo_store_put_policy_version(c->store, c->run_id, 0, "worker --model", NULL);
done:
    free(cfg), free(cmdline);
    snprintf(c->run_id_str, sizeof c->run_id_str, "%lld", (long long)c->run_id);
    return err;
}

/* Records the prompts and marks the groups already recorded (a resumed run) as done. */
static grpo_err
load_items(serve *c, size_t *already)
{
    size_t n = c->ps.n;
    grpo_err err;
    c->prompt_ids = calloc(n ? n : 1, sizeof *c->prompt_ids);
    c->issued_at = calloc(n ? n : 1, sizeof *c->issued_at);
    c->workers = calloc(MAX_WORKERS, sizeof *c->workers);
    c->conns = calloc(MAX_CONNS, sizeof *c->conns);
    if (!c->prompt_ids || !c->issued_at || !c->workers || !c->conns)
        return grpo__fail(GRPO_ENOMEM, "serve: out of memory for %zu prompts", n);
    if ((err = grpo_lease_table_create(&c->leases, n, c->a->lease_timeout)) != GRPO_OK)
        return err;
    *already = 0;
    for (size_t i = 0; i < n; i++) {
        const grpo_prompt *p = &c->ps.items[i];
        grpo_prompt_rec pr = {c->ps.source,     (int64_t)i,     p->prompt,
                              p->messages_json, p->answer_json, p->tests_json};
        int32_t exists = 0;
        if ((err = grpo_store_put_prompt(&c->prompt_ids[i], c->store, &pr)) != GRPO_OK ||
            (err = grpo_store_group_exists(&exists, c->store, c->run_id, 0, c->prompt_ids[i],
                                           c->a->gen.seed)) != GRPO_OK)
            return err;
        if (exists) {
            grpo_lease_table_mark_done(c->leases, i);
            (*already)++;
        }
    }
    return GRPO_OK;
}

static void
fill_params(serve *c)
{
    const args *a = c->a;
    grpo_wparams *p = &c->params;
    p->group_size = a->gen.G, p->seed = a->gen.seed, p->sampling = a->gen.s;
    p->max_new_tokens = a->gen.max_new, p->logprobs = a->gen.logprobs;
    p->template_name = (char *)a->template_name;
    p->n_stop = a->gen.n_stop;
    for (int i = 0; i < a->gen.n_stop; i++)
        p->stop[i] = (char *)a->gen.stop[i];
    p->n_stop_ids = a->gen.n_stop_ids;
    memcpy(p->stop_ids, a->gen.stop_ids, sizeof p->stop_ids);
    c->policy.version = 0, c->policy.max_staleness = a->max_staleness;
}

/* ---- requests ---- */

static void
note_worker(serve *c, const char *id, double tok_s, int result)
{
    double now = grpo_now();
    worker_info *w = NULL;
    for (size_t i = 0; i < c->n_workers && w == NULL; i++)
        if (strcmp(c->workers[i].id, id) == 0)
            w = &c->workers[i];
    if (w == NULL && c->n_workers < MAX_WORKERS) {
        w = &c->workers[c->n_workers++];
        snprintf(w->id, sizeof w->id, "%s", id);
        fprintf(stderr, "\ngrpo serve: worker %s joined\n", id);
    }
    if (w == NULL)
        return;
    w->last_seen = now;
    if (tok_s >= 0)
        w->tokens_per_s = tok_s;
    w->groups += (uint64_t)result;
}

/* Fills the wire lease for item and records it in the store; the lease's tag is its row. */
static grpo_err
begin_lease(serve *c, const char *worker, size_t item, grpo_wlease *l, int backup)
{
    const grpo_prompt *p = &c->ps.items[item];
    l->timeout_s = c->a->lease_timeout;
    l->prompt_id = p->id, l->record_json = p->record_json;
    double at = wall_now();
    if (!backup)
        c->issued_at[item] = at;
    grpo_lease_rec lr = {c->run_id, 0,  c->prompt_ids[item],     c->a->gen.seed, l->attempt,
                         worker,    at, at + c->a->lease_timeout};
    int64_t row = 0;
    grpo_err err = grpo_store_lease_begin(&row, c->store, &lr);
    if (err == GRPO_OK)
        grpo_lease_table_set_tag(c->leases, l->lease_id, row);
    return err;
}

static grpo_err
on_pull(serve *c, const grpo_wmsg *req, grpo_wmsg *rep)
{
    grpo_lease_counts lc;
    grpo_lease_table_counts(c->leases, &lc);
    note_worker(c, req->worker_id, req->tokens_per_s, 0);
    if (lc.done == lc.items) {
        rep->type = GRPO_WMSG_STOP;
        return GRPO_OK;
    }
    static grpo_wlease ls[GRPO_WORKERS_MAX_LEASES];
    /* The trainer is behind (held batches): no new work until it catches up. */
    int want = c->n_held > 0 ? 0 : req->want < c->a->max_leases ? req->want : c->a->max_leases;
    int n = 0;
    double now = grpo_now();
    size_t item;
    for (int backup = 0; backup < 2; backup++) {
        while (n < want && (backup ? c->a->backup_after >= 0 &&
                                         grpo_lease_table_issue_backup(
                                             c->leases, req->worker_id, now, c->a->backup_after,
                                             &item, &ls[n].lease_id, &ls[n].attempt)
                                   : grpo_lease_table_issue(c->leases, req->worker_id, now, &item,
                                                            &ls[n].lease_id, &ls[n].attempt))) {
            grpo_err err = begin_lease(c, req->worker_id, item, &ls[n], backup);
            if (err != GRPO_OK)
                return err;
            n++;
        }
    }
    rep->policy = c->policy;
    if (n == 0) {
        rep->type = GRPO_WMSG_WAIT;
        rep->retry_ms =
            (uint32_t)(c->a->lease_timeout * 1000 / 10 > 500 ? 500 : c->a->lease_timeout * 100);
        return GRPO_OK;
    }
    rep->type = GRPO_WMSG_WORK;
    rep->params = c->params;
    rep->n_leases = n, rep->leases = ls;
    return GRPO_OK;
}

static void
on_heartbeat(serve *c, const grpo_wmsg *req, grpo_wmsg *rep)
{
    double now = grpo_now();
    note_worker(c, req->worker_id, req->tokens_per_s, 0);
    for (int32_t i = 0; i < req->n_ids; i++)
        grpo_lease_table_heartbeat(c->leases, req->ids[i], req->worker_id, now);
    rep->type = GRPO_WMSG_ACK;
    rep->status = GRPO_WACK_OK;
    rep->policy = c->policy;
}

/* A result that does not fit its prompt or the run's params is refused (not recorded). */
static const char *
check_result(const serve *c, const grpo_wresult *r, size_t item)
{
    if (strcmp(r->prompt_id, c->ps.items[item].id) != 0)
        return "its prompt id is not the leased prompt's";
    if (r->n_samples != c->a->gen.G)
        return "its group size differs from --group";
    uint8_t *seen = calloc((size_t)r->n_samples, 1);
    const char *why = seen ? NULL : "out of memory";
    for (int32_t i = 0; seen && i < r->n_samples && why == NULL; i++) {
        int32_t k = r->samples[i].index;
        if (k < 0 || k >= r->n_samples || seen[k])
            why = "its sample indices are not 0..G-1 once each";
        else
            seen[k] = 1;
        if (r->samples[i].n_tokens > c->a->gen.max_new)
            why = "a completion is longer than --max-new-tokens";
    }
    free(seen);
    return why;
}

/* Hands held batches to the publisher, oldest first, while its window has room. */
static grpo_err
flush_held(serve *c)
{
    size_t k = 0;
    grpo_err err = GRPO_OK;
    while (k < c->n_held && (err = grpo_bridge_publish_bytes(c->pub, c->held[k].bytes,
                                                             c->held[k].len, 0)) == GRPO_OK)
        free(c->held[k++].bytes);
    memmove(c->held, c->held + k, (c->n_held - k) * sizeof *c->held);
    c->n_held -= k;
    return err == GRPO_ETIMEOUT ? GRPO_OK : err;
}

/* Hands a stored batch (bytes: ours) to the publisher, behind any held ones. When its window is
 * full (the trainer is behind, or not up yet) the batch stays held and flush_held hands it over
 * once there is room; new leases wait meanwhile. Blocking here instead would leave every worker
 * unanswered for as long as the trainer is busy. */
static grpo_err
hand_over(serve *c, void *bytes, size_t len)
{
    if (c->n_held == c->cap_held) {
        size_t cap = c->cap_held ? 2 * c->cap_held : 16;
        held_batch *t = realloc(c->held, cap * sizeof *t);
        if (t == NULL) {
            free(bytes);
            return grpo__fail(GRPO_ENOMEM, "serve: out of memory");
        }
        c->held = t, c->cap_held = cap;
    }
    c->held[c->n_held++] = (held_batch){bytes, len};
    grpo_err err = flush_held(c);
    if (err == GRPO_OK && c->n_held > 0 && c->held_total++ == 0) /* this one is held (FIFO) */
        fprintf(stderr,
                "\ngrpo serve: the trainer has %d batches unacknowledged (the window); "
                "recorded groups wait for it, and new leases too\n",
                c->a->window);
    return err;
}

/* The steps of a group a worker returned: its verdicts as the scores, advantages, then the record
 * with its batch in one transaction (a crash never leaves a recorded group whose batch the
 * trainer will not get; a restart resends unacknowledged ones), and the batch to the trainer. */
static grpo_err
record_group(serve *c, const grpo_wmsg *req, size_t item, int32_t attempt)
{
    grpo_run_group g = {0};
    char *sj = sampling_json(c->a, &c->ps.items[item]);
    void *batch = NULL;
    size_t batch_len = 0;
    grpo_err err = sj ? grpo_run_group_from_wire(&g, &req->result)
                      : grpo__fail(GRPO_ENOMEM, "serve: out of memory");
    g.run_id = c->run_id, g.item = (int64_t)item, g.store_prompt_id = c->prompt_ids[item];
    g.step = 0, g.seed = c->a->gen.seed, g.max_tokens = c->a->gen.max_new, g.sampling_json = sj;
    g.finished_at = wall_now();
    g.started_at = c->issued_at[item] > 0 ? c->issued_at[item] : g.finished_at;
    g.worker_id = req->worker_id, g.lease_attempt = attempt;
    if (err == GRPO_OK)
        err = grpo_run_advantages(&g);
    if (err == GRPO_OK && c->pub && !grpo_run_group_aborted(&g))
        err = grpo_run_batch_encode(&batch, &batch_len, &g);
    if (err == GRPO_OK)
        err = grpo_run_record(c->store, &g, batch, batch_len);
    if (err == GRPO_OK)
        err = grpo_store_lease_group_done(c->store, c->run_id, 0, c->prompt_ids[item],
                                          c->a->gen.seed, attempt);
    if (err == GRPO_OK && batch != NULL)
        err = hand_over(c, batch, batch_len), batch = NULL;
    grpo_run_group_fini(&g);
    free(sj), free(batch);
    return err;
}

static grpo_err
on_result(serve *c, const grpo_wmsg *req, grpo_wmsg *rep)
{
    const grpo_wresult *r = &req->result;
    size_t item;
    int32_t attempt;
    rep->type = GRPO_WMSG_ACK;
    rep->policy = c->policy;
    note_worker(c, req->worker_id, -1, 0);
    grpo_lease_outcome o = grpo_lease_table_lookup(c->leases, r->lease_id, &item, &attempt);
    if (o == GRPO_LEASE_DUPLICATE) {
        c->duplicates++;
        rep->status = GRPO_WACK_DUPLICATE;
        return GRPO_OK;
    }
    const char *why = o == GRPO_LEASE_UNKNOWN ? "its lease id names no prompt of this run"
                                              : check_result(c, r, item);
    if (why != NULL) {
        grpo_log(GRPO_LOG_WARN, "serve: refused a result from worker %s: %s", req->worker_id, why);
        c->refused++;
        rep->status = GRPO_WACK_REFUSED;
        return GRPO_OK;
    }
    if (c->a->max_staleness >= 0 && c->policy.version - r->policy_version > c->a->max_staleness) {
        c->stale++;
        rep->status = GRPO_WACK_STALE;
        if (grpo_lease_table_attempt(c->leases, item) == attempt) /* its backup carries on, */
            grpo_lease_table_release(c->leases, item);            /* else it is re-issued at once */
        return GRPO_OK;
    }
    grpo_err err = record_group(c, req, item, attempt);
    if (err != GRPO_OK)
        return err;
    grpo_lease_table_complete(c->leases, item);
    note_worker(c, req->worker_id, -1, 1);
    c->recorded++;
    rep->status = GRPO_WACK_OK;
    return GRPO_OK;
}

static void
on_expired(void *ctx, size_t item, int32_t attempt, const char *worker, int64_t row)
{
    serve *c = ctx;
    fprintf(stderr, "\ngrpo serve: lease of prompt %s (attempt %d) held by %s lapsed; re-issuing\n",
            c->ps.items[item].id, attempt, worker);
    if (row > 0)
        grpo_store_lease_end(c->store, row, "expired");
}

/* New weights from the trainer: recorded, then announced to the workers in every reply. */
static grpo_err
poll_weights(serve *c)
{
    grpo_weights_update wu;
    if (c->pub == NULL || !grpo_bridge_poll_weights(c->pub, &wu))
        return GRPO_OK;
    snprintf(c->weights_path, sizeof c->weights_path, "%s", wu.path);
    snprintf(c->weights_sha, sizeof c->weights_sha, "%s", wu.sha256);
    c->policy.version = wu.version;
    c->policy.weights_path = c->weights_path, c->policy.sha256 = c->weights_sha;
    grpo_bridge_set_policy_version(c->pub, wu.version);
    fprintf(stderr, "\ngrpo serve: policy version %lld from %s\n", (long long)wu.version, wu.path);
    return grpo_store_put_policy_version(c->store, c->run_id, wu.version, wu.path, wu.sha256);
}

static void
progress(serve *c, int final)
{
    static double last;
    double now = grpo_now();
    if (!final && now - last < 2.0)
        return;
    last = now;
    grpo_lease_counts lc;
    grpo_lease_table_counts(c->leases, &lc);
    int alive = 0;
    for (size_t i = 0; i < c->n_workers; i++)
        alive += now - c->workers[i].last_seen < c->a->lease_timeout;
    char held[64] = "";
    if (c->n_held > 0) /* the trainer is behind: these batches wait for its window */
        snprintf(held, sizeof held, "  held for the trainer %zu", c->n_held);
    fprintf(stderr,
            "\rgroups %zu/%zu  leased %zu  workers %d  reissued %llu  expired %llu  "
            "duplicates %llu%s%s",
            lc.done, lc.items, lc.leased, alive, (unsigned long long)lc.reissued,
            (unsigned long long)lc.expired, (unsigned long long)c->duplicates, held,
            final ? "\n" : "");
    fflush(stderr);
}

static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void
note_conn(serve *c, const char *worker_id, uint32_t pipe)
{
    size_t w = 0;
    while (w < c->n_workers && strcmp(c->workers[w].id, worker_id) != 0)
        w++;
    if (w == c->n_workers || pipe == 0)
        return;
    for (size_t i = 0; i < c->n_conns; i++)
        if (c->conns[i].pipe == pipe) {
            c->conns[i].worker = (uint32_t)w;
            return;
        }
    if (c->n_conns < MAX_CONNS)
        c->conns[c->n_conns++] = (conn){pipe, (uint32_t)w};
}

static void
on_disconnected(void *ctx, size_t item, int32_t attempt, const char *worker, int64_t row)
{
    serve *c = ctx;
    fprintf(stderr,
            "\ngrpo serve: worker %s disconnected holding prompt %s (attempt %d); "
            "re-issuing\n",
            worker, c->ps.items[item].id, attempt);
    if (row > 0)
        grpo_store_lease_end(c->store, row, "expired");
}

/* A worker whose every connection closed (killed, crashed, cut off) loses its leases now rather
 * than at their deadline. A worker merely reconnecting loses them too; its results still count. */
static void
reap_connections(serve *c)
{
    uint32_t ids[256];
    int n = grpo_wserver_closed_pipes(c->srv, ids, 256);
    for (int k = 0; k < n; k++) {
        size_t i = 0;
        while (i < c->n_conns && c->conns[i].pipe != ids[k])
            i++;
        if (i == c->n_conns)
            continue;
        uint32_t w = c->conns[i].worker;
        c->conns[i] = c->conns[--c->n_conns];
        int still = 0;
        for (size_t j = 0; j < c->n_conns && !still; j++)
            still = c->conns[j].worker == w;
        if (!still)
            grpo_lease_table_expire_worker(c->leases, c->workers[w].id, on_disconnected, c);
    }
}

static grpo_err
handle(serve *c, const grpo_wmsg *req)
{
    grpo_wmsg rep = {0};
    grpo_err err = GRPO_OK;
    c->requests++;
    switch (req->type) {
    case GRPO_WMSG_PULL:
        err = on_pull(c, req, &rep);
        break;
    case GRPO_WMSG_HEARTBEAT:
        on_heartbeat(c, req, &rep);
        break;
    case GRPO_WMSG_RESULT:
        err = on_result(c, req, &rep);
        break;
    default:
        rep.type = GRPO_WMSG_ERROR, rep.message = "not a request";
    }
    if (err != GRPO_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "coordinator failed: %s", grpo_error_last());
        grpo_wmsg e = {0};
        e.type = GRPO_WMSG_ERROR, e.message = msg;
        grpo_wserver_reply(c->srv, &e);
        return err;
    }
    if (req->worker_id)
        note_conn(c, req->worker_id, grpo_wserver_last_pipe(c->srv));
    grpo_err rerr = grpo_wserver_reply(c->srv, &rep);
    if (rerr != GRPO_OK) /* the worker went away: its leases lapse */
        grpo_log(GRPO_LOG_WARN, "serve: %s", grpo_error_last());
    return GRPO_OK;
}

static grpo_err
serve_loop(serve *c)
{
    grpo_err err = GRPO_OK;
    double done_at = 0;
    while (err == GRPO_OK && !interrupted) {
        grpo_lease_counts lc;
        grpo_lease_table_counts(c->leases, &lc);
        if (lc.done == lc.items && c->n_held == 0) {
            if (done_at == 0)
                done_at = grpo_now();
            if (grpo_now() - done_at >= c->a->linger)
                break;
        }
        grpo_wmsg req;
        grpo_err rerr = grpo_wserver_recv(c->srv, &req, 100);
        if (rerr == GRPO_OK) {
            err = handle(c, &req);
            grpo_wmsg_fini(&req);
        } else if (rerr != GRPO_ETIMEOUT && rerr != GRPO_EFORMAT) {
            err = rerr;
        }
        if (err == GRPO_OK) {
            reap_connections(c);
            grpo_lease_table_expire(c->leases, grpo_now(), on_expired, c);
        }
        if (err == GRPO_OK && c->n_held > 0)
            err = flush_held(c);
        if (err == GRPO_OK && c->n_held == 0) /* held batches go out under the version they */
            err = poll_weights(c);            /* were accepted with (--max-staleness)      */
        if (isatty(2))
            progress(c, 0);
    }
    return err;
}

static grpo_err
open_publisher(serve *c)
{
    grpo_bridge_opts bo;
    char wdir[PATH_MAX];
    grpo_bridge_opts_default(&bo);
    bo.run_id = c->run_id_str;
    bo.window = c->a->window;
    bo.max_staleness = c->a->max_staleness;
    snprintf(wdir, sizeof wdir, "%s.weights", c->a->db);
    bo.weights_dir = wdir;
    grpo_run_persist_init(&c->persist, c->store, c->run_id);
    bo.persist = &c->persist.persist;
    return grpo_bridge_publisher_create(&c->pub, c->a->publish, &bo);
}

static void
summary(serve *c, double secs)
{
    grpo_lease_counts lc;
    struct rusage ru;
    grpo_lease_table_counts(c->leases, &lc);
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    printf("run %lld: %zu/%zu prompts done; %llu groups recorded in %.1f s (%.2f groups/s); leases "
           "issued %llu, re-issued %llu, backups %llu, expired %llu; duplicates %llu, stale %llu, "
           "refused %llu; "
           "workers %zu; coordinator CPU %.1f s (%.1f%%), max RSS %ld KiB\n",
           (long long)c->run_id, lc.done, lc.items, (unsigned long long)c->recorded, secs,
           secs > 0 ? (double)c->recorded / secs : 0.0, (unsigned long long)lc.issued,
           (unsigned long long)lc.reissued, (unsigned long long)lc.backups,
           (unsigned long long)lc.expired, (unsigned long long)c->duplicates,
           (unsigned long long)c->stale, (unsigned long long)c->refused, c->n_workers, cpu,
           secs > 0 ? 100 * cpu / secs : 0.0, ru.ru_maxrss);
    if (c->held_total > 0)
        printf("trainer backpressure: %llu batches waited for the publish window (new leases "
               "waited meanwhile)\n",
               (unsigned long long)c->held_total);
}

static void
serve_fini(serve *c)
{
    grpo_bridge_publisher_destroy(c->pub);
    grpo_wserver_destroy(c->srv);
    grpo_lease_table_destroy(c->leases);
    for (size_t i = 0; i < c->n_held; i++) /* stored: a restart resends them */
        free(c->held[i].bytes);
    free(c->held);
    free(c->prompt_ids), free(c->issued_at), free(c->workers), free(c->conns);
    grpo_prompts_fini(&c->ps);
}

int
grpo_cmd_serve(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    serve c;
    memset(&c, 0, sizeof c);
    c.a = &a;
    fill_params(&c);
    size_t already = 0;
    double t0 = grpo_now();
    grpo_err err = grpo_prompts_load(&c.ps, a.prompts, a.gen.skip_bad);
    if (err == GRPO_OK) /* a bad URL fails before the store is touched */
        err = grpo_wserver_create(&c.srv, a.listen);
    if (err == GRPO_OK)
        err = open_run(&c, argc, argv);
    if (err == GRPO_OK)
        err = load_items(&c, &already);
    if (err == GRPO_OK && already > 0)
        fprintf(stderr, "grpo serve: %zu of %zu groups already recorded\n", already, c.ps.n);
    if (err == GRPO_OK && a.publish)
        err = open_publisher(&c);
    int ran = err == GRPO_OK;
    if (err == GRPO_OK) {
        fprintf(stderr, "grpo serve: run %lld, %zu prompts x %d samples, listening on %s\n",
                (long long)c.run_id, c.ps.n, a.gen.G, a.listen);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGPIPE, SIG_IGN);
        err = serve_loop(&c);
    }
    if (err == GRPO_OK && interrupted)
        err = grpo__fail(GRPO_ECANCELED, "interrupted; the groups recorded so far are kept and a "
                                         "restart resumes the run");
    if (err == GRPO_OK && c.pub) {
        fprintf(stderr, "grpo serve: waiting for the trainer to acknowledge every batch\n");
        if ((err = grpo_bridge_flush(c.pub, -1)) == GRPO_OK)
            err = grpo_bridge_finish(c.pub);
    }
    if (ran) {
        if (isatty(2))
            progress(&c, 1);
        summary(&c, grpo_now() - t0);
    }
    if (c.store && c.run_id > 0)
        grpo_store_run_end(c.store, c.run_id,
                           interrupted      ? "interrupted"
                           : err == GRPO_OK ? "ok"
                                            : "failed");
    char msg[600] = "";
    if (err != GRPO_OK)
        snprintf(msg, sizeof msg, "%s",
                 grpo_error_last()[0] ? grpo_error_last() : grpo_err_name(err));
    grpo_err cerr = grpo_store_close(c.store);
    if (err == GRPO_OK && cerr != GRPO_OK) {
        err = cerr;
        snprintf(msg, sizeof msg, "%s", grpo_error_last());
    }
    serve_fini(&c);
    grpo_run_unlock(c.lock);
    if (err != GRPO_OK)
        fprintf(stderr, "grpo serve: %s\n", msg);
    return err == GRPO_OK ? CLI_OK : CLI_FAIL;
}
