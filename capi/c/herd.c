/* herd.c: seed 003's experiment from C, through herdless_poll().
 *
 * One producer writes 8-byte ids as fast as it can into one shared pipe or POSIX message
 * queue; N waiters (threads, or with --processes forked processes) each loop on
 * herdless_poll() + one read, with POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE on the shared
 * descriptor, and herdless_consumed() right after the read. It prints the wall time (first
 * write to the read of the last message), the kernel wake-ups (voluntary context switches of
 * the waiters, RUSAGE_THREAD, from each waiter's start to its first wake-up after the last
 * message was read), the wasted wake-ups (reads that found nothing), each waiter's count and
 * Jain's fairness index; then a RESULT line for scripts. The clock starts once every waiter
 * sleeps in the kernel (checked in /proc). Exit 0 only if every message was read exactly once.
 *
 * Usage: herd [--workload pipe|mq] [--waiters N] [--messages M] [--processes]
 *             [--backend native|emulated] [--rotate N|adaptive] [--quiet]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

#define LAST (1ull << 62)

struct board {
    _Atomic uint64_t end_ns; /* when the last message was read; 0 before */
    _Atomic int failed;
    _Atomic int started;
};

static struct board *board;
static uint64_t *msgs, *empty, *switches_of;
static _Atomic int *tids;
static int workload_mq, data_fd, stop_fd;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_switches(void) {
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_nvcsw : 0;
}

static void die(const char *what, int code) {
    fprintf(stderr, "herd: %s: %d %s\n", what, code,
            code < 0 ? herdless_strerror(code) : strerror(errno));
    exit(2);
}

/* One waiter: herdless_poll, read one message, consumed, until the stop pipe hangs up. */
static void waiter_loop(herdless_waiter w, int index) {
    uint64_t start = thread_switches(), at_drain = 0;
    int drained = 0;
    uint64_t got = 0, wasted = 0;
    struct pollfd fds[2] = {
        {.fd = data_fd, .events = POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE},
        {.fd = stop_fd, .events = POLLIN},
    };
    for (;;) {
        int n = herdless_poll(w, fds, 2, -1);
        if (n < 0) {
            if (errno == EINTR) continue; /* a signal handler ran: poll() again */
            fprintf(stderr, "herd: waiter %d: herdless_poll: %s\n", index,
                    herdless_strerror(herdless_last_error()));
            board->failed = 1;
            break;
        }
        if (!drained && board->end_ns != 0) {
            drained = 1;
            at_drain = thread_switches();
        }
        if (fds[1].revents) break; /* the stop pipe hung up: every message was read */
        if (!(fds[0].revents & POLLIN)) continue;
        uint64_t id;
        ssize_t r = workload_mq ? mq_receive(data_fd, (char *)&id, sizeof id, NULL)
                                : read(data_fd, &id, sizeof id);
        if (r == (ssize_t)sizeof id) {
            herdless_consumed(w, (uint64_t)data_fd); /* before the work: the next may go on */
            got++;
            if (id & LAST) board->end_ns = now_ns();
        } else if (r == 0) {
            break; /* end of file: the producer closed the pipe after the last message */
        } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            /* Counted in herdless_stats too, and consumed. */
            if (errno == EAGAIN) herdless_found_nothing(w, (uint64_t)data_fd);
            if (!drained) wasted++;
        } else {
            fprintf(stderr, "herd: waiter %d: read returned %zd\n", index, r);
            board->failed = 1;
            break;
        }
    }
    msgs[index] = got;
    empty[index] = wasted;
    switches_of[index] = (drained ? at_drain : thread_switches()) - start;
}

struct thread_arg {
    herdless_waiter waiter;
    int index;
};

static void *thread_main(void *p) {
    struct thread_arg *a = p;
    tids[a->index] = (int)syscall(SYS_gettid);
    waiter_loop(a->waiter, a->index);
    herdless_leave(a->waiter);
    return NULL;
}

/* Is thread tid of process pid asleep in poll/epoll_wait right now? (/proc stat + syscall) */
static int asleep(int pid, int tid) {
    char path[96], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *paren = strrchr(buf, ')');
    if (!paren || paren[1] != ' ' || paren[2] != 'S') return 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", pid, tid);
    f = fopen(path, "r");
    if (!f) return 0;
    long nr = -1;
    int ok = fscanf(f, "%ld", &nr) == 1;
    fclose(f);
#if defined(__x86_64__)
    return ok && (nr == 7 || nr == 232 || nr == 271 || nr == 281 || nr == 441);
#else
    return ok && (nr == SYS_epoll_pwait || nr == SYS_ppoll);
#endif
}

static void until_asleep(int pid, int tid) {
    uint64_t deadline = now_ns() + 60ull * 1000000000ull;
    while (!asleep(pid, tid)) {
        if (now_ns() > deadline || board->failed) {
            fprintf(stderr, "herd: waiter %d/%d never fell asleep in the kernel\n", pid, tid);
            exit(2);
        }
        sched_yield();
    }
}

