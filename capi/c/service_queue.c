/* service_queue.c: seed 003's middleware from C. A supervisor creates a named herdless group
 * and a POSIX message queue, then starts N server executables by fork + exec (this program
 * again, as "serve"). Each server opens the group and the queue BY NAME (nothing inherited but
 * a report pipe), joins, and loops on herdless_poll() with
 * POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE on the queue, one mq_receive per event and
 * herdless_consumed() right after. The supervisor sends M requests (blocking when the queue is
 * full, as the seed's senders do); once the queue is empty it closes a stop pipe every server
 * watches (plainly, not exclusive: the hang-up wakes them all), and prints what each
 * server served, the lost and duplicated requests, Jain's fairness index and the servers'
 * kernel wake-ups (voluntary context switches from the moment each was ready) per request;
 * then a RESULT line for scripts. The clock starts once every server sleeps in the kernel
 * (its state in /proc is S). Exit 0 only if every request was served exactly once.
 *
 * Usage: service_queue [--servers N] [--requests M] [--backend native|emulated|auto]
 *        (and, for the exec'd servers: service_queue serve GROUP QUEUE REPORT_FD STOP_FD INDEX)
 *
 * Why a stop pipe and not stop requests in the queue: a receive that moves a blocked sender's
 * message into the full queue wakes no poller (the kernel's mq_receive), so a native server that
 * left right after it would leave that message unannounced, and the others asleep. While servers
 * stay, the one that received comes back to its wait and sees it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

/* A report record fits in PIPE_BUF, so records of several servers never interleave. */
#define IDS_PER_RECORD 500

struct record {
    uint32_t server;
    uint32_t count;     /* ids in this record; 0 in the last record, which carries the totals */
    uint64_t switches;  /* last record: voluntary context switches from ready to stop */
    uint64_t empty;     /* last record: receives that found the queue empty */
    uint64_t ids[IDS_PER_RECORD];
};

static void die(const char *what, int code) {
    fprintf(stderr, "%s: %d %s\n", what, code, code < 0 ? herdless_strerror(code) : strerror(errno));
    exit(2);
}

static uint64_t switches(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_nvcsw : 0;
}

static void write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die("write", 0);
        p += n;
        len -= (size_t)n;
    }
}

static int serve(const char *group_name, const char *queue_name, int report, int stop,
                 uint32_t index) {
    struct herdless_group group;
    struct herdless_waiter waiter;
    int rc = herdless_group_open(group_name, NULL, &group); /* open only: the group's settings */
    if (rc != HERDLESS_OK) die("herdless_group_open", rc);
    if ((rc = herdless_join(group, &waiter)) != HERDLESS_OK) die("herdless_join", rc);
    mqd_t q = mq_open(queue_name, O_RDONLY | O_NONBLOCK);
    if (q == (mqd_t)-1) die("mq_open", 0);
    struct record rec;
    memset(&rec, 0, sizeof rec);
    rec.server = index;
    uint64_t empty = 0, start = switches();
    char ready = 1;
    write_all(report, &ready, 1);
    for (;;) {
        struct pollfd pfd[2] = {
            {.fd = (int)q, .events = POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE},
            {.fd = stop, .events = POLLIN},
        };
        int n = herdless_poll(waiter, pfd, 2, -1);
        if (n < 0) { /* -1 and errno, as poll(); the detail in herdless_last_error() */
            if (errno == EINTR) continue;
            die("herdless_poll", herdless_last_error());
        }
        if (pfd[1].revents) break; /* the supervisor hung up: every request is served */
        if (n == 0 || !(pfd[0].revents & POLLIN)) continue;
        uint64_t id;
        ssize_t got = mq_receive(q, (char *)&id, sizeof id, NULL);
        herdless_consumed(waiter, (uint64_t)q);
        if (got < 0) {
            if (errno == EAGAIN) { empty++; continue; }
            die("mq_receive", 0);
        }
        rec.ids[rec.count++] = id;
        if (rec.count == IDS_PER_RECORD) {
            write_all(report, &rec, sizeof rec);
            rec.count = 0;
        }
    }
    uint64_t used = switches() - start;
    if (rec.count > 0) write_all(report, &rec, sizeof rec);
    rec.count = 0;
    rec.switches = used;
    rec.empty = empty;
    write_all(report, &rec, sizeof rec);
    herdless_leave(waiter);
    herdless_group_free(group);
    mq_close(q);
    return 0;
}

/* Is process `pid` asleep (state S in /proc/<pid>/stat)? */
static int asleep(pid_t pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')');
    return end && end[1] == ' ' && end[2] == 'S';
}

