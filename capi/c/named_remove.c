/* named_remove.c: one name, one group, from C. A member of the named group runs in a forked
 * child (it opens the group by name itself, as an unrelated server would) and serves a pipe.
 * herdless_group_remove while it lives is refused with HERDLESS_EINUSE (errno EBUSY), its
 * message naming the member's process and the C call that forces, and nothing changes: the
 * member serves on, and herdless_group_open with options opens the same group
 * (HERDLESS_ORIGIN_OPENED). herdless_group_remove_forced then removes it: the name is free
 * (HERDLESS_ENOGROUP), the supervisor makes the new group (HERDLESS_ORIGIN_CREATED), and the
 * member, at its next herdless_wait, gets HERDLESS_EREMOVED (errno EIDRM), leaves, opens the
 * name again and serves in the new group. Once it has gone, herdless_group_remove succeeds;
 * a group nobody used is re-made (HERDLESS_ORIGIN_REMADE); a group only this process has open
 * is removed, and its handle then refuses to join. Prints one line per check; exits 0 if all
 * held.
 *
 * Usage: named_remove native|emulated */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "herdless.h"

static int failures = 0;

static void check(const char *what, long got, long want) {
    printf("%s %-72s got %ld want %ld\n", got == want ? "ok  " : "FAIL", what, got, want);
    failures += got != want;
}

/* What the member tells the supervisor: a tag and a value, 16 bytes (one atomic pipe write). */
enum { JOINED = 1, READ = 2, REMOVED = 3, FAILED = 4 };

static void write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) exit(3);
        p += n;
        len -= (size_t)n;
    }
}

static void read_all(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            printf("FAIL the member's report pipe ended early\n");
            exit(1);
        }
        p += n;
        len -= (size_t)n;
    }
}

static void tell(int report, uint64_t tag, uint64_t value) {
    uint64_t record[2] = {tag, value};
    write_all(report, record, sizeof record);
}

/* Opens the group by name (open only), joins, and watches the data pipe (exclusive) and the
 * poke pipe (plainly). */
static int join_by_name(const char *name, int data, int poke, herdless_group *group,
                        herdless_waiter *waiter) {
    int rc = herdless_group_open(name, NULL, group);
    if (rc == HERDLESS_OK) rc = herdless_join(*group, waiter);
    if (rc == HERDLESS_OK) rc = herdless_add(*waiter, data, 0, HERDLESS_READABLE | HERDLESS_EXCLUSIVE);
    if (rc == HERDLESS_OK) rc = herdless_add(*waiter, poke, 1, HERDLESS_READABLE);
    return rc;
}

/* The member: serves the data pipe until it hangs up; on HERDLESS_EREMOVED it leaves, waits
 * for the supervisor's word on the go pipe (the new group is made), and joins by name again. */
static int member(const char *name, int data, int poke, int go, int report) {
    herdless_group group;
    herdless_waiter waiter;
    int rc = join_by_name(name, data, poke, &group, &waiter);
    if (rc != HERDLESS_OK) {
        tell(report, FAILED, (uint64_t)(int64_t)rc);
        return 1;
    }
    tell(report, JOINED, (uint64_t)herdless_member(waiter));
    for (;;) {
        herdless_event events[2];
        int n = herdless_wait(waiter, events, 2, -1);
        if (n == HERDLESS_EREMOVED) {
            tell(report, REMOVED, (uint64_t)errno);
            herdless_leave(waiter);
            herdless_group_free(group);
            char byte;
            read_all(go, &byte, 1);
            if ((rc = join_by_name(name, data, poke, &group, &waiter)) != HERDLESS_OK) {
                tell(report, FAILED, (uint64_t)(int64_t)rc);
                return 1;
            }
            tell(report, JOINED, (uint64_t)herdless_member(waiter));
            continue;
        }
        if (n < 0) {
            tell(report, FAILED, (uint64_t)(int64_t)n);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (events[i].data == 1) {
                char byte;
                ssize_t poked = read(poke, &byte, 1); /* -1 (EAGAIN): drained already */
                (void)poked;
                continue;
            }
            uint64_t id;
            ssize_t got = read(data, &id, sizeof id);
            if (got == 0) return 0; /* the supervisor hung up */
            if (got == (ssize_t)sizeof id) {
                herdless_consumed(waiter, 0);
                tell(report, READ, id);
            } else {
                herdless_found_nothing(waiter, 0);
            }
        }
    }
}

static uint64_t next(int report, uint64_t *value) {
    uint64_t record[2];
    read_all(report, record, sizeof record);
    *value = record[1];
    return record[0];
}

/* Writes message `id` and checks that the member reports it read. */
static void send_and_check(const char *what, int data, int report, uint64_t id) {
    write_all(data, &id, sizeof id);
    uint64_t value;
    uint64_t tag = next(report, &value);
    check(what, tag == READ && value == id, 1);
}

