/* The resume step: one process per run (a lock the kernel drops when the holder dies, however it
 * dies), and the JSONL output brought back in line with the store, which is the truth: every
 * recorded completion exactly once, in whole lines, whatever the point the last process was
 * killed at. */
#include "common/common_int.h"
#include "common/json.h"
#include "grpo/run.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the lock ---- */

#define LOCK_SLOT 256 /* bytes of DB.lock per run: the holder's "pid host" */

struct grpo_run_lock {
    int fd;
    int64_t run_id;
};

static struct flock
slot(int64_t run_id, short type)
{
    struct flock fl = {0};
    fl.l_type = type, fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)run_id * LOCK_SLOT, fl.l_len = LOCK_SLOT;
    return fl;
}

static grpo_err
held_by_other(int fd, const char *path, const char *db, int64_t run_id)
{
    char who[LOCK_SLOT + 1] = {0};
    long pid = 0;
    char host[LOCK_SLOT] = "?";
    if (pread(fd, who, LOCK_SLOT, (off_t)run_id * LOCK_SLOT) > 0)
        sscanf(who, "pid %ld host %255s", &pid, host);
    return grpo__fail(GRPO_ESTATE,
                      "%s: run %lld is being written by pid %ld on host %s (lock %s); wait for "
                      "it to end or stop it",
                      db, (long long)run_id, pid, host, path);
}

grpo_err
grpo_run_lock_take(grpo_run_lock **out, const char *db_path, int64_t run_id)
{
    char path[PATH_MAX], who[LOCK_SLOT] = {0}, host[128] = "unknown";
    *out = NULL;
    snprintf(path, sizeof path, "%s.lock", db_path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open the run lock", path);
    struct flock fl = slot(run_id, F_WRLCK);
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        int e = errno;
        grpo_err err = e == EAGAIN || e == EACCES
                           ? held_by_other(fd, path, db_path, run_id)
                           : grpo__fail_errno(GRPO_EIO, e, "%s: cannot lock run %lld", path,
                                              (long long)run_id);
        close(fd);
        return err;
    }
    gethostname(host, sizeof host - 1);
    snprintf(who, sizeof who, "pid %ld host %s\n", (long)getpid(), host);
    grpo_run_lock *l = malloc(sizeof *l);
    if (l == NULL || pwrite(fd, who, LOCK_SLOT, (off_t)run_id * LOCK_SLOT) != LOCK_SLOT) {
        free(l);
        close(fd); /* drops the lock */
        return grpo__fail(GRPO_EIO, "%s: cannot write the run lock", path);
    }
    l->fd = fd, l->run_id = run_id;
    *out = l;
    return GRPO_OK;
}

void
grpo_run_unlock(grpo_run_lock *l)
{
    if (l == NULL)
        return;
    char zero[LOCK_SLOT] = {0};
    if (pwrite(l->fd, zero, LOCK_SLOT, (off_t)l->run_id * LOCK_SLOT) < 0) {
        /* the lock goes with the descriptor all the same */
    }
    close(l->fd);
    free(l);
}

/* ---- one JSONL line ---- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one (or is NUL). */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80                    ? 1
                 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2
                 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                                : 0;
    if (len == 0 || len > n || (len > 1 && !grpo__utf8_valid((const char *)s, len)))
        return 0;
    return s[0] == 0 ? 0 : len; /* NUL cannot travel in a C string */
}

/* Model output may be invalid UTF-8 (or hold NUL): JSON needs text, so each bad byte becomes
 * U+FFFD here (the store keeps the exact bytes). The caller frees the result. */
static char *
utf8_lossy(const char *text, size_t n)
{
    grpo_buf b = {0};
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq((const unsigned char *)text + i, n - i);
        if (grpo__buf_append(&b, l ? text + i : "\xEF\xBF\xBD", l ? l : 3) != GRPO_OK)
            break;
        i += l ? l : 1;
    }
    if (grpo__buf_append(&b, "", 1) != GRPO_OK) {
        grpo__buf_fini(&b);
        return NULL;
    }
    return b.data;
}

static void
json_floats(cJSON *o, const char *key, const float *v, int32_t n)
{
    if (v == NULL)
        return;
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
}

static void
json_turns(cJSON *o, const grpo_run_line *l)
{
    if (l->n_turns <= 0)
        return;
    cJSON *a = cJSON_AddArrayToObject(o, "turns");
    for (int32_t k = 0; k < l->n_turns; k++) {
        const grpo_turn_rec *u = &l->turns[k];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "action_end", u->action_end);
        cJSON_AddNumberToObject(t, "n_obs", u->n_obs);
        cJSON_AddNumberToObject(t, "n_obs_cut", u->n_obs_cut);
        cJSON *r = u->record_json ? cJSON_Parse(u->record_json) : NULL;
        cJSON_AddItemToObject(t, "record", r ? r : cJSON_CreateObject());
        cJSON_AddItemToArray(a, t);
    }
}