int main(int argc, char **argv) {
    if (argc == 7 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), (uint32_t)atoi(argv[6]));
    int servers = 100, backend = HERDLESS_BACKEND_AUTO;
    long requests = 20000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--servers") == 0) servers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--requests") == 0) requests = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--backend") == 0)
            backend = strcmp(argv[i + 1], "native") == 0 ? HERDLESS_BACKEND_NATIVE
                    : strcmp(argv[i + 1], "emulated") == 0 ? HERDLESS_BACKEND_EMULATED
                    : HERDLESS_BACKEND_AUTO;
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    char group_name[64], queue_name[64];
    snprintf(group_name, sizeof group_name, "svc.%d", (int)getpid());
    snprintf(queue_name, sizeof queue_name, "/herdless-svc-%d", (int)getpid());

    struct herdless_options options;
    herdless_options_init(&options);
    options.backend = backend;
    options.max_members = (size_t)servers;
    struct herdless_group group;
    int rc = herdless_group_open(group_name, &options, &group);
    if (rc != HERDLESS_OK) die("herdless_group_open (create)", rc);
    struct mq_attr attr = {.mq_maxmsg = 10, .mq_msgsize = sizeof(uint64_t)};
    mqd_t q = mq_open(queue_name, O_WRONLY | O_CREAT | O_EXCL, 0600, &attr);
    if (q == (mqd_t)-1) die("mq_open (create)", 0);

    int report[2], stop[2];
    if (pipe(report) != 0 || pipe(stop) != 0) die("pipe", 0);
    pid_t *pids = calloc((size_t)servers, sizeof *pids);
    for (int s = 0; s < servers; s++) {
        pid_t pid = fork();
        if (pid < 0) die("fork", 0);
        if (pid == 0) {
            char fd_arg[16], stop_arg[16], index_arg[16];
            snprintf(fd_arg, sizeof fd_arg, "%d", report[1]);
            snprintf(stop_arg, sizeof stop_arg, "%d", stop[0]);
            snprintf(index_arg, sizeof index_arg, "%d", s);
            close(report[0]);
            close(stop[1]);
            execl(argv[0], argv[0], "serve", group_name, queue_name, fd_arg, stop_arg, index_arg,
                  (char *)NULL);
            _exit(127);
        }
        pids[s] = pid;
    }
    close(report[1]);
    close(stop[0]);
    for (int s = 0; s < servers; s++) {
        char b;
        if (read(report[0], &b, 1) != 1) die("a server did not start", 0);
    }
    for (int s = 0; s < servers; s++)
        while (!asleep(pids[s])) sched_yield();

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t id = 0; id < (uint64_t)requests; id++)
        if (mq_send(q, (const char *)&id, sizeof id, 0) != 0) die("mq_send", 0);
    /* Every request sent; once the queue is empty, every one was received: the hang-up ends
     * the servers (bounded: 60 s). */
    for (int i = 0; i < 60000; i++) {
        struct mq_attr now;
        if (mq_getattr(q, &now) != 0) die("mq_getattr", 0);
        if (now.mq_curmsgs == 0) break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    close(stop[1]);

    unsigned char *seen = calloc((size_t)requests, 1);
    uint64_t *served = calloc((size_t)servers, sizeof *served);
    uint64_t total_switches = 0, total_empty = 0, duplicated = 0, stray = 0;
    struct record rec;
    for (;;) {
        size_t have = 0;
        while (have < sizeof rec) {
            ssize_t n = read(report[0], (char *)&rec + have, sizeof rec - have);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            have += (size_t)n;
        }
        if (have == 0) break;
        if (have != sizeof rec || rec.server >= (uint32_t)servers) die("a torn report", 0);
        if (rec.count == 0) {
            total_switches += rec.switches;
            total_empty += rec.empty;
        }
        for (uint32_t i = 0; i < rec.count; i++) {
            uint64_t id = rec.ids[i];
            if (id >= (uint64_t)requests) { stray++; continue; }
            if (seen[id]++) duplicated++;
            served[rec.server]++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int failed_servers = 0;
    for (int s = 0; s < servers; s++) {
        int status;
        waitpid(pids[s], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_servers++;
    }
    uint64_t lost = 0;
    for (long i = 0; i < requests; i++) lost += seen[i] == 0;
    double sum = 0, sq = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int s = 0; s < servers; s++) {
        sum += (double)served[s];
        sq += (double)served[s] * (double)served[s];
        if (served[s] < lo) lo = served[s];
        if (served[s] > hi) hi = served[s];
    }
    double jain = sq > 0 ? sum * sum / ((double)servers * sq) : 0;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    double per = (double)total_switches / (double)requests;
    printf("%d exec'd servers (backend %s), %ld requests in %.3f s: served min %llu max %llu, "
           "Jain %.4f; lost %llu, duplicated %llu; %.2f kernel wake-ups and %.3f empty receives "
           "per request\n",
           servers, herdless_group_backend(group) == HERDLESS_BACKEND_NATIVE ? "native" : "emulated",
           requests, secs, (unsigned long long)lo, (unsigned long long)hi, jain,
           (unsigned long long)lost, (unsigned long long)duplicated, per,
           (double)total_empty / (double)requests);
    printf("RESULT servers=%d requests=%ld lost=%llu duplicated=%llu stray=%llu jain=%.4f "
           "wakeups_per_request=%.3f failed_servers=%d seconds=%.3f\n",
           servers, requests, (unsigned long long)lost, (unsigned long long)duplicated,
           (unsigned long long)stray, jain, per, failed_servers, secs);
    mq_close(q);
    mq_unlink(queue_name);
    herdless_group_free(group);
    /* Every server has gone: the removal goes through (it would refuse, naming them, if one
     * lingered). */
    int removed = herdless_group_remove(group_name);
    if (removed != HERDLESS_OK) fprintf(stderr, "herdless_group_remove: %s\n", herdless_strerror(removed));
    return lost == 0 && duplicated == 0 && stray == 0 && failed_servers == 0 && removed == HERDLESS_OK
               ? 0
               : 1;
}
