/* The prompts JSONL reader: one {"id", "prompt" | "messages", "answer", "tests", "task",
 * "language"} object per line, from a file or from a file at a git revision (libgit2). Every line
 * is checked (size, UTF-8, JSON, types) and a bad one is reported with its line number. */
#include "rollout/engine/engine_int.h"
#include "common/json.h"

#include <git2.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
prompt_free(grpo_prompt *p)
{
    free(p->id), free(p->prompt), free(p->messages_json), free(p->answer);
    free(p->answer_json), free(p->tests_json), free(p->task), free(p->language);
    free(p->record_json);
    memset(p, 0, sizeof *p);
}

void
grpo_prompts_fini(grpo_prompt_set *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; i < set->n; i++)
        prompt_free(&set->items[i]);
    free(set->items), free(set->source), free(set->git_commit), free(set->git_repo);
    memset(set, 0, sizeof *set);
}

static char *
dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static grpo_err
opt_string(const cJSON *o, const char *key, const char *where, char **out)
{
    const char *s = NULL;
    grpo_err err = grpo__json_str_opt(o, key, where, &s);
    if (err == GRPO_OK && s != NULL && (*out = strdup(s)) == NULL)
        err = grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    return err;
}

static grpo_err
opt_json(const cJSON *o, const char *key, const char *where, char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (it == NULL || cJSON_IsNull(it))
        return GRPO_OK;
    if ((*out = grpo__json_print(it)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    return GRPO_OK;
}

static grpo_err
read_id(const cJSON *o, const char *where, int64_t line, char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "id");
    char buf[32];
    if (it == NULL || cJSON_IsNull(it)) {
        snprintf(buf, sizeof buf, "%lld", (long long)line);
    } else if (cJSON_IsString(it)) {
        if (it->valuestring[0] == '\0')
            return grpo__fail(GRPO_EFORMAT, "%s: \"id\" is empty", where);
        *out = strdup(it->valuestring);
        return *out ? GRPO_OK : grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    } else if (cJSON_IsNumber(it) && fabs(it->valuedouble) >= 9007199254740992.0) {
        /* a double holds integers exactly only below 2^53: two ids past it could read as one */
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"id\" %.17g is beyond 2^53 and cannot be read exactly; "
                          "write it as a string",
                          where, it->valuedouble);
    } else if (cJSON_IsNumber(it) && it->valuedouble == (double)(int64_t)it->valuedouble) {
        snprintf(buf, sizeof buf, "%lld", (long long)it->valuedouble);
    } else {
        return grpo__fail(GRPO_EFORMAT, "%s: \"id\" must be a string or an integer", where);
    }
    *out = strdup(buf);
    return *out ? GRPO_OK : grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
}

static grpo_err
read_answer(const cJSON *o, const char *where, grpo_prompt *p)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "answer");
    if (it == NULL || cJSON_IsNull(it))
        return GRPO_OK;
    if ((p->answer_json = grpo__json_print(it)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    p->answer = strdup(cJSON_IsString(it) ? it->valuestring : p->answer_json);
    return p->answer ? GRPO_OK : grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
}

static grpo_err
check_messages(const cJSON *m, const char *where)
{
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0)
        return grpo__fail(GRPO_EFORMAT, "%s: \"messages\" must be a non-empty array", where);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, m)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsObject(e) || !cJSON_IsString(role))
            return grpo__fail(GRPO_EFORMAT, "%s: messages[%d] needs a string \"role\"", where, i);
        i++;
    }
    return GRPO_OK;
}