char *
grpo_run_line_json(const grpo_run_line *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "run_id", (double)l->run_id);
    cJSON_AddNumberToObject(o, "group", (double)l->group);
    cJSON_AddStringToObject(o, "prompt_id", l->prompt_id);
    cJSON_AddNumberToObject(o, "sample", l->sample);
    cJSON_AddStringToObject(o, "finish", grpo_finish_name(l->finish));
    cJSON_AddNumberToObject(o, "n_tokens", l->n_tokens);
    char *text = utf8_lossy(l->text ? l->text : "", l->text ? l->text_len : 0);
    cJSON_AddStringToObject(o, "text", text ? text : "");
    free(text);
    cJSON_AddNumberToObject(o, "reward", l->reward);
    if (l->skipped)
        cJSON_AddTrueToObject(o, "skipped");
    else
        cJSON_AddNumberToObject(o, "advantage", l->advantage);
    if (l->task)
        cJSON_AddStringToObject(o, "task", l->task);
    if (l->answer)
        cJSON_AddStringToObject(o, "answer", l->answer);
    cJSON *tk = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t k = 0; l->tokens && k < l->n_tokens; k++)
        cJSON_AddItemToArray(tk, cJSON_CreateNumber(l->tokens[k]));
    json_floats(o, "logprobs", l->logprobs, l->n_tokens);
    json_floats(o, "logprobs_processed", l->logprobs_processed, l->n_tokens);
    json_floats(o, "ref_logprobs", l->ref_logprobs, l->n_tokens);
    json_floats(o, "rescored_logprobs", l->rescored_logprobs, l->n_tokens);
    json_turns(o, l);
    char *line = grpo__json_print_utf8(o); /* valid UTF-8 whatever the model wrote */
    cJSON_Delete(o);
    return line;
}

/* ---- the repair ---- */

/* A recorded completion: (prompt index, sample) and its row; seen once a line of it is kept. */
typedef struct rec_key {
    int64_t item;
    int32_t sample, seen;
    int64_t id;
} rec_key;

static int
key_cmp(const void *a, const void *b)
{
    const rec_key *x = a, *y = b;
    if (x->item != y->item)
        return x->item < y->item ? -1 : 1;
    return (x->sample > y->sample) - (x->sample < y->sample);
}

/* A prompt id and its index in the prompt set, sorted by id for lookups. */
typedef struct id_ix {
    const char *id;
    int64_t item;
} id_ix;

static int
id_cmp(const void *a, const void *b)
{
    return strcmp(((const id_ix *)a)->id, ((const id_ix *)b)->id);
}

typedef struct repair {
    grpo_store *s;
    int64_t run_id;
    const grpo_prompt_set *ps;
    rec_key *keys;
    size_t n_keys;
    id_ix *ids;
    grpo_buf out;
    size_t rebuilt, dropped;
} repair;

static grpo_err
load_keys(repair *r)
{
    int64_t *ids = NULL;
    grpo_err err = grpo_store_run_completions(&ids, &r->n_keys, r->s, r->run_id);
    if (err == GRPO_OK && (r->keys = calloc(r->n_keys + 1, sizeof *r->keys)) == NULL)
        err = grpo__fail(GRPO_ENOMEM, "run: out of memory for %zu completions", r->n_keys);
    for (size_t i = 0; err == GRPO_OK && i < r->n_keys; i++) {
        grpo_stored_completion *c = NULL;
        if ((err = grpo_store_get_completion(&c, r->s, ids[i])) == GRPO_OK)
            r->keys[i] = (rec_key){c->prompt_index, c->sample_index, 0, ids[i]};
        grpo_stored_completion_free(c);
    }
    free(ids);
    if (err == GRPO_OK)
        qsort(r->keys, r->n_keys, sizeof *r->keys, key_cmp);
    return err;
}

