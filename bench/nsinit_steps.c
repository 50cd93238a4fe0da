/*
 * The CPU of each step of a task's container as the namespace init
 * (mesoslike/agent/nsinit.c) takes them, timed inside the init: started by
 * bench/nsinit_steps.py (which builds it with cc -O2 -static), not alone.
 *
 *   nsinit_steps N DIR KEEP PLACE [CGROUP...]
 *
 * N launches, one at a time, each a child in a new PID namespace (as the
 * server clones an init) that joins the CGROUPs (directories: it writes
 * itself to each one's cgroup.procs, as join_cgroups does), unshares the
 * mount, IPC and UTS namespaces (each its own unshare, to tell them apart;
 * the init makes one call), makes / a recursive slave, mounts a proc and
 * a tmpfs on /dev/shm, makes its private /tmp's directory in DIR — with
 * KEEP (a directory; "-": none) bound at PLACE inside it first (a path
 * relative to the private /tmp, one level: as the init binds a work
 * directory kept below /tmp) — and binds it on /tmp, then vforks /bin/true
 * and waits for it. Each step's CPU is
 * the init's thread CPU clock around it (the kernel's work in the step's
 * system call; the teardown at the init's exit is in none of them: it is
 * in the children's total, with /bin/true's). Prints one line: the mean
 * of each step, then the children's total CPU, microseconds a launch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CGROUPS 8
static const char *const step_names[] = {"unshare_mount", "unshare_ipc", "unshare_uts", "rslave", "proc",
                                         "dev_shm", "tmp_mkdir", "keep_mkdir", "keep_bind", "tmp_bind",
                                         "task_vfork_exec_wait"};
#define STEPS (sizeof step_names / sizeof step_names[0])

static double cpu_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return now.tv_sec * 1e6 + now.tv_nsec / 1e3;
}

static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    _exit(99);
}

struct timing {
    double joins[MAX_CGROUPS];
    double steps[STEPS];
};

static const char *keep, *place;

static void launch(int number, const char *dir, char **cgroups, int ncgroups, int report) {
    struct timing t;
    double at = cpu_us(), then;
    for (int i = 0; i < ncgroups; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1)
            die(path);
        close(fd);
        then = cpu_us(), t.joins[i] = then - at, at = then;
    }
    size_t step = 0;
#define TIMED(call, what)                                                                                        \
    do {                                                                                                         \
        if ((call) != 0)                                                                                         \
            die(what);                                                                                           \
        then = cpu_us(), t.steps[step++] = then - at, at = then;                                                 \
    } while (0)
    TIMED(unshare(CLONE_NEWNS), "unshare mount");
    TIMED(unshare(CLONE_NEWIPC), "unshare ipc");
    TIMED(unshare(CLONE_NEWUTS), "unshare uts");
    TIMED(mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL), "rslave");
    TIMED(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "proc");
    TIMED(mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"), "/dev/shm");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/t%d", dir, number);
    mode_t mask = umask(0);
    TIMED(mkdir(tmp, 01777) != 0 && errno != EEXIST, "mkdir");
    umask(mask);
    char target[sizeof tmp + 256];   /* DIR/tN/PLACE */
    snprintf(target, sizeof target, "%s/%s", tmp, place);
    TIMED(keep != NULL && mkdir(target, 0777) != 0 && errno != EEXIST, "mkdir the place");
    TIMED(keep != NULL && mount(keep, target, NULL, MS_BIND, NULL) != 0, "bind the kept path");
    TIMED(mount(tmp, "/tmp", NULL, MS_BIND | MS_REC, NULL), "bind /tmp");
    pid_t task = vfork();
    if (task == 0) {
        char *argv[] = {"true", NULL}, *env[] = {NULL};
        execve("/bin/true", argv, env);
        _exit(127);
    }
    TIMED(task < 0 || waitpid(task, NULL, 0) != task, "the task");
    if (write(report, &t, sizeof t) != (ssize_t)sizeof t)
        die("report");
}

int main(int argc, char **argv) {
    if (argc < 5 || argc - 5 > MAX_CGROUPS) {
        fputs("usage: nsinit_steps N DIR KEEP PLACE [CGROUP...]\n", stderr);
        return 2;
    }
    int count = atoi(argv[1]), ncgroups = argc - 5;
    keep = strcmp(argv[3], "-") == 0 ? NULL : argv[3];
    place = argv[4];
    struct timing sum;
    memset(&sum, 0, sizeof sum);
    for (int number = 0; number < count; number++) {
        int report[2];
        if (pipe(report) != 0)
            die("pipe");
        pid_t child = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
        if (child < 0)
            die("clone");
        if (child == 0) {
            close(report[0]);
            launch(number, argv[2], argv + 5, ncgroups, report[1]);
            _exit(0);
        }
        close(report[1]);
        struct timing t;
        ssize_t got = read(report[0], &t, sizeof t);
        close(report[0]);
        int status;
        if (waitpid(child, &status, 0) != child || status != 0 || got != (ssize_t)sizeof t) {
            fputs("a launch failed\n", stderr);
            return 1;
        }
        for (int i = 0; i < ncgroups; i++)
            sum.joins[i] += t.joins[i];
        for (size_t i = 0; i < STEPS; i++)
            sum.steps[i] += t.steps[i];
    }
    struct rusage used;
    getrusage(RUSAGE_CHILDREN, &used);
    for (int i = 0; i < ncgroups; i++)
        printf("join_%d=%.2f ", i, sum.joins[i] / count);
    for (size_t i = 0; i < STEPS; i++)
        printf("%s=%.2f ", step_names[i], sum.steps[i] / count);
    printf("children_total=%.2f\n", (used.ru_utime.tv_sec * 1e6 + used.ru_utime.tv_usec + used.ru_stime.tv_sec * 1e6
                                     + used.ru_stime.tv_usec) / count);
    return 0;
}
