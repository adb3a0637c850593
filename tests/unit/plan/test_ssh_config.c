/* ~/.ssh/config as ssh reads it (Host patterns, first value wins, Include, Match), and how
 * a node is reached from it and the job spec's [ssh] (ssh_target): the spec wins for the
 * node, ProxyJump hops take the configuration, defaults fill the rest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "jobspec.h"
#include "ssh_config.h"
#include "ssh_target.h"

static char home[] = "/tmp/ds_ssh_config_XXXXXX";

static int setup(void **st) {
    (void)st;
    if (!mkdtemp(home)) return -1;
    setenv("HOME", home, 1);
    setenv("USER", "me", 1);
    char path[200];
    snprintf(path, sizeof path, "%s/.ssh", home);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/.ssh/config.d", home);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/.ssh/config.d/a.conf", home);
    FILE *f = fopen(path, "w");
    fputs("Host inc-*\n  Port 2201\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/.ssh/id_ecdsa", home);
    f = fopen(path, "w");
    fclose(f);
    return 0;
}

static int teardown(void **st) {
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
    return system(cmd);
}

static ds_ssh_config *parse(const char *text) {
    ds_err err = {""};
    ds_ssh_config *c = ds_ssh_config_parse("cfg", text, &err);
    if (!c) fail_msg("parse: %s", err.msg);
    return c;
}

static const char *CONFIG =
    "# the file's top: every host\n"
    "ConnectTimeout 7\n"
    "\n"
    "Host gpu-? !gpu-9\n"
    "    HostName 10.0.0.%h.example\n"
    "    User alice\n"
    "    IdentityFile ~/.ssh/id_gpu\n"
    "Host gpu-1\n"
    "    User bob\n" /* too late: gpu-? gave User first */
    "    Port 2222\n"
    "Host=\"bastion\"\n"
    "  HostName = jump.example\n"
    "  User nobody\n"
    "  ProxyJump none\n"
    "Host old\n"
    "  ProxyCommand nc %h %p\n"
    "Include config.d/*.conf\n"
    "Host *\n"
    "    IdentityFile \"~/.ssh/id two\"\n"
    "    StrictHostKeyChecking accept-new\n"
    "    UserKnownHostsFile ~/kh1 /etc/kh2\n"
    "    ServerAliveInterval 0\n"
    "    ProxyJump bastion\n";

static void test_lookup(void **st) {
    (void)st;
    ds_ssh_config *c = parse(CONFIG);
    ds_ssh_host h;
    ds_err err = {""};
    assert_int_equal(ds_ssh_config_lookup(c, "gpu-1", &h, &err), 0);
    assert_string_equal(h.hostname, "10.0.0.gpu-1.example");
    assert_string_equal(h.user, "alice");
    assert_int_equal(h.port, 2222);
    assert_int_equal(h.nidentity, 2); /* IdentityFile adds up */
    assert_string_equal(h.identity_files[0], "~/.ssh/id_gpu");
    assert_string_equal(h.identity_files[1], "~/.ssh/id two");
    assert_int_equal(h.connect_timeout_ms, 7000);
    assert_int_equal(h.strict, DS_HOSTKEY_ACCEPT_NEW);
    assert_int_equal(h.nknown, 2);
    assert_string_equal(h.known_hosts[1], "/etc/kh2");
    assert_int_equal(h.alive_interval_s, 0);
    assert_string_equal(h.proxy_jump, "bastion");
    assert_non_null(strstr(h.where, "cfg:5"));
    ds_ssh_host_free(&h);
    /* negated: gpu-9 is not gpu-?; case does not matter for names */
    assert_int_equal(ds_ssh_config_lookup(c, "GPU-9", &h, &err), 0);
    assert_null(h.hostname);
    assert_null(h.user);
    ds_ssh_host_free(&h);
    /* "ProxyJump none" given first wins over Host *'s */
    assert_int_equal(ds_ssh_config_lookup(c, "bastion", &h, &err), 0);
    assert_string_equal(h.hostname, "jump.example");
    assert_null(h.proxy_jump);
    ds_ssh_host_free(&h);
    /* the included file's Host block, and what follows the Include */
    assert_int_equal(ds_ssh_config_lookup(c, "inc-a", &h, &err), 0);
    assert_int_equal(h.port, 2201);
    assert_int_equal(h.strict, DS_HOSTKEY_ACCEPT_NEW);
    ds_ssh_host_free(&h);
    /* ProxyCommand: refused for the hosts it applies to, naming file:line */
    assert_int_equal(ds_ssh_config_lookup(c, "old", &h, &err), -1);
    assert_non_null(strstr(err.msg, "cfg:16: ProxyCommand is not supported by dslaunch"));
    assert_non_null(strstr(err.msg, "ProxyJump is supported"));
    assert_string_equal(ds_ssh_config_warnings(c), "");
    ds_ssh_config_free(c);
}

