/* herdless_waiter_fd: a waiter in another event loop. Two waiters of one group, each watched
 * by an epoll loop of its own (as libevent or libuv would watch it), on one shared pipe: each
 * message fires one loop and is read once, the other loop stays quiet, and both take turns; a
 * notification fires the loop once; the same descriptor at a second call, close-on-exec; a
 * forked child's copy refused (HERDLESS_EWRONGPROCESS) without harm to the parent's loop;
 * herdless_leave closes the descriptor (a copy reads the hang-up). Usage: waiter_fd
 * native|emulated. Exit 0 if every check holds. */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "herdless.h"

static int failures = 0;

static void check(const char *what, long got, long want) {
    printf("%s %-64s got %ld want %ld\n", got == want ? "ok  " : "FAIL", what, got, want);
    failures += got != want;
}

/* Is every other thread of this process asleep in epoll_wait (state S, /proc)? */
static int others_asleep(void) {
    char path[96], buf[256];
    long self = syscall(SYS_gettid);
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    int all = 1;
    if (!dir) return 0;
    while (all && (e = readdir(dir)) != NULL) {
        long tid = atol(e->d_name);
        if (tid <= 0 || tid == self) continue;
        snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[n] = 0;
        char *state = strrchr(buf, ')');
        snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
        f = fopen(path, "r");
        long nr = -1;
        if (f) {
            if (fscanf(f, "%ld", &nr) != 1) nr = -1;
            fclose(f);
        }
        all = state && state[1] == ' ' && state[2] == 'S' &&
              (nr == SYS_epoll_wait || nr == SYS_epoll_pwait);
    }
    closedir(dir);
    return all;
}

/* Waits (at most 10 s) until every waiter's thread is back asleep in its wait: the members are
 * idle, as the turns and "one loop per message" are promised for. */
static int until_idle(void) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!others_asleep()) {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 10) return 0;
    }
    return 1;
}

/* The host loop: an epoll of its own with the waiter's descriptor in it, level-triggered. */
static int host_loop(int waiter_fd) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = waiter_fd};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, waiter_fd, &ev) != 0) return -1;
    return ep;
}

static int fired(int ep, int ms) {
    struct epoll_event ev;
    return epoll_wait(ep, &ev, 1, ms);
}

/* The loop's turn: takes what the waiter has (herdless_wait with timeout 0 until it returns
 * 0), reads one message per event and says consumed. Returns the messages read. */
static int take_all(herdless_waiter w, int rx) {
    herdless_event ev[4];
    int n, got = 0;
    while ((n = herdless_wait(w, ev, 4, 0)) > 0) {
        for (int i = 0; i < n; i++) {
            char byte;
            if (read(rx, &byte, 1) == 1) {
                herdless_consumed(w, ev[i].data);
                got++;
            } else {
                herdless_found_nothing(w, ev[i].data);
            }
        }
    }
    return got;
}

int main(int argc, char **argv) {
    struct herdless_options options;
    herdless_options_init(&options);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    herdless_group group;
    herdless_waiter w[2];
    int p[2];
    if (herdless_group_new(&options, &group) < 0 || herdless_join(group, &w[0]) < 0 ||
        herdless_join(group, &w[1]) < 0 || pipe(p) != 0 ||
        fcntl(p[0], F_SETFL, O_NONBLOCK) != 0)
        return 2;

    check("a handle of zeros: EBADHANDLE", herdless_waiter_fd((herdless_waiter){0}),
          HERDLESS_EBADHANDLE);
    int fd[2], ep[2];
    for (int i = 0; i < 2; i++) {
        check("herdless_add the shared pipe, exclusive",
              herdless_add(w[i], p[0], 7, HERDLESS_READABLE | HERDLESS_EXCLUSIVE), HERDLESS_OK);
        fd[i] = herdless_waiter_fd(w[i]);
        check("herdless_waiter_fd gives a descriptor", fd[i] >= 0, 1);
        check("... close-on-exec", (fcntl(fd[i], F_GETFD) & FD_CLOEXEC) != 0, 1);
        check("... the same at a second call", herdless_waiter_fd(w[i]), fd[i]);
        ep[i] = host_loop(fd[i]);
        if (ep[i] < 0) return 2;
    }

    /* Each message fires one loop; the other stays quiet; both take turns. */
    int per[2] = {0, 0}, both = 0, none = 0;
    int idle = 1;
    for (int m = 0; m < 20; m++) {
        idle &= until_idle();
        if (write(p[1], "x", 1) != 1) return 2;
        struct pollfd loops[2] = {{.fd = ep[0], .events = POLLIN}, {.fd = ep[1], .events = POLLIN}};
        if (poll(loops, 2, 5000) < 1) {
            none++;
            continue;
        }
        int i = (loops[0].revents & POLLIN) ? 0 : 1;
        fired(ep[i], 0);
        per[i] += take_all(w[i], p[0]);
        /* The message is read: a loop woken for it would be readable now. */
        both += fired(ep[1 - i], 0) == 1 && take_all(w[1 - i], p[0]) == 0;
    }
    check("the waiters' threads were idle before each message", idle, 1);
    check("every message fired a loop", none, 0);
    check("every message read once", per[0] + per[1], 20);
    check("no message fired both loops", both, 0);
    check("both loops took messages", per[0] > 0 && per[1] > 0, 1);
    printf("messages per loop: %d %d\n", per[0], per[1]);

    /* A notification fires the loop once; herdless_wait returns 0 for it. */
    check("herdless_notify", herdless_notify(w[0]), HERDLESS_OK);
    check("... fires the loop", fired(ep[0], 5000), 1);
    check("... herdless_wait returns 0", take_all(w[0], p[0]), 0);
    check("... and then the loop is quiet", fired(ep[0], 0), 0);

    /* A forked child's copy is the parent's: refused, and the parent's loop goes on. */
    pid_t pid = fork();
    if (pid == 0) {
        int refused = herdless_waiter_fd(w[0]) == HERDLESS_EWRONGPROCESS;
        _exit(refused ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    check("a forked child's herdless_waiter_fd: EWRONGPROCESS", WIFEXITED(status) &&
          WEXITSTATUS(status) == 0, 1);
    if (write(p[1], "x", 1) != 1) return 2;
    struct pollfd loops[2] = {{.fd = ep[0], .events = POLLIN}, {.fd = ep[1], .events = POLLIN}};
    check("after the fork, a message fires a loop", poll(loops, 2, 5000) >= 1, 1);
    int i = (loops[0].revents & POLLIN) ? 0 : 1;
    check("... and is read", take_all(w[i], p[0]), 1);

    /* herdless_leave ends the thread and closes the descriptor: a copy reads the hang-up. */
    int copy = fcntl(fd[0], F_DUPFD_CLOEXEC, 0);
    check("herdless_leave", herdless_leave(w[0]), HERDLESS_OK);
    struct pollfd hup = {.fd = copy, .events = POLLIN};
    check("... the descriptor's pipe hangs up", poll(&hup, 1, 5000) == 1 &&
          (hup.revents & POLLHUP) != 0, 1);
    check("... the handle is gone", herdless_waiter_fd(w[0]), HERDLESS_EBADHANDLE);
    close(copy);
    herdless_leave(w[1]);
    herdless_group_free(group);
    printf("%d check(s) failed\n", failures);
    return failures != 0;
}
