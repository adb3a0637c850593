/* The INI job spec: defaults, every key's validation, messages naming file:line:key;
 * and the command line (cli.c) that overrides it. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli.h"
#include "jobspec.h"

#define MIN "[job]\nname = t\nscript = s.lua\n"

/* Parses text as "/jobs/job.ini"; returns "" on success or the error message. */
static const char *parse(ds_jobspec *spec, const char *text) {
    static ds_err err;
    err.msg[0] = '\0';
    if (ds_jobspec_parse(spec, "/jobs/job.ini", text, &err) != 0) return err.msg;
    return "";
}

/* Parses, expects an error containing needle; frees nothing (a failed parse owns nothing). */
static void expect_err(const char *text, const char *needle) {
    ds_jobspec spec;
    const char *msg = parse(&spec, text);
    if (!*msg || !strstr(msg, needle)) {
        print_error("for:\n%s\nexpected an error containing '%s', got '%s'\n", text, needle, msg);
        if (!*msg) ds_jobspec_free(&spec);
        fail();
    }
}

static void test_defaults(void **st) {
    (void)st;
    ds_jobspec s;
    assert_string_equal(parse(&s, MIN), "");
    assert_string_equal(s.path, "/jobs/job.ini");
    assert_string_equal(s.name, "t");
    assert_string_equal(s.script, "s.lua");
    assert_int_equal(s.nargs, 0);
    assert_null(s.args[0]);
    assert_string_equal(s.workdir, "/jobs");
    assert_non_null(s.dsrun);
    assert_true(s.dsrun[0] == '/');
    assert_non_null(strstr(s.dsrun, "dsrun"));
    assert_null(s.hostfile);
    assert_null(s.include);
    assert_null(s.exclude);
    assert_int_equal(s.num_nodes, -1);
    assert_int_equal(s.num_gpus, -1);
    assert_int_equal(s.device, DS_DEVICE_AUTO);
    /* [ssh] unset: the ssh configuration's values, else the defaults (ssh_target.h) */
    assert_null(s.ssh_user);
    assert_int_equal(s.ssh_port, 0);
    assert_null(s.ssh_identity);
    assert_null(s.ssh_known_hosts);
    assert_int_equal(s.host_key_check, -1);
    assert_int_equal(s.ssh_connect_timeout_ms, 0);
    assert_null(s.ssh_config);
    assert_int_equal(s.ssh_force, 0);
    assert_int_equal(s.nenv, 0);
    assert_null(s.rdzv_addr);
    assert_int_equal(s.rdzv_port, 0);
    assert_int_equal(s.rdzv_timeout_ms, 300000);
    assert_int_equal(s.master_port, 0);
    assert_int_equal(s.max_restarts, 0);
    assert_int_equal(s.spares, 0);
    assert_int_equal(s.heartbeat_interval_ms, 5000);
    assert_int_equal(s.heartbeat_timeout_ms, 30000);
    assert_string_equal(s.log_dir, "logs");
    assert_string_equal(s.tee, "all");
    assert_int_equal(s.engine.zero, 0);
    assert_int_equal(s.engine.precision, 0); /* fp32 */
    assert_int_equal(s.engine.checkpoint, 0); /* none */
    assert_int_equal(s.engine.micro_batch, 1);
    assert_int_equal(s.engine.grad_accum, 1);
    assert_int_equal(s.engine.seed, 1234);
    assert_int_equal(s.engine.initial_scale_power, 16);
    assert_int_equal(s.engine.loss_scale_window, 1000);
    assert_int_equal(s.engine.hysteresis, 2);
    assert_int_equal(s.engine.min_loss_scale, 1);
    assert_int_equal(s.engine.reduce_bucket_size, 1 << 20);
    ds_jobspec_free(&s);
}

