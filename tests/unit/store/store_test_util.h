/* Shared helpers of the store tests: a server on a free loopback port, raw sockets that
 * speak (or break) the protocol, and bounded waits for server events. */
#ifndef DS_STORE_TEST_UTIL_H
#define DS_STORE_TEST_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_client.h"
#include "store_proto.h"
#include "store_server.h"
#include "store_token.h"
#include "ds_clock.h"

typedef struct fixture {
    ds_store_server *srv;
    char token[DS_STORE_TOKEN_LEN + 1];
    int port;
} fixture;

static inline int fixture_up(void **state) {
    fixture *f = calloc(1, sizeof *f);
    ds_err err;
    if (ds_store_make_token(f->token, &err) != 0) return -1;
    if (ds_store_server_start("127.0.0.1", 0, f->token, &f->srv, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    f->port = ds_store_server_port(f->srv);
    *state = f;
    return 0;
}

static inline int fixture_down(void **state) {
    fixture *f = *state;
    ds_store_server_stop(f->srv);
    free(f);
    return 0;
}

static inline ds_store_client *connect_ok(fixture *f) {
    ds_err err = {{0}};
    ds_store_client *c = ds_store_connect("127.0.0.1", f->port, f->token, 5000, &err);
    if (!c) fprintf(stderr, "connect: %s\n", err.msg);
    assert_non_null(c);
    return c;
}

/* Waits (at most 5 s) for an event of `kind`, skipping others; returns 1 when found. */
static inline int wait_event(fixture *f, ds_store_event_kind kind, ds_store_event *ev) {
    int64_t deadline = ds_now_ms() + 5000;
    for (;;) {
        while (ds_store_server_next_event(f->srv, ev))
            if (ev->kind == kind) return 1;
        int64_t left = deadline - ds_now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = ds_store_server_event_fd(f->srv), .events = POLLIN};
        poll(&p, 1, (int)left);
    }
}

/* Polls cond-style: until fn(f) == want or 5 s pass. */
static inline int wait_count(fixture *f, int (*fn)(ds_store_server *), int want) {
    int64_t deadline = ds_now_ms() + 5000;
    while (fn(f->srv) != want) {
        if (ds_now_ms() > deadline) return 0;
        poll(NULL, 0, 2);
    }
    return 1;
}

/* ---- raw protocol -------------------------------------------------------------------- */

static inline int raw_connect(fixture *f) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static inline void raw_send(int fd, const ds_buf *b) {
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n <= 0) return; /* the server may already have dropped us */
        off += (size_t)n;
    }
}

static inline void raw_auth(int fd, const char *token) {
    ds_buf b = {0};
    ds_frame_begin(&b, DS_STORE_OP_AUTH);
    ds_buf_put_u32(&b, DS_STORE_VERSION);
    ds_buf_put(&b, token, DS_STORE_TOKEN_LEN);
    ds_frame_end(&b, 0);
    raw_send(fd, &b);
    ds_buf_free(&b);
}

/* Reads one reply; returns its status, or -1 on EOF (the server closed us). */
static inline int raw_reply(int fd) {
    uint8_t hdr[5];
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (got < 5) {
        if (poll(&p, 1, 5000) != 1) return -2;
        ssize_t n = recv(fd, hdr + got, 5 - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    size_t left = ds_load_u32(hdr) - 1;
    while (left > 0) {
        static uint8_t sink[1 << 16];
        if (poll(&p, 1, 5000) != 1) return -2;
        ssize_t n = recv(fd, sink, left < sizeof sink ? left : sizeof sink, 0);
        if (n <= 0) return -1;
        left -= (size_t)n;
    }
    return hdr[4];
}

/* 1 when the server has closed fd (EOF within 5 s). */
static inline int raw_closed(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        if (poll(&p, 1, 5000) != 1) return 0;
        char buf[256];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || n < 0) return 1;
    }
}

#endif
