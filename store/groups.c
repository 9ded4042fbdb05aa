/* Writing groups: validation, the deep copy that lets callers free their records at once, the
 * insertion of a group with its completions, rewards and advantages in one transaction, and the
 * single writer thread that commits queued groups several per transaction. */
#include "store/store_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static const char *const kind_names[] = {"pass", "fail", "skip", "timeout", "error"};

enum { MAX_G = 1 << 16, MAX_REWARDS = 1 << 10 };

grpo_err
grpo_store__check_group(const grpo_group_rec *g)
{
    if (g == NULL)
        return grpo__fail(GRPO_EINVAL, "store: put_group: NULL group");
    if (g->run_id <= 0 || g->prompt_id <= 0)
        return grpo__fail(GRPO_EINVAL,
                          "store: put_group: run_id %lld / prompt_id %lld must be "
                          "ids returned by the store",
                          (long long)g->run_id, (long long)g->prompt_id);
    if (g->n_completions < 0 || g->n_completions > MAX_G ||
        (g->n_completions > 0 && g->completions == NULL))
        return grpo__fail(GRPO_EINVAL, "store: put_group: bad n_completions %d",
                          (int)g->n_completions);
    uint64_t seen[MAX_G / 64] = {0}; /* sample indexes: a duplicate would fail the whole batch */
    for (int32_t i = 0; i < g->n_completions; i++) {
        const grpo_completion_rec *c = &g->completions[i];
        int32_t si = c->sample_index;
        if (si < 0 || si >= MAX_G || (seen[si / 64] >> (si % 64) & 1))
            return grpo__fail(GRPO_EINVAL,
                              "store: put_group: completion %d: sample_index %d is out of "
                              "range or repeated",
                              (int)i, (int)si);
        seen[si / 64] |= 1ull << (si % 64);
        if (c->n_tokens < 0 || c->finish_reason < GRPO_FINISH_EOS ||
            c->finish_reason > GRPO_FINISH_ABORT || c->n_rewards < 0 ||
            c->n_rewards > MAX_REWARDS || (c->n_rewards > 0 && c->rewards == NULL))
            return grpo__fail(GRPO_EINVAL,
                              "store: put_group: completion %d: bad n_tokens, "
                              "finish_reason or n_rewards",
                              (int)i);
        for (int32_t j = 0; j < c->n_rewards; j++) {
            const grpo_reward_rec *r = &c->rewards[j];
            if (r->verifier == NULL || r->kind < 0 || r->kind > 4)
                return grpo__fail(GRPO_EINVAL,
                                  "store: put_group: completion %d reward %d: "
                                  "missing verifier name or bad kind %d",
                                  (int)i, (int)j, (int)r->kind);
        }
        grpo_err err = grpo_store__check_turns(c, i);
        if (err != GRPO_OK)
            return err;
    }
    return grpo_store__check_routes(g);
}

/* ---- deep copy ------------------------------------------------------------------------------ */

typedef struct {
    char *base;
    size_t off; /* bytes used (or needed, when base is NULL) */
} bump;

static void *
take(bump *b, const void *src, size_t n)
{
    size_t at = (b->off + 7) & ~(size_t)7;
    b->off = at + n;
    if (b->base == NULL || src == NULL)
        return b->base ? b->base + at : NULL;
    return memcpy(b->base + at, src, n);
}

static const char *
take_str(bump *b, const char *s)
{
    return s ? take(b, s, strlen(s) + 1) : NULL;
}

/* Bytes of a completion's routes (0 without routes). */
static size_t
route_len(const grpo_group_rec *g, const grpo_completion_rec *c)
{
    if (g->routes == NULL || c->n_tokens <= 1)
        return 0;
    return grpo_store__route_bytes(g->routes, c->n_tokens - 1);
}

/* A completion's turns and their record_json strings, laid out in b: the copy (NULL on the
 * sizing pass or without turns). */
static const grpo_turn_rec *
lay_out_turns(bump *b, const grpo_completion_rec *c)
{
    if (c->n_turns <= 0)
        return NULL;
    grpo_turn_rec *ts = take(b, c->turns, sizeof *ts * (size_t)c->n_turns);
    for (int32_t j = 0; j < c->n_turns; j++) {
        const char *json = take_str(b, c->turns[j].record_json);
        if (b->base)
            ts[j].record_json = json;
    }
    return ts;
}

