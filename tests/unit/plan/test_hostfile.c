/* Hostfile parsing and --include/--exclude/--num_nodes/--num_gpus filtering: every case
 * of DeepSpeed's tests/unit/launcher/test_run.py, then the stricter edge cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostfile.h"

/* The hostlist as "host:0,1 host2:3" (spares get a trailing '*'), for compact asserts. */
static const char *show(const ds_hostlist *hl) {
    static char buf[1024];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < hl->nhosts; i++) {
        const ds_host *h = &hl->hosts[i];
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s:", i ? " " : "", h->name);
        for (int s = 0; s < h->nkept; s++)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", s ? "," : "", h->slots[s]);
        if (h->spare) len += (size_t)snprintf(buf + len, sizeof buf - len, "*");
    }
    return buf;
}

static const char *TWO = "worker-0 slots=4\nworker-1 slots=4\n";
static const char *ONE = "worker-0 slots=4\n";

/* Parses text, filters, returns the result string or "ERR: message". */
static const char *run(const char *text, const char *inc, const char *exc, int nn, int ng) {
    static char out[1100];
    ds_hostlist hl;
    ds_err err = {""};
    if (ds_hostfile_parse(&hl, "hosts", text, &err) != 0) {
        snprintf(out, sizeof out, "ERR: %s", err.msg);
        return out;
    }
    if (ds_hostlist_filter(&hl, inc, exc, nn, ng, &err) != 0)
        snprintf(out, sizeof out, "ERR: %s", err.msg);
    else
        snprintf(out, sizeof out, "%s", show(&hl));
    ds_hostlist_free(&hl);
    return out;
}

static const char *inc(const char *text, const char *s) { return run(text, s, NULL, -1, -1); }
static const char *exc(const char *text, const char *s) { return run(text, NULL, s, -1, -1); }

#define assert_err(got, needle)                                                           \
    do {                                                                                  \
        const char *g_ = (got);                                                           \
        if (strncmp(g_, "ERR: ", 5) != 0 || !strstr(g_, (needle))) {                      \
            print_error("expected an error containing '%s', got '%s'\n", (needle), g_);   \
            fail();                                                                       \
        }                                                                                 \
    } while (0)

/* ---- DeepSpeed's test_run.py ---- */

static void test_ds_parser_mutual_exclusive(void **st) {
    (void)st;
    assert_err(run(ONE, "worker-0", "worker-0", -1, -1), "mutually exclusive");
}

static void test_ds_parser_local(void **st) {
    (void)st;
    assert_string_equal(run(ONE, NULL, NULL, -1, -1), "worker-0:0,1,2,3");
    assert_string_equal(exc(ONE, "worker-0:1"), "worker-0:0,2,3");
    assert_string_equal(exc(ONE, "worker-0:1,2"), "worker-0:0,3");
    assert_string_equal(inc(ONE, "worker-0:1"), "worker-0:1");
    assert_string_equal(inc(ONE, "worker-0:1,1"), "worker-0:1");
    assert_string_equal(inc(ONE, "worker-0:1@worker-0:0,1"), "worker-0:0,1");
    assert_string_equal(inc(ONE, "worker-0"), "worker-0:0,1,2,3");
    /* DeepSpeed returns {} for these two; an empty world is an error here */
    assert_err(exc(ONE, "worker-0"), "leaves no slot");
    assert_err(exc(ONE, "worker-0:0,1,2,3"), "leaves no slot");
}

static void test_ds_parser_multinode(void **st) {
    (void)st;
    assert_string_equal(run(TWO, NULL, NULL, -1, -1), "worker-0:0,1,2,3 worker-1:0,1,2,3");
    assert_string_equal(inc(TWO, "worker-1:0,3"), "worker-1:0,3");
    assert_string_equal(exc(TWO, "worker-1"), "worker-0:0,1,2,3");
    assert_string_equal(exc(TWO, "worker-0:0,1@worker-1:3"), "worker-0:2,3 worker-1:0,1,2");
}

static void test_ds_parse_inclusion_exclusion(void **st) {
    (void)st;
    assert_string_equal(run(TWO, "", "", -1, -1), "worker-0:0,1,2,3 worker-1:0,1,2,3");
    assert_string_equal(inc(TWO, "worker-0"), "worker-0:0,1,2,3");
    assert_string_equal(inc(TWO, "worker-0@worker-1:0,2"), "worker-0:0,1,2,3 worker-1:0,2");
    assert_string_equal(inc(TWO, "worker-1:0,2"), "worker-1:0,2");
    assert_string_equal(exc(TWO, "worker-0:1"), "worker-0:0,2,3 worker-1:0,1,2,3");
}

