/* herdless_poll behaves like poll(): revents as poll() fills them (POLLIN, POLLOUT, POLLHUP,
 * POLLERR, POLLNVAL), entries with fd < 0 ignored, a timeout returns 0, and registrations
 * follow the array as it changes between calls. Usage: poll_shape native|emulated.
 * Exit 0 if every check holds. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "herdless.h"

static int failures = 0;

static void check(const char *what, long got, long want) {
    printf("%s %-64s got %ld want %ld\n", got == want ? "ok  " : "FAIL", what, got, want);
    failures += got != want;
}

/* herdless_poll on one entry, compared with poll() on the same entry without herdless bits. */
static void same_as_poll(herdless_waiter w, const char *what, int fd, short events) {
    struct pollfd plain = {.fd = fd, .events = events};
    int pn = poll(&plain, 1, 0);
    struct pollfd h = {.fd = fd, .events = events | HERDLESS_POLLEXCL | HERDLESS_POLLONE};
    int hn = herdless_poll(w, &h, 1, 1000);
    char line[160];
    snprintf(line, sizeof line, "%s: return", what);
    check(line, hn, pn);
    snprintf(line, sizeof line, "%s: revents", what);
    check(line, h.revents, plain.revents);
    /* Leave the waiter without registrations for the next case. */
    herdless_poll(w, NULL, 0, 0);
}

int main(int argc, char **argv) {
    struct herdless_options options;
    herdless_options_init(&options);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    herdless_group group;
    herdless_waiter w;
    if (herdless_group_new(&options, &group) < 0 || herdless_join(group, &w) < 0) return 2;

    int a[2], b[2], c[2], s[2];
    if (pipe(a) || pipe(b) || pipe(c) || socketpair(AF_UNIX, SOCK_STREAM, 0, s)) return 2;
    /* Every end non-blocking: HERDLESS_POLLEXCL refuses a blocking descriptor. */
    int ends[8] = {a[0], a[1], b[0], b[1], c[0], c[1], s[0], s[1]};
    for (int i = 0; i < 8; i++)
        if (fcntl(ends[i], F_SETFL, O_NONBLOCK) != 0) return 2;

    /* revents as poll() gives them. */
    same_as_poll(w, "writable pipe end: POLLOUT", a[1], POLLOUT);
    if (write(a[1], "x", 1) != 1) return 2;
    same_as_poll(w, "pipe with data: POLLIN", a[0], POLLIN);
    same_as_poll(w, "socket with data, POLLIN|POLLOUT asked", s[1], POLLOUT);
    if (write(s[0], "y", 1) != 1) return 2;
    same_as_poll(w, "socket readable and writable", s[1], POLLIN | POLLOUT);
    close(b[1]);
    same_as_poll(w, "pipe whose writer closed: POLLHUP", b[0], POLLIN);
    close(c[0]);
    same_as_poll(w, "pipe whose reader closed: POLLERR", c[1], POLLOUT);

    /* fd < 0 is ignored; an empty wait times out with 0. */
    struct pollfd two[2] = {{.fd = -1, .events = POLLIN}, {.fd = s[0], .events = POLLIN}};
    check("fd -1 ignored, nothing ready: timeout returns 0", herdless_poll(w, two, 2, 20), 0);
    check("... and revents stay 0", two[0].revents | two[1].revents, 0);

    /* Registrations follow the array. */
    struct pollfd arr[2] = {{.fd = a[0], .events = POLLIN | HERDLESS_POLLEXCL},
                            {.fd = s[0], .events = POLLIN}};
    check("[a, s]: a ready", herdless_poll(w, arr, 2, 1000), 1);
    check("a is registered (herdless_add says EEXIST)",
          herdless_add(w, a[0], 1, HERDLESS_READABLE), HERDLESS_EEXIST);
    arr[0].fd = -1; /* a leaves the array */
    check("[-, s]: nothing ready", herdless_poll(w, arr, 2, 0), 0);
    check("a was deleted (herdless_delete says ENOENT)", herdless_delete(w, a[0]), HERDLESS_ENOENT);
    check("s is still registered", herdless_add(w, s[0], 1, HERDLESS_READABLE), HERDLESS_EEXIST);
    arr[1].events = POLLOUT; /* s's interest changes: now writable */
    check("[-, s POLLOUT]: s writable", herdless_poll(w, arr, 2, 1000), 1);
    check("... revents POLLOUT", arr[1].revents, POLLOUT);
    check("empty array: every registration deleted", herdless_poll(w, NULL, 0, 0), 0);
    check("s was deleted", herdless_delete(w, s[0]), HERDLESS_ENOENT);

    /* The same descriptor twice: interests merged, each entry gets what it asked for. */
    struct pollfd dup[2] = {{.fd = s[1], .events = POLLIN}, {.fd = s[1], .events = POLLOUT}};
    check("s twice (POLLIN, POLLOUT): both entries answered", herdless_poll(w, dup, 2, 1000), 2);
    check("... first POLLIN", dup[0].revents, POLLIN);
    check("... second POLLOUT", dup[1].revents, POLLOUT);

    /* The other entry points: herdless_add + herdless_wait hand out the data; stats count it.
     * (An empty herdless_poll first: it deletes what herdless_poll registered.) */
    check("empty array: herdless_poll's registrations deleted", herdless_poll(w, NULL, 0, 0), 0);
    check("herdless_add a, data 77",
          herdless_add(w, a[0], 77, HERDLESS_READABLE | HERDLESS_EXCLUSIVE), HERDLESS_OK);
    herdless_event ev[4];
    check("herdless_wait: one event", herdless_wait(w, ev, 4, 1000), 1);
    check("... data 77", (long)ev[0].data, 77);
    check("... readable", ev[0].events, HERDLESS_READABLE);
    check("herdless_consumed(77)", herdless_consumed(w, 77), HERDLESS_OK);
    check("herdless_modify a to data 78", herdless_modify(w, a[0], 78, HERDLESS_READABLE),
          HERDLESS_OK);
    check("herdless_wait: data 78", herdless_wait(w, ev, 4, 1000) == 1 ? (long)ev[0].data : -1, 78);
    check("herdless_delete a", herdless_delete(w, a[0]), HERDLESS_OK);
    struct herdless_member_stats st[2];
    check("herdless_stats: one member", herdless_stats(group, st, 2), 1);
    check("... it is this waiter's slot", (long)st[0].member, herdless_member(w));
    check("... alive, with events counted", st[0].alive && st[0].events >= 2, 1);

    herdless_leave(w);
    herdless_group_free(group);
    printf("%d check(s) failed\n", failures);
    return failures == 0 ? 0 : 1;
}