static void test_every_key(void **st) {
    (void)st;
    setenv("HOME", "/home/u", 1);
    const char *text =
        "; a full spec\n"
        "# comments both ways\n"
        "[job]\n"
        "name = gpt2-small_1.0\n"
        "script = train.lua\n"
        "args = --lr 3e-4 'two words' \"a \\\"q\\\"\" back\\ slash ''\n"
        "workdir = ../work\n"
        "dsrun = /opt/ds/bin/dsrun\n"
        "local_rank_arg = yes\n"
        "[resources]\n"
        "hostfile = hosts\n"
        "num_nodes = 2\n"
        "num_gpus = 8\n"
        "device = cuda\n"
        "[ssh]\n"
        "user = alice\n"
        "port = 2222\n"
        "identity = ~/.ssh/id_test\n"
        "known_hosts = kh\n"
        "host_key_check = accept-new\n"
        "connect_timeout = 2.5\n"
        "force = yes\n"
        "config = ssh_config\n"
        "[env]\n"
        "NCCL_DEBUG = INFO\n"
        "EMPTY =\n"
        "WITH_EQ = a=b\n"
        "[rendezvous]\n"
        "addr = 10.0.0.1\n"
        "port = 29400\n"
        "timeout = 60\n"
        "master_port = 29600\n"
        "[restart]\n"
        "max_restarts = 3\n"
        "spares = 1\n"
        "heartbeat_interval = 0.5\n"
        "heartbeat_timeout = 10\n"
        "[logs]\n"
        "dir = /var/log/ds\n"
        "tee = 0,2-3\n"
        "[engine]\n"
        "zero_stage = 3\n"
        "precision = bf16\n"
        "checkpointing = every:2\n"
        "micro_batch = 4\n"
        "grad_accum = 8\n"
        "seed = 9223372036854775807\n"
        "initial_scale_power = 12\n"
        "loss_scale_window = 500\n"
        "hysteresis = 1\n"
        "min_loss_scale = 4\n"
        "reduce_bucket_size = 500000\n";
    ds_jobspec s;
    assert_string_equal(parse(&s, text), "");
    assert_string_equal(s.name, "gpt2-small_1.0");
    assert_int_equal(s.nargs, 6);
    assert_string_equal(s.args[0], "--lr");
    assert_string_equal(s.args[1], "3e-4");
    assert_string_equal(s.args[2], "two words");
    assert_string_equal(s.args[3], "a \"q\"");
    assert_string_equal(s.args[4], "back slash");
    assert_string_equal(s.args[5], "");
    assert_null(s.args[6]);
    assert_string_equal(s.workdir, "/work");
    assert_string_equal(s.dsrun, "/opt/ds/bin/dsrun");
    assert_int_equal(s.local_rank_arg, 1);
    assert_string_equal(s.hostfile, "/jobs/hosts");
    assert_int_equal(s.num_nodes, 2);
    assert_int_equal(s.num_gpus, 8);
    assert_int_equal(s.device, DS_DEVICE_CUDA);
    assert_string_equal(s.ssh_user, "alice");
    assert_int_equal(s.ssh_port, 2222);
    assert_string_equal(s.ssh_identity, "/home/u/.ssh/id_test");
    assert_string_equal(s.ssh_known_hosts, "/jobs/kh");
    assert_int_equal(s.host_key_check, DS_HOSTKEY_ACCEPT_NEW);
    assert_int_equal(s.ssh_connect_timeout_ms, 2500);
    assert_int_equal(s.ssh_force, 1);
    assert_string_equal(s.ssh_config, "/jobs/ssh_config");
    assert_int_equal(s.nenv, 3);
    assert_string_equal(s.env[0].key, "NCCL_DEBUG");
    assert_string_equal(s.env[0].value, "INFO");
    assert_string_equal(s.env[1].value, "");
    assert_string_equal(s.env[2].value, "a=b");
    assert_string_equal(s.rdzv_addr, "10.0.0.1");
    assert_int_equal(s.rdzv_port, 29400);
    assert_int_equal(s.rdzv_timeout_ms, 60000);
    assert_int_equal(s.master_port, 29600);
    assert_int_equal(s.max_restarts, 3);
    assert_int_equal(s.spares, 1);
    assert_int_equal(s.heartbeat_interval_ms, 500);
    assert_int_equal(s.heartbeat_timeout_ms, 10000);
    assert_string_equal(s.log_dir, "/var/log/ds");
    assert_string_equal(s.tee, "0,2-3");
    assert_int_equal(s.engine.zero, 3);
    assert_int_equal(s.engine.precision, 1); /* bf16 */
    assert_int_equal(s.engine.checkpoint, 2); /* every:2 */
    assert_int_equal(s.engine.micro_batch, 4);
    assert_int_equal(s.engine.grad_accum, 8);
    assert_true(s.engine.seed == 9223372036854775807LL);
    assert_int_equal(s.engine.initial_scale_power, 12);
    assert_int_equal(s.engine.loss_scale_window, 500);
    assert_int_equal(s.engine.hysteresis, 1);
    assert_int_equal(s.engine.min_loss_scale, 4);
    assert_int_equal(s.engine.reduce_bucket_size, 500000);
    ds_jobspec_free(&s);
}

static void test_indent_and_inline_comment(void **st) {
    (void)st;
    ds_jobspec s;
    /* indented keys are keys (no multi-line continuation); " ;" starts a comment */
    assert_string_equal(parse(&s, "[job]\n  name = t\n\tscript = a.lua ; the script\n"
                                  "[engine]\n    zero_stage = 2\n"), "");
    assert_string_equal(s.script, "a.lua");
    assert_int_equal(s.engine.zero, 2);
    ds_jobspec_free(&s);
}

