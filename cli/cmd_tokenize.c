/* `grpo tokenize`: encode stdin to ids, decode ids to text, or render and encode a conversation
 * with the DeepSeek-V3/R1 chat template. Output formats are exact (other tools parse them). */
#include "cli/cli.h"
#include "common/common_int.h"
#include "common/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --chat NAME: a family, or auto (GRPO_CHAT_NONE: the tokenizer's own template); -1 if unknown. */
static int
chat_family(const char *name)
{
    if (strcmp(name, "auto") == 0)
        return GRPO_CHAT_NONE;
    int f = grpo_chat_family_parse(name);
    return f == GRPO_CHAT_NONE ? -1 : f;
}

static const char USAGE[] =
    "usage: grpo tokenize --tokenizer FILE [--r1] [--bos] [--no-special]\n"
    "       grpo tokenize --tokenizer FILE --decode [--skip-special] [--lossy]\n"
    "       grpo tokenize --tokenizer FILE --chat NAME --messages FILE.json [--text]\n"
    "       grpo tokenize --tokenizer FILE --chat NAME --messages FILE.jsonl --jsonl\n"
    "\n"
    "Encodes all of stdin (one UTF-8 text) with a byte-level BPE tokenizer.json and prints the\n"
    "ids on one line, separated by single spaces. Identical to HF tokenizers'\n"
    "Tokenizer.encode(text, add_special_tokens=False).\n"
    "\n"
    "  --tokenizer FILE     tokenizer.json, or a directory holding one (required); a\n"
    "                       tokenizer_config.json beside it supplies BOS/EOS and the chat family\n"
    "  --config FILE        read this tokenizer_config.json instead\n"
    "  --r1                 load as DeepSeek-R1: ids 128798/128799 become <think>/</think>\n"
    "  --bos                prepend the BOS id (none by default)\n"
    "  --no-special         treat special-token text in the input as plain text (by default it\n"
    "                       is recognised as the special token)\n"
    "  --decode             read space-separated ids from stdin and write their text, byte for\n"
    "                       byte, with no added newline\n"
    "  --skip-special       with --decode: leave out special tokens\n"
    "  --lossy              with --decode: replace invalid UTF-8 by U+FFFD (as HF decode does)\n"
    "  --chat NAME          render the conversation of --messages with that chat template and\n"
    "                       print its ids, generation prompt included: v3, r1 (implies --r1),\n"
    "                       qwen2.5, qwen3, qwen3-nothink, llama3, llama3.1, r1-distill, or auto\n"
    "                       (the template of the tokenizer_config.json, refused when unknown)\n"
    "  --messages FILE      a JSON array of {\"role\", \"content\"[, \"tool_calls\"]} messages, "
    "or\n"
    "                       an object with a \"messages\" array\n"
    "  --no-generation-prompt  with --chat: leave the generation prompt out\n"
    "  --text               with --chat: print the rendered text instead of ids\n"
    "  --jsonl              with --chat: --messages holds one conversation per line; print one\n"
    "                       JSON object per non-blank line, {\"text\": ..., \"ids\": [...]} or\n"
    "                       {\"error\": ...}; exit status 1 if any line failed\n"
    "  -h, --help           this help\n";

typedef struct opts {
    const char *tokenizer, *config, *chat, *messages;
    int r1, bos, no_special, decode, skip_special, lossy, no_gen, text, jsonl;
} opts;

static int
parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **val = NULL;
        if (strcmp(a, "--tokenizer") == 0)
            val = &o->tokenizer;
        else if (strcmp(a, "--config") == 0)
            val = &o->config;
        else if (strcmp(a, "--chat") == 0)
            val = &o->chat;
        else if (strcmp(a, "--messages") == 0)
            val = &o->messages;
        else if (strcmp(a, "--r1") == 0)
            o->r1 = 1;
        else if (strcmp(a, "--bos") == 0)
            o->bos = 1;
        else if (strcmp(a, "--no-special") == 0)
            o->no_special = 1;
        else if (strcmp(a, "--decode") == 0)
            o->decode = 1;
        else if (strcmp(a, "--skip-special") == 0)
            o->skip_special = 1;
        else if (strcmp(a, "--lossy") == 0)
            o->lossy = 1;
        else if (strcmp(a, "--no-generation-prompt") == 0)
            o->no_gen = 1;
        else if (strcmp(a, "--text") == 0)
            o->text = 1;
        else if (strcmp(a, "--jsonl") == 0)
            o->jsonl = 1;
        else
            return cli_usage("tokenize", "unknown option \"%s\"", a);
        if (val != NULL) {
            if (i + 1 >= argc)
                return cli_usage("tokenize", "%s needs a value", a);
            *val = argv[++i];
        }
    }
    if (o->tokenizer == NULL)
        return cli_usage("tokenize", "--tokenizer FILE is required");
    if (o->chat != NULL && o->messages == NULL)
        return cli_usage("tokenize", "--chat needs --messages FILE.json");
    if (o->chat != NULL && chat_family(o->chat) < 0)
        return cli_usage("tokenize",
                         "--chat must be auto, v3, r1, qwen2.5, qwen3, qwen3-nothink, llama3, "
                         "llama3.1 or r1-distill, not \"%s\"",
                         o->chat);
    if (o->messages != NULL && o->chat == NULL)
        return cli_usage("tokenize", "--messages needs --chat NAME");
    if (o->jsonl && (o->chat == NULL || o->text))
        return cli_usage("tokenize", "--jsonl needs --chat and prints text and ids (no --text)");
    if (o->decode && o->chat != NULL)
        return cli_usage("tokenize", "--decode and --chat cannot be combined");
    return CLI_OK;
}