static void test_match(void **st) {
    (void)st;
    ds_ssh_config *c = parse("Host a\n  HostName real-a\n"
                             "Match host real-* !host real-b\n  Port 1001\n"
                             "Match originalhost a\n  User ua\n"
                             "Match exec \"true\"\n  Port 9\n"
                             "Match all\n  User everyone\n");
    ds_ssh_host h;
    ds_err err = {""};
    assert_int_equal(ds_ssh_config_lookup(c, "a", &h, &err), 0);
    assert_int_equal(h.port, 1001); /* Match host sees the HostName */
    assert_string_equal(h.user, "ua");
    ds_ssh_host_free(&h);
    assert_int_equal(ds_ssh_config_lookup(c, "other", &h, &err), 0);
    assert_int_equal(h.port, 0);
    assert_string_equal(h.user, "everyone");
    ds_ssh_host_free(&h);
    assert_non_null(strstr(ds_ssh_config_warnings(c), "cfg:7: Match exec is not supported by dslaunch: the block is skipped"));
    ds_ssh_config_free(c);
}

static void test_syntax_errors(void **st) {
    (void)st;
    static const char *const bad[][2] = {
        {"Host a\n  Port 0\n", "cfg:2: Port 0: expected a port, 1..65535"},
        {"Port 22x\n", "cfg:1: Port 22x: expected a port"},
        {"\n\nConnectTimeout soon\n", "cfg:3: ConnectTimeout soon: expected seconds"},
        {"StrictHostKeyChecking maybe\n", "cfg:1: StrictHostKeyChecking maybe: expected yes, accept-new"},
        {"IdentitiesOnly perhaps\n", "cfg:1: IdentitiesOnly perhaps: expected yes or no"},
        {"Host\n", "cfg:1: Host needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_err err = {""};
        assert_null(ds_ssh_config_parse("cfg", bad[i][0], &err));
        if (!strstr(err.msg, bad[i][1])) fail_msg("'%s' lacks '%s'", err.msg, bad[i][1]);
    }
    /* unknown keywords are ssh's business, not errors */
    ds_ssh_config_free(parse("ForwardAgent yes\nControlMaster auto\nCompression yes\n"));
    assert_int_equal(ds_ssh_pattern_match("a*,b?", "bc"), 1);
    assert_int_equal(ds_ssh_pattern_match("* !10.*", "10.1.2.3"), 0);
    assert_int_equal(ds_ssh_pattern_match("!x", "y"), 0); /* a negation alone matches nothing */
}

static void spec_of(ds_jobspec *s, const char *ssh_section) {
    char text[512];
    snprintf(text, sizeof text, "[job]\nname = t\nscript = s.lua\n[ssh]\n%s", ssh_section);
    ds_err err = {""};
    if (ds_jobspec_parse(s, "/j/job.ini", text, &err) != 0) fail_msg("%s", err.msg);
}

static void test_target(void **st) {
    (void)st;
    ds_ssh_config *c = parse(CONFIG);
    ds_jobspec spec;
    ds_ssh_opts o;
    ds_err err = {""};
    char want[300];

    /* the spec gives nothing: the configuration, then defaults; ProxyJump bastion */
    spec_of(&spec, "");
    assert_int_equal(ds_ssh_target(&spec, c, "gpu-1", &o, &err), 0);
    assert_string_equal(o.name, "gpu-1");
    assert_string_equal(o.host, "10.0.0.gpu-1.example");
    assert_int_equal(o.port, 2222);
    assert_string_equal(o.user, "alice");
    assert_int_equal(o.use_agent, 1);
    assert_int_equal(o.nidentities, 2);
    snprintf(want, sizeof want, "%s/.ssh/id two", home);
    assert_string_equal(o.identities[1], want);
    snprintf(want, sizeof want, "%s/kh1", home);
    assert_string_equal(o.known_hosts[0], want);
    assert_int_equal(o.check, DS_HOSTKEY_ACCEPT_NEW);
    assert_int_equal(o.timeout_ms, 7000);
    assert_int_equal(o.alive_interval_s, 0);
    assert_int_equal(o.njumps, 1);
    assert_string_equal(o.jumps[0].host, "jump.example");
    assert_string_equal(o.jumps[0].user, "nobody");
    assert_int_equal(o.jumps[0].port, 22);
    ds_ssh_opts_free(&o);
    ds_jobspec_free(&spec);

    /* the spec's keys win for the node, not for its ProxyJump hosts */
    spec_of(&spec, "user = root\nport = 2000\nidentity = /k/id\nknown_hosts = /k/kh\n"
                   "host_key_check = no\nconnect_timeout = 3\n");
    assert_int_equal(ds_ssh_target(&spec, c, "gpu-1", &o, &err), 0);
    assert_string_equal(o.user, "root");
    assert_int_equal(o.port, 2000);
    assert_int_equal(o.use_agent, 0);
    assert_int_equal(o.nidentities, 1);
    assert_string_equal(o.identities[0], "/k/id");
    assert_int_equal(o.nknown, 1);
    assert_string_equal(o.known_hosts[0], "/k/kh");
    assert_int_equal(o.check, DS_HOSTKEY_NO);
    assert_int_equal(o.timeout_ms, 3000);
    assert_string_equal(o.jumps[0].user, "nobody");
    assert_int_equal(o.jumps[0].check, DS_HOSTKEY_ACCEPT_NEW);
    ds_ssh_opts_free(&o);
    ds_jobspec_free(&spec);
    ds_ssh_config_free(c);

    /* nothing anywhere: ssh's defaults; the default keys that exist (only id_ecdsa here) */
    c = parse("");
    spec_of(&spec, "");
    assert_int_equal(ds_ssh_target(&spec, c, "n1", &o, &err), 0);
    assert_string_equal(o.host, "n1");
    assert_int_equal(o.port, 22);
    assert_string_equal(o.user, "me");
    assert_int_equal(o.use_agent, 1);
    assert_int_equal(o.nidentities, 1);
    snprintf(want, sizeof want, "%s/.ssh/id_ecdsa", home);
    assert_string_equal(o.identities[0], want);
    snprintf(want, sizeof want, "%s/.ssh/known_hosts", home);
    assert_string_equal(o.known_hosts[0], want);
    assert_int_equal(o.check, DS_HOSTKEY_YES);
    assert_int_equal(o.timeout_ms, 10000);
    assert_int_equal(o.alive_interval_s, 5);
    assert_int_equal(o.njumps, 0);
    ds_ssh_opts_free(&o);
    ds_jobspec_free(&spec);
    ds_ssh_config_free(c);
}

static void test_proxy_jump(void **st) {
    (void)st;
    ds_ssh_config *c = parse("Host n\n  ProxyJump u1@h1:2201,h2,[fe80::1]:23,u4@::1\n"
                             "Host h2\n  HostName 10.9.9.9\n  Port 2202\n  IdentitiesOnly yes\n"
                             "  IdentityFile %d/keys/%r@%h:%p\n"
                             "Host loop\n  ProxyJump hop\nHost hop\n  ProxyJump other\n"
                             "Host bad\n  ProxyJump u@h:99999\n");
    ds_jobspec spec;
    spec_of(&spec, "");
    ds_ssh_opts o;
    ds_err err = {""};
    char want[300];
    assert_int_equal(ds_ssh_target(&spec, c, "n", &o, &err), 0);
    assert_int_equal(o.njumps, 4);
    assert_string_equal(o.jumps[0].user, "u1");
    assert_string_equal(o.jumps[0].host, "h1");
    assert_int_equal(o.jumps[0].port, 2201);
    assert_string_equal(o.jumps[1].host, "10.9.9.9");
    assert_int_equal(o.jumps[1].port, 2202);
    assert_int_equal(o.jumps[1].use_agent, 0);
    snprintf(want, sizeof want, "%s/keys/me@10.9.9.9:2202", home);
    assert_string_equal(o.jumps[1].identities[0], want);
    assert_string_equal(o.jumps[2].host, "fe80::1");
    assert_int_equal(o.jumps[2].port, 23);
    assert_string_equal(o.jumps[3].user, "u4");
    assert_string_equal(o.jumps[3].host, "::1");
    assert_int_equal(o.jumps[3].port, 22);
    ds_ssh_opts_free(&o);
    assert_int_equal(ds_ssh_target(&spec, c, "loop", &o, &err), -1);
    assert_non_null(strstr(err.msg, "loop: ProxyJump hop hop has a ProxyJump of its own (other)"));
    assert_int_equal(ds_ssh_target(&spec, c, "bad", &o, &err), -1);
    assert_non_null(strstr(err.msg, "bad: ProxyJump hop 'u@h:99999': bad port"));
    ds_jobspec_free(&spec);
    ds_ssh_config_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_target),
        cmocka_unit_test(test_proxy_jump),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
