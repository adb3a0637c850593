#include "failure_record.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_json.h"
#include "agent_proto.h" /* ds_write_all */

static int record_fd = -1;

void ds_failure_record_open(void) {
    const char *v = getenv("DS_ERROR_FD");
    if (!v || !v[0]) return;
    char *end;
    long fd = strtol(v, &end, 10);
    if (*end || fd < 3 || fd > 1 << 20 || fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0) return;
    record_fd = (int)fd;
    unsetenv("DS_ERROR_FD"); /* the script's children have no record to write */
}

void ds_failure_record_write(const ds_context *ctx, const char *kind, const char *message,
                             const char *traceback, int64_t at_ms, int transport) {
    int fd = record_fd;
    if (fd < 0) return;
    record_fd = -1; /* one record per rank: the first error is the one that ended it */
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_failure_json(&j, ctx->rank, ctx->host, at_ms, kind, transport, message, message ? strlen(message) : 0,
                    traceback, traceback ? strlen(traceback) : 0);
    /* Never block on it: a record that does not fit is lost, the exit still tells. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (!j.bad && ds_buf_unread(&j.text) <= DS_FAILURE_RECORD_MAX)
        ds_write_all(fd, ds_buf_head(&j.text), ds_buf_unread(&j.text));
    ds_buf_free(&j.text);
    close(fd);
}
