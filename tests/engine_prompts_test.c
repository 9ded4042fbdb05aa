/* The prompts JSONL reader: good records, each kind of bad line reported with its line number,
 * skip vs fail, invalid UTF-8, size limits, and `git:REPO@REV:path` read through libgit2 from a
 * repository this test creates with the git command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIXED "data/engine/prompts_mixed.jsonl"

static void
test_skip_mode(void **state)
{
    (void)state;
    grpo_prompt_set s;
    assert_int_equal(grpo_prompts_load(&s, MIXED, 1), GRPO_OK);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.n_skipped, 7);
    assert_string_equal(s.items[0].id, "p1");
    assert_string_equal(s.items[0].prompt, "What is 2+2?");
    assert_string_equal(s.items[0].answer, "4");
    assert_string_equal(s.items[0].answer_json, "\"4\"");
    assert_string_equal(s.items[0].task, "math");
    assert_int_equal(s.items[0].line, 1);
    assert_string_equal(s.items[1].id, "7");
    assert_null(s.items[1].prompt);
    assert_non_null(strstr(s.items[1].messages_json, "\"Be brief.\""));
    assert_string_equal(s.items[2].id, "p3");
    assert_string_equal(s.items[2].answer, "12");
    assert_string_equal(s.items[2].language, "python");
    assert_non_null(strstr(s.items[2].tests_json, "\"outputs\""));
    assert_int_equal(s.items[2].line, 4);
    assert_string_equal(s.items[3].id, "8"); /* no id: its line number */
    assert_null(s.git_commit);
    grpo_prompts_fini(&s);
}

static void
expect_fail(const char *text, const char *needle)
{
    grpo_prompt_set s;
    assert_int_equal(grpo_prompts_parse(&s, text, strlen(text), "t.jsonl", 0), GRPO_EFORMAT);
    if (strstr(grpo_error_last(), needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", grpo_error_last(), needle);
}

static void
test_fail_mode(void **state)
{
    (void)state;
    grpo_prompt_set s;
    assert_int_equal(grpo_prompts_load(&s, MIXED, 0), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "prompts_mixed.jsonl:5"));
    expect_fail("{\"id\":1,\"prompt\":\"a\"}\n{\"id\":2,\"prompt\":\"b\"\n", "t.jsonl:2");
    expect_fail("{\"id\":1,\"prompt\":\"a\"}\n{\"id\":1,\"prompt\":\"b\"}\n", "duplicate id");
    expect_fail("{\"id\":1.5,\"prompt\":\"a\"}", "\"id\"");
    expect_fail("{\"id\":\"\",\"prompt\":\"a\"}", "\"id\" is empty");
    /* a number id a double cannot hold exactly (2^53 + 1 reads as 2^53): refused, not rounded */
    expect_fail("{\"id\":9007199254740993,\"prompt\":\"a\"}", "beyond 2^53");
    expect_fail("{\"id\":1e19,\"prompt\":\"a\"}", "write it as a string");
    const char *edge = "{\"id\":9007199254740991,\"prompt\":\"a\"}";
    assert_int_equal(grpo_prompts_parse(&s, edge, strlen(edge), "t.jsonl", 0), GRPO_OK);
    assert_string_equal(s.items[0].id, "9007199254740991");
    grpo_prompts_fini(&s);
    expect_fail("{\"id\":1,\"messages\":[{\"content\":\"x\"}]}", "role");
    expect_fail("{\"id\":1,\"prompt\":\"\xff\xfe\"}", "UTF-8");
    /* cJSON would cut the prompt at an escaped NUL: refused, not silently truncated */
    expect_fail("{\"id\":1,\"prompt\":\"a\\u0000b\"}", "\\u0000");
    expect_fail("\n\n", "no prompts");
    char *big = malloc(GRPO_PROMPTS_MAX_LINE + 64);
    strcpy(big, "{\"id\":1,\"prompt\":\"");
    size_t n = strlen(big);
    memset(big + n, 'x', GRPO_PROMPTS_MAX_LINE);
    strcpy(big + n + GRPO_PROMPTS_MAX_LINE, "\"}");
    expect_fail(big, "limit");
    free(big);
    assert_int_equal(grpo_prompts_load(&s, "no/such/file.jsonl", 0), GRPO_ENOTFOUND);
}

static int
sh(const char *cmd)
{
    int rc = system(cmd);
    return rc;
}

static void
test_git_spec(void **state)
{
    (void)state;
    char dir[] = "/tmp/grpo_prompts_git_XXXXXX", cmd[1024], spec[512], head1[64] = {0};
    if (mkdtemp(dir) == NULL || sh("git --version >/dev/null 2>&1") != 0)
        skip();
    snprintf(cmd, sizeof cmd,
             "cd %s && git init -q . && git config user.email t@t && git config user.name t && "
             "mkdir d && printf '{\"id\":\"a\",\"prompt\":\"v1\"}\\n' > d/p.jsonl && "
             "git add d && git commit -q -m one && git tag v1 && "
             "printf '{\"id\":\"a\",\"prompt\":\"v2\"}\\n{\"id\":\"b\",\"prompt\":\"x\"}\\n' "
             "> d/p.jsonl && git commit -q -am two && git rev-parse v1 > head1",
             dir);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/head1", dir);
    FILE *f = fopen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(head1, sizeof head1, f));
    fclose(f);
    head1[40] = '\0';
    grpo_prompt_set s;
    snprintf(spec, sizeof spec, "git:%s@v1:d/p.jsonl", dir);
    assert_int_equal(grpo_prompts_load(&s, spec, 0), GRPO_OK);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.items[0].prompt, "v1"); /* the file as it was at v1 */
    assert_string_equal(s.git_commit, head1);
    assert_string_equal(s.git_repo, dir);
    grpo_prompts_fini(&s);
    snprintf(spec, sizeof spec, "git:%s@HEAD:d/p.jsonl", dir);
    assert_int_equal(grpo_prompts_load(&s, spec, 0), GRPO_OK);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.items[0].prompt, "v2");
    grpo_prompts_fini(&s);
    snprintf(spec, sizeof spec, "git:%s@nosuchrev:d/p.jsonl", dir);
    assert_int_equal(grpo_prompts_load(&s, spec, 0), GRPO_ENOTFOUND);
    snprintf(spec, sizeof spec, "git:%s@HEAD:d/missing.jsonl", dir);
    assert_int_equal(grpo_prompts_load(&s, spec, 0), GRPO_ENOTFOUND);
    assert_int_equal(grpo_prompts_load(&s, "git:nothing-here", 0), GRPO_EINVAL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    sh(cmd);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skip_mode),
        cmocka_unit_test(test_fail_mode),
        cmocka_unit_test(test_git_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