static void test_structure_errors(void **st) {
    (void)st;
    expect_err("[jbo]\nname = t\n", "/jobs/job.ini:1: [jbo]: unknown section");
    expect_err(MIN "[empty_unknown]\n", "/jobs/job.ini:4: [empty_unknown]: unknown section");
    expect_err(MIN "[job]\nnmae = x\n", "/jobs/job.ini:5: [job] nmae: unknown key (expected one of: name, script");
    expect_err("name = t\n" MIN, "/jobs/job.ini:1: name: key outside any section");
    expect_err(MIN "this is not ini\n", "/jobs/job.ini:4: syntax error");
    expect_err(MIN "[job\n", "/jobs/job.ini:4: syntax error");
    expect_err(MIN "name = u\n", "/jobs/job.ini:4: [job] name: given twice (first on line 2)");
    expect_err(MIN "[job]\nname = u\n", "/jobs/job.ini:5: [job] name: given twice");
    expect_err(MIN "[env]\nA = 1\nA = 2\n", "/jobs/job.ini:6: [env] A: given twice (first on line 5)");
    expect_err(MIN "[engine]\ndeepspeed_config = a.json\ndeepspeed_config = b.json\n",
               "/jobs/job.ini:6: [engine] deepspeed_config: given twice (first on line 5)");
    expect_err("", "/jobs/job.ini: [job] name: required key missing (there is no [job] section)");
    expect_err("[job]\nname = t\n", "/jobs/job.ini:1: [job] script: required key missing (or command)");
    expect_err("[job]\nscript = s\n", "/jobs/job.ini:1: [job] name: required key missing");
    /* the first error wins, whichever kind it is */
    expect_err(MIN "zero = 1\n[bad]\n", "/jobs/job.ini:4: [job] zero: unknown key");
    expect_err(MIN "oops\n[engine]\nzero_stage = 9\n", "/jobs/job.ini:4: syntax error");
    char longline[400];
    snprintf(longline, sizeof longline, MIN "args = %0300d\n", 1);
    expect_err(longline, "/jobs/job.ini:4: line longer than");
}

static void test_value_errors(void **st) {
    (void)st;
    expect_err("[job]\nname = a b\nscript = s\n", ":2: [job] name: 'a b': expected a name");
    expect_err("[job]\nname = ..\nscript = s\n", ":2: [job] name:");
    expect_err("[job]\nname = t\nscript =\n", ":3: [job] script: empty value");
    expect_err(MIN "args = 'open\n", ":4: [job] args: unterminated quote");
    expect_err(MIN "args = \"open\n", ":4: [job] args: unterminated quote");
    expect_err(MIN "args = trailing\\\n", ":4: [job] args: a trailing backslash");
    expect_err(MIN "dsrun = bin/dsrun\n", ":4: [job] dsrun: 'bin/dsrun': expected an absolute path");
    expect_err(MIN "[resources]\nnum_nodes = 0\n", ":5: [resources] num_nodes: 0 is out of range; expected an integer in 1..100000");
    expect_err(MIN "[resources]\nnum_gpus = two\n", ":5: [resources] num_gpus: 'two' is not an integer");
    expect_err(MIN "[resources]\nnum_gpus = 2.0\n", "is not an integer");
    expect_err(MIN "[resources]\nnum_gpus = 99999999999999999999999\n", "out of range");
    expect_err(MIN "[resources]\ndevice = tpu\n", ":5: [resources] device: 'tpu': expected one of auto|cpu|cuda");
    expect_err(MIN "[resources]\ninclude = a\nexclude = b\n", ":6: [resources] include and exclude are mutually exclusive");
    expect_err(MIN "[resources]\nnum_gpus = 1\ninclude = a\n", ":5: [resources] num_nodes/num_gpus cannot be combined");
    expect_err(MIN "[ssh]\nport = 0\n", ":5: [ssh] port: 0 is out of range; expected an integer in 1..65535");
    expect_err(MIN "[ssh]\nport = 65536\n", "out of range");
    expect_err(MIN "[ssh]\nport = -22\n", "out of range");
    expect_err(MIN "[ssh]\nhost_key_check = maybe\n", "expected one of yes|accept-new|no");
    expect_err(MIN "[ssh]\nconnect_timeout = 0\n", ":5: [ssh] connect_timeout: 0 is out of range");
    expect_err(MIN "[ssh]\nconnect_timeout = 1.2345\n", "expected seconds (up to 3 decimals)");
    expect_err(MIN "[ssh]\nconnect_timeout = 1s\n", "expected seconds");
    expect_err(MIN "[ssh]\nconnect_timeout = .5\n", "expected seconds");
    expect_err(MIN "[ssh]\nforce = maybe\n", ":5: [ssh] force: 'maybe': expected true or false");
    expect_err(MIN "[env]\n1BAD = x\n", ":5: [env] 1BAD: not a valid environment variable name");
    expect_err(MIN "[env]\nA-B = x\n", "not a valid environment variable name");
    expect_err(MIN "[env]\nRANK = 3\n", ":5: [env] RANK: set by dslaunch");
    expect_err(MIN "[env]\nCUDA_VISIBLE_DEVICES = 0\n", "set by dslaunch");
    expect_err(MIN "[rendezvous]\nport = 70000\n", "in 0..65535");
    expect_err(MIN "[rendezvous]\ntimeout = 100000\n", "out of range");
    expect_err(MIN "[restart]\nmax_restarts = -1\n", "out of range");
    expect_err(MIN "[restart]\nheartbeat_interval = 10\nheartbeat_timeout = 5\n",
               ":6: [restart] heartbeat_timeout (5 s) must be longer than heartbeat_interval (10 s)");
    expect_err(MIN "[restart]\nheartbeat_interval = 40\n", ":5: [restart] heartbeat_timeout (30 s)");
    expect_err(MIN "[logs]\ntee = 3-1\n", ":5: [logs] tee: '3-1': range 3-1 runs backwards");
    expect_err(MIN "[logs]\ntee = 0,,1\n", "[logs] tee: '0,,1': expected all, none");
    expect_err(MIN "[logs]\ntee = some\n", "expected all, none");
    expect_err(MIN "[logs]\ndir =\n", ":5: [logs] dir: empty value, expected a path");
    expect_err(MIN "[engine]\nzero_stage = 4\n", ":5: [engine] zero_stage: 4 is out of range; expected an integer in 0..3");
    expect_err(MIN "[engine]\ninitial_scale_power = 63\n", ":5: [engine] initial_scale_power: 63 is out of range");
    expect_err(MIN "[engine]\nhysteresis = 0\n", ":5: [engine] hysteresis: 0 is out of range");
    expect_err(MIN "[engine]\nreduce_bucket_size = 0\n", ":5: [engine] reduce_bucket_size: 0 is out of range");
    expect_err(MIN "[engine]\nloss_scale_window = 0\n", "[engine] loss_scale_window: 0 is out of range");
    expect_err(MIN "[engine]\nmin_loss_scale = 0.5\n", ":5: [engine] min_loss_scale: ");
    expect_err(MIN "[engine]\ninitial_scale_power = 2\nmin_loss_scale = 8\n",
               ":6: [engine] min_loss_scale (8) is above the initial scale 2^2");
    expect_err(MIN "[engine]\nprecision = fp8\n", "expected one of fp32|bf16|fp16");
    expect_err(MIN "[engine]\ncheckpointing = every:0\n", "expected none, full or every:N");
    expect_err(MIN "[engine]\ncheckpointing = every:\n", "expected none, full or every:N");
    expect_err(MIN "[engine]\ncheckpointing = some\n", "expected none, full or every:N");
    expect_err(MIN "[engine]\nmicro_batch = 0\n", "out of range");
    expect_err(MIN "[engine]\ngrad_accum = 0\n", "out of range");
    expect_err(MIN "[engine]\nseed = -1\n", "out of range");
    expect_err(MIN "[engine]\nseed = 9223372036854775808\n", "out of range");
}

