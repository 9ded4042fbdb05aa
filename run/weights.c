/* The weight-swap step's model directory: the running model's files, linked, with the trainer's
 * new weights file as model.safetensors. It stays where it is made, so `grpo replay` can load
 * that version later. */
#include "common/common_int.h"
#include "grpo/run.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static grpo_err
make_dir(const char *dir)
{
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash != NULL && slash != parent) {
        *slash = '\0';
        if (mkdir(parent, 0755) != 0 && errno != EEXIST)
            return grpo__fail_errno(GRPO_EIO, errno, "%s", parent);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", dir);
    return GRPO_OK;
}

/* Weights files are not linked: the new file takes their place. */
static int
is_weights(const char *name)
{
    size_t n = strlen(name);
    return (n > 12 && strcmp(name + n - 12, ".safetensors") == 0) ||
           strstr(name, ".safetensors.index") != NULL;
}

static grpo_err
replace_link(const char *link, const char *target)
{
    unlink(link);
    if (symlink(target, link) != 0)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", link);
    return GRPO_OK;
}

grpo_err
grpo_run_weights_dir(const char *dir, const char *model_dir, const char *weights_path)
{
    char src[PATH_MAX], link[PATH_MAX + 300], target[PATH_MAX + 300];
    if (realpath(model_dir, src) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", model_dir);
    grpo_err err = make_dir(dir);
    if (err != GRPO_OK)
        return err;
    DIR *d = opendir(src);
    if (d == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", src);
    struct dirent *e;
    while (err == GRPO_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || is_weights(e->d_name))
            continue;
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        snprintf(target, sizeof target, "%s/%s", src, e->d_name);
        err = replace_link(link, target);
    }
    closedir(d);
    snprintf(link, sizeof link, "%s/model.safetensors", dir);
    return err == GRPO_OK ? replace_link(link, weights_path) : err;
}
