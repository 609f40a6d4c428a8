/* herdless_poll speaks poll()'s language: the same bad input gets the same answer from both
 * (-1 and errno; POLLNVAL in revents), a signal handler ends the wait with -1/EINTR as it ends
 * poll() (also one the wait's signalfd does not see: a SIGTRAP from another thread, glibc's
 * SIGSETXID of another thread's setuid), and every call looks each number up again as poll() does: a number closed and
 * reused (a new pipe, mq_close + mq_open, a reopened FIFO, dup2 over it) is watched anew, a
 * closed one gets POLLNVAL, herdless_delete then herdless_poll watches it again. A descriptor
 * that cannot be watched exclusively gets its error (-1/EPERM), never "always ready".
 * Usage: poll_errors native|emulated. Exit 0 if every check holds. */
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

static int failures = 0;

static void check(const char *what, long got, long want) {
    printf("%s %-70s got %ld want %ld\n", got == want ? "ok  " : "FAIL", what, got, want);
    failures += got != want;
}

/* herdless_poll's answer to an interrupted wait, as poll(2) gives it: -1, errno EINTR, and
 * herdless_last_error() HERDLESS_EINTR. */
static void check_poll_eintr(const char *what, int rc, int err) {
    char line[160];
    snprintf(line, sizeof line, "%s: herdless_poll returns -1", what);
    check(line, rc, -1);
    snprintf(line, sizeof line, "%s: herdless_poll errno EINTR", what);
    check(line, err, EINTR);
    snprintf(line, sizeof line, "%s: herdless_last_error is HERDLESS_EINTR", what);
    check(line, herdless_last_error(), HERDLESS_EINTR);
}

static herdless_waiter w;

/* A pipe whose read end is non-blocking, as a descriptor shared with HERDLESS_POLLEXCL must be
 * (a blocking one is refused with HERDLESS_EBLOCKING). */
static int shared_pipe(int fds[2]) {
    if (pipe(fds) != 0) return -1;
    return fcntl(fds[0], F_SETFL, O_NONBLOCK);
}
static int excl = HERDLESS_POLLEXCL | HERDLESS_POLLONE;

/* One call of each on a copy of the same array: return, errno and every revents compared. */
static void same_answer(const char *what, struct pollfd *fds, nfds_t n, int timeout_ms) {
    struct pollfd plain[8], h[8];
    nfds_t i;
    int pn, perr, hn, herr;
    char line[200];
    for (i = 0; i < n; i++) {
        plain[i] = fds[i];
        h[i] = fds[i];
        h[i].events |= (short)excl;
    }
    errno = 0;
    pn = poll(plain, n, timeout_ms);
    perr = pn < 0 ? errno : 0;
    herdless_poll(w, NULL, 0, 0); /* no registrations left from the last case */
    errno = 0;
    hn = herdless_poll(w, h, n, timeout_ms);
    herr = hn < 0 ? errno : 0;
    snprintf(line, sizeof line, "%s: return as poll()", what);
    check(line, hn, pn);
    snprintf(line, sizeof line, "%s: errno as poll()", what);
    check(line, herr, perr);
    for (i = 0; i < n; i++) {
        snprintf(line, sizeof line, "%s: revents[%d] as poll()", what, (int)i);
        check(line, h[i].revents, plain[i].revents);
    }
}

static volatile sig_atomic_t alarms = 0;
static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