static void test_ds_parse_inclusion_exclusion_errors(void **st) {
    (void)st;
    const char *specs[] = {"worker-0:4", "worker-0:99", "worker-0:0,4"};
    for (int i = 0; i < 3; i++) {
        assert_err(inc(ONE, specs[i]), "no slot");
        assert_err(exc(ONE, specs[i]), "no slot");
    }
    assert_err(inc(ONE, "jeff"), "host 'jeff' is not in the hostfile");
}

static void test_ds_parser_errors(void **st) {
    (void)st;
    assert_err(inc(TWO, "jeff"), "'jeff' is not in the hostfile");
    assert_err(exc(TWO, "jeff"), "'jeff' is not in the hostfile");
    assert_err(inc(TWO, "worker-1:4"), "no slot '4' on host 'worker-1'");
    assert_err(exc(TWO, "worker-1:4"), "no slot '4' on host 'worker-1'");
    assert_err(exc(TWO, "worker-1@worker-0:1@5"), "host '5' is not in the hostfile");
}

static void test_ds_num_plus_parser(void **st) {
    (void)st;
    const char *h = "localhost slots=2\n";
    assert_err(run(h, "localhost", NULL, 1, -1), "cannot be combined");
    assert_err(run(h, "localhost", NULL, 1, 1), "cannot be combined");
    assert_err(run(h, "localhost", NULL, -1, 1), "cannot be combined");
    assert_err(run(h, NULL, "localhost", 1, -1), "cannot be combined");
    assert_err(run(h, NULL, "localhost", 1, 1), "cannot be combined");
    assert_err(run(h, NULL, "localhost", -1, 1), "cannot be combined");
}

static void test_ds_hostfile_good(void **st) {
    (void)st;
    const char *text = "\n    worker-1 slots=2\n    worker-2 slots=2\n\n    localhost slots=1\n"
                       "    123.23.12.10 slots=2\n\n    #worker-1 slots=3\n    # this is a comment\n\n    ";
    assert_string_equal(run(text, NULL, NULL, -1, -1),
                        "worker-1:0,1 worker-2:0,1 localhost:0 123.23.12.10:0,1");
    ds_hostlist hl;
    ds_err err;
    assert_int_equal(ds_hostfile_parse(&hl, "hosts", text, &err), 0);
    assert_int_equal(hl.nhosts, 4);
    assert_int_equal(hl.hosts[0].nslots, 2);
    assert_int_equal(hl.hosts[0].line, 2);
    assert_int_equal(hl.hosts[2].nslots, 1);
    assert_int_equal(hl.hosts[3].line, 6);
    ds_hostlist_free(&hl);
}

/* A byte order mark (as some editors write one) is not part of the first host's name. */
static void test_bom(void **st) {
    (void)st;
    assert_string_equal(run("\xEF\xBB\xBFworker-0 slots=2\nworker-1 slots=1\n", NULL, NULL, -1, -1),
                        "worker-0:0,1 worker-1:0");
    assert_err(run("worker-0 slots=2\n\xEF\xBB\xBFworker-1 slots=1\n", NULL, NULL, -1, -1),
               "hosts:2: host '\xEF\xBB\xBFworker-1': character 0xef is not allowed");
}

static void test_ds_hostfiles_bad(void **st) {
    (void)st;
    assert_err(run("\n    worker-1 slots=2\n    worker-2 slots=1\n    worker-1 slots=1\n", NULL, NULL, -1, -1),
               "hosts:4: host 'worker-1' is listed twice (first on line 2)");
    assert_err(run("\n    this is bad slots=1\n", NULL, NULL, -1, -1), "hosts:2: 'is': expected slots=N");
    assert_err(run("\n    missingslots\n", NULL, NULL, -1, -1), "hosts:2: 'missingslots'");
    assert_err(run("\n    ", NULL, NULL, -1, -1), "hosts: no hosts");
    assert_err(run("\n    worker-1 slots=2\n    this is bad slots=1\n    worker-2 slots=4\n    missingslots\n\n",
                   NULL, NULL, -1, -1),
               "hosts:3:");
}

/* ---- stricter than DeepSpeed ---- */

static void test_strict_slot_counts(void **st) {
    (void)st;
    assert_err(run("a slots=4abc\n", NULL, NULL, -1, -1), "hosts:1: 'slots=4abc': trailing text");
    assert_err(run("a slots=0\n", NULL, NULL, -1, -1), "hosts:1: host 'a': slots=0");
    assert_err(run("a slots=-1\n", NULL, NULL, -1, -1), "positive integer");
    assert_err(run("a slots=\n", NULL, NULL, -1, -1), "positive integer");
    assert_err(run("a slots = 4\n", NULL, NULL, -1, -1), "expected slots=N");
    assert_err(run("a slots=99999999999999999999\n", NULL, NULL, -1, -1), "more than");
    assert_err(run("a slots=2 b slots=2\n", NULL, NULL, -1, -1), "unexpected 'b'");
    assert_err(run("a slots=2 spare spare\n", NULL, NULL, -1, -1), "unexpected 'spare'");
    assert_err(run("a@b slots=2\n", NULL, NULL, -1, -1), "not allowed in a host name");
    assert_err(run("a,b slots=2\n", NULL, NULL, -1, -1), "not allowed in a host name");
}