static int
read_stdin(grpo_buf *b)
{
    char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (grpo__buf_append(b, chunk, n) != GRPO_OK)
            return cli_fail("tokenize");
    if (ferror(stdin)) {
        fprintf(stderr, "grpo tokenize: stdin: read error\n");
        return CLI_FAIL;
    }
    if (b->data == NULL && grpo__buf_append(b, "", 0) != GRPO_OK)
        return cli_fail("tokenize");
    return CLI_OK;
}

static int
print_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

static int
do_encode(grpo_tokenizer *tok, const opts *o)
{
    grpo_buf in = {0};
    int rc = read_stdin(&in);
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned flags = (o->no_special ? 0 : GRPO_TOK_PARSE_SPECIAL) | (o->bos ? GRPO_TOK_ADD_BOS : 0);
    size_t ok = rc == CLI_OK ? grpo__utf8_valid_len(in.data, in.len) : 0;
    if (rc == CLI_OK && ok != in.len) {
        fprintf(stderr, "grpo tokenize: stdin: invalid UTF-8 at byte %zu\n", ok);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK && grpo_tokenizer_encode(tok, in.data, in.len, flags, &ids, &n) != GRPO_OK)
        rc = cli_fail("tokenize");
    if (rc == CLI_OK)
        rc = print_ids(ids, n);
    free(ids);
    grpo__buf_fini(&in);
    return rc;
}

static int
parse_ids(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 64, k = 0, word = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (ids == NULL)
        return CLI_FAIL;
    for (;;) {
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r' || *s == ',')
            s++;
        if (*s == 0)
            break;
        char *end;
        long v = strtol(s, &end, 10);
        word++;
        if (end == s || (*end && !strchr(" \n\t\r,", *end)) || v < INT32_MIN || v > INT32_MAX) {
            int w = (int)strcspn(s, " \n\t\r,");
            fprintf(stderr, "grpo tokenize: stdin: item %zu (\"%.*s\") is not an integer id\n",
                    word, w > 20 ? 20 : w, s);
            free(ids);
            return CLI_FAIL;
        }
        if (k == cap) {
            int32_t *p = realloc(ids, (cap *= 2) * sizeof *ids);
            if (p == NULL) {
                free(ids);
                return CLI_FAIL;
            }
            ids = p;
        }
        ids[k++] = (int32_t)v;
        s = end;
    }
    *out = ids;
    *n = k;
    return CLI_OK;
}

static int
do_decode(grpo_tokenizer *tok, const opts *o)
{
    grpo_buf in = {0};
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *text = NULL;
    int rc = read_stdin(&in);
    if (rc == CLI_OK)
        rc = parse_ids(in.data, &ids, &n);
    unsigned flags =
        (o->skip_special ? GRPO_TOK_SKIP_SPECIAL : 0) | (o->lossy ? GRPO_TOK_LOSSY : 0);
    if (rc == CLI_OK && grpo_tokenizer_decode(tok, ids, n, flags, &text, &len) != GRPO_OK)
        rc = cli_fail("tokenize");
    if (rc == CLI_OK && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0))
        rc = CLI_FAIL;
    free(text);
    free(ids);
    grpo__buf_fini(&in);
    return rc;
}

/* One --jsonl conversation to one output line: its text and ids, or the error. Returns whether it
 * rendered; *io_fail is set when stdout or memory failed. */
