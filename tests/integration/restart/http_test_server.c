/* A minimal HTTP/1.1 server for the webhook and URL-script tests, on 127.0.0.1 only.
 *   http_test_server DIR   prints its port, then serves until stdin closes (at most 300 s):
 *     GET /NAME     DIR/NAME (404 when missing)
 *     POST /ANY     appends the body and a newline to DIR/posts.jsonl, answers 200
 * One connection at a time, each closed after its answer: enough for a test. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static void answer(int c, int code, const char *body, size_t len) {
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", code,
                     code == 200 ? "OK" : "Not Found", len);
    if (write(c, head, (size_t)n) != n || (len && write(c, body, len) != (ssize_t)len)) perror("write");
}

static void serve(int c, const char *dir) {
    char req[1 << 16];
    size_t have = 0;
    char *end = NULL;
    while (!end && have < sizeof req - 1) { /* the head */
        ssize_t r = read(c, req + have, sizeof req - 1 - have);
        if (r <= 0) return;
        have += (size_t)r;
        req[have] = 0;
        end = strstr(req, "\r\n\r\n");
    }
    if (!end) return;
    char method[8], path[512];
    if (sscanf(req, "%7s %511s", method, path) != 2) return;
    if (!strcmp(method, "POST")) {
        size_t want = 0;
        for (char *l = strstr(req, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n"))
            if (!strncasecmp(l + 2, "Content-Length:", 15)) want = strtoul(l + 17, NULL, 10);
        size_t body = (size_t)(end + 4 - req);
        while (have - body < want && have < sizeof req - 1) {
            ssize_t r = read(c, req + have, sizeof req - 1 - have);
            if (r <= 0) return;
            have += (size_t)r;
        }
        char file[1024];
        snprintf(file, sizeof file, "%s/posts.jsonl", dir);
        FILE *f = fopen(file, "a");
        if (f) {
            fwrite(req + body, 1, want, f);
            fputc('\n', f);
            fclose(f);
        }
        answer(c, 200, "", 0);
        return;
    }
    char file[1024];
    snprintf(file, sizeof file, "%s/%s", dir, strstr(path, "..") ? "-" : path + 1);
    FILE *f = fopen(file, "rb");
    if (!f) {
        answer(c, 404, "", 0);
        return;
    }
    static char data[1 << 22];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    answer(c, 200, data, n);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: http_test_server DIR\n");
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
        perror("http_test_server");
        return 1;
    }
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    printf("%d\n", ntohs(sa.sin_port));
    fflush(stdout);
    for (;;) {
        struct pollfd p[2] = {{.fd = 0, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
        if (poll(p, 2, 300000) <= 0 || p[0].revents) return 0;
        int c = accept(fd, NULL, NULL);
        if (c < 0) continue;
        serve(c, argv[1]);
        close(c);
    }
}