int main(int argc, char **argv) {
    int waiters = 8, processes = 0, quiet = 0, backend = HERDLESS_BACKEND_NATIVE;
    uint64_t messages = 20000;
    uint32_t rotate = HERDLESS_ROTATE_ADAPTIVE;
    const char *workload = "pipe";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--processes")) processes = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--workload") && v) workload = argv[++i];
        else if (!strcmp(a, "--waiters") && v) waiters = atoi(argv[++i]);
        else if (!strcmp(a, "--messages") && v) messages = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--rotate") && v) {
            const char *r = argv[++i];
            rotate = !strcmp(r, "adaptive") ? HERDLESS_ROTATE_ADAPTIVE : (uint32_t)atoi(r);
        }
        else if (!strcmp(a, "--backend") && v) {
            backend = !strcmp(argv[++i], "emulated") ? HERDLESS_BACKEND_EMULATED
                                                       : HERDLESS_BACKEND_NATIVE;
        } else {
            fprintf(stderr,
                    "usage: herd [--workload pipe|mq] [--waiters N] [--messages M] "
                    "[--processes] [--backend native|emulated] [--rotate N|adaptive] [--quiet]\n");
            return 2;
        }
    }
    workload_mq = !strcmp(workload, "mq");
    if (waiters < 1 || messages < 1 || (!workload_mq && strcmp(workload, "pipe"))) {
        fprintf(stderr, "herd: --waiters and --messages must be at least 1, --workload pipe|mq\n");
        return 2;
    }

    struct herdless_options options;
    herdless_options_init(&options);
    options.backend = backend;
    options.rotate_every = rotate;
    options.max_members = (size_t)waiters;
    herdless_group group;
    int rc = herdless_group_new(&options, &group);
    if (rc < 0) die("herdless_group_new", rc);

    /* Shared memory: the board and the per-waiter figures (forked waiters write there too). */
    size_t bytes = sizeof(struct board) + (size_t)waiters * (3 * sizeof(uint64_t) + sizeof(int));
    void *shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED) die("mmap", 0);
    board = shm;
    msgs = (uint64_t *)(board + 1);
    empty = msgs + waiters;
    switches_of = empty + waiters;
    tids = (_Atomic int *)(switches_of + waiters);

    /* The channel: the waiters' side non-blocking, the producer's side blocking. */
    int write_fd = -1;
    char mq_name[64] = "";
    long depth = 0;
    if (workload_mq) {
        struct rlimit lim;
        if (getrlimit(RLIMIT_MSGQUEUE, &lim) == 0) {
            lim.rlim_cur = lim.rlim_max;
            setrlimit(RLIMIT_MSGQUEUE, &lim);
        }
        snprintf(mq_name, sizeof mq_name, "/herdless-c-herd-%d", (int)getpid());
        mq_unlink(mq_name);
        for (depth = 65536;; depth = depth / 2 > 10 ? depth / 2 : 10) {
            struct mq_attr attr = {.mq_maxmsg = depth, .mq_msgsize = 8};
            data_fd = mq_open(mq_name, O_CREAT | O_EXCL | O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0600,
                              &attr);
            if (data_fd >= 0 || depth == 10 ||
                !(errno == EINVAL || errno == EMFILE || errno == ENOMEM))
                break;
        }
        if (data_fd < 0) die("mq_open", 0);
        write_fd = mq_open(mq_name, O_WRONLY | O_CLOEXEC);
        if (write_fd < 0) die("mq_open (producer)", 0);
    } else {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) die("pipe", 0);
        data_fd = p[0];
        write_fd = p[1];
        fcntl(data_fd, F_SETFL, fcntl(data_fd, F_GETFL) | O_NONBLOCK);
    }
    int stop[2];
    if (pipe2(stop, O_CLOEXEC) != 0) die("pipe", 0);
    stop_fd = stop[0];

    pthread_t *threads = calloc((size_t)waiters, sizeof *threads);
    struct thread_arg *args = calloc((size_t)waiters, sizeof *args);
    pid_t *pids = calloc((size_t)waiters, sizeof *pids);
    for (int i = 0; i < waiters; i++) {
        if (processes) {
            pid_t pid = fork();
            if (pid < 0) die("fork", 0);
            if (pid == 0) {
                close(write_fd);
                close(stop[1]);
                herdless_waiter w;
                int jrc = herdless_join(group, &w); /* joined in the child */
                if (jrc < 0) die("herdless_join (child)", jrc);
                waiter_loop(w, i);
                herdless_leave(w);
                _exit(0);
            }
            pids[i] = pid;
        } else {
            args[i].index = i;
            rc = herdless_join(group, &args[i].waiter); /* in order: registration order */
            if (rc < 0) die("herdless_join", rc);
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setstacksize(&attr, 256 * 1024);
            if (pthread_create(&threads[i], &attr, thread_main, &args[i]) != 0)
                die("pthread_create", 0);
            pthread_attr_destroy(&attr);
        }
    }
    for (int i = 0; i < waiters; i++) {
        if (processes) {
            until_asleep(pids[i], pids[i]);
        } else {
            while (tids[i] == 0) sched_yield();
            until_asleep(getpid(), tids[i]);
        }
    }

    /* Produce as fast as the channel takes it; the last id is marked. */
    uint64_t start_ns = now_ns();
    for (uint64_t i = 0; i < messages; i++) {
        uint64_t id = i + 1 == messages ? (i | LAST) : i;
        int ok;
        do {
            ok = workload_mq ? mq_send(write_fd, (const char *)&id, sizeof id, 0) == 0
                             : write(write_fd, &id, sizeof id) == (ssize_t)sizeof id;
        } while (!ok && errno == EINTR);
        if (!ok) die("write", 0);
    }
    uint64_t deadline = now_ns() + 120ull * 1000000000ull;
    while (board->end_ns == 0 && !board->failed) {
        if (now_ns() > deadline) {
            fprintf(stderr, "herd: the last message was never read\n");
            for (int i = 0; processes && i < waiters; i++) kill(pids[i], SIGKILL);
            return 2;
        }
        usleep(1000);
    }
    close(write_fd);
    close(stop[1]); /* hang-up: every waiter stops */
    for (int i = 0; i < waiters; i++) {
        if (processes) {
            int status;
            waitpid(pids[i], &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) board->failed = 1;
        } else {
            pthread_join(threads[i], NULL);
        }
    }
    if (workload_mq) mq_unlink(mq_name);

    uint64_t read_total = 0, kernel = 0, wasted = 0, lo = UINT64_MAX, hi = 0;
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < waiters; i++) {
        read_total += msgs[i];
        kernel += switches_of[i];
        wasted += empty[i];
        lo = msgs[i] < lo ? msgs[i] : lo;
        hi = msgs[i] > hi ? msgs[i] : hi;
        sum += (double)msgs[i];
        sum_sq += (double)msgs[i] * (double)msgs[i];
    }
    double jain = sum_sq > 0 ? sum * sum / ((double)waiters * sum_sq) : 0;
    double seconds = (double)(board->end_ns - start_ns) / 1e9;
    struct rusage children;
    getrusage(RUSAGE_CHILDREN, &children);
    const char *backend_name = herdless_group_backend(group) == HERDLESS_BACKEND_EMULATED
                                   ? "emulated"
                                   : "native";
    char depth_note[48] = "";
    if (workload_mq) snprintf(depth_note, sizeof depth_note, ", queue depth %ld", depth);
    char rotate_name[16] = "adaptive";
    if (rotate != HERDLESS_ROTATE_ADAPTIVE) snprintf(rotate_name, sizeof rotate_name, "%u", rotate);
    printf("herd (C, herdless_poll): %s%s, %d %s, %s backend, rotate_every %s: %llu messages\n",
           workload, depth_note, waiters, processes ? "processes" : "threads", backend_name,
           rotate_name, (unsigned long long)messages);
    printf("  wall time        %.3f s\n", seconds);
    printf("  kernel wake-ups  %llu (%.2f per message; voluntary context switches)\n",
           (unsigned long long)kernel, (double)kernel / (double)messages);
    if (processes)
        printf("  RUSAGE_CHILDREN  %ld voluntary switches over the children's whole lives\n",
               children.ru_nvcsw);
    printf("  wasted wake-ups  %llu (reads that found nothing)\n", (unsigned long long)wasted);
    printf("  per waiter       min %llu, mean %.1f, max %llu; Jain %.4f\n",
           (unsigned long long)lo, sum / waiters, (unsigned long long)hi, jain);
    if (!quiet) {
        printf("  counts          ");
        for (int i = 0; i < waiters; i++) printf(" %llu", (unsigned long long)msgs[i]);
        printf("\n");
    }
    printf("RESULT workload=%s waiters=%d processes=%d backend=%s messages=%llu read=%llu "
           "seconds=%.4f kernel_wakeups=%llu wasted=%llu jain=%.4f\n",
           workload, waiters, processes, backend_name, (unsigned long long)messages,
           (unsigned long long)read_total, seconds, (unsigned long long)kernel,
           (unsigned long long)wasted, jain);
    herdless_group_free(group);
    if (board->failed || read_total != messages) {
        fprintf(stderr, "herd: %llu messages written, %llu read%s\n",
                (unsigned long long)messages, (unsigned long long)read_total,
                board->failed ? ", and a waiter failed" : "");
        return 1;
    }
    return 0;
}
