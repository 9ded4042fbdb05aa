/* `grpo serve`: the flags, the help and what is printed for the coordinator of rollout workers,
 * which is run/ (grpo/run.h: grpo_coord_open, grpo_coord_serve). It owns the prompt stream, the
 * store (the single writer), the advantages and the trainer bridge; workers (`grpo worker`) pull
 * prompt groups as leases, generate and verify them, and send the groups back. */
#include "cli/cli.h"
#include "cli/run_common.h"
#include "common/common_int.h"
#include "grpo/bridge.h"
#include "grpo/rollout.h"
#include "grpo/run.h"
#include "grpo/store.h"
#include "grpo/workers.h"

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
typedef struct args {
    grpo_coord_opts o; /* the flags, as the coordinator's options */
    int det;           /* --deterministic: -1 not given, 0 off, 1 on */
} args;

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
        "  --model DIR          the workers' --model (optional; not loaded here): its single\n"
        "                       model.safetensors is version 0, recorded with its sha256, and a\n"
        "                       trainer's first weight delta may be against it\n"
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
    fputs("  --template NAME      chat template (as grpo rollout; default: the worker's, r1)\n", f);
    cli_gen_help_logprobs(f);
    fputs("  --numerics N         exact (default), q8 or fp8: how every worker loads the\n"
          "                       model (as grpo rollout --numerics; recorded, so replay\n"
          "                       uses it too)\n",
          f);
    fputs(CLI_HELP_DETERMINISTIC, f);
    fputs("  --kv-dtype D         f32 (default), bf16 or fp8: the workers' KV cache rows (as\n"
          "                       grpo rollout --kv-dtype; recorded)\n"
          "  --record-routes      the workers return the MoE experts the router chose for every\n"
          "                       prompt and completion token, into the store and the batches\n"
          "                       (docs/routes.md)\n"
          "  --on-bad-line MODE   fail (default) or skip a bad prompts line\n"
          "Tools (sent to the workers, which load the environments themselves: python and every\n"
          "plugin PATH.so must exist on each worker's machine; --tool-threads and\n"
          "--tools-in-process are grpo worker flags):\n",
          f);
    cli_tools_help(f);
    fputs("  --help               this text\n\n"
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
    O_TEMPLATE,
    O_ROUTES,
    O_MODEL,
    O_NUMERICS,
    O_DET,
    O_KVDT
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
    {"record-routes", no_argument, 0, O_ROUTES},
    {"model", required_argument, 0, O_MODEL},
    {"numerics", required_argument, 0, O_NUMERICS},
    {"deterministic", required_argument, 0, O_DET},
    {"kv-dtype", required_argument, 0, O_KVDT},
    CLI_GEN_LONG_OPTS,
    CLI_TOOLS_LONG_OPTS,
    {0, 0, 0, 0},
};

static int
parse_opt(void *ctx, int c, const char *v)
{
    grpo_coord_opts *a = &((args *)ctx)->o;
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
    case O_MODEL:
        a->model = v;
        return 0;
    case O_NEWRUN:
        a->new_run = 1;
        return 0;
    case O_ROUTES:
        a->record_routes = 1;
        return 0;
    case O_NUMERICS:
        return cli_numerics_opt(CMD, v, &a->numerics);
    case O_DET:
        return cli_deterministic_opt(CMD, v, &((args *)ctx)->det);
    case O_KVDT:
        return cli_kv_dtype_opt(CMD, v, &a->kv_dtype);
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
    case CLI_O_TOOLTHREADS:
    case CLI_O_TOOLSINPROC:
        return cli_usage(CMD, "--%s is a grpo worker flag (each worker runs its own tools)",
                         c == CLI_O_TOOLTHREADS ? "tool-threads" : "tools-in-process");
    default:
        if (cli_tools_is_opt(c))
            return cli_tools_parse_opt(CMD, &a->tools, c, v);
        return cli_gen_is_opt(c) ? cli_gen_parse_opt(CMD, &a->gen, c, v)
                                 : cli_usage(CMD, "unknown option");
    }
}