int main(int argc, char **argv) {
    struct herdless_options options;
    herdless_options_init(&options);
    options.backend = (argc > 1 && strcmp(argv[1], "emulated") == 0) ? HERDLESS_BACKEND_EMULATED
                                                                     : HERDLESS_BACKEND_NATIVE;
    options.max_members = 4;
    char name[64];
    snprintf(name, sizeof name, "c.remove.%d", (int)getpid());

    herdless_group group;
    check("herdless_group_open with options: OK", herdless_group_open(name, &options, &group),
          HERDLESS_OK);
    check("herdless_group_origin: HERDLESS_ORIGIN_CREATED", herdless_group_origin(group),
          HERDLESS_ORIGIN_CREATED);
    herdless_group_free(group); /* the member opens the name itself */

    int data[2], poke[2], go[2], report[2];
    if (pipe(data) != 0 || pipe(poke) != 0 || pipe(go) != 0 || pipe(report) != 0) return 2;
    fcntl(data[0], F_SETFL, O_NONBLOCK);
    fcntl(poke[0], F_SETFL, O_NONBLOCK);
    pid_t child = fork();
    if (child < 0) return 2;
    if (child == 0) {
        close(data[1]);
        close(poke[1]);
        close(go[1]);
        close(report[0]);
        _exit(member(name, data[0], poke[0], go[0], report[1]));
    }
    close(data[0]);
    close(poke[0]);
    close(go[0]);
    close(report[1]);
    uint64_t value;
    check("the member joined", next(report[0], &value), JOINED);

    /* Refused while the member lives: nothing changes. */
    int rc = herdless_group_remove(name);
    int err = errno;
    check("herdless_group_remove while a member lives: HERDLESS_EINUSE", rc, HERDLESS_EINUSE);
    check("HERDLESS_EINUSE: errno EBUSY", err, EBUSY);
    const char *message = herdless_strerror(rc);
    char pid_text[32];
    snprintf(pid_text, sizeof pid_text, "process %d", (int)child);
    printf("     %s\n", message);
    check("its message names the member's process", strstr(message, pid_text) != NULL, 1);
    check("its message names herdless_group_remove_forced",
          strstr(message, "herdless_group_remove_forced") != NULL, 1);
    check("its message names no Rust call", strstr(message, "Group::") == NULL, 1);
    send_and_check("the member serves on", data[1], report[0], 7);
    check("herdless_group_open with options: the same group",
          herdless_group_open(name, &options, &group), HERDLESS_OK);
    check("herdless_group_origin: HERDLESS_ORIGIN_OPENED", herdless_group_origin(group),
          HERDLESS_ORIGIN_OPENED);
    struct herdless_member_stats stats[4];
    check("herdless_stats: the member is there", herdless_stats(group, stats, 4), 1);
    check("herdless_stats: the member's process", stats[0].pid, child);
    herdless_group_free(group);

    /* Forced: the name is free, the supervisor makes the new group, the member moves to it. */
    check("herdless_group_remove_forced: OK", herdless_group_remove_forced(name), HERDLESS_OK);
    check("the name is free: HERDLESS_ENOGROUP", herdless_group_open(name, NULL, &group),
          HERDLESS_ENOGROUP);
    check("herdless_group_open with options: OK", herdless_group_open(name, &options, &group),
          HERDLESS_OK);
    check("herdless_group_origin: HERDLESS_ORIGIN_CREATED (not the removed group)",
          herdless_group_origin(group), HERDLESS_ORIGIN_CREATED);
    write_all(go[1], "g", 1);   /* the member may join again once it was told */
    write_all(poke[1], "p", 1); /* and it calls herdless_wait again if it was inside one */
    check("the member's herdless_wait: HERDLESS_EREMOVED", next(report[0], &value), REMOVED);
    check("HERDLESS_EREMOVED: errno EIDRM", (long)value, EIDRM);
    check("the member joined the new group", next(report[0], &value), JOINED);
    check("herdless_stats of the new group: the member", herdless_stats(group, stats, 4), 1);
    check("herdless_stats: its process", stats[0].pid, child);
    check("herdless_stats: its slot", (long)stats[0].member, (long)value);
    send_and_check("the member serves in the new group", data[1], report[0], 9);
    herdless_group_free(group);

    /* Once the member has gone: removed, and the name is free. */
    close(data[1]);
    int status = 0;
    waitpid(child, &status, 0);
    check("the member exited 0", WIFEXITED(status) && WEXITSTATUS(status) == 0, 1);
    check("herdless_group_remove after the member left: OK", herdless_group_remove(name),
          HERDLESS_OK);
    check("then herdless_group_open: HERDLESS_ENOGROUP", herdless_group_open(name, NULL, &group),
          HERDLESS_ENOGROUP);

    /* A group nobody used is re-made; one only this process has open is removed. */
    check("herdless_group_open with options: OK", herdless_group_open(name, &options, &group),
          HERDLESS_OK);
    herdless_group_free(group);
    check("herdless_group_open with options again: OK",
          herdless_group_open(name, &options, &group), HERDLESS_OK);
    check("herdless_group_origin: HERDLESS_ORIGIN_REMADE", herdless_group_origin(group),
          HERDLESS_ORIGIN_REMADE);
    check("herdless_group_remove with only this process's handle: OK",
          herdless_group_remove(name), HERDLESS_OK);
    herdless_waiter waiter;
    check("herdless_join of the removed group: HERDLESS_EREMOVED", herdless_join(group, &waiter),
          HERDLESS_EREMOVED);
    herdless_group_free(group);
    check("herdless_group_origin of a freed handle: HERDLESS_EBADHANDLE",
          herdless_group_origin(group), HERDLESS_EBADHANDLE);

    printf("%d check(s) failed\n", failures);
    return failures == 0 ? 0 : 1;
}
