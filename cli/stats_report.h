/* `grpo stats --report`: the one-file HTML report (cli/stats_report.c) and the cell formatting it
 * shares with the text outputs of cli/cmd_stats.c. */
#ifndef GRPO_CLI_STATS_REPORT_H
#define GRPO_CLI_STATS_REPORT_H

#include "grpo/store.h"

#include <stddef.h>

/* The report's tables, each from grpo_store_stats with the command's run and step filters. */
typedef struct report_tables {
    grpo_stats_table *steps, *runs, *prompts, *verifiers, *workers;
    grpo_stats_table *finish, *reward_hist, *length_hist, *time, *kl, *examples;
} report_tables;

enum { REPORT_N_TABLES = 11 };

/* The table pointers of r in the order of report_bys[]. */
void report_table_slots(report_tables *r, grpo_stats_table **slots[REPORT_N_TABLES]);
extern const grpo_stats_by report_bys[REPORT_N_TABLES];
void report_tables_free(report_tables *r);

/* Writes the report to path (db is the database named in it); CLI_OK or CLI_FAIL, with the
 * message printed. */
int report_write(const char *path, const char *db, const report_tables *rt);

/* A cell as text: numbers with 6 significant digits (17 when exact), text cut at a character
 * boundary to fit n bytes, nothing for null. */
void stats_cell_text(const grpo_stats_cell *c, char *buf, size_t n, int exact);

#endif
