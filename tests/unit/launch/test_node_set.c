/* node_set: a pass of the controller's loop gathers only the nodes with something to do
 * (a ready descriptor, a wake, a timer due), never the idle ones; the live count follows
 * nodes as they end, by their turn or by a wake; the loop's alarms come in time order; an
 * opening's deadline brings its turn with no descriptor ready. Nodes over pipes (as an srun or relayed node is). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cmocka.h>

#include "ds_clock.h"
#include "node_set.h"

#define N 64 /* nodes[0 .. N - 1) start over pipes; nodes[N - 1] waits (queued) */

typedef struct fixture {
    ds_node nodes[N];
    int far[N][3]; /* the agent's ends: stdin's read end, stdout's and stderr's write ends */
    ds_node_wakes wakes;
    ds_node_set *set;
    int lines;
} fixture;

static void on_frame(void *ctx, ds_node *n, const ds_frame *f) { (void)ctx, (void)n, (void)f; }
static void on_line(void *ctx, ds_node *n, const char *line) {
    (void)n, (void)line;
    ((fixture *)ctx)->lines++;
}

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    ds_err err = {{0}};
    for (int i = 0; i < N; i++) {
        fx->nodes[i].local.in_fd = fx->nodes[i].local.out_fd = fx->nodes[i].local.err_fd = -1;
        fx->nodes[i].wakes = &fx->wakes;
        fx->far[i][0] = fx->far[i][1] = fx->far[i][2] = -1;
        if (i < N - 1 && ds_node_start_piped(&fx->nodes[i], fx->far[i], &err) != 0) return -1;
    }
    fx->set = ds_node_set_new(fx->nodes, N, &fx->wakes, &err);
    *state = fx;
    return fx->set ? 0 : -1;
}

static int teardown(void **state) {
    fixture *fx = *state;
    ds_node_set_free(fx->set);
    for (int i = 0; i < N; i++) {
        ds_node_free(&fx->nodes[i]);
        for (int k = 0; k < 3; k++)
            if (fx->far[i][k] >= 0) close(fx->far[i][k]);
    }
    free(fx);
    return 0;
}

/* One pass as controller.c runs it, after a poll of the set's descriptor that waits at
 * most wait_ms; returns how many nodes it gathered. */
static int pass(fixture *fx, int wait_ms) {
    struct pollfd pf = {.fd = ds_node_set_fd(fx->set), .events = POLLIN};
    poll(&pf, 1, wait_ms);
    ds_node_handler h = {.ctx = fx, .frame = on_frame, .agent_line = on_line};
    ds_err err = {{0}};
    long long now = ds_now_ms();
    int k = ds_node_set_gather(fx->set, pf.revents != 0, now);
    for (int t = 0; t < k; t++) {
        int ready, i = ds_node_set_nth(fx->set, t, &ready);
        if (ds_node_turn(&fx->nodes[i], ready, now)) ds_node_io(&fx->nodes[i], &h);
        assert_int_equal(ds_node_set_update(fx->set, i, now, &err), 0);
    }
    return k;
}

static void test_a_pass_gathers_only_nodes_with_something_to_do(void **state) {
    fixture *fx = *state;
    assert_int_equal(pass(fx, 0), N - 1); /* their starts woke them: registered in the first pass */
    assert_int_equal(ds_node_set_timeout(fx->set, ds_now_ms()), -1); /* nothing to wait for */
    assert_int_equal(pass(fx, 0), 0);
    assert_int_equal(write(fx->far[17][2], "hello\n", 6), 6);
    assert_int_equal(pass(fx, 1000), 1);
    int ready;
    assert_int_equal(ds_node_set_nth(fx->set, 0, &ready), 17);
    assert_true(ready);
    assert_int_equal(fx->lines, 1);
    assert_int_equal(pass(fx, 0), 0); /* read: idle again */
    assert_int_equal(ds_node_set_live(fx->set), N);
}

static void test_a_stop_wakes_its_node_alone(void **state) {
    fixture *fx = *state;
    pass(fx, 0);
    ds_node_stop(&fx->nodes[5]);
    assert_int_equal(ds_node_set_timeout(fx->set, ds_now_ms()), 0);
    assert_int_equal(pass(fx, 0), 1);
    int ready;
    assert_int_equal(ds_node_set_nth(fx->set, 0, &ready), 5);
    assert_false(ready);
    char c;
    assert_int_equal(read(fx->far[5][0], &c, 1), 0); /* its stdin closed: the agent's dead-man switch */
    assert_int_equal(pass(fx, 0), 0);
}

