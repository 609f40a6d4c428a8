/* shared_servers.c: POLLEXCL as a flag, from unrelated processes. A supervisor creates a POSIX
 * message queue and two named FIFOs, then starts N servers through a shell, each with setsid
 * and in the background, so that the shell exits at once and no server is the supervisor's
 * child (nor shares a parent with it): they share nothing but the queue's and the FIFOs'
 * names. No server makes, opens or joins a group: each opens the queue by name and loops on
 *
 *     herdless_poll_shared({queue, POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE},
 *                          {stop FIFO, POLLIN}, -1)
 *
 * with one mq_receive per event (and herdless_consumed_shared right after it). The supervisor
 * sends M requests (the queue 10 deep: it waits while it is full), waits until the queue is
 * empty, then closes the stop FIFO, whose hang-up every server sees (it polls it without the bit).
 * It prints what each server served, the lost and duplicated requests, Jain's index and the
 * servers' kernel wake-ups (voluntary context switches from the moment each was ready) per
 * request, then a RESULT line. The backend is the environment's HERDLESS_BACKEND (the servers
 * inherit it through the shell). Exit 0 only if every request was served exactly once.
 *
 * Usage: shared_servers [--servers N] [--requests M] [--gap-us G]
 *        (--gap-us: sleep G microseconds after each request; 0, the default, keeps a backlog)
 *        (the servers: shared_servers serve QUEUE REPORT_FIFO STOP_FIFO INDEX)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

/* A report record fits in PIPE_BUF, so records of several servers never interleave. */
#define IDS_PER_RECORD 500
#define READY UINT32_MAX

struct record {
    uint32_t server;
    uint32_t count;     /* ids in this record; 0: the last record (totals); READY: started */
    uint64_t switches;  /* last record: voluntary context switches from ready to stop */
    uint64_t empty;     /* last record: receives that found the queue empty; READY: the pid */
    uint64_t ids[IDS_PER_RECORD];
};

/* The supervisor's servers (their pids as they report them), killed if it gives up. */
static pid_t *servers_started;
static int servers_known;