static void test_comments_whitespace_crlf(void **st) {
    (void)st;
    assert_string_equal(run("# head\r\na slots=2 # two GPUs\r\n\tb\tslots=1\t\r\n", NULL, NULL, -1, -1),
                        "a:0,1 b:0");
    /* a '#' inside a token is not a comment (DeepSpeed's \S+ host name) */
    assert_string_equal(run("a#1 slots=1\n", NULL, NULL, -1, -1), "ERR: hosts:1: host 'a#1': character 0x23 is not allowed in a host name");
    assert_string_equal(run("a slots=1", NULL, NULL, -1, -1), "a:0"); /* no final newline */
}

static void test_num_nodes_num_gpus(void **st) {
    (void)st;
    const char *three = "a slots=4\nb slots=4\nc slots=2\n";
    assert_string_equal(run(three, NULL, NULL, 2, -1), "a:0,1,2,3 b:0,1,2,3");
    assert_string_equal(run(three, NULL, NULL, 3, -1), "a:0,1,2,3 b:0,1,2,3 c:0,1");
    assert_string_equal(run(three, NULL, NULL, -1, 2), "a:0,1 b:0,1 c:0,1");
    assert_string_equal(run(three, NULL, NULL, 2, 3), "a:0,1,2 b:0,1,2");
    assert_err(run(three, NULL, NULL, 4, -1), "--num_nodes 4: only 3 nodes available");
    assert_err(run(three, NULL, NULL, -1, 3), "--num_gpus 3: host 'c' has only 2 slots");
    assert_err(run(three, NULL, NULL, 0, -1), "expected a positive number");
    assert_err(run(three, NULL, NULL, -1, 0), "expected a positive number");
}

static void test_bare_host_wins(void **st) {
    (void)st;
    assert_string_equal(inc(TWO, "worker-0@worker-0:1"), "worker-0:0,1,2,3");
    assert_string_equal(inc(TWO, "worker-0:1@worker-0"), "worker-0:0,1,2,3");
    assert_string_equal(exc(TWO, "worker-0@worker-0:1"), "worker-1:0,1,2,3");
    /* one host named twice with slot lists: merged */
    assert_string_equal(inc(TWO, "worker-0:3@worker-0:1"), "worker-0:1,3");
    assert_string_equal(exc(TWO, "worker-0:1,1@worker-0:2"), "worker-0:0,3 worker-1:0,1,2,3");
}

static void test_order_is_hostfile_order(void **st) {
    (void)st;
    assert_string_equal(inc("a slots=1\nb slots=1\nc slots=1\n", "c@a"), "a:0 c:0");
}

static void test_filter_syntax_errors(void **st) {
    (void)st;
    assert_err(inc(TWO, "worker-0@"), "empty host");
    assert_err(inc(TWO, "@worker-0"), "empty host");
    assert_err(inc(TWO, "worker-0:"), "empty slot list");
    assert_err(inc(TWO, "worker-0:x"), "'x' is not a slot index");
    assert_err(inc(TWO, "worker-0:1,,2"), "'' is not a slot index");
    assert_err(inc(TWO, "worker-0:-1"), "'-1' is not a slot index");
    assert_err(inc(TWO, "worker-0: 1"), "' 1' is not a slot index");
    assert_err(inc(TWO, "worker-0:1:2"), "host 'worker-0:1' is not in the hostfile");
}

static void test_ipv6_names(void **st) {
    (void)st;
    const char *h = "::1 slots=2\nfe80::2 slots=2\n";
    assert_string_equal(inc(h, "::1"), "::1:0,1");
    assert_string_equal(inc(h, "fe80::2:1"), "fe80::2:1");
    assert_string_equal(exc(h, "::1:0"), "::1:1 fe80::2:0,1");
}

static void test_spares(void **st) {
    (void)st;
    const char *h = "a slots=2\ns slots=2 spare\nb slots=2\n";
    assert_string_equal(run(h, NULL, NULL, -1, -1), "a:0,1 s:0,1* b:0,1");
    /* num_nodes counts world nodes only; spares stay */
    assert_string_equal(run(h, NULL, NULL, 1, -1), "a:0,1 s:0,1*");
    assert_err(run(h, NULL, NULL, 3, -1), "only 2 nodes available");
    assert_string_equal(run(h, NULL, NULL, -1, 1), "a:0 s:0* b:0");
    assert_string_equal(exc(h, "s"), "a:0,1 b:0,1");
    assert_string_equal(inc(h, "b@s"), "s:0,1* b:0,1");
    assert_err(inc(h, "s"), "leaves no slot");
    assert_err(run("s slots=1 spare\n", NULL, NULL, -1, -1), "every host is a spare");
}