static int
parse_args(args *x, int argc, char **argv)
{
    grpo_coord_opts *a = &x->o;
    grpo_coord_opts_default(a);
    a->listen = getenv("GRPO_LISTEN_URL");
    if (a->listen == NULL || a->listen[0] == '\0')
        a->listen = "tcp://0.0.0.0:5555";
    x->det = -1;
    int rc = cli_getopt(CMD, argc, argv, long_opts, parse_opt, x);
    if (rc != 0 || (rc = cli_deterministic_apply(CMD, x->det, &a->numerics)) != 0)
        return rc;
    if (a->prompts == NULL)
        return cli_usage(CMD, "--prompts is required");
    return 0;
}

static void
progress(void *ctx, const grpo_coord_stats *st, int final)
{
    static double last;
    double now = grpo_now();
    (void)ctx;
    if (!isatty(2) || (!final && now - last < 2.0))
        return;
    last = now;
    char held[64] = "";
    if (st->held > 0) /* the trainer is behind: these batches wait for its window */
        snprintf(held, sizeof held, "  held for the trainer %zu", st->held);
    fprintf(stderr,
            "\rgroups %zu/%zu  leased %zu  workers %zu  reissued %llu  expired %llu  "
            "duplicates %llu%s%s",
            st->done, st->items, st->leased, st->workers_alive, (unsigned long long)st->reissued,
            (unsigned long long)st->expired, (unsigned long long)st->duplicates, held,
            final ? "\n" : "");
    fflush(stderr);
}

static void
summary(const grpo_coord_stats *st)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double secs = st->seconds;
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    printf("run %lld: %zu/%zu prompts done; %llu groups recorded in %.1f s (%.2f groups/s); leases "
           "issued %llu, re-issued %llu, backups %llu, expired %llu; duplicates %llu, stale %llu, "
           "refused %llu; "
           "workers %zu; coordinator CPU %.1f s (%.1f%%), max RSS %ld KiB\n",
           (long long)st->run_id, st->done, st->items, (unsigned long long)st->recorded, secs,
           secs > 0 ? (double)st->recorded / secs : 0.0, (unsigned long long)st->issued,
           (unsigned long long)st->reissued, (unsigned long long)st->backups,
           (unsigned long long)st->expired, (unsigned long long)st->duplicates,
           (unsigned long long)st->stale, (unsigned long long)st->refused, st->workers, cpu,
           secs > 0 ? 100 * cpu / secs : 0.0, ru.ru_maxrss);
    if (st->held_total > 0)
        printf("trainer backpressure: %llu batches waited for the publish window (new leases "
               "waited meanwhile)\n",
               (unsigned long long)st->held_total);
}

static grpo_coord *volatile the_coord;

static void
on_signal(int sig)
{
    (void)sig;
    grpo_coord_cancel(the_coord);
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
    char *cmdline = cli_join_argv(argc, argv);
    a.o.command_line = cmdline;
    grpo_coord *c = NULL;
    grpo_coord_stats st;
    grpo_err err = grpo_coord_open(&c, &a.o);
    int ran = err == GRPO_OK;
    if (err == GRPO_OK) {
        grpo_coord_get_stats(c, &st);
        if (st.resumed)
            fprintf(stderr, "grpo serve: resuming run %lld from %s\n", (long long)st.run_id,
                    a.o.db);
        if (st.already > 0)
            fprintf(stderr, "grpo serve: %zu of %zu groups already recorded\n", st.already,
                    st.items);
        fprintf(stderr, "grpo serve: run %lld, %zu prompts x %d samples, listening on %s\n",
                (long long)st.run_id, st.items, a.o.gen.G, a.o.listen);
        the_coord = c;
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGPIPE, SIG_IGN);
        err = grpo_coord_serve(c, progress, NULL);
    }
    char msg[600] = "";
    if (err != GRPO_OK)
        snprintf(msg, sizeof msg, "%s",
                 grpo_error_last()[0] ? grpo_error_last() : grpo_err_name(err));
    if (ran) {
        grpo_coord_get_stats(c, &st);
        summary(&st);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    the_coord = NULL;
    grpo_err cerr = grpo_coord_close(c);
    if (err == GRPO_OK && cerr != GRPO_OK) {
        err = cerr;
        snprintf(msg, sizeof msg, "%s", grpo_error_last());
    }
    free(cmdline);
    if (err != GRPO_OK)
        fprintf(stderr, "grpo serve: %s\n", msg);
    return err == GRPO_OK ? CLI_OK : CLI_FAIL;
}