static void die(const char *what, int code) {
    fprintf(stderr, "%s: %d %s\n", what, code,
            code < 0 ? herdless_strerror(code) : strerror(errno));
    for (int s = 0; s < servers_known; s++)
        if (servers_started[s] > 0) kill(servers_started[s], SIGKILL);
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

static int serve(const char *queue_name, const char *report_path, const char *stop_path,
                 uint32_t index) {
    mqd_t q = mq_open(queue_name, O_RDONLY | O_NONBLOCK);
    if (q == (mqd_t)-1) die("mq_open", 0);
    int report = open(report_path, O_WRONLY);
    int stop = open(stop_path, O_RDONLY | O_NONBLOCK);
    if (report < 0 || stop < 0) die("open a FIFO", 0);
    struct record rec;
    memset(&rec, 0, sizeof rec);
    rec.server = index;
    rec.count = READY;
    rec.empty = (uint64_t)getpid();
    uint64_t empty = 0, start = switches();
    write_all(report, &rec, sizeof rec);
    rec.count = 0;
    rec.empty = 0;
    for (;;) {
        struct pollfd pfd[2] = {
            {.fd = (int)q, .events = POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE},
            {.fd = stop, .events = POLLIN},
        };
        int n = herdless_poll_shared(pfd, 2, -1);
        if (n < 0) { /* -1 and errno, as poll(); the detail in herdless_last_error() */
            if (errno == EINTR) continue;
            die("herdless_poll_shared", herdless_last_error());
        }
        if (pfd[1].revents) break; /* the supervisor hung up: every request is served */
        if (n == 0 || !(pfd[0].revents & POLLIN)) continue;
        uint64_t id;
        ssize_t got = mq_receive(q, (char *)&id, sizeof id, NULL);
        herdless_consumed_shared((int)q);
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

/* Is process `pid` still there? (The servers are not our children: sh started them.) */
static int alive(pid_t pid) {
    return kill(pid, 0) == 0 || errno == EPERM;
}

/* How many servers are still there. */
static int servers_alive(const pid_t *pids, int servers) {
    int n = 0;
    for (int s = 0; s < servers; s++) n += alive(pids[s]);
    return n;
}

/* Reads one record from the report FIFO, waiting at most 60 s; 0 if none came. */
static int next_record(int fd, struct record *rec) {
    size_t have = 0;
    while (have < sizeof *rec) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 60000);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        ssize_t n = read(fd, (char *)rec + have, sizeof *rec - have);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return 0;
        have += (size_t)n;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2], argv[3], argv[4], (uint32_t)atoi(argv[5]));
    int servers = 32;
    long requests = 10000;
    long gap_us = 0; /* between two requests: 0 keeps a backlog in the queue */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--servers") == 0) servers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--requests") == 0) requests = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--gap-us") == 0) gap_us = atol(argv[i + 1]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    char queue_name[64], dir[64], report_path[96], stop_path[96];
    snprintf(queue_name, sizeof queue_name, "/herdless-shared-%d", (int)getpid());
    snprintf(dir, sizeof dir, "/tmp/herdless-shared-%d", (int)getpid());
    snprintf(report_path, sizeof report_path, "%s/report", dir);
    snprintf(stop_path, sizeof stop_path, "%s/stop", dir);
    if (mkdir(dir, 0700) != 0 || mkfifo(report_path, 0600) != 0 || mkfifo(stop_path, 0600) != 0)
        die("mkfifo", 0);
    /* Both FIFOs held open read-write: neither open blocks, and the stop FIFO has a writer
     * (this process) until the supervisor closes it. */
    int report = open(report_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    int stop = open(stop_path, O_RDWR | O_CLOEXEC);
    if (report < 0 || stop < 0) die("open a FIFO", 0);
    struct mq_attr attr = {.mq_maxmsg = 10, .mq_msgsize = sizeof(uint64_t)};
    mqd_t q = mq_open(queue_name, O_WRONLY | O_CREAT | O_EXCL, 0600, &attr);
    if (q == (mqd_t)-1) die("mq_open (create)", 0);

    /* The servers, started by a shell that exits at once: each one's parent is then init. */
    size_t len = 128 + sizeof dir + (size_t)servers * (strlen(argv[0]) + 3 * 96 + 64);
    char *script = malloc(len), *at = script;
    at += sprintf(at, "exec </dev/null >/dev/null 2>>'%s/servers.log'; ", dir);
    for (int s = 0; s < servers; s++)
        at += sprintf(at, "setsid '%s' serve '%s' '%s' '%s' %d & ", argv[0], queue_name,
                      report_path, stop_path, s);
    sprintf(at, "exit 0");
    if (system(script) != 0) die("starting the servers with sh", 0);
    free(script);

    pid_t *pids = calloc((size_t)servers, sizeof *pids);
    servers_started = pids;
    servers_known = servers;
    unsigned char *seen = calloc((size_t)requests, 1);
    uint64_t *served = calloc((size_t)servers, sizeof *served);
    uint64_t total_switches = 0, total_empty = 0, duplicated = 0, stray = 0;
    int ready = 0, done = 0, unrelated = 0;
    struct record rec;
    while (ready < servers) {
        if (!next_record(report, &rec) || rec.count != READY || rec.server >= (uint32_t)servers)
            die("a server did not start", 0);
        pids[rec.server] = (pid_t)rec.empty;
        ready++;
    }
    for (int s = 0; s < servers; s++) {
        if (getpgid(pids[s]) == pids[s] && getsid(pids[s]) == pids[s]) unrelated++;
        while (!asleep(pids[s])) {
            if (!alive(pids[s])) die("a server exited before its first wait", 0);
            sched_yield();
        }
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long sent = 0;
    /* Send while reading reports (a server's report write must never wait for the supervisor,
     * which may be blocked sending), until every request is sent and the queue is empty: then
     * every request was received, and the servers report the rest after the stop. Bounded:
     * 60 s without a receive fails the run, and so does a queue no server is left to serve. */
    long waited_ms = 0, left = -1, quiet_ms = 0;
    for (;;) {
        while (sent < requests) {
            uint64_t id = (uint64_t)sent;
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            now.tv_nsec += 1000000;
            if (now.tv_nsec >= 1000000000) { now.tv_sec++; now.tv_nsec -= 1000000000; }
            if (mq_timedsend(q, (const char *)&id, sizeof id, 0, &now) != 0) {
                if (errno == ETIMEDOUT) break; /* full: read reports meanwhile */
                die("mq_send", 0);
            }
            sent++;
            if (gap_us > 0) {
                struct timespec gap = {.tv_sec = gap_us / 1000000, .tv_nsec = (gap_us % 1000000) * 1000};
                while (nanosleep(&gap, &gap) != 0 && errno == EINTR) {}
            }
        }
        if (sent == requests) {
            struct mq_attr now;
            if (mq_getattr(q, &now) != 0) die("mq_getattr", 0);
            if (now.mq_curmsgs == 0) break;
            waited_ms = now.mq_curmsgs == left ? waited_ms + 1 : 0;
            left = now.mq_curmsgs;
            if (waited_ms > 60000) {
                fprintf(stderr, "%ld requests left in the queue for 60 s\n", left);
                break;
            }
        }
        struct pollfd p = {.fd = report, .events = POLLIN};
        int r = poll(&p, 1, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("poll", 0);
        if (r == 0) {
            /* Nothing reported for a while: are any servers left to serve the queue? */
            if (++quiet_ms % 100 == 0 && servers_alive(pids, servers) == 0)
                die("every server exited with requests left", 0);
            continue;
        }
        quiet_ms = 0;
        if (!next_record(report, &rec) || rec.server >= (uint32_t)servers) die("a torn report", 0);
        for (uint32_t i = 0; i < rec.count; i++) {
            uint64_t id = rec.ids[i];
            if (id >= (uint64_t)requests) { stray++; continue; }
            if (seen[id]++) duplicated++;
            served[rec.server]++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    close(stop); /* the hang-up: every server ends */
    while (done < servers && next_record(report, &rec)) {
        if (rec.server >= (uint32_t)servers) die("a torn report", 0);
        if (rec.count == 0) {
            done++;
            total_switches += rec.switches;
            total_empty += rec.empty;
            continue;
        }
        for (uint32_t i = 0; i < rec.count; i++) {
            uint64_t id = rec.ids[i];
            if (id >= (uint64_t)requests) { stray++; continue; }
            if (seen[id]++) duplicated++;
            served[rec.server]++;
        }
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
    const char *backend = getenv("HERDLESS_BACKEND");
    printf("%d unrelated servers (setsid, %d in sessions of their own; HERDLESS_BACKEND=%s), "
           "%ld requests in %.3f s: served min %llu max %llu, Jain %.4f; lost %llu, duplicated "
           "%llu; %.3f kernel wake-ups and %.4f empty receives per request\n",
           servers, unrelated, backend ? backend : "(auto)", requests, secs,
           (unsigned long long)lo, (unsigned long long)hi, jain, (unsigned long long)lost,
           (unsigned long long)duplicated, per, (double)total_empty / (double)requests);
    printf("RESULT servers=%d unrelated=%d requests=%ld lost=%llu duplicated=%llu stray=%llu "
           "jain=%.4f wakeups_per_request=%.3f empty_per_request=%.4f stopped=%d seconds=%.3f\n",
           servers, unrelated, requests, (unsigned long long)lost, (unsigned long long)duplicated,
           (unsigned long long)stray, jain, per, (double)total_empty / (double)requests, done,
           secs);
    mq_close(q);
    mq_unlink(queue_name);
    close(report);
    unlink(report_path);
    unlink(stop_path);
    /* What the servers said on their standard error, shown. */
    char log_path[128], line[512];
    snprintf(log_path, sizeof log_path, "%s/servers.log", dir);
    FILE *log = fopen(log_path, "r");
    while (log && fgets(line, sizeof line, log)) fprintf(stderr, "server: %s", line);
    if (log) fclose(log);
    unlink(log_path);
    rmdir(dir);
    return lost == 0 && duplicated == 0 && stray == 0 && done == servers && unrelated == servers
               ? 0
               : 1;
}
