/* relay_opts: the SSH target a relay gets for each node arrives as the controller worked
 * it out (every hop, key file and known_hosts file, in order), and a target that cannot
 * travel (a newline in a value) or arrives malformed is an error, not a guess. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "relay_opts.h"

static void hop(ds_ssh_opts *o, const char *name, int port) {
    memset(o, 0, sizeof *o);
    o->name = strdup(name);
    o->host = strdup(name);
    o->user = strdup("root");
    o->port = port;
    o->use_agent = 1;
    o->check = DS_HOSTKEY_ACCEPT_NEW;
    o->timeout_ms = 5000;
    o->alive_interval_s = 5;
    o->nidentities = 2;
    o->identities = calloc(2, sizeof *o->identities);
    o->identities[0] = strdup("/keys/id_ed25519");
    o->identities[1] = strdup("/keys/other key");
    o->nknown = 1;
    o->known_hosts = calloc(1, sizeof *o->known_hosts);
    o->known_hosts[0] = strdup("/keys/known_hosts");
}

static void test_round_trip(void **state) {
    (void)state;
    ds_ssh_opts o, back;
    hop(&o, "node7", 2222);
    o.njumps = 1;
    o.jumps = calloc(1, sizeof *o.jumps);
    hop(&o.jumps[0], "bastion", 22);
    ds_buf b = {0};
    assert_int_equal(ds_relay_opts_put(&b, &o, "exec '/opt/ds/dsrun' agent --job 'j-1' --node 7"), 0);
    char *cmd = NULL;
    ds_err err = {""};
    assert_int_equal(ds_relay_opts_get((const char *)ds_buf_head(&b), ds_buf_unread(&b), &back, &cmd, &err), 0);
    assert_string_equal(cmd, "exec '/opt/ds/dsrun' agent --job 'j-1' --node 7");
    assert_string_equal(back.name, "node7");
    assert_string_equal(back.host, "node7");
    assert_string_equal(back.user, "root");
    assert_int_equal(back.port, 2222);
    assert_int_equal(back.use_agent, 1);
    assert_int_equal(back.check, DS_HOSTKEY_ACCEPT_NEW);
    assert_int_equal(back.timeout_ms, 5000);
    assert_int_equal(back.alive_interval_s, 5);
    assert_int_equal(back.nidentities, 2);
    assert_string_equal(back.identities[1], "/keys/other key");
    assert_int_equal(back.nknown, 1);
    assert_int_equal(back.njumps, 1);
    assert_string_equal(back.jumps[0].host, "bastion");
    assert_int_equal(back.jumps[0].port, 22);
    assert_int_equal(back.jumps[0].nidentities, 2);
    free(cmd);
    ds_ssh_opts_free(&back);
    ds_ssh_opts_free(&o);
    ds_buf_free(&b);
}

static void test_refused(void **state) {
    (void)state;
    ds_ssh_opts o, back;
    hop(&o, "node7", 22);
    free(o.identities[0]);
    o.identities[0] = strdup("/keys/evil\nport=1");
    ds_buf b = {0};
    assert_int_equal(ds_relay_opts_put(&b, &o, "exec x"), -1);
    ds_ssh_opts_free(&o);
    ds_buf_free(&b);
    char *cmd = NULL;
    ds_err err = {""};
    const char *bad[] = {"ssh\nhost=h\nbogus=1\ncommand=x", "ssh\nhost=h", "ssh\ncommand=x", "ssh\nno equals sign"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ds_relay_opts_get(bad[i], strlen(bad[i]), &back, &cmd, &err), -1);
        assert_null(cmd);
        assert_non_null(strstr(err.msg, "malformed SSH target"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip), cmocka_unit_test(test_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