/* Lays the group out in b (a sizing pass when b->base is NULL, then the copying pass). */
static void
lay_out(bump *b, grpo_group_rec *dst, const grpo_group_rec *g)
{
    *dst = *g;
    dst->sampling_json = take_str(b, g->sampling_json);
    dst->worker_id = take_str(b, g->worker_id);
    dst->batch = g->batch ? take(b, g->batch, g->batch_len) : NULL;
    if (g->routes != NULL) {
        grpo_routes_rec *r = take(b, g->routes, sizeof *r);
        const uint8_t *p =
            take(b, g->routes->prompt, grpo_store__route_bytes(g->routes, g->routes->n_prompt));
        if (b->base)
            r->prompt = p;
        dst->routes = r;
    }
    grpo_completion_rec *cs = take(b, g->completions, sizeof *cs * (size_t)g->n_completions);
    dst->completions = cs;
    for (int32_t i = 0; i < g->n_completions; i++) {
        const grpo_completion_rec *c = &g->completions[i];
        size_t tl = c->text ? (c->text_len ? c->text_len : strlen(c->text)) : 0;
        const int32_t *ids = c->token_ids ? take(b, c->token_ids, 4 * (size_t)c->n_tokens) : NULL;
        const float *lps =
            c->token_logprobs ? take(b, c->token_logprobs, 4 * (size_t)c->n_tokens) : NULL;
        char *text = c->text ? take(b, NULL, tl + 1) : NULL;
        if (text) {
            memcpy(text, c->text, tl);
            text[tl] = '\0';
        }
        grpo_reward_rec *rs = take(b, c->rewards, sizeof *rs * (size_t)c->n_rewards);
        for (int32_t j = 0; j < c->n_rewards && b->base; j++) {
            const grpo_reward_rec *r = &c->rewards[j];
            rs[j].verifier = take_str(b, r->verifier);
            rs[j].version = take_str(b, r->version);
            rs[j].label = take_str(b, r->label);
            rs[j].details_json = take_str(b, r->details_json);
        }
        for (int32_t j = 0; j < c->n_rewards && !b->base; j++) {
            const grpo_reward_rec *r = &c->rewards[j];
            take_str(b, r->verifier), take_str(b, r->version), take_str(b, r->label),
                take_str(b, r->details_json);
        }
        const grpo_turn_rec *ts = lay_out_turns(b, c);
        size_t rn = route_len(g, c);
        const uint8_t *rt = rn && c->routes ? take(b, c->routes, rn) : NULL;
        if (b->base) {
            cs[i].routes = rt;
            cs[i].token_ids = ids;
            cs[i].token_logprobs = lps;
            cs[i].text = text;
            cs[i].text_len = tl;
            cs[i].rewards = rs;
            cs[i].turns = ts;
        }
    }
}

store_item *
grpo_store__copy_group(const grpo_group_rec *g)
{
    bump sizing = {NULL, sizeof(store_item)};
    grpo_group_rec scratch;
    lay_out(&sizing, &scratch, g);
    store_item *it = malloc(sizing.off);
    if (it == NULL) {
        grpo__fail(GRPO_ENOMEM, "store: put_group: out of memory copying a group");
        return NULL;
    }
    bump b = {(char *)it, sizeof(store_item)};
    it->next = NULL;
    lay_out(&b, &it->g, g);
    return it;
}

/* ---- insertion ------------------------------------------------------------------------------ */

static void
bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static grpo_err
step_done(grpo_store *s, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    grpo_err err = rc == SQLITE_DONE ? GRPO_OK : grpo_store__db_fail(s, rc, what);
    sqlite3_reset(st);
    return err;
}

/* The stored reward and correctness when the caller left them to be derived. */
static void
derive(const grpo_completion_rec *c, int *has_reward, double *reward, int *correct)
{
    int scored = 0, passed = 0;
    double sum = 0;
    for (int32_t j = 0; j < c->n_rewards; j++) {
        if (c->rewards[j].kind == 2 /* skip */)
            continue;
        scored++;
        passed += c->rewards[j].kind == 0;
        sum += c->rewards[j].score;
    }
    *has_reward = c->has_reward || scored > 0;
    *reward = c->has_reward ? c->reward : sum;
    *correct = c->correct >= 0 ? (c->correct != 0) : (scored == 0 ? -1 : passed == scored);
}