static void handle(int sig, void (*handler)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void alarm_in_ms(long first, long every) {
    struct itimerval t;
    memset(&t, 0, sizeof t);
    t.it_value.tv_sec = first / 1000;
    t.it_value.tv_usec = (first % 1000) * 1000;
    t.it_interval.tv_sec = every / 1000;
    t.it_interval.tv_usec = (every % 1000) * 1000;
    setitimer(ITIMER_REAL, &t, NULL);
}

static long ms_since(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

/* A signal during the wait: -1/EINTR from both, soon, with the handler run once. */
static void interrupted(const char *what, int fd, int flags) {
    struct pollfd pfd;
    struct timespec start;
    int rc, err;
    char line[200];
    handle(SIGALRM, on_alarm, flags);

    pfd.fd = fd;
    pfd.events = POLLIN;
    alarms = 0;
    alarm_in_ms(50, 0);
    rc = poll(&pfd, 1, 5000);
    err = errno;
    snprintf(line, sizeof line, "%s: poll() returns -1", what);
    check(line, rc, -1);
    snprintf(line, sizeof line, "%s: poll() errno EINTR", what);
    check(line, err, EINTR);

    pfd.events = (short)(POLLIN | excl);
    alarms = 0;
    clock_gettime(CLOCK_MONOTONIC, &start);
    alarm_in_ms(50, 0);
    rc = herdless_poll(w, &pfd, 1, 5000);
    err = errno;
    check_poll_eintr(what, rc, err);
    snprintf(line, sizeof line, "%s: the handler ran once before the return", what);
    check(line, alarms, 1);
    snprintf(line, sizeof line, "%s: returned well before the 5 s timeout", what);
    check(line, ms_since(&start) < 4000, 1);
    alarm_in_ms(0, 0);
}

/* A handler that runs past the signalfd: the wait blocks every catchable signal and watches
 * them through a signalfd, but never blocks the synchronous ones (SIGTRAP here, sent by
 * another thread) nor glibc's own (the SIGSETXID every thread runs when another thread calls
 * setuid). Their handler ends the kernel wait itself, which the Rust waiter reports as
 * Events::interrupted(): the C calls answer it as poll() does, -1/EINTR and HERDLESS_EINTR. */
static pthread_t waiting_thread;
static int past_how;
static volatile sig_atomic_t traps = 0;
static void on_trap(int sig) {
    (void)sig;
    traps++;
}
static void *interrupt_later(void *arg) {
    (void)arg;
    usleep(50000);
    if (past_how == 0) {
        if (setuid(getuid()) != 0) perror("setuid");
    } else {
        pthread_kill(waiting_thread, SIGTRAP);
    }
    return NULL;
}
static void interrupted_past_the_signalfd(const char *what, int fd, int how) {
    pthread_t helper;
    struct pollfd pfd;
    struct timespec start;
    herdless_event ev[2];
    int rc, err;
    char line[200];
    past_how = how;
    waiting_thread = pthread_self();
    handle(SIGTRAP, on_trap, 0);

    pfd.fd = fd;
    pfd.events = POLLIN;
    pthread_create(&helper, NULL, interrupt_later, NULL);
    errno = 0;
    rc = poll(&pfd, 1, 5000);
    err = errno;
    pthread_join(helper, NULL);
    snprintf(line, sizeof line, "%s: poll() returns -1/EINTR", what);
    check(line, rc == -1 && err == EINTR, 1);

    herdless_poll(w, NULL, 0, 0);
    pfd.events = (short)(POLLIN | excl);
    traps = 0;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_create(&helper, NULL, interrupt_later, NULL);
    errno = 0;
    rc = herdless_poll(w, &pfd, 1, 5000);
    err = errno;
    pthread_join(helper, NULL);
    check_poll_eintr(what, rc, err);
    snprintf(line, sizeof line, "%s: herdless_poll returned well before its 5 s", what);
    check(line, ms_since(&start) < 4000, 1);

    herdless_poll(w, NULL, 0, 0);
    herdless_add(w, fd, 7, HERDLESS_READABLE | HERDLESS_EXCLUSIVE);
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_create(&helper, NULL, interrupt_later, NULL);
    errno = 0;
    rc = herdless_wait(w, ev, 2, 5000);
    err = errno;
    pthread_join(helper, NULL);
    snprintf(line, sizeof line, "%s: herdless_wait returns HERDLESS_EINTR", what);
    check(line, rc, HERDLESS_EINTR);
    snprintf(line, sizeof line, "%s: herdless_wait errno EINTR", what);
    check(line, err, EINTR);
    snprintf(line, sizeof line, "%s: herdless_wait returned well before its 5 s", what);
    check(line, ms_since(&start) < 4000, 1);
    if (how == 1) {
        snprintf(line, sizeof line, "%s: the handler ran in the waiting thread, twice", what);
        check(line, traps, 2);
    }
    herdless_delete(w, fd);
}

/* No handler to run (ignored, or SIGCHLD's default): no EINTR, from either; the timeout. */
static void not_interrupted(int fd) {
    struct pollfd pfd;
    pid_t child;
    int status;
    pfd.fd = fd;
    pfd.events = POLLIN;

    handle(SIGALRM, SIG_IGN, 0);
    alarm_in_ms(20, 10);
    same_answer("SIGALRM ignored, every 10 ms: a 150 ms timeout", &pfd, 1, 150);
    alarm_in_ms(0, 0);

    /* SIGCHLD with its default action (ignore), from a child exiting 30 ms into the wait. */
    handle(SIGCHLD, SIG_DFL, 0);
    child = fork();
    if (child == 0) {
        usleep(30000);
        _exit(0);
    }
    check("SIGCHLD (default: ignore) during poll(): the timeout, 0", poll(&pfd, 1, 150), 0);
    waitpid(child, &status, 0);
    pfd.events = (short)(POLLIN | excl);
    child = fork();
    if (child == 0) {
        usleep(30000);
        _exit(0);
    }
    check("SIGCHLD (default: ignore) during herdless_poll: the timeout, 0",
          herdless_poll(w, &pfd, 1, 150), 0);
    waitpid(child, &status, 0);
}

int main(int argc, char **argv) {
    struct herdless_options options;
    herdless_group group;
    struct pollfd one, two[2], big[300];
    struct rlimit old_limit, low;
    int a[2], b[2], p[2], q[2], n, i, file, fifo, writer, reused;
    char name[64], fifo_path[64], byte = 'x';
    mqd_t m, m2;
    struct pollfd *volatile nothing = NULL;
    struct mq_attr attr;

    herdless_options_init(&options);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    if (herdless_group_new(&options, &group) < 0 || herdless_join(group, &w) < 0) return 2;
    if (shared_pipe(a) || shared_pipe(b)) return 2;

    /* ---- the same bad input, the same answer ---- */
    errno = 0;
    n = poll(nothing, 1, 0); /* a NULL the compiler cannot see, so it does not warn */
    check("poll(NULL, 1): -1", n, -1);
    check("poll(NULL, 1): EFAULT", errno, EFAULT);
    errno = 0;
    n = herdless_poll(w, NULL, 1, 0);
    check("herdless_poll(NULL, 1): -1", n, -1);
    check("herdless_poll(NULL, 1): EFAULT", errno, EFAULT);
    check("herdless_poll(NULL, 1): herdless_last_error HERDLESS_ENULL", herdless_last_error(),
          HERDLESS_ENULL);

    getrlimit(RLIMIT_NOFILE, &old_limit);
    low = old_limit;
    low.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &low);
    for (i = 0; i < 300; i++) {
        big[i].fd = -1;
        big[i].events = POLLIN;
    }
    errno = 0;
    n = poll(big, 300, 0);
    check("poll(300 entries, RLIMIT_NOFILE 64): -1", n, -1);
    check("poll(300 entries, RLIMIT_NOFILE 64): EINVAL", errno, EINVAL);
    errno = 0;
    n = herdless_poll(w, big, 300, 0);
    check("herdless_poll(300 entries, RLIMIT_NOFILE 64): -1", n, -1);
    check("herdless_poll(300 entries, RLIMIT_NOFILE 64): EINVAL", errno, EINVAL);
    setrlimit(RLIMIT_NOFILE, &old_limit);

    /* Bad descriptors: POLLNVAL in revents, the count includes them; -1 is ignored. */
    if (pipe(p)) return 2;
    close(p[0]);
    close(p[1]); /* p[0] and p[1] are closed numbers until the next open */
    one.fd = p[0];
    one.events = POLLIN;
    same_answer("a closed descriptor", &one, 1, 1000);
    two[0].fd = p[0];
    two[0].events = POLLIN;
    two[1].fd = -1;
    two[1].events = POLLIN;
    same_answer("a closed descriptor and fd -1", two, 2, 1000);
    if (write(a[1], &byte, 1) != 1) return 2;
    two[1].fd = a[0];
    same_answer("a closed descriptor and a readable pipe: both reported", two, 2, 1000);
    if (read(a[0], &byte, 1) != 1) return 2;
    two[0].fd = -1;
    two[1].fd = a[0];
    same_answer("fd -1 and an empty pipe: the timeout", two, 2, 50);

    /* A regular file: without POLLEXCL poll()'s answer (always ready); with it, its error. */
    file = open(argv[0], O_RDONLY);
    one.fd = file;
    one.events = POLLIN;
    excl = HERDLESS_POLLONE;
    same_answer("a regular file without HERDLESS_POLLEXCL: always ready", &one, 1, 1000);
    excl = HERDLESS_POLLEXCL | HERDLESS_POLLONE;
    one.events = (short)(POLLIN | HERDLESS_POLLEXCL);
    errno = 0;
    n = herdless_poll(w, &one, 1, 1000);
    check("a regular file with HERDLESS_POLLEXCL: -1 (never always-ready)", n, -1);
    check("a regular file with HERDLESS_POLLEXCL: errno EPERM", errno, EPERM);
    check("a regular file with HERDLESS_POLLEXCL: HERDLESS_EUNWATCHABLE", herdless_last_error(),
          HERDLESS_EUNWATCHABLE);
    check("... and its message names the descriptor",
          strstr(herdless_strerror(HERDLESS_EUNWATCHABLE), "descriptor") != NULL, 1);
    close(file);
    /* The same for /dev/null and an epoll descriptor, on both backends. */
    {
        int devnull = open("/dev/null", O_RDONLY), ep = epoll_create1(0);
        one.fd = devnull;
        one.events = (short)(POLLIN | HERDLESS_POLLEXCL);
        errno = 0;
        n = herdless_poll(w, &one, 1, 1000);
        check("/dev/null with HERDLESS_POLLEXCL: -1/EPERM", n == -1 && errno == EPERM, 1);
        one.fd = ep;
        errno = 0;
        n = herdless_poll(w, &one, 1, 1000);
        check("an epoll descriptor with HERDLESS_POLLEXCL: -1/EPERM", n == -1 && errno == EPERM, 1);
        close(devnull);
        close(ep);
    }

    /* ---- signals ---- */
    interrupted("SIGALRM handler, no SA_RESTART", a[0], 0);
    interrupted("SIGALRM handler, SA_RESTART (poll() is never restarted)", a[0], SA_RESTART);
    not_interrupted(a[0]);
    /* Ready data and a signal: the count, and the handler runs on the way out. */
    handle(SIGALRM, on_alarm, 0);
    alarms = 0;
    if (write(a[1], &byte, 1) != 1) return 2;
    one.fd = a[0];
    one.events = (short)(POLLIN | excl);
    raise(SIGALRM); /* before the call: handled at once, as before poll() */
    n = herdless_poll(w, &one, 1, 1000);
    check("data ready after a handled signal: 1", n, 1);
    if (read(a[0], &byte, 1) != 1) return 2;
    check("the signal's handler ran once", alarms, 1);
    /* herdless_wait follows the same rule: HERDLESS_EINTR (and errno EINTR). */
    {
        herdless_event ev[2];
        herdless_poll(w, NULL, 0, 0);
        herdless_add(w, a[0], 7, HERDLESS_READABLE | HERDLESS_EXCLUSIVE);
        alarms = 0;
        alarm_in_ms(50, 0);
        errno = 0;
        n = herdless_wait(w, ev, 2, 5000);
        check("herdless_wait interrupted by a handler: HERDLESS_EINTR", n, HERDLESS_EINTR);
        check("herdless_wait interrupted by a handler: errno EINTR", errno, EINTR);
        check("herdless_wait: the handler ran once", alarms, 1);
        herdless_delete(w, a[0]);
    }

    interrupted_past_the_signalfd("another thread's setuid (glibc's SIGSETXID)", a[0], 0);
    interrupted_past_the_signalfd("SIGTRAP sent to the waiting thread", a[0], 1);

    /* ---- each number looked up on every call ---- */
    /* A registered pipe closed: POLLNVAL. Its number reused by a new pipe: watched anew. */
    if (shared_pipe(p)) return 2;
    one.fd = p[0];
    one.events = (short)(POLLIN | excl);
    check("a pipe registered (nothing ready)", herdless_poll(w, &one, 1, 0), 0);
    close(p[0]);
    check("... closed: 1 entry", herdless_poll(w, &one, 1, 1000), 1);
    check("... closed: POLLNVAL", one.revents, POLLNVAL);
    close(p[1]);
    if (shared_pipe(q)) return 2;
    check("a new pipe took the closed number", q[0], p[0]);
    if (write(q[1], &byte, 1) != 1) return 2;
    check("the reused number is watched anew: 1 entry", herdless_poll(w, &one, 1, 2000), 1);
    check("the reused number is watched anew: POLLIN", one.revents, POLLIN);
    if (read(q[0], &byte, 1) != 1) return 2;
    /* Closed and reused between two calls, without a call seeing it closed. */
    close(q[0]);
    close(q[1]);
    if (shared_pipe(p)) return 2;
    check("a third pipe took the number", p[0], q[0]);
    if (write(p[1], &byte, 1) != 1) return 2;
    check("closed and reused between calls: watched anew", herdless_poll(w, &one, 1, 2000), 1);
    if (read(p[0], &byte, 1) != 1) return 2;
    /* dup2 over a registered number. */
    check("dup2 over the registered number", dup2(b[0], p[0]), p[0]);
    if (write(b[1], &byte, 1) != 1) return 2;
    check("dup2'd: the new file is watched: 1 entry", herdless_poll(w, &one, 1, 2000), 1);
    check("dup2'd: POLLIN", one.revents, POLLIN);
    if (read(b[0], &byte, 1) != 1) return 2;
    close(p[0]);
    close(p[1]);

    /* herdless_delete, then herdless_poll: registered again. */
    one.fd = a[0];
    check("a pipe registered by herdless_poll", herdless_poll(w, &one, 1, 0), 0);
    check("herdless_delete of it", herdless_delete(w, a[0]), HERDLESS_OK);
    if (write(a[1], &byte, 1) != 1) return 2;
    check("herdless_poll after herdless_delete watches it again", herdless_poll(w, &one, 1, 2000),
          1);
    if (read(a[0], &byte, 1) != 1) return 2;

    /* A POSIX message queue closed and opened again: same queue, same inode, same number. */
    snprintf(name, sizeof name, "/herdless-poll-errors-%d", (int)getpid());
    memset(&attr, 0, sizeof attr);
    attr.mq_maxmsg = 4;
    attr.mq_msgsize = 8;
    m = mq_open(name, O_CREAT | O_RDWR | O_NONBLOCK, 0600, &attr);
    if (m == (mqd_t)-1) return 2;
    one.fd = (int)m;
    check("a message queue registered (empty)", herdless_poll(w, &one, 1, 0), 0);
    mq_close(m);
    m2 = mq_open(name, O_RDWR | O_NONBLOCK);
    check("mq_open after mq_close took the same number", (int)m2, (int)m);
    if (mq_send(m2, "x", 1, 0) != 0) return 2;
    check("the reopened queue is watched anew: 1 entry", herdless_poll(w, &one, 1, 2000), 1);
    check("the reopened queue is watched anew: POLLIN", one.revents, POLLIN);
    mq_close(m2);
    check("the closed queue: POLLNVAL", herdless_poll(w, &one, 1, 1000) == 1 &&
                                            one.revents == POLLNVAL, 1);
    mq_unlink(name);

    /* A named FIFO reopened: same inode, same number. */
    snprintf(fifo_path, sizeof fifo_path, "/tmp/herdless-fifo-%d", (int)getpid());
    if (mkfifo(fifo_path, 0600) != 0) return 2;
    fifo = open(fifo_path, O_RDONLY | O_NONBLOCK);
    writer = open(fifo_path, O_WRONLY | O_NONBLOCK);
    one.fd = fifo;
    check("a FIFO registered (empty)", herdless_poll(w, &one, 1, 0), 0);
    close(fifo);
    reused = open(fifo_path, O_RDONLY | O_NONBLOCK);
    check("the FIFO reopened on the same number", reused, fifo);
    if (write(writer, &byte, 1) != 1) return 2;
    check("the reopened FIFO is watched anew", herdless_poll(w, &one, 1, 2000), 1);
    close(reused);
    close(writer);
    unlink(fifo_path);

    herdless_leave(w);
    herdless_group_free(group);
    printf("%d check(s) failed\n", failures);
    return failures == 0 ? 0 : 1;
}
