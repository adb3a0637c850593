/* The /metrics endpoint: serves the text it was given on loopback (any free port), 404
 * for other paths, 405 for other methods; a client that connects and says nothing is
 * dropped after the I/O timeout and the next one is served; the exposition text of a row
 * has the row's values. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "ds_buf.h"
#include "ds_clock.h"
#include "metrics.h"
#include "monitor.h"
#include "prometheus.h"

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Sends req, reads the whole answer (the server closes), within 10 s. */
static char *ask(int port, const char *req) {
    int fd = dial(port);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    static char buf[65536];
    size_t have = 0;
    int64_t deadline = ds_now_ms() + 10000;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - ds_now_ms());
        assert_true(left > 0 && poll(&p, 1, left) == 1);
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n <= 0) break;
        have += (size_t)n;
    }
    buf[have] = 0;
    close(fd);
    return buf;
}

static void serves_the_text_it_was_given(void **state) {
    (void)state;
    ds_err err = {{0}};
    ds_prom *p = ds_prom_start(NULL, 0, &err);
    assert_non_null(p);
    int port = ds_prom_port(p);
    assert_true(port > 0);
    char *a = ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(a, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(a, "Content-Type: text/plain; version=0.0.4"));
    assert_non_null(strstr(a, "Content-Length: 0\r\n"));
    ds_prom_set(p, "ds_step{job=\"j\"} 3\n", 19);
    a = ask(port, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_non_null(strstr(a, "Content-Length: 19\r\n"));
    assert_non_null(strstr(a, "\r\n\r\nds_step{job=\"j\"} 3\n"));
    a = ask(port, "GET /metrics?x=1 HTTP/1.1\n\n");
    assert_non_null(strstr(a, "\r\n\r\nds_step"));
    assert_non_null(strstr(ask(port, "GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found"));
    assert_non_null(strstr(ask(port, "GET /metricsx HTTP/1.1\r\n\r\n"), "404"));
    assert_non_null(strstr(ask(port, "POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405"));
    ds_prom_stop(p);
}

static void a_silent_client_does_not_hold_the_endpoint(void **state) {
    (void)state;
    ds_err err = {{0}};
    ds_prom *p = ds_prom_start("127.0.0.1", 0, &err);
    assert_non_null(p);
    ds_prom_set(p, "x 1\n", 4);
    int64_t t0 = ds_now_ms();
    int silent = dial(ds_prom_port(p));
    char *a = ask(ds_prom_port(p), "GET /metrics HTTP/1.1\r\n\r\n");
    assert_non_null(strstr(a, "\r\n\r\nx 1\n"));
    /* served once the silent one was dropped, not before and not much after */
    int64_t waited = ds_now_ms() - t0;
    assert_true(waited >= DS_PROM_IO_TIMEOUT_MS - 50 && waited < DS_PROM_IO_TIMEOUT_MS + 5000);
    close(silent);
    ds_prom_stop(p);
}

static void a_busy_port_is_an_error(void **state) {
    (void)state;
    ds_err err = {{0}};
    ds_prom *p = ds_prom_start("127.0.0.1", 0, &err);
    assert_non_null(p);
    assert_null(ds_prom_start("127.0.0.1", ds_prom_port(p), &err));
    assert_non_null(strstr(err.msg, "metrics endpoint: cannot listen on 127.0.0.1:"));
    assert_null(ds_prom_start("no.such.host.invalid", 0, &err));
    assert_non_null(strstr(err.msg, "cannot resolve"));
    ds_prom_stop(p);
}

static void the_text_of_a_row(void **state) {
    (void)state;
    static const char *const cats[] = {"params"};
    ds_metrics_row r = {.step = 12, .total_steps = 300, .nranks = 2, .loss = 1.25, .lr = 0.001, .grad_norm = NAN,
                        .loss_scale = 65536, .skipped_total = 3, .tokens_per_s = 4096.5, .ncats = 1, .cats = cats};
    r.step_time = (ds_stat){0.5, 0.5, 0.625, 0.75, 1};
    r.mem_peak[0] = (ds_stat){100, 100, 150, 200, 1};
    ds_buf b = {0};
    ds_monitor_prom_text(&b, &r, "gpt-0a1b2c3d", 2);
    const char *t = ds_buf_str(&b);
    const char *want[] = {
        "# TYPE ds_step gauge\nds_step{job=\"gpt-0a1b2c3d\"} 12\n",
        "ds_total_steps{job=\"gpt-0a1b2c3d\"} 300\n",
        "ds_loss{job=\"gpt-0a1b2c3d\"} 1.25\n",
        "ds_learning_rate{job=\"gpt-0a1b2c3d\"} 0.001\n",
        "ds_grad_norm{job=\"gpt-0a1b2c3d\"} NaN\n",
        "# TYPE ds_skipped_steps_total counter\nds_skipped_steps_total{job=\"gpt-0a1b2c3d\"} 3\n",
        "ds_tokens_per_second{job=\"gpt-0a1b2c3d\"} 4096.5\n",
        "ds_step_time_seconds{job=\"gpt-0a1b2c3d\",stat=\"median\"} 0.625\n",
        "ds_memory_bytes{job=\"gpt-0a1b2c3d\",category=\"params\",kind=\"peak\",stat=\"max\"} 200\n",
        "ds_restarts_total{job=\"gpt-0a1b2c3d\"} 2\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(t, want[i])) fail_msg("missing: %s\nin:\n%s", want[i], t);
    ds_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(serves_the_text_it_was_given),
        cmocka_unit_test(a_silent_client_does_not_hold_the_endpoint),
        cmocka_unit_test(a_busy_port_is_an_error),
        cmocka_unit_test(the_text_of_a_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