static grpo_err
insert_rewards(grpo_store *s, const grpo_group_rec *g, const grpo_completion_rec *c, int64_t cid)
{
    grpo_err err;
    sqlite3_stmt *st;
    for (int32_t j = 0; j < c->n_rewards; j++) {
        const grpo_reward_rec *r = &c->rewards[j];
        if ((err = grpo_store__stmt(s, ST_REWARD_INSERT, &st)) != GRPO_OK)
            return err;
        sqlite3_bind_int64(st, 1, cid);
        sqlite3_bind_int(st, 2, j);
        sqlite3_bind_int64(st, 3, g->run_id);
        sqlite3_bind_int64(st, 4, g->step);
        bind_text(st, 5, r->verifier);
        bind_text(st, 6, r->version ? r->version : "");
        bind_text(st, 7, kind_names[r->kind]);
        bind_text(st, 8, r->label);
        sqlite3_bind_double(st, 9, r->score);
        bind_text(st, 10, r->details_json);
        sqlite3_bind_double(st, 11, r->ms);
        if ((err = step_done(s, st, "inserting a reward")) != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

static grpo_err
insert_completion(grpo_store *s, const grpo_group_rec *g, int64_t gid, const grpo_completion_rec *c)
{
    grpo_err err;
    sqlite3_stmt *st;
    int has_reward, correct;
    double reward;
    if ((err = grpo_store__stmt(s, ST_COMPLETION_INSERT, &st)) != GRPO_OK)
        return err;
    derive(c, &has_reward, &reward, &correct);
    sqlite3_bind_int64(st, 1, gid);
    sqlite3_bind_int64(st, 2, g->run_id);
    sqlite3_bind_int64(st, 3, g->step);
    sqlite3_bind_int(st, 4, c->sample_index);
    sqlite3_bind_int(st, 5, c->n_tokens);
    sqlite3_bind_text(st, 6, grpo_finish_name((grpo_finish)c->finish_reason), -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 7, c->logprob_sum);
    sqlite3_bind_double(st, 8, c->first_token_ms);
    sqlite3_bind_double(st, 9, c->gen_ms);
    if (has_reward)
        sqlite3_bind_double(st, 10, reward);
    if (correct >= 0)
        sqlite3_bind_int(st, 11, correct);
    if (c->has_advantage) {
        sqlite3_bind_double(st, 12, c->advantage);
        if (!c->no_ref) {
            sqlite3_bind_double(st, 13, c->kl_mean);
            sqlite3_bind_double(st, 14, c->kl_max);
            sqlite3_bind_double(st, 15, c->ref_logprob_sum);
        }
    }
    /* x86 and arm64 are little-endian, the blobs' documented order. */
    if (c->token_ids)
        sqlite3_bind_blob(st, 16, c->token_ids, 4 * c->n_tokens, SQLITE_STATIC);
    if (c->token_logprobs)
        sqlite3_bind_blob(st, 17, c->token_logprobs, 4 * c->n_tokens, SQLITE_STATIC);
    if (c->text)
        sqlite3_bind_text64(st, 18, c->text, c->text_len ? c->text_len : strlen(c->text),
                            SQLITE_STATIC, SQLITE_UTF8);
    if ((err = step_done(s, st, "inserting a completion")) != GRPO_OK)
        return err;
    int64_t cid = sqlite3_last_insert_rowid(s->db);
    if ((err = insert_rewards(s, g, c, cid)) != GRPO_OK)
        return err;
    return grpo_store__insert_turns(s, g, c, cid);
}

/* The group's summary columns: reward mean / population std / all-equal over the completions
 * that have a reward, judged and correct counts, total tokens. */
typedef struct {
    int n_rew, zero, n_judged, n_correct, n_truncated;
    double mean, std;
    int64_t tokens;
} summary;

static void
summarize(const grpo_group_rec *g, summary *m)
{
    double lo = 0, hi = 0, sum = 0, q = 0;
    memset(m, 0, sizeof *m);
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < g->n_completions; i++) {
            int has, correct;
            double r;
            derive(&g->completions[i], &has, &r, &correct);
            if (pass == 1) {
                if (has)
                    q += (r - m->mean) * (r - m->mean);
                continue;
            }
            m->tokens += g->completions[i].n_tokens;
            m->n_truncated += g->completions[i].finish_reason == GRPO_FINISH_LENGTH;
            m->n_judged += correct >= 0;
            m->n_correct += correct == 1;
            if (!has)
                continue;
            lo = m->n_rew == 0 || r < lo ? r : lo;
            hi = m->n_rew == 0 || r > hi ? r : hi;
            sum += r;
            m->n_rew++;
        }
        if (pass == 0 && m->n_rew > 0)
            m->mean = sum / m->n_rew;
    }
    m->std = m->n_rew > 0 ? sqrt(q / m->n_rew) : 0;
    m->zero = lo == hi;
}

/* One verifier's verdicts on a group, summed. */
typedef struct {
    const char *verifier, *version;
    int64_t n, kinds[5];
    double score_sum, score_sq_sum, ms_sum;
} vsum;

/* Fills v (room for every reward of the group) and returns the number of verifiers. */
static int32_t
sum_verifiers(const grpo_group_rec *g, vsum *v)
{
    int32_t nv = 0;
    for (int32_t i = 0; i < g->n_completions; i++) {
        const grpo_completion_rec *c = &g->completions[i];
        for (int32_t j = 0; j < c->n_rewards; j++) {
            const grpo_reward_rec *r = &c->rewards[j];
            const char *ver = r->version ? r->version : "";
            int32_t k = 0;
            while (k < nv && (strcmp(v[k].verifier, r->verifier) || strcmp(v[k].version, ver)))
                k++;
            if (k == nv) {
                memset(&v[nv], 0, sizeof v[nv]);
                v[nv].verifier = r->verifier, v[nv].version = ver, nv++;
            }
            v[k].n++;
            v[k].kinds[r->kind]++;
            v[k].ms_sum += r->ms;
            if (r->kind != 2) /* skip */
                v[k].score_sum += r->score, v[k].score_sq_sum += r->score * r->score;
        }
    }
    return nv;
}

static grpo_err
insert_verifier_sums(grpo_store *s, const grpo_group_rec *g, int64_t gid)
{
    grpo_err err = GRPO_OK;
    sqlite3_stmt *st;
    size_t n_rewards = 0;
    for (int32_t i = 0; i < g->n_completions; i++)
        n_rewards += (size_t)g->completions[i].n_rewards;
    if (n_rewards == 0)
        return GRPO_OK;
    vsum stack[8], *v = n_rewards <= 8 ? stack : malloc(n_rewards * sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "store: out of memory summing verdicts");
    int32_t nv = sum_verifiers(g, v);
    for (int32_t k = 0; k < nv && err == GRPO_OK; k++) {
        if ((err = grpo_store__stmt(s, ST_GV_INSERT, &st)) != GRPO_OK)
            break;
        sqlite3_bind_int64(st, 1, gid);
        sqlite3_bind_text(st, 2, v[k].verifier, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, v[k].version, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, g->run_id);
        sqlite3_bind_int64(st, 5, g->step);
        sqlite3_bind_int64(st, 6, v[k].n);
        for (int j = 0; j < 5; j++) /* pass, fail, skip, timeout, error */
            sqlite3_bind_int64(st, 7 + j, v[k].kinds[j]);
        sqlite3_bind_double(st, 12, v[k].score_sum);
        sqlite3_bind_double(st, 13, v[k].score_sq_sum);
        sqlite3_bind_double(st, 14, v[k].ms_sum);
        err = step_done(s, st, "inserting a verifier summary");
    }
    if (v != stack)
        free(v);
    return err;
}

grpo_err
grpo_store__insert_group(grpo_store *s, const grpo_group_rec *g)
{
    grpo_err err;
    sqlite3_stmt *st;
    if ((err = grpo_store__stmt(s, ST_GROUP_INSERT, &st)) != GRPO_OK)
        return err;
    sqlite3_bind_int64(st, 1, g->run_id);
    sqlite3_bind_int64(st, 2, g->step);
    sqlite3_bind_int64(st, 3, g->prompt_id);
    sqlite3_bind_int64(st, 4, g->policy_version);
    sqlite3_bind_int64(st, 5, (int64_t)g->seed);
    sqlite3_bind_int(st, 6, g->n_completions);
    bind_text(st, 7, g->sampling_json);
    sqlite3_bind_int(st, 8, g->max_tokens);
    sqlite3_bind_double(st, 9, g->started_at);
    sqlite3_bind_double(st, 10, g->finished_at);
    sqlite3_bind_double(st, 11, g->prefill_ms);
    sqlite3_bind_double(st, 12, g->gen_ms);
    sqlite3_bind_double(st, 13, g->verify_ms);
    bind_text(st, 14, g->worker_id);
    sqlite3_bind_int(st, 15, g->lease_attempt);
    summary m;
    summarize(g, &m);
    sqlite3_bind_int(st, 16, m.n_rew);
    if (m.n_rew > 0) {
        sqlite3_bind_double(st, 17, m.mean);
        sqlite3_bind_double(st, 18, m.std);
        sqlite3_bind_int(st, 19, m.zero);
    }
    sqlite3_bind_int(st, 20, m.n_judged);
    sqlite3_bind_int(st, 21, m.n_correct);
    sqlite3_bind_int(st, 22, m.n_truncated);
    sqlite3_bind_int64(st, 23, m.tokens);
    if ((err = step_done(s, st, "inserting a group")) != GRPO_OK)
        return err;
    if (sqlite3_changes(s->db) == 0)
        return GRPO_OK; /* already recorded: a resend after a restart */
    int64_t gid = sqlite3_last_insert_rowid(s->db);
    for (int32_t i = 0; i < g->n_completions; i++)
        if ((err = insert_completion(s, g, gid, &g->completions[i])) != GRPO_OK)
            return err;
    if ((err = insert_verifier_sums(s, g, gid)) != GRPO_OK ||
        (g->routes && (err = grpo_store__insert_routes(s, g, gid)) != GRPO_OK) || g->batch == NULL)
        return err;
    return grpo_store__insert_batch(s, g->batch_id, g->run_id, g->step, 1, g->batch, g->batch_len);
}

/* Writes the groups of a linked list, then n_arr groups of an array, in one transaction; all or
 * none. */
static grpo_err
write_groups(grpo_store *s, store_item *items, const grpo_group_rec *arr, int32_t n_arr)
{
    grpo_err err;
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__exec(s, "BEGIN IMMEDIATE", "starting a transaction")) != GRPO_OK)
        goto done;
    for (int32_t i = 0; i < n_arr && err == GRPO_OK; i++)
        err = grpo_store__insert_group(s, &arr[i]);
    for (store_item *it = items; it && err == GRPO_OK; it = it->next)
        err = grpo_store__insert_group(s, &it->g);
    if (err == GRPO_OK)
        err = grpo_store__exec(s, "COMMIT", "committing groups");
    if (err != GRPO_OK && !sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
done:
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* ---- the writer thread ---------------------------------------------------------------------- */

static void *
writer_main(void *arg)
{
    grpo_store *s = arg;
    int32_t max_batch = s->opts.batch_groups > 0 ? s->opts.batch_groups : 256;
    pthread_mutex_lock(&s->qmu);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->q_nonempty, &s->qmu);
        if (s->head == NULL)
            break;
        store_item *first = s->head, *last = first;
        int32_t n = 1;
        while (last->next && n < max_batch)
            last = last->next, n++;
        s->head = last->next;
        if (s->head == NULL)
            s->tail = NULL;
        last->next = NULL;
        grpo_err err = s->werr;
        pthread_mutex_unlock(&s->qmu);

        if (err == GRPO_OK)
            err = write_groups(s, first, NULL, 0);
        for (store_item *it = first, *next; it; it = next)
            next = it->next, free(it);

        pthread_mutex_lock(&s->qmu);
        if (err != GRPO_OK && s->werr == GRPO_OK) {
            s->werr = err;
            snprintf(s->werr_msg, sizeof s->werr_msg, "%s", grpo_error_last());
        }
        s->queued -= n;
        pthread_cond_broadcast(&s->q_progress);
    }
    pthread_mutex_unlock(&s->qmu);
    return NULL;
}