static void test_the_live_count_follows_nodes_as_they_end(void **state) {
    fixture *fx = *state;
    pass(fx, 0);
    close(fx->far[9][1]); /* its agent gone: both streams hang up */
    close(fx->far[9][2]);
    fx->far[9][1] = fx->far[9][2] = -1;
    assert_int_equal(pass(fx, 1000), 1);
    assert_int_equal(fx->nodes[9].state, DS_NODE_DONE);
    assert_int_equal(ds_node_set_live(fx->set), N - 1);
    ds_node_abandon(&fx->nodes[11], "dropped"); /* no descriptor says so: its wake does */
    assert_int_equal(pass(fx, 0), 1);
    assert_int_equal(ds_node_set_live(fx->set), N - 2);
    assert_int_equal(pass(fx, 0), 0); /* a done node's descriptors are out of the set */
    ds_node_abandon(&fx->nodes[11], "again");
    pass(fx, 0);
    assert_int_equal(ds_node_set_live(fx->set), N - 2); /* counted once */
}

/* The loop's alarms (its heartbeat check): taken in time order, a new one replacing the
 * node's old one, never shortening the poll. */
static void test_alarms_come_in_time_order(void **state) {
    fixture *fx = *state;
    pass(fx, 0);
    long long now = ds_now_ms();
    ds_node_set_alarm(fx->set, 3, now + 50);
    ds_node_set_alarm(fx->set, 4, now + 10);
    ds_node_set_alarm(fx->set, 3, now + 5);
    ds_node_set_alarm(fx->set, 7, now + 30);
    ds_node_set_alarm(fx->set, 7, 0);
    assert_int_equal(ds_node_set_timeout(fx->set, now), -1);
    assert_int_equal(ds_node_set_alarm_due(fx->set, now), -1);
    assert_int_equal(ds_node_set_alarm_due(fx->set, now + 20), 3);
    assert_int_equal(ds_node_set_alarm_due(fx->set, now + 20), 4);
    assert_int_equal(ds_node_set_alarm_due(fx->set, now + 100), -1); /* 3's first and 7's: replaced */
}

/* An SSH opening to a port that accepts and never says a word: no descriptor becomes
 * ready, the deadline brings the node's turn and its failure. */
static void test_a_deadline_brings_the_turn(void **state) {
    fixture *fx = *state;
    pass(fx, 0);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(ls, 4), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &len), 0);
    ds_err err = {{0}};
    assert_int_equal(ds_ssh_global_init(&err), 0);
    ds_node *n = &fx->nodes[N - 1];
    ds_ssh_opts o = {.name = strdup("silent"), .host = strdup("127.0.0.1"), .port = ntohs(a.sin_port),
                     .user = strdup("nobody"), .check = DS_HOSTKEY_NO, .timeout_ms = 300};
    long long t0 = ds_now_ms(); /* (before the start, which sets the deadline) */
    assert_int_equal(ds_node_start_ssh(n, &o, "true", &err), 0);
    int turns = 0;
    for (int k = 0; k < 50 && n->state != DS_NODE_DONE; k++) {
        int wait = ds_node_set_timeout(fx->set, ds_now_ms());
        assert_true(wait >= 0 && wait <= 300); /* the deadline is a timer */
        turns += pass(fx, wait);
    }
    assert_int_equal(n->state, DS_NODE_DONE);
    assert_non_null(strstr(n->error, "no answer within the connect timeout"));
    assert_true(ds_now_ms() - t0 >= 300);
    assert_true(turns < 10); /* woken at its start, on its socket, at its deadline: no busy loop */
    assert_int_equal(ds_node_set_live(fx->set), N - 1);
    pass(fx, 0); /* (its abandon in its turn woke it once more) */
    assert_int_equal(pass(fx, 0), 0);
    close(ls);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_pass_gathers_only_nodes_with_something_to_do, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_stop_wakes_its_node_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_live_count_follows_nodes_as_they_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alarms_come_in_time_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_deadline_brings_the_turn, setup, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
