/* The agent's directory for its program ranks' error files: named after the job, the host
 * and the agent's pid, locked while its agent lives, and a new agent removes the
 * directories of this host's agents that are gone (an agent killed outright cannot), but
 * never one whose agent lives (its pid here, or its lock held from another pid namespace),
 * one that is not ours, or one another node made in a TMPDIR they share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "error_file.h"

static char tmp[] = "/tmp/ds_error_file_dir_XXXXXX";
static char host[80]; /* this machine's name, as the directories carry it */

/* A pid that no process has now: a child's, after it was reaped. */
static long gone_pid(void) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return (long)pid;
}

static void make_dir(const char *name, int with_file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    assert_int_equal(mkdir(path, 0700), 0);
    if (!with_file) return;
    snprintf(path, sizeof path, "%s/%s/rank-3.json", tmp, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"message\": \"x\"}", f);
    fclose(f);
}

static int exists(const char *name) {
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return stat(path, &st) == 0;
}

static void test_gone_agents_dirs_removed_live_and_foreign_kept(void **state) {
    (void)state;
    char stale[192], stale_empty[192], live[192], odd[192], other_node[192];
    snprintf(stale, sizeof stale, "dsrun-errors-train-7-%s-%ld-aB3dE9", host, gone_pid());
    snprintf(stale_empty, sizeof stale_empty, "dsrun-errors-job-%s-%ld-Zz0000", host, gone_pid());
    snprintf(live, sizeof live, "dsrun-errors-train-%s-%ld-qQ1234", host, (long)getppid());
    snprintf(odd, sizeof odd, "dsrun-errors-train-%s-%ld-qQ1234", host, gone_pid());
    /* another node's agent, alive there, with a pid that no process has here */
    snprintf(other_node, sizeof other_node, "dsrun-errors-train-x%s-%ld-rR5678", host, gone_pid());
    make_dir(stale, 1);
    make_dir(stale_empty, 0);
    make_dir(live, 1);
    make_dir(odd, 1);
    make_dir(other_node, 1);
    char keep[512]; /* a file that is not an error file keeps its directory */
    snprintf(keep, sizeof keep, "%s/%s/notes.txt", tmp, odd);
    FILE *f = fopen(keep, "w");
    assert_non_null(f);
    fclose(f);
    make_dir("dsrun-errors-unrelated", 0);

    ds_err err = {{0}};
    char *dir = NULL;
    int lock = -1;
    assert_int_equal(ds_error_file_dir("train", &dir, &lock, &err), 0);
    char want[256];
    snprintf(want, sizeof want, "%s/dsrun-errors-train-%s-%ld-", tmp, host, (long)getpid());
    assert_memory_equal(dir, want, strlen(want));
    assert_int_equal(strlen(dir), strlen(want) + 6);

    assert_false(exists(stale));
    assert_false(exists(stale_empty));
    assert_true(exists(live));
    assert_true(exists(odd));
    assert_true(exists(other_node));
    assert_true(exists("dsrun-errors-unrelated"));
    /* the directory is locked while its agent lives */
    int probe = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(probe >= 0);
    assert_int_equal(flock(probe, LOCK_EX | LOCK_NB), -1);
    close(probe);
    ds_error_file_remove_dir(dir);
    close(lock);
    free(dir);
}

/* An agent in another pid namespace on this host (a container sharing TMPDIR): its pid
 * names no process here, but it holds its directory's lock, so the directory stays until
 * the lock is gone. */
static void test_locked_dir_of_another_pid_namespace_kept(void **state) {
    (void)state;
    char other_ns[192], path[512];
    snprintf(other_ns, sizeof other_ns, "dsrun-errors-train-%s-%ld-nS0001", host, gone_pid());
    make_dir(other_ns, 1);
    snprintf(path, sizeof path, "%s/%s", tmp, other_ns);
    int held = open(path, O_RDONLY | O_DIRECTORY);
    assert_true(held >= 0);
    assert_int_equal(flock(held, LOCK_EX), 0);

    ds_err err = {{0}};
    char *dir = NULL;
    int lock = -1;
    assert_int_equal(ds_error_file_dir("train", &dir, &lock, &err), 0);
    assert_true(exists(other_ns));
    ds_error_file_remove_dir(dir);
    close(lock);
    free(dir);

    close(held); /* that agent is gone now */
    assert_int_equal(ds_error_file_dir("train", &dir, &lock, &err), 0);
    assert_false(exists(other_ns));
    ds_error_file_remove_dir(dir);
    close(lock);
    free(dir);
}

int main(void) {
    if (!mkdtemp(tmp)) return 1;
    if (gethostname(host, sizeof host - 1) != 0) return 1;
    setenv("TMPDIR", tmp, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gone_agents_dirs_removed_live_and_foreign_kept),
        cmocka_unit_test(test_locked_dir_of_another_pid_namespace_kept),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) rc = 1;
    return rc;
}