grpo_err
grpo_store__writer_start(grpo_store *s)
{
    if (pthread_create(&s->writer, NULL, writer_main, s) != 0)
        return grpo__fail(GRPO_ESYS, "store: %s: cannot start the writer thread", s->path);
    s->writer_started = 1;
    return GRPO_OK;
}

void
grpo_store__writer_stop(grpo_store *s)
{
    pthread_mutex_lock(&s->qmu);
    s->stop = 1;
    pthread_cond_broadcast(&s->q_nonempty);
    pthread_mutex_unlock(&s->qmu);
    pthread_join(s->writer, NULL);
    s->writer_started = 0;
}

/* Call with qmu held. */
static grpo_err
raise_werr(grpo_store *s)
{
    return s->werr == GRPO_OK ? GRPO_OK : grpo__fail(s->werr, "%s", s->werr_msg);
}

grpo_err
grpo_store__writer_error(grpo_store *s)
{
    pthread_mutex_lock(&s->qmu);
    grpo_err err = raise_werr(s);
    pthread_mutex_unlock(&s->qmu);
    return err;
}

grpo_err
grpo_store_put_group(grpo_store *s, const grpo_group_rec *g)
{
    grpo_err err;
    if (s == NULL)
        return grpo__fail(GRPO_EINVAL, "store: put_group: NULL store");
    if (s->opts.read_only)
        return grpo__fail(GRPO_EPERM, "store: %s: put_group: the store is open read-only", s->path);
    if ((err = grpo_store__check_group(g)) != GRPO_OK)
        return err;
    if (!s->writer_started)
        return write_groups(s, NULL, g, 1);
    store_item *it = grpo_store__copy_group(g);
    if (it == NULL)
        return GRPO_ENOMEM;
    int32_t cap = s->opts.queue_groups > 0 ? s->opts.queue_groups : 4096;
    pthread_mutex_lock(&s->qmu);
    while (s->queued >= cap && s->werr == GRPO_OK)
        pthread_cond_wait(&s->q_progress, &s->qmu);
    if ((err = raise_werr(s)) == GRPO_OK) {
        if (s->tail)
            s->tail->next = it;
        else
            s->head = it;
        s->tail = it;
        s->queued++;
        it = NULL;
        pthread_cond_signal(&s->q_nonempty);
    }
    pthread_mutex_unlock(&s->qmu);
    free(it);
    return err;
}

