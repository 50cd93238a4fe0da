/*
 * What a reap of a task's init costs its reaper (sup29n), in one process:
 * N inits cloned as nsinit's are (the first process of a new PID namespace),
 * each ended and left a zombie, then reaped by waitpid, the reap alone
 * timed (wall and this process's CPU). Variants, what the init does first:
 *   0  nothing
 *   1  a mount namespace of its own with a fresh /proc (nsinit's enter())
 *   2  1, and the host's /proc/thread-self/children read (nsinit's H line)
 *   3  1, and a task vforked that executes /bin/true (nsinit's task)
 * The reap's cost is mostly release_task's /proc flush (the dentries and
 * inodes of the init's pid killed): docs/performance.rst, "Stop 20: the
 * shared supervisor's end in C (sup29n)". Needs root (namespaces, mounts).
 *
 *     cc -O2 -o /var/tmp/nsinit_reap bench/nsinit_reap.c && for v in 0 1 2 3; do /var/tmp/nsinit_reap $v 1500; done
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    if (argc != 3) {
        fputs("usage: nsinit_reap VARIANT(0-3) COUNT\n", stderr);
        return 2;
    }
    int variant = atoi(argv[1]), n = atoi(argv[2]);
    double waited = 0, waited_cpu = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | CLONE_NEWPID, NULL, NULL, NULL, NULL);
        if (pid == 0) {
            int host = open("/proc", O_PATH | O_DIRECTORY);
            if (variant >= 1) {
                if (unshare(CLONE_NEWNS) != 0) _exit(1);
                mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
                if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) _exit(2);
            }
            if (variant == 2) {
                int fd = openat(host, "thread-self/children", O_RDONLY);
                char b[64];
                if (fd >= 0 && read(fd, b, sizeof b) >= 0)
                    close(fd);
            }
            if (variant == 3) {
                pid_t t = vfork();
                if (t == 0) { execl("/bin/true", "true", (char *)NULL); _exit(127); }
                waitpid(t, NULL, 0);
            }
            _exit(0);
        }
        siginfo_t info;
        waitid(P_PID, pid, &info, WEXITED | WNOWAIT);   /* ended: a zombie now */
        double t0 = now(), c0 = cpu();
        waitpid(pid, NULL, 0);
        waited += now() - t0; waited_cpu += cpu() - c0;
    }
    printf("variant %d: reap %.1f us wall, %.1f us cpu each\n", variant, waited / n * 1e6, waited_cpu / n * 1e6);
    return 0;
}