static void test_local(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_err err;
    unsetenv("CUDA_VISIBLE_DEVICES");
    assert_int_equal(ds_hostlist_local(&hl, 0, -1, &err), 0);
    assert_string_equal(show(&hl), "localhost:0");
    ds_hostlist_free(&hl);
    assert_int_equal(ds_hostlist_local(&hl, 0, 3, &err), 0);
    assert_string_equal(show(&hl), "localhost:0,1,2");
    ds_hostlist_free(&hl);
    assert_int_equal(ds_hostlist_local(&hl, 4, -1, &err), 0);
    assert_string_equal(show(&hl), "localhost:0,1,2,3");
    /* more slots asked than GPUs: the filter says so */
    assert_int_equal(ds_hostlist_filter(&hl, NULL, NULL, -1, 8, &err), -1);
    assert_non_null(strstr(err.msg, "has only 4 slots"));
    ds_hostlist_free(&hl);
    /* the CUDA runtime counted 2 devices through the mask: slots are the physical ids */
    setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
    assert_int_equal(ds_hostlist_local(&hl, 2, -1, &err), 0);
    assert_string_equal(show(&hl), "localhost:0,2");
    assert_int_equal(ds_hostlist_filter(&hl, "localhost:2", NULL, -1, -1, &err), 0);
    assert_string_equal(show(&hl), "localhost:2");
    ds_hostlist_free(&hl);
    assert_int_equal(ds_hostlist_local(&hl, 2, -1, &err), 0);
    assert_int_equal(ds_hostlist_filter(&hl, "localhost:1", NULL, -1, -1, &err), -1);
    assert_non_null(strstr(err.msg, "no slot '1' on host 'localhost' (it has slots 0,2)"));
    ds_hostlist_free(&hl);
    setenv("CUDA_VISIBLE_DEVICES", "GPU-1234", 1);
    assert_int_equal(ds_hostlist_local(&hl, 1, -1, &err), -1);
    assert_non_null(strstr(err.msg, "not a device index"));
    setenv("CUDA_VISIBLE_DEVICES", "1,1", 1);
    assert_int_equal(ds_hostlist_local(&hl, 2, -1, &err), -1);
    assert_non_null(strstr(err.msg, "listed twice"));
    /* no GPU found: the mask does not matter */
    assert_int_equal(ds_hostlist_local(&hl, 0, 2, &err), 0);
    assert_string_equal(show(&hl), "localhost:0,1");
    ds_hostlist_free(&hl);
    unsetenv("CUDA_VISIBLE_DEVICES");
    assert_int_equal(ds_hostlist_local(&hl, 0, 0, &err), -1);
}

static void test_load_file(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_err err;
    char path[] = "/tmp/ds_hostfile_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "a slots=2\nb slots=1\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    assert_int_equal(ds_hostfile_load(&hl, path, &err), 0);
    assert_string_equal(show(&hl), "a:0,1 b:0");
    ds_hostlist_free(&hl);
    /* a NUL byte: binary, not a hostfile */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "a slots=2\nb\0", 12), 12);
    close(fd);
    assert_int_equal(ds_hostfile_load(&hl, path, &err), -1);
    assert_non_null(strstr(err.msg, ":2: NUL byte"));
    unlink(path);
    assert_int_equal(ds_hostfile_load(&hl, path, &err), -1);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "No such file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ds_parser_mutual_exclusive),
        cmocka_unit_test(test_ds_parser_local),
        cmocka_unit_test(test_ds_parser_multinode),
        cmocka_unit_test(test_ds_parse_inclusion_exclusion),
        cmocka_unit_test(test_ds_parse_inclusion_exclusion_errors),
        cmocka_unit_test(test_ds_parser_errors),
        cmocka_unit_test(test_ds_num_plus_parser),
        cmocka_unit_test(test_ds_hostfile_good),
        cmocka_unit_test(test_bom),
        cmocka_unit_test(test_ds_hostfiles_bad),
        cmocka_unit_test(test_strict_slot_counts),
        cmocka_unit_test(test_comments_whitespace_crlf),
        cmocka_unit_test(test_num_nodes_num_gpus),
        cmocka_unit_test(test_bare_host_wins),
        cmocka_unit_test(test_order_is_hostfile_order),
        cmocka_unit_test(test_filter_syntax_errors),
        cmocka_unit_test(test_ipv6_names),
        cmocka_unit_test(test_spares),
        cmocka_unit_test(test_local),
        cmocka_unit_test(test_load_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