grpo_err
grpo_store_put_groups(grpo_store *s, const grpo_group_rec *groups, int32_t n)
{
    grpo_err err = GRPO_OK;
    if (s == NULL || n < 0 || (n > 0 && groups == NULL))
        return grpo__fail(GRPO_EINVAL, "store: put_groups: NULL store or groups");
    if (s->writer_started || s->opts.read_only) {
        for (int32_t i = 0; i < n && err == GRPO_OK; i++)
            err = grpo_store_put_group(s, &groups[i]);
        return err;
    }
    for (int32_t i = 0; i < n; i++)
        if ((err = grpo_store__check_group(&groups[i])) != GRPO_OK)
            return err;
    return n > 0 ? write_groups(s, NULL, groups, n) : GRPO_OK;
}

grpo_err
grpo_store__writable(grpo_store *s, const char *what)
{
    if (s == NULL)
        return grpo__fail(GRPO_EINVAL, "store: %s: NULL store", what);
    if (s->opts.read_only)
        return grpo__fail(GRPO_EPERM, "store: %s: %s: the store is open read-only", s->path, what);
    return grpo_store_flush(s);
}

double
grpo_store__wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

grpo_err
grpo_store_flush(grpo_store *s)
{
    if (s == NULL || !s->writer_started)
        return GRPO_OK;
    pthread_mutex_lock(&s->qmu);
    while (s->queued > 0)
        pthread_cond_wait(&s->q_progress, &s->qmu);
    grpo_err err = raise_werr(s);
    pthread_mutex_unlock(&s->qmu);
    return err;
}

