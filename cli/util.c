/* Helpers shared by the subcommands: uniform error lines and exit codes. */
#include "cli/cli.h"
#include "grpo/model.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "grpo %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see grpo %s --help)\n", cmd);
    return CLI_USAGE;
}

int
cli_fail(const char *cmd)
{
    const char *m = grpo_error_last();
    fprintf(stderr, "grpo %s: %s\n", cmd, m[0] ? m : "failed");
    return CLI_FAIL;
}

int
cli_not_built(const char *cmd, const char *issue)
{
    fprintf(stderr, "grpo %s: not built yet (%s)\n", cmd, issue);
    return CLI_FAIL;
}

int
cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    return 0;
}

int
cli_select_gpu(const char *cmd, int gpu, int want_threads)
{
    if (gpu < 0)
        return 0;
    if (want_threads > 0)
        return cli_usage(cmd, "give --threads or --gpu, not both");
    if (strstr(grpo_build_features(), "cuda=yes") == NULL)
        return cli_usage(cmd, "--gpu %d: this grpo was built without the CUDA backend", gpu);
    char d[16];
    snprintf(d, sizeof d, "%d", gpu);
    setenv("CUDA_VISIBLE_DEVICES", d, 1);
    return 0;
}

int
cli_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return -1;
    static const char units[] = "KMGT"; /* powers of 1024 */
    uint64_t mul = 1;
    const char *unit = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (unit != NULL) {
        mul = 1ull << (10 * (unit - units + 1));
        end++;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (v != 0 && mul > UINT64_MAX / v))
        return -1;
    *out = (uint64_t)v * mul;
    return 0;
}

int
cli_numerics_opt(const char *cmd, const char *v, int *out)
{
    if (grpo_numerics_parse(v, out) != GRPO_OK)
        return cli_usage(cmd, "--numerics: %s", grpo_error_last());
    return 0;
}

int
cli_deterministic_opt(const char *cmd, const char *v, int *det)
{
    if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) {
        *det = strcmp(v, "on") == 0;
        return 0;
    }
    return cli_usage(cmd, "--deterministic %s: expected on or off", v);
}

int
cli_deterministic_apply(const char *cmd, int det, int *numerics)
{
    if (det == 0 && *numerics == GRPO_NUMERICS_FP8)
        *numerics = GRPO_NUMERICS_FP8_NONDET;
    else if (det == 0 && *numerics != GRPO_NUMERICS_FP8_NONDET)
        return cli_usage(cmd,
                         "--deterministic off: numerics %s is always deterministic (only "
                         "fp8 has a batch-dependent variant)",
                         grpo_numerics_name(*numerics));
    else if (det == 1 && *numerics == GRPO_NUMERICS_FP8_NONDET)
        return cli_usage(cmd, "--deterministic on contradicts --numerics fp8-nondet");
    return 0;
}

int
cli_kv_dtype_opt(const char *cmd, const char *v, int *out)
{
    if (grpo_kv_dtype_parse(v, out) != GRPO_OK)
        return cli_usage(cmd, "--kv-dtype: %s", grpo_error_last());
    return 0;
}
