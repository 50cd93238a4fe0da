/*
 * What each part of a task's container costs, in isolation: started by
 * bench/ns_variants.py (which builds it with cc -O2 -static), not alone.
 *
 *   ns_variants N FLAGS DIR      N launches, 4 at a time; prints the CPU
 *                                (user, system) of all of them, ms each
 *
 * Each launch is a child (clone; with PID a new PID namespace; with EXEC it
 * first executes this program again, as an exec'd init helper would; with
 * VM it shares this process's memory, on a stack of its own, as a thread
 * would: no copy of the address space made, faulted in and torn down) that
 * does what FLAGS say, then starts /bin/true (fork, or vfork with VFORK)
 * and waits for it. DIR: where the private /tmp directories are made.
 * With TEMPLATE this process first makes a mount namespace of its own with
 * / a recursive slave, which each launch's copies (as an init server that
 * did so once at its start would): no MS_SLAVE walk a launch. With SHM_BIND
 * /dev/shm is a directory of one tmpfs mounted once (DIR/shm) bound in
 * place, not a tmpfs (a superblock) of its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
    PID = 1, MOUNT = 2, IPC = 4, UTS = 8, RSLAVE = 16, RPRIVATE = 32, PROC = 64, SHM = 128,
    TMP = 256, VFORK = 4096, EXEC = 8192, VM = 16384, TEMPLATE = 32768, SHM_BIND = 65536,
};

#define STACK_SIZE (256 << 10)
static char *stacks[4];
static pid_t stack_owner[4];

static int launch(int number);

static int launch_on_own_stack(void *number) {
    return launch((int)(long)number);
}

static long flags;
static const char *dir;

static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    _exit(99);
}

static int launch(int number) {
    int unshared = (flags & MOUNT ? CLONE_NEWNS : 0) | (flags & IPC ? CLONE_NEWIPC : 0)
                   | (flags & UTS ? CLONE_NEWUTS : 0);
    if (unshared && unshare(unshared) != 0) die("unshare");
    if (flags & RSLAVE && mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) die("rslave");
    if (flags & RPRIVATE && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("rprivate");
    if (flags & PROC && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) die("proc");
    if (flags & SHM && mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) die("shm");
    if (flags & SHM_BIND) {
        char shm[4096];
        snprintf(shm, sizeof shm, "%s/shm/s%d", dir, number);
        if (mkdir(shm, 01777) != 0 && errno != EEXIST) die("mkdir shm");
        if (mount(shm, "/dev/shm", NULL, MS_BIND, NULL) != 0) die("bind /dev/shm");
    }
    if (flags & TMP) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s/t%d", dir, number);
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) die("mkdir");
        if (mount(tmp, "/tmp", NULL, MS_BIND | MS_REC, NULL) != 0) die("bind /tmp");
    }
    pid_t task = flags & VFORK ? vfork() : fork();
    if (task < 0) die("fork");
    if (task == 0) {
        char *argv[] = {"true", NULL}, *env[] = {NULL};
        execve("/bin/true", argv, env);
        _exit(127);
    }
    int status;
    waitpid(task, &status, 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--launch") == 0) {   /* an exec'd launch */
        flags = strtol(argv[2], NULL, 0);
        dir = argv[3];
        return launch(atoi(argv[4]));
    }
    if (argc != 4) {
        fputs("usage: ns_variants N FLAGS DIR\n", stderr);
        return 2;
    }
    int count = atoi(argv[1]), running = 0;
    flags = strtol(argv[2], NULL, 0);
    dir = argv[3];
    if (flags & (TEMPLATE | SHM_BIND) && (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0))
        die("template");
    if (flags & SHM_BIND) {
        char shm[4096];
        snprintf(shm, sizeof shm, "%s/shm", dir);
        if (mkdir(shm, 01777) != 0 || mount("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0)
            die("the shared tmpfs");
    }
    for (int slot = 0; slot < 4; slot++)
        if ((stacks[slot] = malloc(STACK_SIZE)) == NULL) die("malloc");
    for (int number = 0; number < count; number++) {
        if (running >= 4) {
            pid_t ended = wait(NULL);
            for (int slot = 0; slot < 4; slot++)
                if (stack_owner[slot] == ended)
                    stack_owner[slot] = 0;
            running--;
        }
        pid_t child;
        if (flags & VM) {   /* the launch in this process's memory (its libc's errno too: a bench only) */
            int slot = 0;
            while (stack_owner[slot] != 0)
                slot++;
            child = clone(launch_on_own_stack, stacks[slot] + STACK_SIZE,
                          CLONE_VM | (flags & PID ? CLONE_NEWPID : 0) | SIGCHLD, (void *)(long)number);
            if (child < 0) die("clone");
            stack_owner[slot] = child;
            running++;
            continue;
        }
        child = (pid_t)syscall(SYS_clone, (flags & PID ? CLONE_NEWPID : 0) | SIGCHLD, NULL, NULL, NULL, NULL);
        if (child < 0) die("clone");
        if (child == 0) {
            if (flags & EXEC) {
                char flag_text[32], number_text[32];
                snprintf(flag_text, sizeof flag_text, "%ld", flags);
                snprintf(number_text, sizeof number_text, "%d", number);
                char *again[] = {"ns_variants", "--launch", flag_text, (char *)dir, number_text, NULL};
                char *env[] = {NULL};
                execve("/proc/self/exe", again, env);
                _exit(98);
            }
            _exit(launch(number));
        }
        running++;
    }
    while (running-- > 0)
        wait(NULL);
    struct rusage used;
    getrusage(RUSAGE_CHILDREN, &used);
    printf("%.4f %.4f\n", (used.ru_utime.tv_sec * 1e3 + used.ru_utime.tv_usec / 1e3) / count,
           (used.ru_stime.tv_sec * 1e3 + used.ru_stime.tv_usec / 1e3) / count);
    return 0;
}
