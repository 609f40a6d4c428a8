/* What a herdless_event carries: the caller's own data (any 64-bit value, shared by several
 * descriptors if it likes), and the hang-up and error bits beside READABLE and WRITABLE; a
 * duplicate of a registered descriptor refused, naming the registered number; events left
 * unconsumed counted in herdless_member_stats.unconsumed. Usage: events native|emulated.
 * Exit 0 if every check holds. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "herdless.h"

static int failures = 0;

static void check(const char *what, long long got, long long want) {
    printf("%s %-64s got %lld want %lld\n", got == want ? "ok  " : "FAIL", what, got, want);
    failures += got != want;
}

static int nonblocking_pipe(int p[2]) {
    if (pipe(p) != 0) return -1;
    return fcntl(p[0], F_SETFL, O_NONBLOCK) | fcntl(p[1], F_SETFL, O_NONBLOCK);
}

static uint64_t unconsumed(herdless_group group) {
    struct herdless_member_stats st[1];
    if (herdless_stats(group, st, 1) != 1) return UINT64_MAX;
    return st[0].unconsumed;
}

/* Registers `watched` with `data` and `interest`, closes `closed` (the pipe's other end), and
 * returns the events bits of the one event that follows (its data checked), or -1. */
static long long after_close(herdless_waiter w, int watched, int closed, uint64_t data,
                             uint32_t interest) {
    herdless_event ev[4];
    if (herdless_add(w, watched, data, interest) != HERDLESS_OK) return -1;
    close(closed);
    int n = herdless_wait(w, ev, 4, 1000);
    check("... one event, with its data", n == 1 && ev[0].data == data, 1);
    herdless_delete(w, watched);
    return n == 1 ? (long long)ev[0].events : -1;
}

int main(int argc, char **argv) {
    struct herdless_options options;
    herdless_options_init(&options);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    herdless_group group;
    herdless_waiter w;
    if (herdless_group_new(&options, &group) < 0 || herdless_join(group, &w) < 0) return 2;
    int a[2], b[2], c[2];
    if (nonblocking_pipe(a) || nonblocking_pipe(b) || nonblocking_pipe(c)) return 2;
    const uint32_t shared = HERDLESS_READABLE | HERDLESS_EXCLUSIVE;
    herdless_event ev[4];
    char byte;

    /* Any 64-bit value is the caller's data, and two descriptors may share one. */
    check("herdless_add a, data UINT64_MAX", herdless_add(w, a[0], UINT64_MAX, shared),
          HERDLESS_OK);
    check("herdless_add b, the same data", herdless_add(w, b[0], UINT64_MAX, shared), HERDLESS_OK);
    if (write(a[1], "x", 1) != 1 || write(b[1], "y", 1) != 1) return 2;
    int n = herdless_wait(w, ev, 4, 1000);
    check("herdless_wait: both descriptors", n, 2);
    check("... the first carries UINT64_MAX", ev[0].data == UINT64_MAX, 1);
    check("... the second too", n == 2 && ev[1].data == UINT64_MAX, 1);
    check("... readable, nothing else", ev[0].events, HERDLESS_READABLE);
    if (read(a[0], &byte, 1) != 1 || read(b[0], &byte, 1) != 1) return 2;
    check("herdless_consumed(UINT64_MAX): both events", herdless_consumed(w, UINT64_MAX),
          HERDLESS_OK);
    check("the next wait: nothing", herdless_wait(w, ev, 4, 0), 0);
    check("... and nothing left unconsumed", (long long)unconsumed(group), 0);

    /* An event never consumed: the next wait consumes it, and counts it. */
    if (write(a[1], "x", 1) != 1) return 2;
    check("herdless_wait: a", herdless_wait(w, ev, 4, 1000), 1);
    if (read(a[0], &byte, 1) != 1) return 2;
    check("the next wait, without herdless_consumed", herdless_wait(w, ev, 4, 0), 0);
    check("... counted unconsumed", (long long)unconsumed(group), 1);

    /* A duplicate of a registered descriptor: refused, naming the number it duplicates. */
    int copy = dup(a[0]);
    check("herdless_add of dup(a[0])", herdless_add(w, copy, 5, shared), HERDLESS_EEXIST);
    char want[64];
    snprintf(want, sizeof want, "duplicate of descriptor %d", a[0]);
    const char *message = herdless_strerror(HERDLESS_EEXIST);
    check("... the message names the registered number", strstr(message, want) != NULL, 1);
    check("... and the C remedy", strstr(message, "herdless_modify") != NULL, 1);
    close(copy);
    check("herdless_delete a", herdless_delete(w, a[0]), HERDLESS_OK);
    check("herdless_delete b", herdless_delete(w, b[0]), HERDLESS_OK);

    /* A writer that leaves: READABLE (a read returns 0) and HERDLESS_HANGUP. */
    check("the writer left: READABLE | HERDLESS_HANGUP",
          after_close(w, c[0], c[1], 3, HERDLESS_READABLE), HERDLESS_READABLE | HERDLESS_HANGUP);
    /* A reader that leaves: the write end gets WRITABLE (a write fails with EPIPE) and
     * HERDLESS_ERROR, not READABLE (it asked for writing only). */
    check("the reader left: WRITABLE | HERDLESS_ERROR",
          after_close(w, a[1], a[0], 4, HERDLESS_WRITABLE), HERDLESS_WRITABLE | HERDLESS_ERROR);

    /* herdless_found_nothing of data no event has: counted all the same. */
    struct herdless_member_stats st[1];
    check("herdless_found_nothing(12345)", herdless_found_nothing(w, 12345), HERDLESS_OK);
    check("herdless_stats", herdless_stats(group, st, 1), 1);
    check("... one empty wake-up", (long long)st[0].empty_wakeups, 1);

    herdless_leave(w);
    herdless_group_free(group);
    printf("%d check(s) failed\n", failures);
    return failures != 0;
}