static grpo_err
load_ids(repair *r)
{
    size_t n = r->ps->n;
    if ((r->ids = calloc(n + 1, sizeof *r->ids)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "run: out of memory for %zu prompts", n);
    for (size_t i = 0; i < n; i++)
        r->ids[i] = (id_ix){r->ps->items[i].id, (int64_t)i};
    qsort(r->ids, n, sizeof *r->ids, id_cmp);
    return GRPO_OK;
}

/* The recorded completion a line of this run stands for, or NULL. */
static rec_key *
line_key(repair *r, const cJSON *o)
{
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(o, "prompt_id");
    const cJSON *smp = cJSON_GetObjectItemCaseSensitive(o, "sample");
    if (!cJSON_IsString(pid) || !cJSON_IsNumber(smp))
        return NULL;
    id_ix want = {pid->valuestring, 0};
    const id_ix *p = bsearch(&want, r->ids, r->ps->n, sizeof *r->ids, id_cmp);
    if (p == NULL)
        return NULL;
    rec_key k = {p->item, (int32_t)smp->valuedouble, 0, 0};
    return bsearch(&k, r->keys, r->n_keys, sizeof *r->keys, key_cmp);
}

/* Keeps a whole line when it is of another run, or the first line of a recorded completion. */
static grpo_err
keep_or_drop(repair *r, const char *line, size_t len)
{
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(o, "run_id");
    int keep = 0;
    if (cJSON_IsObject(o) && cJSON_IsNumber(run) && (int64_t)run->valuedouble != r->run_id) {
        keep = 1;
    } else if (cJSON_IsObject(o) && cJSON_IsNumber(run)) {
        rec_key *k = line_key(r, o);
        keep = k != NULL && !k->seen;
        if (keep)
            k->seen = 1;
    }
    cJSON_Delete(o);
    if (!keep) {
        r->dropped++;
        return GRPO_OK;
    }
    grpo_err err = grpo__buf_append(&r->out, line, len);
    return err == GRPO_OK ? grpo__buf_append(&r->out, "\n", 1) : err;
}

/* The file's whole lines, kept or dropped; a last line without its newline is torn: dropped. */
static grpo_err
scan_file(repair *r, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) != 0)
        return GRPO_OK;
    grpo_err err = grpo__read_file(path, (size_t)1 << 40, &text, &len);
    for (size_t i = 0; err == GRPO_OK && i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        if (nl == NULL) {
            r->dropped++;
            break;
        }
        size_t n = (size_t)(nl - (text + i));
        if (n > 0)
            err = keep_or_drop(r, text + i, n);
        i += n + 1;
    }
    free(text);
    return err;
}

static grpo_err
rebuild(repair *r, const rec_key *k)
{
    grpo_stored_completion *c = NULL;
    grpo_err err = grpo_store_get_completion(&c, r->s, k->id);
    if (err != GRPO_OK)
        return err;
    const grpo_prompt *p =
        k->item >= 0 && (size_t)k->item < r->ps->n ? &r->ps->items[k->item] : NULL;
    grpo_run_line l = {0};
    l.run_id = r->run_id, l.group = k->item, l.prompt_id = p ? p->id : "";
    l.task = p ? p->task : NULL, l.answer = p ? p->answer : NULL;
    l.sample = c->sample_index, l.finish = c->finish_reason;
    l.n_tokens = c->n_tokens, l.text = c->text, l.text_len = c->text_len;
    l.reward = c->reward, l.advantage = c->advantage, l.skipped = !c->has_advantage;
    l.tokens = c->token_ids, l.logprobs = c->token_logprobs;
    l.n_turns = c->n_turns, l.turns = c->turns;
    char *line = grpo_run_line_json(&l);
    grpo_stored_completion_free(c);
    if (line == NULL)
        return grpo__fail(GRPO_ENOMEM, "run: out of memory");
    err = grpo__buf_append(&r->out, line, strlen(line));
    free(line);
    r->rebuilt++;
    return err == GRPO_OK ? grpo__buf_append(&r->out, "\n", 1) : err;
}

/* Writes the repaired text beside path, then renames it over path. */
static grpo_err
replace_file(const char *path, const grpo_buf *b)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.repair", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open for writing", tmp);
    int bad = b->len && fwrite(b->data, 1, b->len, f) != b->len;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        grpo_err err =
            grpo__fail_errno(GRPO_EIO, errno, "%s: cannot write the repaired lines", tmp);
        unlink(tmp);
        return err;
    }
    return GRPO_OK;
}

grpo_err
grpo_run_repair_jsonl(const char *path, grpo_store *s, int64_t run_id, const grpo_prompt_set *ps,
                      size_t *n_rebuilt, size_t *n_dropped)
{
    repair r = {0};
    r.s = s, r.run_id = run_id, r.ps = ps;
    grpo_err err = load_keys(&r);
    if (err == GRPO_OK)
        err = load_ids(&r);
    if (err == GRPO_OK)
        err = scan_file(&r, path);
    for (size_t i = 0; err == GRPO_OK && i < r.n_keys; i++)
        if (!r.keys[i].seen)
            err = rebuild(&r, &r.keys[i]);
    if (err == GRPO_OK)
        err = replace_file(path, &r.out);
    if (n_rebuilt)
        *n_rebuilt = r.rebuilt;
    if (n_dropped)
        *n_dropped = r.dropped;
    grpo__buf_fini(&r.out);
    free(r.keys), free(r.ids);
    return err;
}
