/* herdless_poll_shared keeps poll()'s promises: without either bit it answers as poll() does
 * (the same count and revents, -1 ignored, POLLNVAL for a closed number); with HERDLESS_POLLEXCL
 * a closed number gets POLLNVAL at once, a number closed and reused is the new object's, a
 * signal handler ends the wait with -1/EINTR, a signal with nothing to run every millisecond
 * leaves the timeout whole, and two permission classes in one call are -1/ENOTSUP
 * (HERDLESS_ELINES). The backend is the environment's HERDLESS_BACKEND. Prints each check and
 * "N check(s) failed"; exit 0 if every check holds. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

#define SHARED (POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE)

static int failures = 0;

static void check(const char *what, long got, long want) {
    printf("%s %-66s got %ld want %ld\n", got == want ? "ok  " : "FAIL", what, got, want);
    failures += got != want;
}

static void shared_pipe(int p[2]) {
    if (pipe(p) != 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) != 0) exit(2);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static volatile sig_atomic_t alarms = 0;
static void on_alarm(int sig) { (void)sig; alarms++; }

static pthread_t poller;
static volatile int stop_signals = 0;
static void *signal_every_ms(void *arg) {
    int sig = *(int *)arg;
    struct timespec ms = {0, 1000000};
    while (!stop_signals) {
        pthread_kill(poller, sig);
        nanosleep(&ms, NULL);
    }
    return NULL;
}

int main(void) {
    int ready[2], idle[2], gone[2];
    shared_pipe(ready);
    shared_pipe(idle);
    shared_pipe(gone);
    close(gone[0]);
    close(gone[1]);
    if (write(ready[1], "x", 1) != 1) return 2;

    /* ---- without the bits: poll() itself ---- */
    struct pollfd sys[4] = {{ready[0], POLLIN, 0}, {idle[0], POLLIN, 0}, {gone[0], POLLIN, 0},
                            {-1, POLLIN, 0}};
    struct pollfd ours[4];
    memcpy(ours, sys, sizeof sys);
    int n_sys = poll(sys, 4, 0), n_ours = herdless_poll_shared(ours, 4, 0);
    check("no bits: the count poll() gives", n_ours, n_sys);
    for (int i = 0; i < 4; i++) {
        char line[96];
        snprintf(line, sizeof line, "no bits: entry %d's revents as poll()'s", i);
        check(line, ours[i].revents, sys[i].revents);
    }
    check("no bits: a closed number gets POLLNVAL", ours[2].revents, POLLNVAL);

    /* ---- with HERDLESS_POLLEXCL ---- */
    struct pollfd one = {gone[0], SHARED, 0};
    check("closed number: returns 1 at once", herdless_poll_shared(&one, 1, 5000), 1);
    check("closed number: POLLNVAL", one.revents, POLLNVAL);

    /* A number closed and reused: the new object's readiness, not the old one's. */
    int old[2], fresh[2];
    shared_pipe(old);
    if (write(old[1], "o", 1) != 1) return 2;
    one = (struct pollfd){old[0], SHARED, 0};
    check("old pipe: ready", herdless_poll_shared(&one, 1, 5000), 1);
    int number = old[0];
    close(old[0]);
    shared_pipe(fresh);
    if (fresh[0] != number) {
        if (dup2(fresh[0], number) != number) return 2;
        close(fresh[0]);
    }
    one = (struct pollfd){number, SHARED, 0};
    check("reused number: the new pipe is empty", herdless_poll_shared(&one, 1, 50), 0);
    if (write(fresh[1], "n", 1) != 1) return 2;
    check("reused number: the new pipe's byte", herdless_poll_shared(&one, 1, 5000), 1);
    check("reused number: POLLIN", one.revents, POLLIN);
    char c;
    check("reused number: reads the new pipe's byte", read(number, &c, 1) == 1 && c == 'n', 1);
    herdless_consumed_shared(number);

    /* A handler during the wait: -1/EINTR. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval t = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &t, NULL);
    one = (struct pollfd){idle[0], SHARED, 0};
    int rc = herdless_poll_shared(&one, 1, -1);
    int err = errno;
    check("a handler ran: -1", rc, -1);
    check("a handler ran: errno EINTR", err, EINTR);
    check("a handler ran: once", alarms, 1);

    /* A signal every ms: SIGWINCH (nothing to run) leaves the timeout whole; SIGALRM (a
     * handler) ends each wait with EINTR, and a loop on the time left ends at the deadline. */
    poller = pthread_self();
    int sigs[2] = {SIGWINCH, SIGALRM};
    for (int s = 0; s < 2; s++) {
        pthread_t sender;
        stop_signals = 0;
        alarms = 0;
        if (pthread_create(&sender, NULL, signal_every_ms, &sigs[s]) != 0) return 2;
        double start = now_ms(), deadline = start + 150;
        int interrupted = 0, result = 0;
        for (;;) {
            double left = deadline - now_ms();
            if (left < 0) left = 0;
            one = (struct pollfd){idle[0], SHARED, 0};
            rc = herdless_poll_shared(&one, 1, (int)left + 1);
            if (rc < 0 && errno == EINTR) interrupted++;
            if (rc > 0 || (rc < 0 && errno != EINTR)) { result = rc; break; }
            if (now_ms() >= deadline) { result = 0; break; }
        }
        double took = now_ms() - start;
        stop_signals = 1;
        pthread_join(sender, NULL);
        char line[96];
        snprintf(line, sizeof line, "%s every ms: ends with 0 (its timeout)", s ? "SIGALRM" : "SIGWINCH");
        check(line, result, 0);
        snprintf(line, sizeof line, "%s every ms: not before its 150 ms", s ? "SIGALRM" : "SIGWINCH");
        check(line, took >= 150, 1);
        snprintf(line, sizeof line, "%s every ms: EINTR seen", s ? "SIGALRM" : "SIGWINCH");
        check(line, interrupted > 0, s == 1);
        printf("     (%.0f ms, %d EINTR)\n", took, interrupted);
    }

    /* Two permission classes in one call: an anonymous pipe (the caller's line) and a FIFO of
     * mode 0644 (its owner's 0666 line). */
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/herdless-shared-errors-%d", (int)getpid());
    if (mkfifo(fifo, 0600) != 0 || chmod(fifo, 0644) != 0) return 2;
    int f = open(fifo, O_RDWR | O_NONBLOCK);
    unlink(fifo);
    if (f < 0) return 2;
    struct pollfd two[2] = {{idle[0], SHARED, 0}, {f, SHARED, 0}};
    rc = herdless_poll_shared(two, 2, 0);
    err = errno;
    check("two classes: -1", rc, -1);
    check("two classes: errno ENOTSUP", err, ENOTSUP);
    check("two classes: HERDLESS_ELINES", herdless_last_error(), HERDLESS_ELINES);
    printf("     %s\n", herdless_strerror(HERDLESS_ELINES));

    printf("%d check(s) failed\n", failures);
    return failures != 0;
}
