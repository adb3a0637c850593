#include "ds_mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int ds_mapfile_open(ds_mapfile *m, const char *path, const char *what, ds_err *err) {
    m->data = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ds_err_errno(err, errno, "%s: cannot open%s%s", path, what ? " " : "",
                            what ? what : "");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ds_err_errno(err, e, "%s: stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ds_err_set(err, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    if (len > 0) {
        void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ds_err_errno(err, e, "%s: mmap", path);
        }
        m->data = map;
        m->len = len;
    }
    close(fd);
    return 0;
}

void ds_mapfile_close(ds_mapfile *m) {
    if (m->data) munmap(m->data, m->len);
    m->data = NULL;
    m->len = 0;
}