static void test_tee(void **st) {
    (void)st;
    ds_err err;
    assert_int_equal(ds_tee_check("all", &err), 0);
    assert_int_equal(ds_tee_check("none", &err), 0);
    assert_int_equal(ds_tee_check("0,2-3,7", &err), 0);
    assert_int_equal(ds_tee_check("", &err), -1);
    assert_int_equal(ds_tee_check("1-", &err), -1);
    assert_int_equal(ds_tee_check("-1", &err), -1);
    assert_int_equal(ds_tee_check("1,", &err), -1);
    assert_int_equal(ds_tee_check("1-2-3", &err), -1);
    assert_true(ds_tee_selects("all", 5));
    assert_false(ds_tee_selects("none", 0));
    assert_true(ds_tee_selects("0,2-3,7", 0));
    assert_false(ds_tee_selects("0,2-3,7", 1));
    assert_true(ds_tee_selects("0,2-3,7", 2));
    assert_true(ds_tee_selects("0,2-3,7", 3));
    assert_false(ds_tee_selects("0,2-3,7", 4));
    assert_true(ds_tee_selects("0,2-3,7", 7));
}

static void test_load_file(void **st) {
    (void)st;
    char dir[] = "/tmp/ds_jobspec_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/job.ini", dir);
    FILE *f = fopen(path, "w");
    fputs("\xEF\xBB\xBF[job]\r\nname = t\r\nscript = s.lua\r\n[resources]\r\nhostfile = h\r\n", f);
    fclose(f);
    ds_jobspec s;
    ds_err err;
    assert_int_equal(ds_jobspec_load(&s, path, &err), 0);
    assert_string_equal(s.script, "s.lua");
    assert_string_equal(s.workdir, dir);
    char hf[300];
    snprintf(hf, sizeof hf, "%s/h", dir);
    assert_string_equal(s.hostfile, hf);
    ds_jobspec_free(&s);
    unlink(path);
    assert_int_equal(ds_jobspec_load(&s, path, &err), -1);
    assert_non_null(strstr(err.msg, "cannot open the job spec"));
    assert_int_equal(ds_jobspec_load(&s, dir, &err), -1);
    rmdir(dir);
}

/* ---- command line ---- */

