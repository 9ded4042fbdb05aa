/* Git provenance through libgit2: HEAD commit, branch, dirty flag and remote url of the
 * repository that contains a path. "Not a repository" is a normal answer. */
#include "store/store_int.h"

#include <git2.h>
#include <string.h>

static grpo_err
git_fail(const char *path, const char *what)
{
    const git_error *e = git_error_last();
    return grpo__fail(GRPO_EIO, "store: git %s: %s: %s", path, what,
                      e && e->message ? e->message : "unknown libgit2 error");
}

static void
copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static grpo_err
describe_head(git_repository *repo, const char *path, grpo_git_info *out)
{
    git_reference *head = NULL;
    int rc = git_repository_head(&head, repo);
    if (rc == GIT_EUNBORNBRANCH || rc == GIT_ENOTFOUND) {
        /* No commit yet: the branch HEAD points at is still worth recording. */
        git_reference *sym = NULL;
        if (git_reference_lookup(&sym, repo, "HEAD") == 0) {
            const char *t = git_reference_symbolic_target(sym);
            copy_str(out->branch, sizeof out->branch,
                     t && strncmp(t, "refs/heads/", 11) == 0 ? t + 11 : t);
            git_reference_free(sym);
        }
        return GRPO_OK;
    }
    if (rc != 0)
        return git_fail(path, "reading HEAD");
    const git_oid *oid = git_reference_target(head);
    if (oid)
        git_oid_tostr(out->commit, sizeof out->commit, oid);
    copy_str(out->branch, sizeof out->branch,
             git_repository_head_detached(repo) == 1 ? "HEAD" : git_reference_shorthand(head));
    git_reference_free(head);
    return GRPO_OK;
}

static grpo_err
describe_dirty(git_repository *repo, const char *path, grpo_git_info *out)
{
    if (git_repository_is_bare(repo))
        return GRPO_OK;
    git_status_options opts;
    git_status_options_init(&opts, GIT_STATUS_OPTIONS_VERSION);
    opts.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
    opts.flags = GIT_STATUS_OPT_EXCLUDE_SUBMODULES; /* untracked files do not make it dirty */
    git_status_list *list = NULL;
    if (git_status_list_new(&list, repo, &opts) != 0)
        return git_fail(path, "reading the status");
    out->dirty = git_status_list_entrycount(list) > 0;
    git_status_list_free(list);
    return GRPO_OK;
}

/* remote.origin.url, else the first remote.NAME.url of the config. Reads the config directly:
 * git_remote_lookup and git_remote_list match regexes and leak pcre2 match data in libgit2 1.5. */
static void
describe_remote(git_repository *repo, grpo_git_info *out)
{
    git_config *cfg = NULL;
    git_config_iterator *it = NULL;
    git_config_entry *e;
    const char *url = NULL;
    if (git_repository_config_snapshot(&cfg, repo) != 0)
        goto done;
    if (git_config_get_string(&url, cfg, "remote.origin.url") == 0) {
        copy_str(out->remote_url, sizeof out->remote_url, url);
        goto done;
    }
    if (git_config_iterator_new(&it, cfg) != 0)
        goto done;
    while (git_config_next(&e, it) == 0) {
        size_t n = strlen(e->name);
        if (strncmp(e->name, "remote.", 7) == 0 && n > 11 && strcmp(e->name + n - 4, ".url") == 0) {
            copy_str(out->remote_url, sizeof out->remote_url, e->value);
            break;
        }
    }
done:
    git_config_iterator_free(it);
    git_config_free(cfg);
    git_error_clear();
}

grpo_err
grpo_store_git_describe(const char *path, grpo_git_info *out)
{
    grpo_err err = GRPO_OK;
    git_repository *repo = NULL;
    memset(out, 0, sizeof *out);
    if (path == NULL)
        return grpo__fail(GRPO_EINVAL, "store: git: NULL path");
    git_libgit2_init();
    int rc = git_repository_open_ext(&repo, path, 0, NULL);
    if (rc == GIT_ENOTFOUND) {
        git_error_clear();
        goto done;
    }
    if (rc != 0) {
        err = git_fail(path, "opening the repository");
        goto done;
    }
    out->is_repo = 1;
    const char *wd = git_repository_workdir(repo);
    copy_str(out->workdir, sizeof out->workdir, wd ? wd : git_repository_path(repo));
    if ((err = describe_head(repo, path, out)) != GRPO_OK ||
        (err = describe_dirty(repo, path, out)) != GRPO_OK)
        goto done;
    describe_remote(repo, out);
done:
    git_repository_free(repo);
    git_libgit2_shutdown();
    return err;
}