/* Parses one line into *p (zeroed on failure). */
static grpo_err
parse_line(const char *s, size_t n, const char *where, int64_t line, grpo_prompt *p)
{
    cJSON *o = NULL;
    grpo_err err;
    memset(p, 0, sizeof *p);
    p->line = line;
    if (n > GRPO_PROMPTS_MAX_LINE)
        return grpo__fail(GRPO_EFORMAT, "%s: line is %zu bytes; the limit is %u", where, n,
                          GRPO_PROMPTS_MAX_LINE);
    if ((err = grpo__json_parse_text(s, n, where, &o)) != GRPO_OK)
        return err;
    if (!cJSON_IsObject(o)) {
        err = grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", where);
        goto done;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if ((err = read_id(o, where, line, &p->id)) != GRPO_OK ||
        (err = opt_string(o, "prompt", where, &p->prompt)) != GRPO_OK ||
        (err = read_answer(o, where, p)) != GRPO_OK ||
        (err = opt_json(o, "tests", where, &p->tests_json)) != GRPO_OK ||
        (err = opt_string(o, "task", where, &p->task)) != GRPO_OK ||
        (err = opt_string(o, "language", where, &p->language)) != GRPO_OK)
        goto done;
    if (msgs != NULL && !cJSON_IsNull(msgs)) {
        if ((err = check_messages(msgs, where)) != GRPO_OK ||
            (err = opt_json(o, "messages", where, &p->messages_json)) != GRPO_OK)
            goto done;
    }
    if ((p->prompt == NULL) == (p->messages_json == NULL)) {
        err =
            grpo__fail(GRPO_EFORMAT, "%s: needs exactly one of \"prompt\" and \"messages\"", where);
        goto done;
    }
    if (p->prompt != NULL && p->prompt[0] == '\0') {
        err = grpo__fail(GRPO_EFORMAT, "%s: \"prompt\" is empty", where);
        goto done;
    }
    if ((p->record_json = dup_n(s, n)) == NULL)
        err = grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
done:
    cJSON_Delete(o);
    if (err != GRPO_OK)
        prompt_free(p);
    return err;
}

static int
id_seen(const grpo_prompt_set *set, const char *id)
{
    for (size_t i = 0; i < set->n; i++) /* quadratic, but files of prompts are small */
        if (strcmp(set->items[i].id, id) == 0)
            return 1;
    return 0;
}

static grpo_err
add_line(grpo_prompt_set *set, size_t *cap, const char *s, size_t n, const char *where,
         int64_t line, int skip_bad)
{
    char place[512];
    grpo_prompt p;
    snprintf(place, sizeof place, "%s:%lld", where, (long long)line);
    grpo_err err = parse_line(s, n, place, line, &p);
    if (err == GRPO_OK && id_seen(set, p.id)) {
        err = grpo__fail(GRPO_EFORMAT, "%s: duplicate id \"%s\"", place, p.id);
        prompt_free(&p);
    }
    if (err != GRPO_OK) {
        if (!skip_bad || err == GRPO_ENOMEM)
            return err;
        grpo_log(GRPO_LOG_WARN, "skipping bad line: %s", grpo_error_last());
        set->n_skipped++;
        return GRPO_OK;
    }
    if (set->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        grpo_prompt *ni = realloc(set->items, nc * sizeof *ni);
        if (ni == NULL) {
            prompt_free(&p);
            return grpo__fail(GRPO_ENOMEM, "%s: out of memory", place);
        }
        set->items = ni, *cap = nc;
    }
    set->items[set->n++] = p;
    return GRPO_OK;
}

/* One warning for every math prompt (task "math", the default) without an "answer": the math
 * verifier has nothing to compare with, so their completions get no math reward. */
static void
warn_no_answer(const grpo_prompt_set *set, const char *where)
{
    size_t n = 0;
    int64_t first = 0;
    for (size_t i = 0; i < set->n; i++) {
        const grpo_prompt *p = &set->items[i];
        if ((p->task == NULL || strcmp(p->task, "math") == 0) && p->answer == NULL && n++ == 0)
            first = p->line;
    }
    if (n > 0)
        grpo_log(GRPO_LOG_WARN,
                 "%s: %zu math prompt%s (task \"math\" or none) without an \"answer\", the "
                 "first at line %lld: the math verifier cannot grade them",
                 where, n, n == 1 ? "" : "s", (long long)first);
}

static int
blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

grpo_err
grpo_prompts_parse(grpo_prompt_set *out, const char *text, size_t len, const char *where,
                   int skip_bad)
{
    grpo_err err = GRPO_OK;
    size_t cap = 0;
    memset(out, 0, sizeof *out);
    if ((out->source = strdup(where)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    int64_t line = 0;
    for (size_t at = 0; at < len && err == GRPO_OK;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t e = nl ? (size_t)(nl - text) : len;
        line++;
        if (!blank(text + at, e - at))
            err = add_line(out, &cap, text + at, e - at, where, line, skip_bad);
        at = e + 1;
    }
    if (err == GRPO_OK && out->n == 0)
        err = grpo__fail(GRPO_EFORMAT, "%s: no prompts", where);
    if (err != GRPO_OK)
        grpo_prompts_fini(out);
    else
        warn_no_answer(out, where);
    return err;
}

/* git:REPO@REV:PATH. The '@' is the last one followed later by a ':'. */
static grpo_err
split_git(const char *spec, char **repo, char **rev, char **path)
{
    const char *s = spec + 4, *at = NULL;
    for (const char *q = s; *q; q++)
        if (*q == '@' && strchr(q, ':') != NULL && strchr(q, ':') > q + 1)
            at = q;
    if (at == NULL || at == s)
        return grpo__fail(GRPO_EINVAL, "%s: expected git:REPO_PATH@REV:path/in/repo", spec);
    const char *colon = strchr(at, ':');
    if (colon[1] == '\0')
        return grpo__fail(GRPO_EINVAL, "%s: the path inside the repository is empty", spec);
    *repo = dup_n(s, (size_t)(at - s));
    *rev = dup_n(at + 1, (size_t)(colon - at - 1));
    *path = strdup(colon + 1);
    if (!*repo || !*rev || !*path)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", spec);
    return GRPO_OK;
}

static grpo_err
git_fail(const char *spec, const char *what)
{
    const git_error *e = git_error_last();
    return grpo__fail(GRPO_ENOTFOUND, "%s: %s: %s", spec, what, e && e->message ? e->message : "?");
}

static grpo_err
load_git(grpo_prompt_set *out, const char *spec, int skip_bad)
{
    char *repo_path = NULL, *rev = NULL, *path = NULL, hex[GIT_OID_HEXSZ + 1];
    git_repository *repo = NULL;
    git_object *obj = NULL;
    git_commit *commit = NULL;
    git_tree *tree = NULL;
    git_tree_entry *entry = NULL;
    git_blob *blob = NULL;
    grpo_err err = split_git(spec, &repo_path, &rev, &path);
    git_libgit2_init();
    if (err != GRPO_OK)
        goto done;
    if (git_repository_open_ext(&repo, repo_path, 0, NULL) != 0) {
        err = git_fail(spec, "cannot open the repository");
        goto done;
    }
    if (git_revparse_single(&obj, repo, rev) != 0 ||
        git_object_peel((git_object **)&commit, obj, GIT_OBJECT_COMMIT) != 0) {
        err = git_fail(spec, "unknown revision");
        goto done;
    }
    if (git_commit_tree(&tree, commit) != 0 || git_tree_entry_bypath(&entry, tree, path) != 0 ||
        git_tree_entry_type(entry) != GIT_OBJECT_BLOB ||
        git_blob_lookup(&blob, repo, git_tree_entry_id(entry)) != 0) {
        err = git_fail(spec, "no such file at that revision");
        goto done;
    }
    if ((uint64_t)git_blob_rawsize(blob) > GRPO_PROMPTS_MAX_FILE) {
        err = grpo__fail(GRPO_EFORMAT, "%s: file too large", spec);
        goto done;
    }
    err = grpo_prompts_parse(out, git_blob_rawcontent(blob), (size_t)git_blob_rawsize(blob), spec,
                             skip_bad);
    if (err != GRPO_OK)
        goto done;
    git_oid_tostr(hex, sizeof hex, git_commit_id(commit));
    out->git_commit = strdup(hex);
    out->git_repo = repo_path, repo_path = NULL;
    if (out->git_commit == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "%s: out of memory", spec);
        grpo_prompts_fini(out);
    }
done:
    git_blob_free(blob), git_tree_entry_free(entry), git_tree_free(tree);
    git_commit_free(commit), git_object_free(obj), git_repository_free(repo);
    git_libgit2_shutdown();
    free(repo_path), free(rev), free(path);
    return err;
}

grpo_err
grpo_prompts_load(grpo_prompt_set *out, const char *spec, int skip_bad)
{
    memset(out, 0, sizeof *out);
    if (strncmp(spec, "git:", 4) == 0)
        return load_git(out, spec, skip_bad);
    char *text = NULL;
    size_t n = 0;
    grpo_err err = grpo__read_file(spec, GRPO_PROMPTS_MAX_FILE, &text, &n);
    if (err != GRPO_OK)
        return err;
    err = grpo_prompts_parse(out, text, n, spec, skip_bad);
    free(text);
    return err;
}
