/* Helpers the in-process bridge tests share (cmocka): a free loopback port and a publisher with
 * the tests' run id and a short long poll. Header-only: each test is one translation unit. */
#ifndef GRPO_TESTS_BRIDGE_TEST_UTIL_H
#define GRPO_TESTS_BRIDGE_TEST_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpo/bridge.h"

/* A TCP port nobody listens on now (the kernel's choice for port 0). */
static int
free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* A publisher of run "r1" on url: window, poll_ms 50, persist and weights_dir (may be NULL). */
static grpo_bridge_publisher *
start_publisher(const char *url, int window, const grpo_bridge_persist *persist,
                const char *weights_dir)
{
    grpo_bridge_opts o;
    grpo_bridge_opts_default(&o);
    o.run_id = "r1";
    o.window = window;
    o.poll_ms = 50;
    o.persist = persist;
    o.weights_dir = weights_dir;
    grpo_bridge_publisher *p = NULL;
    grpo_err err = grpo_bridge_publisher_create(&p, url, &o);
    if (err != GRPO_OK)
        fprintf(stderr, "%s\n", grpo_error_last());
    assert_int_equal(err, GRPO_OK);
    return p;
}

#endif
