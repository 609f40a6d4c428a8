/* herdless_leave against a call on the same waiter in another thread: one thread leaves a
 * waiter while another calls herdless_wait(-1) (odd rounds: herdless_poll(-1)) on it, the
 * leave coming at a different moment of the other call each round (before it, inside its
 * handle lookup, while it sleeps). Every round must end: the leave returns HERDLESS_OK, and
 * the other call returns HERDLESS_EBADHANDLE (herdless_poll: -1, errno EBADF), either because
 * it came after the leave or because the leave woke it; herdless_notify afterwards says
 * HERDLESS_EBADHANDLE. A round that does not end within the alarm fails the program.
 * Usage: leave_race native|emulated [rounds]. Exit 0 if every round held. */
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

static herdless_waiter w;
static volatile int round_no = 0;
static int use_poll = 0;
static int got = 0, got_errno = 0;
static int pipe_fd[2];

static void on_alarm(int sig) {
    char line[96];
    int n = snprintf(line, sizeof line, "HUNG: round %d did not end within the alarm\n",
                     round_no);
    (void)sig;
    if (n > 0 && write(1, line, (size_t)n) < 0) _exit(4);
    _exit(3);
}

static void *waiting(void *arg) {
    (void)arg;
    errno = 0;
    if (use_poll) {
        struct pollfd pfd;
        pfd.fd = pipe_fd[0];
        pfd.events = (short)(POLLIN | HERDLESS_POLLEXCL);
        got = herdless_poll(w, &pfd, 1, -1);
    } else {
        herdless_event ev[4];
        got = herdless_wait(w, ev, 4, -1);
    }
    got_errno = errno;
    return NULL;
}

/* A pseudo-random pause of 0 to about 200 microseconds, spun (no sleep: the moments inside a
 * call's lookup are a few hundred nanoseconds wide). */
static void pause_some(unsigned *seed) {
    struct timespec start, now;
    long ns = (long)(rand_r(seed) % 200000);
    if (rand_r(seed) % 4 == 0) return; /* a quarter of the rounds leave at once */
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < ns);
}

int main(int argc, char **argv) {
    struct herdless_options options;
    herdless_group group;
    struct sigaction sa;
    pthread_t thread;
    unsigned seed = (unsigned)getpid();
    int rounds = argc > 2 ? atoi(argv[2]) : 100;
    int i, rc, failures = 0, busy = 0;

    setvbuf(stdout, NULL, _IONBF, 0); /* a hang's _exit loses nothing printed */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    herdless_options_init(&options);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    if (herdless_group_new(&options, &group) < 0) return 2;
    if (pipe(pipe_fd)) return 2;
    /* A shared descriptor is non-blocking (an exclusive registration refuses one that is not). */
    if (fcntl(pipe_fd[0], F_SETFL, fcntl(pipe_fd[0], F_GETFL) | O_NONBLOCK)) return 2;

    for (i = 0; i < rounds; i++) {
        round_no = i;
        use_poll = i % 2;
        got = 12345;
        if (herdless_join(group, &w) != HERDLESS_OK) return 2;
        if (!use_poll && herdless_add(w, pipe_fd[0], 1, HERDLESS_READABLE | HERDLESS_EXCLUSIVE))
            return 2;
        alarm(30); /* a round takes microseconds; 30 s is a hang on any machine */
        if (pthread_create(&thread, NULL, waiting, NULL)) return 2;
        pause_some(&seed);
        rc = herdless_leave(w);
        while (rc == HERDLESS_EBUSY) {
            /* What the old contract asked for (wake it, leave again); the new one never
             * answers EBUSY, which the check below counts as a failure. */
            busy++;
            herdless_notify(w);
            rc = herdless_leave(w);
        }
        pthread_join(thread, NULL);
        alarm(0);
        if (rc != HERDLESS_OK) {
            printf("FAIL round %d: herdless_leave returned %d (%s)\n", i, rc,
                   herdless_strerror(rc));
            failures++;
        }
        if (use_poll ? (got != -1 || got_errno != EBADF) : got != HERDLESS_EBADHANDLE) {
            printf("FAIL round %d: %s returned %d (errno %d), want %s\n", i,
                   use_poll ? "herdless_poll" : "herdless_wait", got, got_errno,
                   use_poll ? "-1/EBADF" : "HERDLESS_EBADHANDLE");
            failures++;
        }
        if (herdless_notify(w) != HERDLESS_EBADHANDLE) {
            printf("FAIL round %d: herdless_notify after the leave is not EBADHANDLE\n", i);
            failures++;
        }
    }
    if (busy) {
        printf("FAIL: herdless_leave answered HERDLESS_EBUSY %d time(s)\n", busy);
        failures++;
    }
    herdless_group_free(group);
    printf("%d round(s), %d check(s) failed; every round ended\n", rounds, failures);
    return failures == 0 ? 0 : 1;
}
