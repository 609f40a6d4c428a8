/* Registrations changed by one thread while another waits on the same epoll instance: an
 * exclusive ADD, a close and a DEL made while the waiter is blocked in epoll_wait take effect
 * in that wait, as the kernel's do. Prints what the waiting thread got, step by step; the
 * preload's tests compare it with the run without the preload. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static int ep;
static int step_r, step_w, done_r, done_w;

static void die(const char *what) { perror(what); exit(2); }

/* The waiting thread: for each step byte, one epoll_wait (timeout given by the step), its
 * result sent back as text. */
static void *waiter(void *arg) {
  (void)arg;
  char step;
  while (read(step_r, &step, 1) == 1) {
    int timeout = step == 'w' ? 5000 : 300;
    struct epoll_event evs[4];
    int n = epoll_wait(ep, evs, 4, timeout);
    int e = errno;
    char line[128];
    int len = snprintf(line, sizeof line, "wait: %d%s", n, n < 0 && e == EINTR ? " EINTR" : "");
    for (int i = 0; i < n; i++)
      len += snprintf(line + len, sizeof line - len, " [%#x data %llu]", evs[i].events,
                      (unsigned long long)evs[i].data.u64);
    line[len++] = '\n';
    if (write(done_w, line, len) != len) die("write");
  }
  return NULL;
}

static volatile sig_atomic_t handled;
static void on_usr1(int sig) { (void)sig; handled = 1; }

static void settle(void) {
  struct timespec t = {0, 50 * 1000 * 1000};
  nanosleep(&t, NULL); /* the waiter into its epoll_wait (the result is the same if not) */
}

static void result(void) {
  char line[128];
  ssize_t n = read(done_r, line, sizeof line - 1);
  if (n <= 0) die("read result");
  line[n] = 0;
  fputs(line, stdout);
}

int main(void) {
  int p[2], q[2], s[2], d[2];
  if (pipe2(p, O_NONBLOCK) || pipe2(q, O_NONBLOCK) || pipe(s) || pipe(d)) die("pipe");
  step_r = s[0]; step_w = s[1]; done_r = d[0]; done_w = d[1];
  ep = epoll_create1(0);
  struct epoll_event ex = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 1};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ex)) die("ctl p");
  pthread_t t;
  if (pthread_create(&t, NULL, waiter, NULL)) die("pthread_create");

  printf("-- an exclusive ADD while the thread waits, then a write to it\n");
  if (write(step_w, "w", 1) != 1) die("step");
  settle();
  struct epoll_event ex2 = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 2};
  printf("ctl ADD q: %d\n", epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ex2));
  settle();
  if (write(q[1], "a", 1) != 1) die("write q");
  result();
  char c;
  if (read(q[0], &c, 1) != 1) die("read q");

  printf("-- p closed while the thread waits, then a write to q\n");
  if (write(step_w, "w", 1) != 1) die("step");
  settle();
  printf("close p: %d\n", close(p[0]));
  settle();
  if (write(q[1], "b", 1) != 1) die("write q");
  result();
  if (read(q[0], &c, 1) != 1) die("read q");

  printf("-- q deleted while the thread waits, then a write to q\n");
  if (write(step_w, "t", 1) != 1) die("step");
  settle();
  printf("ctl DEL q: %d\n", epoll_ctl(ep, EPOLL_CTL_DEL, q[0], NULL));
  if (write(q[1], "c", 1) != 1) die("write q");
  result();

  if (read(q[0], &c, 1) != 1) die("read q");
  printf("-- two threads in epoll_wait on the instance: the second's own timeout\n");
  printf("ctl ADD q: %d\n", epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ex2));
  if (write(step_w, "w", 1) != 1) die("step");
  settle();
  struct epoll_event mine[4];
  printf("main's wait 300 ms: %d\n", epoll_wait(ep, mine, 4, 300));
  if (write(q[1], "d", 1) != 1) die("write q");
  result();
  if (read(q[0], &c, 1) != 1) die("read q");

  printf("-- a signal with a handler (no SA_RESTART) for the waiting thread\n");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  if (write(step_w, "w", 1) != 1) die("step");
  settle();
  pthread_kill(t, SIGUSR1);
  result();
  printf("handler ran: %d\n", (int)handled);

  close(step_w);
  pthread_join(t, NULL);
  return 0;
}
