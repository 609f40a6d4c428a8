/* A C program that cannot be rebuilt: workers share one POSIX message queue, registered with
 * EPOLLIN | EPOLLERR | EPOLLEXCLUSIVE as a middleware's poller does (or polled with
 * HERDLESS_POLLEXCL), and a stop pipe without the flag.
 *
 *   mq_workers MODE WORKERS MESSAGES
 *     procs    forked workers, each its own epoll made after the fork
 *     threads  threads, each its own epoll
 *     inherit  one epoll made and registered before the fork, used by every forked worker
 *     poll     forked workers calling poll() with POLLIN | HERDLESS_POLLEXCL (0x0800)
 *
 * The parent sends the messages one at a time, each once every worker sleeps in its wait
 * (/proc) and 1 ms after the last was taken, each carrying its number; the
 * worker that receives one acknowledges it through a pipe (its index and the number), so the
 * next is sent once it was taken. Printed: "counts: c0 c1 ..." (per worker, in registration
 * order), then "lost: L duplicated: D". Exit status 0 when nothing was lost or duplicated.
 * The program knows nothing of herdless: libherdless_preload.so under LD_PRELOAD gives it
 * turns. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLLEXCL_BIT 0x0800

static mqd_t q;
static int stop_r, stop_w, ack_r, ack_w, go_r, go_w;
static int shared_ep = -1;
static const char *mode;

struct ack { int worker, seq, tid; }; /* tid: the worker's thread, in its ready message */

static void die(const char *what) { perror(what); exit(2); }

/* Waits (at most 10 s) until thread `tid` sleeps: state S in /proc/<tid>/stat. */
static void until_asleep(int tid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", tid);
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    FILE *f = fopen(path, "r");
    if (!f) return; /* gone: nothing to wait for */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')');
    if (end && end[1] == ' ' && end[2] == 'S') return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > 10) return;
    sched_yield();
  }
}

static void take_one(int index) {
  int seq;
  while (mq_receive(q, (char *)&seq, sizeof seq, NULL) == (ssize_t)sizeof seq) {
    struct ack a = {index, seq, 0};
    if (write(ack_w, &a, sizeof a) != (ssize_t)sizeof a) die("write ack");
  }
  if (errno != EAGAIN) die("mq_receive");
}

