/* Private declarations shared by the files of rollout/engine (and its tests). */
#ifndef GRPO_ENGINE_INT_H
#define GRPO_ENGINE_INT_H

#include "common/common_int.h"
#include "grpo/rollout.h"

/* Looks for the stop strings in text[0..len) ending after byte new_from (text before it was already
 * checked). Returns the index of the match that ends first (lowest index on a tie) and sets *end to
 * the byte just after it, or returns -1. */
int grpo_engine__stop_find(const char *text, size_t len, size_t new_from, const char *const *stops,
                           int n_stops, size_t *end);

/* A fake model for scheduler tests: a paged token cache with the same refcounting and
 * copy-on-write rules as grpo_kv (and a hard page limit), and logits that are a hash of the whole
 * sequence read back from its pages, so a wrong fork or copy changes the output. */
typedef struct grpo_engine__fake grpo_engine__fake;
grpo_err grpo_engine__fake_create(grpo_engine__fake **out, int32_t vocab, int32_t page_tokens,
                                  size_t pages_total, uint64_t salt);
void grpo_engine__fake_destroy(grpo_engine__fake *f);
void grpo_engine__fake_backend(grpo_engine__fake *f, grpo_rollout_backend *b);
size_t grpo_engine__fake_seqs_live(const grpo_engine__fake *f);
/* Largest number of rows any forward call carried. */
int grpo_engine__fake_max_rows(const grpo_engine__fake *f);
/* Gives b (a fake backend) forward_sample: the draws made inside the "backend" from its rows, as
 * a GPU backend makes them where its logits are (grpo_sample_ex over each draw's row and key). */
void grpo_engine__fake_sampler(grpo_engine__fake *f, grpo_rollout_backend *b);
/* Draws made by forward_sample so far. */
long grpo_engine__fake_drawn(const grpo_engine__fake *f);

#endif