/* argv outlives the call (ds_cli points into it), until the next call. */
static int cli(ds_cli *c, ds_err *err, ...) {
    static char *argv[32];
    memset(argv, 0, sizeof argv);
    argv[0] = "dslaunch";
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
    va_end(ap);
    return ds_cli_parse(c, argc, argv, err);
}

static void test_cli(void **st) {
    (void)st;
    ds_cli c;
    ds_err err;
    assert_int_equal(cli(&c, &err, "job.ini", NULL), 0);
    assert_string_equal(c.job, "job.ini");
    assert_int_equal(c.num_nodes, -1);
    assert_int_equal(c.num_gpus, -1);
    assert_int_equal(c.dry_run, 0);
    assert_int_equal(cli(&c, &err, "--hostfile", "h", "--include=a@b:1", "--num_nodes", "2",
                         "job.ini", "--dry-run", "--master_addr", "10.0.0.1", "--master_port=1234",
                         "--tee", "0,2-3", "--log_dir", "L", "--force_ssh", "--num_gpus=3", NULL), 0);
    assert_string_equal(c.hostfile, "h");
    assert_string_equal(c.include, "a@b:1");
    assert_int_equal(c.num_nodes, 2);
    assert_int_equal(c.num_gpus, 3);
    assert_string_equal(c.master_addr, "10.0.0.1");
    assert_int_equal(c.master_port, 1234);
    assert_string_equal(c.tee, "0,2-3");
    assert_string_equal(c.log_dir, "L");
    assert_int_equal(c.force_ssh, 1);
    assert_int_equal(c.dry_run, 1);
    assert_string_equal(c.job, "job.ini");
    assert_int_equal(cli(&c, &err, "-H", "h", "-e", "x", "-ij", "--", "-job.ini", NULL), 0);
    assert_string_equal(c.exclude, "x");
    assert_string_equal(c.include, "j");
    assert_string_equal(c.job, "-job.ini");
    assert_int_equal(cli(&c, &err, "--help", NULL), 0);
    assert_int_equal(c.help, 1);
    assert_int_equal(cli(&c, &err, "-V", NULL), 0);
    assert_int_equal(c.version, 1);

    assert_int_equal(cli(&c, &err, NULL), -1);
    assert_string_equal(err.msg, "no job spec or program given");
    assert_int_equal(cli(&c, &err, "a.ini", "b.ini", NULL), -1);
    assert_string_equal(err.msg, "'b.ini': only one job spec may be given");
    assert_int_equal(cli(&c, &err, "--bogus", "a.ini", NULL), -1);
    assert_string_equal(err.msg, "unknown option '--bogus'");
    assert_int_equal(cli(&c, &err, "a.ini", "--hostfile", NULL), -1);
    assert_string_equal(err.msg, "--hostfile needs a value");
    assert_int_equal(cli(&c, &err, "a.ini", "--num_nodes", "x", NULL), -1);
    assert_string_equal(err.msg, "--num_nodes 'x': expected an integer");
    assert_int_equal(cli(&c, &err, "a.ini", "--num_gpus=0", NULL), -1);
    assert_string_equal(err.msg, "--num_gpus 0: expected 1..4096");
    assert_int_equal(cli(&c, &err, "a.ini", "--master_port", "70000", NULL), -1);
    assert_int_equal(cli(&c, &err, "a.ini", "--dry-run=yes", NULL), -1);
    assert_string_equal(err.msg, "--dry-run takes no value");
    assert_int_equal(cli(&c, &err, "a.ini", "--tee", "x", NULL), -1);
    assert_non_null(strstr(err.msg, "--tee: 'x': expected all, none"));
    assert_int_equal(cli(&c, &err, "a.ini", "--include=", NULL), -1);
    assert_string_equal(err.msg, "--include: empty value");
}

/* torchrun's shape: the first positional argument not ending in .ini is the program and
 * everything after it is its own; after a spec, `--` starts the arguments. */