static bool
jsonl_line(grpo_tokenizer *tok, grpo_chat_family fam, int gen, const char *line, size_t len,
           const char *where, bool *io_fail)
{
    grpo_chat chat = {0};
    char *text = NULL, *s = NULL;
    size_t tlen = 0, n = 0;
    int32_t *ids = NULL;
    grpo_err err = grpo_chat_parse_json(&chat, line, len, where);
    if (err == GRPO_OK)
        err = grpo_chat_render(tok, fam, chat.msgs, chat.n, gen, &text, &tlen);
    if (err == GRPO_OK)
        err = grpo_tokenizer_encode(tok, text, tlen, GRPO_TOK_PARSE_SPECIAL, &ids, &n);
    cJSON *out = cJSON_CreateObject(), *arr = NULL;
    if (out != NULL && err != GRPO_OK) {
        cJSON_AddStringToObject(out, "error", grpo_error_last());
    } else if (out != NULL) {
        cJSON_AddStringToObject(out, "text", text);
        cJSON_AddItemToObject(out, "ids", arr = cJSON_CreateArray());
        for (size_t i = 0; arr != NULL && i < n; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    }
    s = out != NULL ? cJSON_PrintUnformatted(out) : NULL;
    if (s == NULL || printf("%s\n", s) < 0)
        *io_fail = true;
    free(s);
    cJSON_Delete(out);
    free(ids);
    free(text);
    grpo_chat_fini(&chat);
    return err == GRPO_OK;
}

/* --jsonl: every non-blank line of the --messages file is one conversation. */
static int
do_chat_jsonl(grpo_tokenizer *tok, const opts *o)
{
    char *data = NULL, where[4200];
    size_t len = 0, lineno = 0;
    bool io_fail = false, all_ok = true;
    grpo_chat_family fam = (grpo_chat_family)chat_family(o->chat);
    if (grpo__read_file(o->messages, (size_t)1 << 31, &data, &len) != GRPO_OK)
        return cli_fail("tokenize");
    for (size_t at = 0; at < len && !io_fail;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl != NULL ? (size_t)(nl - data) : len;
        lineno++;
        if (strspn(data + at, " \t\r") < end - at) {
            snprintf(where, sizeof where, "%s:%zu", o->messages, lineno);
            all_ok &= jsonl_line(tok, fam, !o->no_gen, data + at, end - at, where, &io_fail);
        }
        at = end + 1;
    }
    free(data);
    if (io_fail || fflush(stdout) != 0) {
        fprintf(stderr, "grpo tokenize: stdout: write error or out of memory\n");
        return CLI_FAIL;
    }
    return all_ok ? CLI_OK : CLI_FAIL;
}

static int
do_chat(grpo_tokenizer *tok, const opts *o)
{
    char *json = NULL, *text = NULL;
    size_t jlen = 0, tlen = 0, n = 0;
    int32_t *ids = NULL;
    grpo_chat chat = {0};
    int rc = CLI_OK;
    grpo_chat_family fam = (grpo_chat_family)chat_family(o->chat);
    if (grpo__read_file(o->messages, (size_t)1 << 30, &json, &jlen) != GRPO_OK ||
        grpo_chat_parse_json(&chat, json, jlen, o->messages) != GRPO_OK)
        rc = cli_fail("tokenize");
    if (rc == CLI_OK && o->text) {
        if (grpo_chat_render(tok, fam, chat.msgs, chat.n, !o->no_gen, &text, &tlen) != GRPO_OK)
            rc = cli_fail("tokenize");
        else if (fwrite(text, 1, tlen, stdout) != tlen || fflush(stdout) != 0)
            rc = CLI_FAIL;
    } else if (rc == CLI_OK) {
        if (grpo_chat_encode(tok, fam, chat.msgs, chat.n, !o->no_gen, &ids, &n) != GRPO_OK)
            rc = cli_fail("tokenize");
        else
            rc = print_ids(ids, n);
    }
    free(ids);
    free(text);
    free(json);
    grpo_chat_fini(&chat);
    return rc;
}

int
grpo_cmd_tokenize(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return CLI_OK;
    }
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc != CLI_OK)
        return rc;
    grpo_tokenizer_opts to = {0};
    /* R1's template emits <think>, a token only in R1's tokenizer: --chat r1 implies --r1 */
    to.r1 = o.r1 || (o.chat != NULL && grpo_chat_family_parse(o.chat) == GRPO_CHAT_R1);
    to.config_path = o.config;
    grpo_tokenizer *tok = NULL;
    if (grpo_tokenizer_load(&tok, o.tokenizer, &to) != GRPO_OK)
        return cli_fail("tokenize");
    if (o.decode)
        rc = do_decode(tok, &o);
    else if (o.chat != NULL && o.jsonl)
        rc = do_chat_jsonl(tok, &o);
    else if (o.chat != NULL)
        rc = do_chat(tok, &o);
    else
        rc = do_encode(tok, &o);
    grpo_tokenizer_destroy(tok);
    return rc;
}