static void *worker(void *arg) {
  int index = (int)(long)arg;
  char c;
  if (read(go_r, &c, 1) != 1) die("read go"); /* registration in the parent's order */
  if (strcmp(mode, "poll") == 0) {
    if (write(ack_w, &(struct ack){index, -1, (int)gettid()}, sizeof(struct ack)) < 0) die("write");
    for (;;) {
      struct pollfd fds[2] = {{q, POLLIN | POLLEXCL_BIT, 0}, {stop_r, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) { if (errno == EINTR) continue; die("poll"); }
      if (fds[0].revents & POLLIN) take_one(index);
      if (fds[1].revents) return NULL;
    }
  }
  int ep = shared_ep;
  if (ep < 0) {
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN | EPOLLERR | EPOLLEXCLUSIVE, .data.u64 = 7};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, q, &ev) < 0) die("epoll_ctl queue");
    struct epoll_event st = {.events = EPOLLIN, .data.u64 = 9};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, stop_r, &st) < 0) die("epoll_ctl stop");
  }
  if (write(ack_w, &(struct ack){index, -1, (int)gettid()}, sizeof(struct ack)) < 0) die("write");
  for (;;) {
    struct epoll_event evs[8];
    int n = epoll_wait(ep, evs, 8, -1);
    if (n < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
    int stop = 0;
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == 7) take_one(index);
      else if (evs[i].data.u64 == 9) stop = 1;
      else { fprintf(stderr, "unknown data %llu\n", (unsigned long long)evs[i].data.u64); exit(2); }
    }
    if (stop) break;
  }
  if (shared_ep < 0) close(ep);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) { fprintf(stderr, "usage: mq_workers procs|threads|inherit|poll WORKERS MESSAGES\n"); return 2; }
  mode = argv[1];
  int workers = atoi(argv[2]), messages = atoi(argv[3]);
  char name[64];
  snprintf(name, sizeof name, "/herdless-preload-%d", (int)getpid());
  struct mq_attr attr = {.mq_maxmsg = 10, .mq_msgsize = sizeof(int)};
  q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_NONBLOCK, 0600, &attr);
  if (q < 0) die("mq_open");
  mq_unlink(name);
  int p[2];
  if (pipe(p) < 0) die("pipe");
  stop_r = p[0];
  stop_w = p[1];
  if (pipe(p) < 0) die("pipe");
  ack_r = p[0];
  ack_w = p[1];
  if (pipe(p) < 0) die("pipe");
  go_r = p[0];
  go_w = p[1];
  if (strcmp(mode, "inherit") == 0) {
    shared_ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLERR | EPOLLEXCLUSIVE, .data.u64 = 7};
    if (epoll_ctl(shared_ep, EPOLL_CTL_ADD, q, &ev) < 0) die("epoll_ctl queue");
    struct epoll_event st = {.events = EPOLLIN, .data.u64 = 9};
    if (epoll_ctl(shared_ep, EPOLL_CTL_ADD, stop_r, &st) < 0) die("epoll_ctl stop");
  }
  int threads = strcmp(mode, "threads") == 0;
  pthread_t tids[256];
  pid_t pids[256];
  if (workers < 1 || workers > 256) die("workers");
  for (int i = 0; i < workers; i++) {
    if (threads) {
      if (pthread_create(&tids[i], NULL, worker, (void *)(long)i) != 0) die("pthread_create");
    } else {
      pids[i] = fork();
      if (pids[i] < 0) die("fork");
      if (pids[i] == 0) { close(stop_w); worker((void *)(long)i); _exit(0); }
    }
  }
  /* One by one: worker i registers (or is ready) before worker i+1 is let go. */
  int worker_tids[256];
  for (int i = 0; i < workers; i++) {
    struct ack a;
    if (write(go_w, "g", 1) != 1) die("write go");
    if (read(ack_r, &a, sizeof a) != (ssize_t)sizeof a) die("read ready");
    worker_tids[i] = a.tid;
  }
  struct timespec settle = {0, 100 * 1000 * 1000}, gap = {0, 1000 * 1000};
  nanosleep(&settle, NULL); /* every worker into its first wait */
  int *counts = calloc(workers, sizeof(int)), *seen = calloc(messages, sizeof(int));
  int duplicated = 0;
  for (int seq = 0; seq < messages; seq++) {
    /* Every worker back in its wait first: one the scheduler has not brought back yet would
     * lose its turn (as the contract says), and on a loaded machine 1 ms is not enough. */
    for (int i = 0; i < workers; i++) until_asleep(worker_tids[i]);
    if (mq_send(q, (const char *)&seq, sizeof seq, 0) < 0) die("mq_send");
    struct ack a;
    if (read(ack_r, &a, sizeof a) != (ssize_t)sizeof a) die("read ack");
    if (a.seq < 0 || a.seq >= messages || a.worker < 0 || a.worker >= workers) die("bad ack");
    counts[a.worker]++;
    if (seen[a.seq]++) duplicated++;
    nanosleep(&gap, NULL);
  }
  close(stop_w);
  for (int i = 0; i < workers; i++) {
    if (threads) pthread_join(tids[i], NULL);
    else waitpid(pids[i], NULL, 0);
  }
  int lost = 0;
  for (int seq = 0; seq < messages; seq++) lost += seen[seq] == 0;
  printf("counts:");
  for (int i = 0; i < workers; i++) printf(" %d", counts[i]);
  printf("\nlost: %d duplicated: %d\n", lost, duplicated);
  return lost || duplicated;
}