static void test_cli_program_and_args(void **st) {
    (void)st;
    ds_cli c;
    ds_err err;
    assert_int_equal(cli(&c, &err, "--hostfile", "h", "train.py", "--lr", "3e-4", "--hostfile", "x", NULL), 0);
    assert_null(c.job);
    assert_string_equal(c.program, "train.py");
    assert_string_equal(c.hostfile, "h");
    assert_int_equal(c.nargs, 4);
    assert_string_equal(c.args[0], "--lr");
    assert_string_equal(c.args[3], "x");
    assert_null(c.args[4]);
    assert_int_equal(cli(&c, &err, "run.sh", NULL), 0);
    assert_string_equal(c.program, "run.sh");
    assert_int_equal(c.nargs, 0);
    assert_int_equal(cli(&c, &err, "job.ini", "--dry-run", "--", "steps=5", "--lr", NULL), 0);
    assert_string_equal(c.job, "job.ini");
    assert_null(c.program);
    assert_int_equal(c.dry_run, 1);
    assert_int_equal(c.nargs, 2);
    assert_string_equal(c.args[0], "steps=5");
    assert_string_equal(c.args[1], "--lr");
    assert_int_equal(cli(&c, &err, "job.ini", NULL), 0);
    assert_null(c.args); /* none given: the spec's stay */
    assert_int_equal(cli(&c, &err, "job.ini", "--", NULL), 0);
    assert_non_null(c.args); /* given, and empty */
    assert_int_equal(c.nargs, 0);
    assert_int_equal(cli(&c, &err, "--", "job.ini", "a", NULL), 0);
    assert_string_equal(c.job, "job.ini");
    assert_int_equal(c.nargs, 1);
    assert_int_equal(cli(&c, &err, "job.ini", "steps=5", NULL), -1);
    assert_string_equal(err.msg, "'steps=5': with a job spec, the program's arguments come after "
                                 "`--` (dslaunch [options] job.ini -- ARGS...)");
    assert_int_equal(cli(&c, &err, "--set", "engine.zero_stage=2", "--set=job.name=x", "job.ini", NULL), 0);
    assert_int_equal(c.nsets, 2);
    assert_string_equal(c.sets[0], "engine.zero_stage=2");
    assert_string_equal(c.sets[1], "job.name=x");
    assert_int_equal(cli(&c, &err, "--set", "", "job.ini", NULL), -1);
    assert_string_equal(err.msg, "--set: empty value");
}

