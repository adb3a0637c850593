#include "notify.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ds_clock.h"

#define NOTIFY_TRIES 3
#define NOTIFY_MAX_QUEUED 10000

typedef struct event {
    struct event *next;
    char json[];
} event;

struct ds_notify {
    char *url;
    int timeout_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    event *head, *tail;
    int queued;
    int stopping;
    long long stop_deadline_ms; /* after stop: the queue's last chance ends here */
    int dropped, warned;
};

static size_t discard(char *p, size_t size, size_t n, void *u) {
    (void)p;
    (void)u;
    return size * n;
}

/* One POST: 0 delivered, 1 worth trying again, -1 refused for good (a 4xx). */
static int post(ds_notify *n, CURL *c, const char *json, char *why, size_t cap) {
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, n->url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)n->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)n->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        snprintf(why, cap, "%s", curl_easy_strerror(rc));
        return 1;
    }
    if (code >= 200 && code < 300) return 0;
    snprintf(why, cap, "HTTP %ld", code);
    return code >= 500 ? 1 : -1;
}

static void deliver(ds_notify *n, CURL *c, event *e) {
    char why[256] = "";
    int rc = 1;
    for (int t = 0; t < NOTIFY_TRIES && rc == 1; t++) {
        if (t) {
            struct timespec d = {0, t == 1 ? 500000000L : 0};
            if (t == 2) d.tv_sec = 1;
            pthread_mutex_lock(&n->mu);
            int late = n->stopping && ds_now_ms() >= n->stop_deadline_ms;
            pthread_mutex_unlock(&n->mu);
            if (late) break;
            nanosleep(&d, NULL);
        }
        rc = post(n, c, e->json, why, sizeof why);
    }
    if (rc == 0) return;
    pthread_mutex_lock(&n->mu);
    n->dropped++;
    int warn = !n->warned;
    n->warned = 1;
    pthread_mutex_unlock(&n->mu);
    if (warn)
        fprintf(stderr, "dslaunch: warning: the webhook %s does not take events (%s); they are still in "
                        "launcher.log\n", n->url, why);
}

static void *send_loop(void *arg) {
    ds_notify *n = arg;
    CURL *c = curl_easy_init();
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (!n->head && !n->stopping) pthread_cond_wait(&n->cv, &n->mu);
        if (!n->head) break;
        event *e = n->head;
        n->head = e->next;
        if (!n->head) n->tail = NULL;
        n->queued--;
        int give_up = n->stopping && ds_now_ms() >= n->stop_deadline_ms;
        pthread_mutex_unlock(&n->mu);
        if (give_up || !c) {
            pthread_mutex_lock(&n->mu);
            n->dropped++;
            pthread_mutex_unlock(&n->mu);
        } else {
            deliver(n, c, e);
        }
        free(e);
        pthread_mutex_lock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    if (c) curl_easy_cleanup(c);
    return NULL;
}

ds_notify *ds_notify_start(const char *url, int timeout_ms, ds_err *err) {
    ds_notify *n = calloc(1, sizeof *n);
    if (!n || !(n->url = strdup(url))) {
        free(n);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    n->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* signals are the controller's loop's */
    int rc = pthread_create(&n->thread, NULL, send_loop, n);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        ds_err_errno(err, rc, "webhook: starting its thread");
        free(n->url);
        free(n);
        return NULL;
    }
    return n;
}

void ds_notify_post(ds_notify *n, const char *json) {
    if (!n) return;
    size_t len = strlen(json);
    event *e = malloc(sizeof *e + len + 1);
    if (!e) return;
    memcpy(e->json, json, len + 1);
    e->next = NULL;
    pthread_mutex_lock(&n->mu);
    if (n->queued >= NOTIFY_MAX_QUEUED) { /* a dead webhook cannot grow the controller */
        n->dropped++;
        free(e);
    } else {
        if (n->tail) n->tail->next = e;
        else n->head = e;
        n->tail = e;
        n->queued++;
        pthread_cond_signal(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
}

int ds_notify_stop(ds_notify *n) {
    if (!n) return 0;
    pthread_mutex_lock(&n->mu);
    n->stopping = 1;
    n->stop_deadline_ms = ds_now_ms() + n->timeout_ms;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
    int dropped = n->dropped;
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n->url);
    free(n);
    return dropped;
}