grpo_err
grpo_store_group_exists(int32_t *exists, grpo_store *s, int64_t run_id, int64_t step,
                        int64_t prompt_id, uint64_t seed)
{
    grpo_err err;
    sqlite3_stmt *st;
    *exists = 0;
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__stmt(s, ST_GROUP_EXISTS, &st)) == GRPO_OK) {
        sqlite3_bind_int64(st, 1, run_id);
        sqlite3_bind_int64(st, 2, step);
        sqlite3_bind_int64(st, 3, prompt_id);
        sqlite3_bind_int64(st, 4, (int64_t)seed);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *exists = 1;
        else if (rc != SQLITE_DONE)
            err = grpo_store__db_fail(s, rc, "looking up a group");
        sqlite3_reset(st);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

grpo_err
grpo_store_last_step(int64_t *step, grpo_store *s, int64_t run_id)
{
    grpo_err err;
    sqlite3_stmt *st;
    *step = -1;
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__stmt(s, ST_LAST_STEP, &st)) == GRPO_OK) {
        sqlite3_bind_int64(st, 1, run_id);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
            *step = sqlite3_column_int64(st, 0);
        else if (rc != SQLITE_ROW)
            err = grpo_store__db_fail(s, rc, "reading the last step");
        sqlite3_reset(st);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}