/* ds_cli_job: a spec or a program, then --set, the arguments and the options. */
static void test_cli_job(void **st) {
    (void)st;
    char dir[] = "/tmp/ds_clijob_XXXXXX", cwd[512], path[300];
    assert_non_null(mkdtemp(dir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    FILE *f = fopen("job.ini", "w");
    fputs("[job]\nname = t\nscript = s.lua\nargs = a b\n[engine]\nzero_stage = 1\n"
          "[env]\nA = 1\nB = 2\n", f);
    fclose(f);
    ds_cli c;
    ds_jobspec s;
    ds_err err;

    /* a program alone: named after it, this directory as workdir, its arguments */
    assert_int_equal(cli(&c, &err, "-H", "hosts", "dir/my train.v2.py", "--lr", "3", NULL), 0);
    assert_int_equal(ds_cli_job(&c, &s, &err), 0);
    assert_string_equal(s.name, "my_train");
    assert_string_equal(s.script, "dir/my train.v2.py");
    assert_false(ds_jobspec_is_lua(&s));
    assert_int_equal(s.nargs, 2);
    assert_string_equal(s.args[1], "3");
    assert_null(s.path);
    snprintf(path, sizeof path, "%s/hosts", dir);
    assert_string_equal(s.hostfile, path);
    assert_string_equal(s.workdir, dir);
    ds_jobspec_free(&s);

    /* a spec, overridden: --set (files' keys replaced, [env] too), then `--` args */
    assert_int_equal(cli(&c, &err, "job.ini", "--set", "engine.zero_stage=3", "--set",
                         "env.A=x", "--set", "env.C=3", "--set", "resources.hostfile=h2", "--",
                         "steps=5", NULL), 0);
    assert_int_equal(ds_cli_job(&c, &s, &err), 0);
    assert_true(ds_jobspec_is_lua(&s));
    assert_int_equal(s.engine.zero, 3);
    assert_int_equal(s.nargs, 1);
    assert_string_equal(s.args[0], "steps=5");
    assert_int_equal(s.nenv, 3);
    assert_string_equal(s.env[0].key, "B");
    assert_string_equal(s.env[1].key, "A");
    assert_string_equal(s.env[1].value, "x");
    assert_string_equal(s.env[2].value, "3");
    snprintf(path, sizeof path, "%s/h2", dir); /* relative to the current directory */
    assert_string_equal(s.hostfile, path);
    ds_jobspec_free(&s);

    /* `--` with nothing after it clears the spec's arguments; command replaces both */
    assert_int_equal(cli(&c, &err, "job.ini", "--", NULL), 0);
    assert_int_equal(ds_cli_job(&c, &s, &err), 0);
    assert_int_equal(s.nargs, 0);
    ds_jobspec_free(&s);
    assert_int_equal(cli(&c, &err, "--set", "job.command=python3 -u t.py 'a b'", "job.ini", NULL), 0);
    assert_int_equal(ds_cli_job(&c, &s, &err), 0);
    assert_string_equal(s.script, "python3");
    assert_int_equal(s.nargs, 3);
    assert_string_equal(s.args[2], "a b");
    ds_jobspec_free(&s);

    /* errors name the --set and say what was expected, as for a line of the file */
    static const char *const bad[][2] = {
        {"engine.zero=5", "--set engine.zero=5: [engine] zero: unknown key (expected one of: zero_stage"},
        {"engine.zero_stage=5", "--set engine.zero_stage=5: [engine] zero_stage: 5 is out of range; expected an integer in 0..3"},
        {"engin.zero_stage=1", "--set engin.zero_stage=1: [engin]: unknown section"},
        {"zero_stage=1", "--set zero_stage=1: expected SECTION.KEY=VALUE"},
        {"engine.zero_stage", "--set engine.zero_stage: expected SECTION.KEY=VALUE"},
        {"env.RANK=3", "--set env.RANK=3: [env] RANK: set by dslaunch"},
        {"job.interpreter=python3", "--set: [job] interpreter: s.lua is a Lua script"},
        {"resources.include=a", "--set: [resources] include and exclude are mutually exclusive"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *extra = i == 7 ? "resources.exclude=b" : "engine.seed=1";
        assert_int_equal(cli(&c, &err, "job.ini", "--set", bad[i][0], "--set", extra, NULL), 0);
        assert_int_equal(ds_cli_job(&c, &s, &err), -1);
        if (!strstr(err.msg, bad[i][1])) fail_msg("--set %s: '%s' lacks '%s'", bad[i][0], err.msg, bad[i][1]);
    }
    assert_int_equal(chdir(cwd), 0);
    unlink(strcat(strcpy(path, dir), "/job.ini"));
    rmdir(dir);
}

static void test_command_and_interpreter(void **st) {
    (void)st;
    ds_jobspec s;
    assert_string_equal(parse(&s, "[job]\nname = t\ncommand = python3 -u train.py --lr 3e-4\n"), "");
    assert_string_equal(s.script, "python3");
    assert_int_equal(s.nargs, 4);
    assert_string_equal(s.args[0], "-u");
    assert_string_equal(s.args[3], "3e-4");
    assert_null(s.args[4]);
    assert_int_equal(s.ninterp, 0);
    ds_jobspec_free(&s);
    assert_string_equal(parse(&s, "[job]\nname = t\nscript = train.py\ninterpreter = python3 -u\n"), "");
    assert_int_equal(s.ninterp, 2);
    assert_string_equal(s.interpreter[0], "python3");
    assert_string_equal(s.interpreter[1], "-u");
    assert_false(ds_jobspec_is_lua(&s));
    ds_jobspec_free(&s);
    expect_err("[job]\nname = t\ncommand = a.py\nscript = b.py\n",
               ":4: [job] command names the program and its arguments: give it, or script and args, not both");
    expect_err("[job]\nname = t\nargs = x\ncommand = a.py\n", ":4: [job] command names");
    expect_err("[job]\nname = t\ncommand = ''\n", ":3: [job] command: empty value");
    expect_err("[job]\nname = t\ncommand = 'open\n", ":3: [job] command: unterminated quote");
    expect_err("[job]\nname = t\nscript = s.lua\ninterpreter = lua\n",
               ":4: [job] interpreter: s.lua is a Lua script");
    expect_err("[job]\nname = t\n", ":1: [job] script: required key missing (or command)");
}

static void test_cli_apply(void **st) {
    (void)st;
    ds_jobspec s;
    ds_cli c;
    ds_err err;
    assert_string_equal(parse(&s, MIN "[resources]\nhostfile = /h\nnum_nodes = 4\n[logs]\ntee = none\n"), "");
    assert_int_equal(cli(&c, &err, "job.ini", "--hostfile", "rel/hosts", "--num_nodes", "2",
                         "--master_addr", "m", "--master_port", "1000", "--tee", "1",
                         "--log_dir", "/abs/logs", "--force_ssh", "--local_rank_arg", NULL), 0);
    assert_int_equal(ds_cli_apply(&c, &s, &err), 0);
    assert_int_equal(s.local_rank_arg, 1);
    char cwd[512], want[600];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "%s/rel/hosts", cwd);
    assert_string_equal(s.hostfile, want);
    assert_int_equal(s.num_nodes, 2);
    assert_string_equal(s.rdzv_addr, "m");
    assert_int_equal(s.master_port, 1000);
    assert_string_equal(s.tee, "1");
    assert_string_equal(s.log_dir, "/abs/logs");
    assert_int_equal(s.ssh_force, 1);
    ds_jobspec_free(&s);
    /* no option given: the spec is untouched */
    assert_string_equal(parse(&s, MIN "[resources]\nnum_gpus = 2\n"), "");
    assert_int_equal(cli(&c, &err, "job.ini", NULL), 0);
    assert_int_equal(ds_cli_apply(&c, &s, &err), 0);
    assert_int_equal(s.num_gpus, 2);
    assert_string_equal(s.tee, "all");
    ds_jobspec_free(&s);
    /* the selection is overridden as a whole: no clash between the two sources */
    assert_string_equal(parse(&s, MIN "[resources]\nnum_gpus = 2\nnum_nodes = 1\n"), "");
    assert_int_equal(cli(&c, &err, "job.ini", "--exclude", "h:1", NULL), 0);
    assert_int_equal(ds_cli_apply(&c, &s, &err), 0);
    assert_int_equal(s.num_gpus, -1);
    assert_int_equal(s.num_nodes, -1);
    assert_string_equal(s.exclude, "h:1");
    ds_jobspec_free(&s);
    assert_string_equal(parse(&s, MIN "[resources]\ninclude = h\n"), "");
    assert_int_equal(cli(&c, &err, "job.ini", "--num_gpus", "1", NULL), 0);
    assert_int_equal(ds_cli_apply(&c, &s, &err), 0);
    assert_null(s.include);
    assert_int_equal(s.num_gpus, 1);
    ds_jobspec_free(&s);
}

/* [restart]'s supervision keys: defaults, values, and what is refused. */
/* [launch] relay_threshold / relay_fanout (docs/scale.md#relays): relays past 256 nodes
 * by default, 0 turns them off, the fanout is ⌈√N⌉ unless given. */
static void test_relay_keys(void **st) {
    (void)st;
    ds_jobspec s;
    assert_string_equal(parse(&s, MIN), "");
    assert_int_equal(s.relay_threshold, 256);
    assert_int_equal(s.relay_fanout, 0);
    ds_jobspec_free(&s);
    assert_string_equal(parse(&s, MIN "[launch]\nrelay_threshold = 0\nrelay_fanout = 16\n"), "");
    assert_int_equal(s.relay_threshold, 0);
    assert_int_equal(s.relay_fanout, 16);
    ds_jobspec_free(&s);
    expect_err(MIN "[launch]\nrelay_threshold = -1\n", ":5: [launch] relay_threshold: -1 is out of range; expected an integer in 0..1000000");
    expect_err(MIN "[launch]\nrelay_fanout = many\n", ":5: [launch] relay_fanout: 'many' is not an integer");
}

static void test_restart_keys(void **st) {
    (void)st;
    ds_jobspec s;
    assert_string_equal(parse(&s, MIN), "");
    assert_int_equal(s.backoff_ms, 1000);
    assert_int_equal(s.backoff_max_ms, 60000);
    assert_int_equal(s.drain_signals, 1 << SIGTERM | 1 << SIGUSR1 | 1 << SIGUSR2);
    assert_int_equal(s.drain_timeout_ms, 120000);
    ds_jobspec_free(&s);
    assert_string_equal(parse(&s, MIN "[restart]\nbackoff = 0\nbackoff_max = 2.5\ndrain_signals = SIGUSR1, HUP\n"
                                      "drain_timeout = 30\n"), "");
    assert_int_equal(s.backoff_ms, 0);
    assert_int_equal(s.backoff_max_ms, 2500);
    assert_int_equal(s.drain_signals, 1 << SIGUSR1 | 1 << SIGHUP);
    assert_int_equal(s.drain_timeout_ms, 30000);
    ds_jobspec_free(&s);
    assert_string_equal(parse(&s, MIN "[restart]\ndrain_signals = none\n"), "");
    assert_int_equal(s.drain_signals, 0);
    ds_jobspec_free(&s);
    expect_err(MIN "[restart]\ndrain_signals = KILL\n", ":5: [restart] drain_signals: 'KILL': expected none, or signal names");
    expect_err(MIN "[restart]\ndrain_signals = ,\n", "drain_signals");
    expect_err(MIN "[restart]\ndrain_timeout = 0\n", "out of range");
    /* [logs] and [checkpoint] mode: private by default; octal, the owner keeps rwx */
    assert_string_equal(parse(&s, MIN), "");
    assert_int_equal(s.log_mode, 0700);
    assert_int_equal(s.ckpt_mode, 0700);
    assert_int_equal(s.hang_timeout_ms, 0);
    assert_int_equal(s.node_retries, 2);
    assert_int_equal(s.min_nodes, 0);
    assert_null(s.webhook);
    ds_jobspec_free(&s);
    assert_string_equal(parse(&s, MIN "[logs]\nmode = 0750\n[checkpoint]\nmode = 0777\n[notify]\nwebhook = https://h/x\n"), "");
    assert_int_equal(s.log_mode, 0750);
    assert_int_equal(s.ckpt_mode, 0777);
    assert_string_equal(s.webhook, "https://h/x");
    ds_jobspec_free(&s);
    expect_err(MIN "[logs]\nmode = 0644\n", ":5: [logs] mode: '0644': expected octal permission bits");
    expect_err(MIN "[checkpoint]\nmode = 750\n", "expected octal");
    expect_err(MIN "[checkpoint]\nmode = 0758\n", "expected octal");
    expect_err(MIN "[notify]\nwebhook = ftp://h/x\n", "expected an http:// or https:// URL");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart_keys),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_indent_and_inline_comment),
        cmocka_unit_test(test_structure_errors),
        cmocka_unit_test(test_value_errors),
        cmocka_unit_test(test_tee),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_cli_program_and_args),
        cmocka_unit_test(test_cli_job),
        cmocka_unit_test(test_command_and_interpreter),
        cmocka_unit_test(test_cli_apply),
        cmocka_unit_test(test_relay_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
