/* libFuzzer: the rendezvous store server (launcher/store_server.c) on arbitrary bytes from
 * the network. A server runs in this process on loopback for the whole session; each
 * input is one connection that sends its bytes (after a valid AUTH frame when the first
 * byte is odd, so the fuzzer reaches every request, not only the handshake) and then
 * closes its side. The server must close the connection promptly (a client that hung up
 * is never kept, even one blocked in GET or WAIT), and every 32 inputs a well-behaved
 * client must still set and get, with no connection left behind. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_client.h"
#include "store_proto.h"
#include "store_server.h"
#include "ds_clock.h"

#define CLOSE_WITHIN_MS 5000 /* far above the server's reaction; a miss means it kept us */

static ds_store_server *g_server;
static ds_store_client *g_probe;
static char g_token[DS_STORE_TOKEN_LEN + 1];
static int g_port;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ds_err err = {{0}};
    if (ds_store_make_token(g_token, &err) != 0 ||
        ds_store_server_start("127.0.0.1", 0, g_token, &g_server, &err) != 0)
        abort();
    g_port = ds_store_server_port(g_server);
    if (!(g_probe = ds_store_connect("127.0.0.1", g_port, g_token, 5000, &err))) abort();
    return 0;
}

static int connect_server(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) abort();
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        /* libFuzzer's timeout alarm can interrupt connect, which then goes on by itself */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int so = 0;
        socklen_t len = sizeof so;
        if (errno != EINTR) so = errno;
        else
            while (poll(&p, 1, -1) < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0)
                if (errno != EINTR) abort();
        if (so != 0) {
            errno = so;
            perror("fuzz_store_server: connect");
            abort();
        }
    }
    /* Closing with a reset leaves no TIME_WAIT behind: tens of thousands of connections
     * a minute would otherwise run out of local ports. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    return fd;
}

static void send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* the server may drop us mid-send: that is its right */
        b += w;
        n -= (size_t)w;
    }
}

static void send_auth(int fd) {
    ds_buf b = {0};
    if (ds_frame_begin(&b, DS_STORE_OP_AUTH) != 0 || ds_buf_put_u32(&b, DS_STORE_VERSION) != 0 ||
        ds_buf_put(&b, g_token, DS_STORE_TOKEN_LEN) != 0)
        abort();
    ds_frame_end(&b, 0);
    send_all(fd, b.data, b.len);
    ds_buf_free(&b);
}

/* Reads answers until the server closes the connection; aborts if it does not. */
static void await_close(int fd) {
    int64_t deadline = ds_now_ms() + CLOSE_WITHIN_MS;
    uint8_t buf[4096];
    for (;;) {
        int64_t left = deadline - ds_now_ms();
        if (left <= 0) abort();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) < 0) continue;
        if (!p.revents) continue;
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return; /* EOF or reset: closed */
    }
}

/* The server still serves a well-behaved client, and holds no connection but the probe's. */
static void probe(void) {
    static unsigned n;
    ds_err err = {{0}};
    char val[32];
    int len = snprintf(val, sizeof val, "%u", ++n);
    void *got = NULL;
    size_t glen = 0;
    if (ds_store_set(g_probe, "fuzz/probe", val, (size_t)len, &err) != 0 ||
        ds_store_get(g_probe, "fuzz/probe", &got, &glen, 1000, &err) != 0 || glen != (size_t)len ||
        memcmp(got, val, glen) != 0)
        abort();
    free(got);
    ds_store_event ev;
    while (ds_store_server_next_event(g_server, &ev) == 1) {
    }
    /* A dropped connection is closed at once and reaped on the server's next turn, which
     * the probe's own request has just forced; allow one turn of lag all the same. */
    int64_t deadline = ds_now_ms() + CLOSE_WITHIN_MS;
    while (ds_store_server_nclients(g_server) > 1)
        if (ds_now_ms() > deadline) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int fd = connect_server();
    if (data[0] & 1) send_auth(fd);
    send_all(fd, data + 1, size - 1);
    shutdown(fd, SHUT_WR);
    await_close(fd);
    close(fd);
    static unsigned runs;
    if (++runs % 32 == 0) probe();
    return 0;
}
