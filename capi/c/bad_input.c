/* Bad input from C: every case must come back as a code (and a message), never a crash.
 * Prints one line per case; exits 0 if every case got the expected code.
 * Usage: bad_input native|emulated */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "herdless.h"

static int failures = 0;

static void expect(const char *what, int got, int want) {
    int ok = (got == want);
    printf("%s %-58s -> %3d %s\n", ok ? "ok  " : "FAIL", what, got,
           got < 0 ? herdless_strerror(got) : "");
    if (!ok) {
        printf("     expected %d (%s)\n", want, herdless_strerror(want));
        failures++;
    }
}

#define EXPECT(call, want) expect(#call, (call), (want))

struct busy {
    herdless_waiter waiter;
    int result;
};

static void *wait_forever(void *arg) {
    struct busy *b = arg;
    herdless_event ev[4];
    do { /* EBUSY while the main thread is inside a call on the waiter */
        b->result = herdless_wait(b->waiter, ev, 4, -1);
    } while (b->result == HERDLESS_EBUSY);
    return NULL;
}

int main(int argc, char **argv) {
    struct herdless_options options;
    EXPECT(herdless_options_init(NULL), HERDLESS_ENULL);
    EXPECT(herdless_options_init(&options), HERDLESS_OK);
    /* The default turn rule is the adaptive one, as in the Rust API. */
    EXPECT(options.rotate_every == HERDLESS_ROTATE_ADAPTIVE, 1);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    herdless_group group;
    EXPECT(herdless_group_new(&options, NULL), HERDLESS_ENULL);
    struct herdless_options bad = options;
    bad.max_members = 0;
    EXPECT(herdless_group_new(&bad, &group), HERDLESS_EINVAL);
    bad = options;
    bad.backend = 7;
    EXPECT(herdless_group_new(&bad, &group), HERDLESS_EINVAL);
    EXPECT(herdless_group_new(&options, &group), HERDLESS_OK);

    herdless_waiter waiter;
    EXPECT(herdless_join(group, NULL), HERDLESS_ENULL);
    EXPECT(herdless_join((herdless_group){0}, &waiter), HERDLESS_EBADHANDLE);
    EXPECT(herdless_join((herdless_group){0x47000099000000ffull}, &waiter), HERDLESS_EBADHANDLE);
    EXPECT(herdless_join(group, &waiter), HERDLESS_OK);
    EXPECT(herdless_join((herdless_group){waiter.id}, &waiter), HERDLESS_EBADHANDLE);

    int file = open(argv[0], O_RDONLY); /* a regular file: this program */
    int p[2];
    if (file < 0 || pipe(p) != 0) return 2;
    int closed[2];
    if (pipe(closed) != 0) return 2;
    close(closed[0]); /* numbers not reused below: nothing is opened after this */
    close(closed[1]);
    uint32_t rx = HERDLESS_READABLE | HERDLESS_EXCLUSIVE;

    EXPECT(herdless_add(waiter, closed[0], 1, rx), HERDLESS_EBADF);
    EXPECT(herdless_add(waiter, -1, 1, rx), HERDLESS_EBADF);
    EXPECT(herdless_add(waiter, file, 1, rx), HERDLESS_EUNWATCHABLE);
    EXPECT(herdless_add(waiter, p[0], 1, 0), HERDLESS_EINVAL);
    EXPECT(herdless_add(waiter, p[0], 1, HERDLESS_PRIORITY | HERDLESS_EXCLUSIVE), HERDLESS_EINVAL);
    EXPECT(herdless_add(waiter, p[0], 1, rx | 0x100), HERDLESS_EINVAL);
    /* A blocking descriptor, exclusive: refused, the message naming C's fix; then non-blocking. */
    EXPECT(herdless_add(waiter, p[0], 1, rx), HERDLESS_EBLOCKING);
    expect("HERDLESS_EBLOCKING: errno EINVAL", errno, EINVAL);
    expect("herdless_strerror of HERDLESS_EBLOCKING names fcntl and O_NONBLOCK",
           strstr(herdless_strerror(HERDLESS_EBLOCKING), "fcntl") != NULL &&
               strstr(herdless_strerror(HERDLESS_EBLOCKING), "O_NONBLOCK") != NULL, 1);
    EXPECT(herdless_add(waiter, p[0], 1, HERDLESS_READABLE), HERDLESS_OK); /* not exclusive */
    EXPECT(herdless_modify(waiter, p[0], 1, rx), HERDLESS_EBLOCKING);
    EXPECT(herdless_delete(waiter, p[0]), HERDLESS_OK);
    struct pollfd blocking = {.fd = p[0], .events = POLLIN | HERDLESS_POLLEXCL};
    EXPECT(herdless_poll(waiter, &blocking, 1, 0), -1);
    EXPECT(herdless_last_error(), HERDLESS_EBLOCKING);
    EXPECT(herdless_poll(waiter, &blocking, 0, 0), 0);
    if (fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK) != 0) return 2;
    EXPECT(herdless_delete(waiter, p[0]), HERDLESS_ENOENT);
    EXPECT(herdless_modify(waiter, p[0], 1, rx), HERDLESS_ENOENT);
    EXPECT(herdless_add(waiter, p[0], 1, rx), HERDLESS_OK);
    EXPECT(herdless_add(waiter, p[0], 1, rx), HERDLESS_EEXIST);
    int code = herdless_add(waiter, p[0], 1, rx);
    const char *message = herdless_strerror(code);
    expect("herdless_strerror names the descriptor and the C remedy",
           strstr(message, "already registered") != NULL &&
               strstr(message, "herdless_modify") != NULL, 1);
    expect("herdless_strerror of an unknown code is a string", herdless_strerror(-999) != NULL, 1);
    expect("no code is -1 (poll's failure value)",
           HERDLESS_ENULL < -1 && HERDLESS_EINTR < -1 && HERDLESS_EPANIC < -1, 1);

    herdless_event events[4];
    EXPECT(herdless_wait(waiter, NULL, 4, 0), HERDLESS_ENULL);
    EXPECT(herdless_wait(waiter, events, 0, 0), HERDLESS_EINVAL);
    EXPECT(herdless_wait(waiter, events, 4, 0), 0);
    EXPECT(herdless_delete(waiter, p[0]), HERDLESS_OK);

    /* herdless_poll fails as poll() does: -1, errno, and the code in herdless_last_error. */
    EXPECT(herdless_poll(waiter, NULL, 1, 0), -1);
    expect("herdless_poll(NULL, 1): errno EFAULT", errno, EFAULT);
    EXPECT(herdless_last_error(), HERDLESS_ENULL);
    EXPECT(herdless_poll(waiter, NULL, 0, 0), 0);
    struct pollfd nval = {.fd = closed[0], .events = POLLIN | HERDLESS_POLLEXCL};
    EXPECT(herdless_poll(waiter, &nval, 1, 0), 1);
    expect("a closed descriptor in herdless_poll gets POLLNVAL, as in poll()",
           nval.revents == POLLNVAL, 1);
    struct pollfd pri = {.fd = p[0], .events = POLLPRI | HERDLESS_POLLEXCL};
    EXPECT(herdless_poll(waiter, &pri, 1, 0), -1);
    EXPECT(herdless_last_error(), HERDLESS_EINVAL);
    expect("POLLPRI with HERDLESS_POLLEXCL: errno EINVAL", errno, EINVAL);
    EXPECT(herdless_poll(waiter, &pri, 0, 0), 0);

    struct herdless_member_stats stats[4];
    EXPECT(herdless_stats(group, NULL, 4), HERDLESS_ENULL);
    EXPECT(herdless_stats(group, NULL, 0), 1);
    EXPECT(herdless_stats(group, stats, 4), 1);
    /* An empty wake-up the caller reports: counted in herdless_stats. */
    EXPECT(herdless_found_nothing(waiter, 5), HERDLESS_OK);
    EXPECT(herdless_found_nothing((herdless_waiter){0}, 5), HERDLESS_EBADHANDLE);
    EXPECT(herdless_stats(group, stats, 4), 1);
    expect("herdless_found_nothing counts an empty wake-up", (int)stats[0].empty_wakeups, 1);
    EXPECT(herdless_stats((herdless_group){0}, stats, 4), HERDLESS_EBADHANDLE);

    /* Another thread in a call on the waiter: EBUSY, but herdless_notify goes through. */
    struct busy b = {.waiter = waiter, .result = -100};
    pthread_t thread;
    pthread_create(&thread, NULL, wait_forever, &b);
    int busy = 0;
    for (int i = 0; i < 10000 && busy != HERDLESS_EBUSY; i++) {
        busy = herdless_member(waiter); /* no side effect: a probe until the thread waits */
        if (busy != HERDLESS_EBUSY) usleep(1000);
    }
    expect("herdless_member while another thread waits on the waiter", busy, HERDLESS_EBUSY);
    EXPECT(herdless_add(waiter, p[0], 1, rx), HERDLESS_EBUSY);
    EXPECT(herdless_notify(waiter), HERDLESS_OK);
    pthread_join(thread, NULL);
    expect("the notified herdless_wait returned 0", b.result, 0);

    /* Another thread leaves the waiter while a thread waits on it: the leave wakes the wait,
     * which answers HERDLESS_EBADHANDLE; the leave succeeds (capi/c/leave_race.c races it). */
    {
        herdless_waiter gone;
        EXPECT(herdless_join(group, &gone), HERDLESS_OK);
        struct busy g = {.waiter = gone, .result = -100};
        pthread_create(&thread, NULL, wait_forever, &g);
        busy = 0;
        for (int i = 0; i < 10000 && busy != HERDLESS_EBUSY; i++) {
            busy = herdless_member(gone);
            if (busy != HERDLESS_EBUSY) usleep(1000);
        }
        EXPECT(herdless_leave(gone), HERDLESS_OK);
        pthread_join(thread, NULL);
        expect("the wait the leave ended returned HERDLESS_EBADHANDLE", g.result,
               HERDLESS_EBADHANDLE);
        EXPECT(herdless_notify(gone), HERDLESS_EBADHANDLE);
    }

    /* Wrong process: the child inherits the handles; the waiter is refused, the group is not. */
    pid_t child = fork();
    if (child == 0) {
        int wrong = 0;
        wrong += herdless_add(waiter, p[0], 1, rx) != HERDLESS_EWRONGPROCESS;
        wrong += herdless_poll(waiter, &pri, 0, 0) != -1;
        wrong += herdless_last_error() != HERDLESS_EWRONGPROCESS;
        wrong += herdless_wait(waiter, events, 4, 0) != HERDLESS_EWRONGPROCESS;
        wrong += herdless_notify(waiter) != HERDLESS_EWRONGPROCESS;
        wrong += herdless_leave(waiter) != HERDLESS_EWRONGPROCESS;
        herdless_waiter own;
        wrong += herdless_join(group, &own) != HERDLESS_OK;
        wrong += herdless_leave(own) != HERDLESS_OK;
        _exit(wrong);
    }
    int status = -1;
    waitpid(child, &status, 0);
    expect("the parent's waiter in a forked child: EWRONGPROCESS (8 checks)",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);

    /* Full group. */
    struct herdless_options one = options;
    one.max_members = 1;
    herdless_group small;
    herdless_waiter first, second;
    EXPECT(herdless_group_new(&one, &small), HERDLESS_OK);
    EXPECT(herdless_join(small, &first), HERDLESS_OK);
    EXPECT(herdless_join(small, &second), HERDLESS_EFULL);
    expect("the full group's message names herdless_options.max_members",
           strstr(herdless_strerror(HERDLESS_EFULL), "herdless_options.max_members") != NULL, 1);
    expect("errno after HERDLESS_EFULL is ENOSPC", errno, ENOSPC);
    EXPECT(herdless_leave(first), HERDLESS_OK);
    EXPECT(herdless_group_free(small), HERDLESS_OK);

    /* Use after free and double free. */
    EXPECT(herdless_leave(waiter), HERDLESS_OK);
    EXPECT(herdless_leave(waiter), HERDLESS_EBADHANDLE);
    EXPECT(herdless_add(waiter, p[0], 1, rx), HERDLESS_EBADHANDLE);
    EXPECT(herdless_poll(waiter, &pri, 0, 0), -1);
    EXPECT(herdless_last_error(), HERDLESS_EBADHANDLE);
    expect("herdless_poll with a freed waiter: errno EBADF", errno, EBADF);
    EXPECT(herdless_group_free(group), HERDLESS_OK);
    EXPECT(herdless_group_free(group), HERDLESS_EBADHANDLE);
    EXPECT(herdless_join(group, &waiter), HERDLESS_EBADHANDLE);
    EXPECT(herdless_group_free((herdless_group){0}), HERDLESS_EBADHANDLE);

    printf("%d case(s) failed\n", failures);
    return failures == 0 ? 0 : 1;
}
