/*
 * nsinit: the init of a task's container, started by the agent's shared
 * supervisor (mesoslike/agent/shared_supervisor.py) in place of a Python
 * supervisor forked per task. Built by mesoslike/agent/nsinit.py on the
 * agent's first start (cc, once per version of this file).
 *
 * The shared supervisor starts one of it as a server ("nsinit --serve",
 * below), which clones each task's init: a child of the shared supervisor,
 * the leader of a process group of its own, the first process (pid 1) of a
 * new PID namespace when the task has one, with no environment, its
 * signals blocked, and:
 *
 *   fd 0, 1, 2  the task's stdin (/dev/null), stdout and stderr
 *   fd 3        the launch spec (a memfd): NUL-terminated fields, records
 *               of a tag and its fields (see read_spec; nsinit.py writes it)
 *   fd 4        the status pipe to the shared supervisor, lines of:
 *                 "R PID"     the task executes (PID as this namespace sees it)
 *                 "H PID"     (with R, in the same write, when the init is
 *                             the first process of a PID namespace) the
 *                             task's pid as the host sees it
 *                 "F MESSAGE" it could not be started (nsinit then exits 127)
 *                 "X STATUS"  the task's leader ended with wait status STATUS
 *               or, for an init of a channel request ('C', below), the
 *               server's status channel, one pipe shared by every init: the
 *               same lines each as "TAG KIND ..." (TAG: the request's), each
 *               write at most PIPE_BUF bytes (whole, never interleaved)
 *
 * It does what mesoslike/agent/namespaces.py's enter() does in a Python
 * supervisor: the namespaces other than pid (unshare), / a recursive slave,
 * a fresh /proc (with pid), a fresh /dev/shm (with ipc), the sandbox's tmp
 * on /tmp with the kept paths bound inside first, the volumes (each source
 * checked to lie in its directory on the very file mounted), the host name
 * (with uts), the loopback up (with net). Then it vforks the task: a session
 * of its own, the user's groups, gid and uid (after everything only root
 * may do), its working directory, an empty signal mask and default
 * dispositions, and execve with the task's environment, which nothing of
 * this process ever read or used before (it runs as root; LD_PRELOAD and
 * the like in that environment reach only the task's own program).
 *
 * As the init it forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and
 * SIGUSR2 to the task's process group (a task that is pid 1 itself would
 * ignore a SIGTERM it has no handler for), reaps every orphan, and once the
 * task's leader ends, SIGKILLs what is left of its group, says the status
 * and exits (the kernel then kills whatever else is left in the namespace).
 *
 * No shell, no library but libc; every field is checked; a failure before
 * the task executes is said on fd 4, never left to a crash.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPEC_FD 3
#define STATUS_FD 4
#define MAX_SPEC (16 << 20)
#define MAX_ITEMS 65536

static int status_fd = STATUS_FD;
/* An init of a channel request ('C'): the tag its lines go under on the
 * server's status channel (fd 4: one pipe shared by every init of the shared
 * supervisor), each line "TAG KIND ...". Empty: a pipe of its own. */
static char status_tag[24];

/* ------------------------------------------------------------ reporting */
/* line's lines each under the tag, in tagged[0:size], at most PIPE_BUF bytes (a longer F line cut short). */
static void tag_lines(const char *line, char *tagged, size_t size) {
    size_t at = 0, tag = strlen(status_tag);
    for (const char *next = line; *next != '\0' && at + tag + 3 <= size;) {
        memcpy(tagged + at, status_tag, tag);
        tagged[at + tag] = ' ';
        at += tag + 1;
        while (*next != '\0' && *next != '\n' && at + 2 <= size)
            tagged[at++] = *next++;
        while (*next != '\0' && *next != '\n')   /* what does not fit */
            next++;
        tagged[at++] = '\n';
        if (*next == '\n')
            next++;
    }
    tagged[at] = '\0';
}

static void write_line(const char *line) {
    size_t left = strlen(line);
    while (left > 0) {
        ssize_t n = write(status_fd, line, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        line += n;
        left -= (size_t)n;
    }
}

/* A line too long for say's own buffer (an F line), tagged in a PIPE_BUF one. */
__attribute__((noinline)) static void say_long(const char *line) {
    char tagged[PIPE_BUF];
    tag_lines(line, tagged, sizeof tagged);
    write_line(tagged);
}

static void say(const char *line) {
    /* on the channel: each line tagged, the whole in one write of at most PIPE_BUF bytes, which
     * a pipe takes whole (never interleaved with another init's); a longer F line is cut short.
     * The R, H and X lines of every launch fit a small buffer: a PIPE_BUF one on the stack was a
     * page more of it each init wrote (a fault; stop 22, init22) */
    if (status_tag[0] == '\0') {
        write_line(line);
        return;
    }
    char tagged[256];
    size_t need = strlen(line) + 2, tag = strlen(status_tag) + 1;
    for (const char *c = line; *c != '\0'; c++)
        need += *c == '\n' ? tag : 0;
    if (need + tag > sizeof tagged) {
        say_long(line);
        return;
    }
    tag_lines(line, tagged, sizeof tagged);
    write_line(tagged);
}

static void fail(const char *format, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *format, ...) {
    char message[4096] = "F ";
    va_list args;
    va_start(args, format);
    vsnprintf(message + 2, sizeof message - 3, format, args);
    va_end(args);
    for (char *c = message; *c; c++)
        if (*c == '\n')
            *c = ' ';
    strcat(message, "\n");
    say(message);
    _exit(127);
}

/* "KIND NUMBER\n" at line (room for 24 bytes): its length. The lines an
 * init says on every launch (R, H, X) and the server's answer (P), without
 * the C library's printf: its code (four pages of text here) and its stack
 * frame were pages each init and the server, after each clone, faulted in
 * or copied again (~1.5-2.5 us a fault in this VM; stop 22, init22). */
static size_t number_line(char *line, char kind, long value, int newline) {
    char digits[24];
    size_t count = 0, at = 0;
    unsigned long magnitude = value < 0 ? 0UL - (unsigned long)value : (unsigned long)value;
    do {
        digits[count++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude != 0);
    line[at++] = kind;
    line[at++] = ' ';
    if (value < 0)
        line[at++] = '-';
    while (count > 0)
        line[at++] = digits[--count];
    if (newline)
        line[at++] = '\n';
    line[at] = '\0';
    return at;
}

/* ------------------------------------------------------------ the spec */
struct volume {
    const char *source, *target, *within, *create;
    int readonly;
};

struct spec {
    int pid, mount, ipc, uts, net;
    const char *hostname, *tmp, *cwd;
    const char **cgroups; size_t ncgroups;
    struct kept { const char *source, *target; } *keep; size_t nkeep;
    struct volume *volumes; size_t nvolumes;
    int switch_user; uid_t uid; gid_t gid;
    gid_t *groups; size_t ngroups;
    const char **env; size_t nenv;
    const char **argv; size_t nargv;
};

static char *read_all(int fd, size_t *size) {
    size_t capacity = 1 << 16, used = 0;
    char *data = malloc(capacity + 1);
    if (data == NULL)
        fail("out of memory");
    for (;;) {
        if (used == capacity) {
            if (capacity >= MAX_SPEC)
                fail("the launch spec is larger than %d bytes", MAX_SPEC);
            capacity *= 2;
            data = realloc(data, capacity + 1);
            if (data == NULL)
                fail("out of memory");
        }
        ssize_t n = read(fd, data + used, capacity - used);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail("cannot read the launch spec: %s", strerror(errno));
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    data[used] = '\0';
    *size = used;
    return data;
}

struct cursor { char *at, *end; };

static const char *field(struct cursor *c, const char *what) {
    if (c->at >= c->end)
        fail("the launch spec ends inside %s", what);
    char *nul = memchr(c->at, '\0', (size_t)(c->end - c->at));
    if (nul == NULL)
        fail("the launch spec's last field is not terminated");
    const char *value = c->at;
    c->at = nul + 1;
    return value;
}

static const char *path_field(struct cursor *c, const char *what) {
    const char *value = field(c, what);
    if (value[0] != '/' || strlen(value) >= PATH_MAX)
        fail("%s is not an absolute path", what);
    return value;
}

static unsigned long number(const char *text, unsigned long limit, const char *what) {
    char *end;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || value > limit)
        fail("%s is not a number up to %lu: %.40s", what, limit, text);
    return value;
}

static void *grow(void *items, size_t count, size_t size) {
    if (count >= MAX_ITEMS)
        fail("too many items in the launch spec");
    if ((count & (count - 1)) == 0) {   /* 0, 1, 2, 4, ...: double */
        items = realloc(items, (count ? count * 2 : 1) * size);
        if (items == NULL)
            fail("out of memory");
    }
    return items;
}

/* Records: "ns" NAME | "hostname" H | "tmp" DIR | "keep" SOURCE TARGET |
 * "volume" SOURCE TARGET READONLY WITHIN CREATE | "user" UID GID GROUPS
 * (comma-separated) | "cwd" DIR | "cgroup" DIR | "env" NAME=VALUE |
 * "arg" ARG | "end". */
static void parse_spec(struct spec *s, char *data, size_t size);

static void read_spec(struct spec *s) {
    size_t size;
    char *data = read_all(SPEC_FD, &size);
    close(SPEC_FD);
    parse_spec(s, data, size);
}

/* The spec's records in data[0:size] (data[size] is a NUL); s points into it. */
static void parse_spec(struct spec *s, char *data, size_t size) {
    struct cursor c = {data, data + size};
    memset(s, 0, sizeof *s);
    int ended = 0;
    while (!ended) {
        const char *tag = field(&c, "a record");
        if (strcmp(tag, "ns") == 0) {
            const char *name = field(&c, "a namespace");
            if (strcmp(name, "pid") == 0) s->pid = 1;
            else if (strcmp(name, "mount") == 0) s->mount = 1;
            else if (strcmp(name, "ipc") == 0) s->ipc = 1;
            else if (strcmp(name, "uts") == 0) s->uts = 1;
            else if (strcmp(name, "net") == 0) s->net = 1;
            else fail("unknown namespace %.40s", name);
        } else if (strcmp(tag, "hostname") == 0) {
            s->hostname = field(&c, "the host name");
            if (strlen(s->hostname) > 64)
                fail("the host name is longer than 64 bytes");
        } else if (strcmp(tag, "tmp") == 0) {
            s->tmp = path_field(&c, "the private /tmp");
        } else if (strcmp(tag, "keep") == 0) {
            s->keep = grow(s->keep, s->nkeep, sizeof *s->keep);
            s->keep[s->nkeep].source = path_field(&c, "a kept path");
            s->keep[s->nkeep].target = path_field(&c, "a kept path's place");
            s->nkeep++;
        } else if (strcmp(tag, "volume") == 0) {
            s->volumes = grow(s->volumes, s->nvolumes, sizeof *s->volumes);
            struct volume *v = &s->volumes[s->nvolumes++];
            v->source = path_field(&c, "a volume's source");
            v->target = path_field(&c, "a volume's target");
            v->readonly = (int)number(field(&c, "a volume's mode"), 1, "a volume's mode");
            v->within = field(&c, "a volume's directory");
            v->create = field(&c, "a volume's creation directory");
        } else if (strcmp(tag, "user") == 0) {
            s->switch_user = 1;
            s->uid = (uid_t)number(field(&c, "the uid"), 0xfffffffeUL, "the uid");
            s->gid = (gid_t)number(field(&c, "the gid"), 0xfffffffeUL, "the gid");
            char *groups = (char *)field(&c, "the groups");
            for (char *save = NULL, *g = strtok_r(groups, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
                s->groups = grow(s->groups, s->ngroups, sizeof *s->groups);
                s->groups[s->ngroups++] = (gid_t)number(g, 0xfffffffeUL, "a group");
            }
        } else if (strcmp(tag, "cgroup") == 0) {
            s->cgroups = grow(s->cgroups, s->ncgroups, sizeof *s->cgroups);
            s->cgroups[s->ncgroups++] = path_field(&c, "a cgroup");
        } else if (strcmp(tag, "cwd") == 0) {
            s->cwd = path_field(&c, "the working directory");
        } else if (strcmp(tag, "env") == 0) {
            s->env = grow(s->env, s->nenv, sizeof *s->env);
            s->env[s->nenv] = field(&c, "a variable");
            if (strchr(s->env[s->nenv], '=') == NULL)
                fail("a variable without '='");
            s->nenv++;
        } else if (strcmp(tag, "arg") == 0) {
            s->argv = grow(s->argv, s->nargv, sizeof *s->argv);
            s->argv[s->nargv++] = field(&c, "an argument");
        } else if (strcmp(tag, "end") == 0) {
            ended = 1;
        } else {
            fail("unknown record %.40s in the launch spec", tag);
        }
    }
    if (c.at != c.end)
        fail("the launch spec goes on after its end");
    if (s->nargv == 0 || s->argv[0][0] == '\0')
        fail("no program to execute");
    if (s->cwd == NULL)
        fail("no working directory");
    s->env = grow(s->env, s->nenv, sizeof *s->env);
    s->env[s->nenv] = NULL;
    s->argv = grow(s->argv, s->nargv, sizeof *s->argv);
    s->argv[s->nargv] = NULL;
}

/* ------------------------------------------------------------ mounts */
static void do_mount(const char *source, const char *target, const char *type, unsigned long flags,
                     const char *data) {
    if (mount(source, target, type, flags, data) != 0)
        fail("mount %s on %s: %s", type ? type : (source ? source : ""), target, strerror(errno));
}

/* path and its missing parents made, from the deepest that exists: a kept
 * path's place in a fresh private /tmp is two or three levels below it, and
 * one mkdir of each prefix from / (what this did before) was a dozen failed
 * mkdirs a task, each a walk of a long path with its parent's lock taken.
 * The missing prefixes are cut in place in one buffer, not a PATH_MAX frame
 * a level: each level's frame was a page of stack more the init wrote, a
 * copy-on-write fault of ~2 us in this VM (stop 22, init22). */
static void make_directories(const char *path, mode_t mode) {
    if (mkdir(path, mode) == 0 || errno == EEXIST)
        return;
    if (errno != ENOENT)
        fail("cannot make %s: %s", path, strerror(errno));
    char at[PATH_MAX];
    size_t length = strlen(path);
    if (length >= sizeof at)
        fail("a path too long: %.80s", path);
    memcpy(at, path, length + 1);
    while (length > 1 && at[length - 1] == '/')
        at[--length] = '\0';
    size_t cuts = 0;   /* back: each missing prefix cut at its last slash, until one is made or exists */
    for (;;) {
        char *slash = strrchr(at, '/');
        if (slash == NULL || slash == at)   /* below / itself: nothing above to make */
            fail("cannot make %s: %s", path, strerror(ENOENT));
        *slash = '\0';
        cuts++;
        if (mkdir(at, mode) == 0 || errno == EEXIST)
            break;
        if (errno != ENOENT)
            fail("cannot make %s: %s", at, strerror(errno));
    }
    while (cuts-- > 0) {   /* forth: the shallowest cut put back first, its directory made (a file there fails) */
        at[strlen(at)] = '/';
        if (mkdir(at, mode) != 0 && errno != EEXIST)
            fail("cannot make %s: %s", at, strerror(errno));
    }
}

/* The directory target and its missing parents below base (a directory
 * that exists: the private /tmp, just made), made from base down: a kept
 * path's place, whose first try from its own depth (make_directories)
 * fails in a fresh /tmp and walks the whole path again for each level.
 * A target not below base: make_directories. */
static void make_below(const char *base, const char *target, mode_t mode) {
    size_t length = strlen(base), whole = strlen(target);
    while (length > 1 && base[length - 1] == '/')
        length--;
    char at[512];   /* not PATH_MAX: a page of stack less each init writes; a longer place, the long way */
    if (whole >= sizeof at || length < 2 || strncmp(target, base, length) != 0 || target[length] != '/') {
        make_directories(target, mode);
        return;
    }
    memcpy(at, target, whole + 1);
    for (char *next = at + length + 1; *next != '\0';) {
        char *slash = strchr(next, '/');
        if (slash != NULL)
            *slash = '\0';
        if (*next != '\0' && mkdir(at, mode) != 0 && errno != EEXIST)   /* a file there fails, as below */
            fail("cannot make %s: %s", at, strerror(errno));
        if (slash == NULL)
            break;
        *slash = '/';
        next = slash + 1;
    }
}

/* The path with its existing part's symlinks resolved (os.path.realpath's
 * way with a missing rest: kept as it is; but no "." or "..", which would
 * be taken lexically there). */
static void resolve(const char *path, char *out, int depth) {
    if (depth > 256)
        fail("a path too deep: %.80s", path);
    if (realpath(path, out) != NULL)
        return;
    if (errno != ENOENT && errno != ENOTDIR)
        fail("cannot resolve %s: %s", path, strerror(errno));
    char parent[PATH_MAX];
    if (strlen(path) >= sizeof parent || path[0] != '/')
        fail("cannot resolve %.80s", path);
    strcpy(parent, path);
    size_t length = strlen(parent);
    while (length > 1 && parent[length - 1] == '/')
        parent[--length] = '\0';
    char *slash = strrchr(parent, '/');
    const char *last = slash + 1;
    if (strcmp(last, "..") == 0 || strcmp(last, ".") == 0 || last[0] == '\0')
        fail("%s: a missing part with '.' or '..'", path);
    char name[NAME_MAX + 1];
    if (strlen(last) > NAME_MAX)
        fail("a name too long in %.80s", path);
    strcpy(name, last);
    if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    resolve(parent, out, depth + 1);
    if (strlen(out) + strlen(name) + 2 > PATH_MAX)
        fail("a path too long: %.80s", path);
    if (strcmp(out, "/") != 0)
        strcat(out, "/");
    strcat(out, name);
}

static void check_within(const char *path, const char *directory, const char *what) {
    char real[PATH_MAX], limit[PATH_MAX];
    resolve(path, real, 0);
    resolve(directory, limit, 0);
    size_t n = strlen(limit);
    while (n > 1 && limit[n - 1] == '/')
        limit[--n] = '\0';
    if (strcmp(real, limit) == 0)
        return;
    if (strncmp(real, limit, n) == 0 && (real[n] == '/' || (n == 1 && limit[0] == '/')))
        return;
    fail("%s resolves to %s, outside %s", what, real, limit);
}

static void bind_volume(const struct volume *v) {
    int fd = open(v->source, O_PATH | O_CLOEXEC);
    if (fd < 0)
        fail("volume source %s: %s", v->source, strerror(errno));
    char opened[64], real[PATH_MAX];
    snprintf(opened, sizeof opened, "/proc/self/fd/%d", fd);
    if (v->within[0]) {
        ssize_t n = readlink(opened, real, sizeof real - 1);
        if (n < 0)
            fail("volume source %s: %s", v->source, strerror(errno));
        real[n] = '\0';
        char what[PATH_MAX + 32];
        snprintf(what, sizeof what, "volume source %s", v->source);
        check_within(real, v->within, what);
    }
    struct stat info;
    if (v->create[0] && lstat(v->target, &info) != 0) {
        char parent[PATH_MAX];
        strcpy(parent, v->target);
        char *slash = strrchr(parent, '/');
        if (slash == parent)
            slash[1] = '\0';
        else
            *slash = '\0';
        check_within(parent, v->create, parent);
        if (stat(opened, &info) != 0)
            fail("volume source %s: %s", v->source, strerror(errno));
        if (S_ISDIR(info.st_mode)) {
            make_directories(v->target, 0777);
        } else {
            make_directories(parent, 0777);
            int made = open(v->target, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (made < 0)
                fail("cannot make %s: %s", v->target, strerror(errno));
            close(made);
        }
    }
    do_mount(opened, v->target, NULL, MS_BIND | MS_REC, NULL);
    close(fd);
    if (v->readonly)   /* a bind takes its flags only from a remount */
        do_mount(NULL, v->target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL);
}

static void loopback_up(void) {
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        fail("socket: %s", strerror(errno));
    struct ifreq request;
    memset(&request, 0, sizeof request);
    strcpy(request.ifr_name, "lo");
    if (ioctl(sock, SIOCGIFFLAGS, &request) != 0)
        fail("the loopback's flags: %s", strerror(errno));
    request.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &request) != 0)
        fail("the loopback up: %s", strerror(errno));
    close(sock);
}

/* The cgroups' parent directories, held open by a server (cached_parent):
 * for each of the spec's first "cgroup" records, noted by the server just
 * before it cloned this init (note_cgroups), this clone's copy of the
 * descriptor of its parent and its own name's place in the request — the
 * record's, the very pointer parse_spec then takes from this clone's copy
 * of it being joined_path; none for an init not cloned from an inline or
 * channel request. */
#define JOINED_MAX 8
static int joined_fd[JOINED_MAX], joined_threads[JOINED_MAX];
static const char *joined_path[JOINED_MAX], *joined_name[JOINED_MAX];
static size_t joined_count;

/* Into the task's cgroups, before anything of the task runs (its first
 * instruction is in them) and before this process does the task's work. */
/* A cgroup's cgroup.procs opened by its whole path (PATH_MAX on the stack: out of
 * join_cgroups' frame, which every launch's stack holds). */
__attribute__((noinline)) static int open_procs_by_path(const char *cgroup) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/cgroup.procs", cgroup) >= sizeof path)
        fail("a cgroup's path is too long");
    return open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
}

static void join_cgroups(const struct spec *s) {
    for (size_t i = 0; i < s->ncgroups; i++) {
        char path[NAME_MAX + sizeof "/cgroup.procs"];
        /* a v1 cgroup's tasks file, not its cgroup.procs: this process has one thread, so the
         * two move the same; but the kernel moves a whole thread group (cgroup.procs) under
         * its global cgroup_threadgroup_rwsem, taken for writing — every fork, exec and exit
         * of the machine waits on it meanwhile, and the agents' launches make thousands a
         * second — while a thread that moves itself needs no such lock (cgroup_procs_write_start:
         * "If the thread is current, it won't exit(2) under our hands") */
        int fd = -1;
        /* from the server's descriptor of its parent (two names walked, not the whole path through
         * /sys); by its whole path if there is none, or if that fails (a parent removed since the
         * server opened it finds nothing: the whole path, as ever, says why) */
        if (i < joined_count && joined_path[i] == s->cgroups[i] && joined_fd[i] >= 0) {
            size_t length = strlen(joined_name[i]);
            const char *file = joined_threads[i] ? "/tasks" : "/cgroup.procs";
            if (length + sizeof "/cgroup.procs" <= sizeof path) {
                memcpy(path, joined_name[i], length);
                memcpy(path + length, file, strlen(file) + 1);
                fd = openat(joined_fd[i], path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
            }
        }
        if (fd < 0)
            fd = open_procs_by_path(s->cgroups[i]);
        if (fd < 0 || write(fd, "0", 1) != 1)
            fail("cannot join the cgroup %s: %s", s->cgroups[i], strerror(errno));
        close(fd);
    }
}

static void enter(const struct spec *s) {
    int flags = (s->mount ? CLONE_NEWNS : 0) | (s->ipc ? CLONE_NEWIPC : 0) | (s->uts ? CLONE_NEWUTS : 0)
                | (s->net ? CLONE_NEWNET : 0);
    if (flags && unshare(flags) != 0)
        fail("unshare: %s", strerror(errno));
    if (s->mount) {
        do_mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
        if (s->pid)
            do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
        if (s->ipc)
            do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
        if (s->tmp) {   /* made, mode 1777; the kept paths bound at their places inside first */
            mode_t mask = umask(0);   /* made 1777 at once: no chmod (a path walk, an inode change) */
            int made = mkdir(s->tmp, 01777) == 0, error = errno;
            umask(mask);
            if (!made) {
                if (error != EEXIST)
                    make_directories(s->tmp, 0777);
                if (chmod(s->tmp, 01777) != 0)
                    fail("cannot chmod %s: %s", s->tmp, strerror(errno));
            }
            for (size_t i = 0; i < s->nkeep; i++) {
                make_below(s->tmp, s->keep[i].target, 0777);
                do_mount(s->keep[i].source, s->keep[i].target, NULL, MS_BIND, NULL);
            }
            do_mount(s->tmp, "/tmp", NULL, MS_BIND | MS_REC, NULL);
        }
        for (size_t i = 0; i < s->nvolumes; i++)
            bind_volume(&s->volumes[i]);
    } else if (s->tmp || s->nvolumes) {
        fail("a private /tmp or volumes without a mount namespace");
    }
    if (s->uts && s->hostname && s->hostname[0] && sethostname(s->hostname, strlen(s->hostname)) != 0)
        fail("sethostname: %s", strerror(errno));
    if (s->net)
        loopback_up();
}

/* ------------------------------------------------------------ the task */
/* The signals this process ignores, which a task must not inherit ignored
 * (become_task resets these): found once by init_signals, after which no
 * disposition of this process changes (a server's clones inherit the list). */
static int ignored[NSIG], ignored_count;

/* A disposition as the kernel takes it (rt_sigaction), by the system call:
 * the C library's sigaction refuses its own signals (32 and 33, which its
 * posix_spawn leaves ignored in what it starts — this server, spawned so
 * by nsinit.py, and so its tasks); this program uses neither. */
#define KERNEL_SIGNALS 64
struct kernel_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    unsigned long long mask;
};

static int raw_sigaction(int signum, const struct kernel_sigaction *action, struct kernel_sigaction *old) {
    return (int)syscall(SYS_rt_sigaction, signum, action, old, sizeof(unsigned long long));
}

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static void close_range_of(int lowest, int highest) {
    for (int fd = lowest; fd <= highest; fd++)
        close(fd);
}

static void close_from(int lowest) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0)
        return;
#endif
    long limit = sysconf(_SC_OPEN_MAX);
    close_range_of(lowest, (int)(limit > 0 && limit < (1 << 20) ? limit : 65536) - 1);
}

/* Why the vforked child could not become the task, in the memory it
 * shares with this process: read once vfork returns, which is after the
 * child executed (then untouched) or exited (then set). No pipe to say it
 * on (a pipe made, read and closed a task, before). */
static volatile int task_failed, task_error;
static const char *volatile task_step;

/* The task's program by the task's PATH (execvpe would take this process's),
 * as Python's os.execvpe does; returns with errno set if none executes. Out
 * of line: its PATH_MAX buffer is not in the frame of every launch's vfork
 * child (a page of stack more each init wrote; stop 22, init22). */
__attribute__((noinline)) static void execute_on_path(const struct spec *s, const char *program) {
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (size_t i = 0; i < s->nenv; i++)
        if (strncmp(s->env[i], "PATH=", 5) == 0)
            path = s->env[i] + 5;
    int first_error = 0;
    char candidate[PATH_MAX];
    for (const char *at = path; ; ) {
        const char *colon = strchrnul(at, ':');
        size_t length = (size_t)(colon - at);
        if (length + strlen(program) + 2 < sizeof candidate) {
            if (length == 0)
                snprintf(candidate, sizeof candidate, "%s", program);
            else
                snprintf(candidate, sizeof candidate, "%.*s/%s", (int)length, at, program);
            execve(candidate, (char *const *)s->argv, (char *const *)s->env);
            if (errno != ENOENT && errno != ENOTDIR && first_error == 0)
                first_error = errno;
        }
        if (*colon == '\0')
            break;
        at = colon + 1;
    }
    if (first_error)
        errno = first_error;
}

/* In the vforked child (it shares this process's memory until it executes
 * or exits: it only makes system calls and writes its own stack and the
 * three words above): becomes the task, or says why not and exits. */
static void become_task(const struct spec *s) __attribute__((noreturn));
static void become_task(const struct spec *s) {
    int code = 0;
    const char *step = "setsid";
    if (setsid() < 0) goto failed;
    step = "chdir";   /* as root: the task's user may not traverse the directories above its sandbox */
    if (chdir(s->cwd) != 0) goto failed;
    if (s->switch_user) {   /* groups, then gid, then uid: each needs root left; the system calls
                               themselves (a vfork child: no C library bookkeeping shared with the parent) */
        step = "setgroups";
        if (syscall(SYS_setgroups, s->ngroups, s->groups) != 0) goto failed;
        step = "setresgid";
        if (syscall(SYS_setresgid, s->gid, s->gid, s->gid) != 0) goto failed;
        step = "setresuid";
        if (syscall(SYS_setresuid, s->uid, s->uid, s->uid) != 0) goto failed;
    }
    /* the ignored ones only (found once: note_ignored): execve resets every
     * caught signal to its default and every signal's flags itself, an
     * ignored one stays ignored (one system call each, not 64 a task) */
    struct kernel_sigaction dfl;
    memset(&dfl, 0, sizeof dfl);   /* SIG_DFL */
    for (int i = 0; i < ignored_count; i++)
        raw_sigaction(ignored[i], &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    step = "execute";
    const char *program = s->argv[0];
    if (strchr(program, '/') != NULL) {
        execve(program, (char *const *)s->argv, (char *const *)s->env);
    } else {
        execute_on_path(s, program);
    }
failed:
    code = errno;
    task_error = code;
    task_step = step;
    task_failed = 1;
    _exit(127);
}

/* The signals an init watches; blocked, SIGPIPE ignored (a status pipe
 * whose reader died: EPIPE, not death) and SIGCHLD default (never ignored:
 * its children would be reaped by the kernel, their status lost). A server
 * does this once for every init it clones (they inherit it). */
static void watch_signals(sigset_t *watched) {
    sigemptyset(watched);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        sigaddset(watched, forwarded[i]);
    sigaddset(watched, SIGCHLD);
}

static void note_ignored(void) {
    ignored_count = 0;
    for (int signum = 1; signum <= KERNEL_SIGNALS; signum++) {
        struct kernel_sigaction current;
        if (raw_sigaction(signum, NULL, &current) == 0 && current.handler == SIG_IGN)
            ignored[ignored_count++] = signum;
    }
}

static void init_signals(void) {
    sigset_t watched;   /* blocked already by the spawner: a SIGTERM before now waits, not lost */
    watch_signals(&watched);
    sigprocmask(SIG_BLOCK, &watched, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGCHLD, SIG_DFL);
    note_ignored();
}

/* The host's pid of the task (this process's only child: the task, live
 * or not yet reaped — nothing else is reaped or orphaned to it before the
 * task is said to execute but an orphan of the task's own), read in the
 * host's /proc: 0 if not exactly one child is listed (the shared supervisor
 * then looks itself, as before H). In C here, once: the shared supervisor's
 * Python read this process's children and each one's status per task. */
static long host_pid_of_task(int host_proc) {
    int fd = openat(host_proc, "thread-self/children", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char text[64];
    ssize_t n;
    do {
        n = read(fd, text, sizeof text - 1);
    } while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    errno = 0;
    long pid = strtol(text, &end, 10);
    while (*end == ' ' || *end == '\n')
        end++;
    return text[0] >= '1' && text[0] <= '9' && errno == 0 && *end == '\0' && pid <= 0x3fffffff ? pid : 0;
}

/* cloned: by a server, with its descriptors in place (fd 4 close-on-exec)
 * and its signals set (init_signals) already */
static int init_main(int cloned, char *inline_spec, size_t inline_size) {
    if (!cloned) {
        if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) != 0) {
            fputs("nsinit: no status pipe on fd 4\n", stderr);
            return 2;
        }
        init_signals();
    }
    sigset_t watched;
    watch_signals(&watched);

    struct spec s;
    if (inline_spec != NULL)   /* handed over in the request: in this clone's copy of the server's memory */
        parse_spec(&s, inline_spec, inline_size);
    else
        read_spec(&s);
    join_cgroups(&s);
    if (joined_count > 0)   /* the server's descriptors of the parents (become_init_inline kept them) */
        close_from(STATUS_FD + 1);
    /* the host's /proc, before enter() mounts the namespace's on it: where
     * the task's host pid is read (host_pid_of_task) */
    int host_proc = s.pid ? open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    enter(&s);

    /* vfork: no copy of this process's page tables to make, fault in and
     * throw away at the task's exec (a fork's cost here, measured) */
    task_failed = 0;
    pid_t task = vfork();
    if (task < 0)
        fail("fork: %s", strerror(errno));
    if (task == 0) {
        close_from(3);   /* every descriptor above 2 goes: the status pipe, the host's /proc */
        become_task(&s);
    }
    if (task_failed) {   /* it did not execute: why (it has exited: vfork returned) */
        int code = task_error;
        const char *step = task_step ? task_step : "start";
        waitpid(task, NULL, 0);
        if (strcmp(step, "execute") == 0)
            fail("cannot execute %s: %s", s.argv[0], strerror(code));
        fail("the task's %s failed: %s", step, strerror(code));
    }
    char line[64];
    size_t said = number_line(line, 'R', (long)task, 1);
    if (host_proc >= 0) {   /* R and H in one write: read together */
        long host = host_pid_of_task(host_proc);
        close(host_proc);
        if (host > 0)
            number_line(line + said, 'H', host, 1);
    }
    say(line);

    for (;;) {
        siginfo_t info;
        int signum = sigwaitinfo(&watched, &info);
        if (signum < 0)
            continue;
        if (signum != SIGCHLD) {
            if (kill(-task, signum) != 0)
                kill(task, signum);
            continue;
        }
        for (;;) {   /* every ended child, by a look that reaps nothing: the leader is waited for apart */
            siginfo_t ended;
            memset(&ended, 0, sizeof ended);
            if (waitid(P_ALL, 0, &ended, WEXITED | WNOHANG | WNOWAIT) != 0 || ended.si_pid == 0)
                break;
            if (ended.si_pid != task) {   /* an orphan */
                waitpid(ended.si_pid, NULL, 0);
                continue;
            }
            kill(-task, SIGKILL);   /* the unreaped leader still pins the group id: its group cleared first */
            int status;
            if (waitpid(task, &status, 0) != task)
                fail("the task's leader cannot be waited for: %s", strerror(errno));
            number_line(line, 'X', status, 1);
            say(line);
            return 0;
        }
    }
}

/* ------------------------------------------------------------ the server
 * "nsinit --serve": fd 3 a SOCK_SEQPACKET socket to the shared supervisor,
 * which started this process with no environment and the init's signals
 * blocked. Each request is one message of one byte, 'P' (the init is the
 * first process of a new PID namespace) or 'N' (it is not), with four
 * descriptors: the launch spec, the status pipe, the task's stdout and
 * stderr. The server clones the init — a child of the shared supervisor
 * (CLONE_PARENT: it watches, signals and reaps it as one it spawned) —
 * which takes them as fds 3, 4, 1 and 2 (/dev/null as 0), makes a session
 * of its own and goes on as an init spawned with them would. The answer,
 * one message: "P PID" (the init's pid, the shared supervisor's view) or
 * "F MESSAGE". The init leads a process group of its own (the shared
 * supervisor signals it as a group), in the shared supervisor's session:
 * not a session of its own, which the kernel gives a scheduling group of
 * its own (autogroup), made and torn down per task; the task has its own
 * session, as ever. A server started with a pipe as fd 4 (its status
 * channel, the shared supervisor's) also takes channel requests: "C", then
 * 'P' or 'N', the init's tag (digits) and an inline request's fields, no
 * descriptor; the init says its lines on the channel under the tag, so no
 * pipe is made, passed and closed a task (and one read takes the lines
 * of many inits). It serves until the socket's other end is gone (and dies
 * with the process that started it).
 *
 * Why: an exec of this program per task — the C library's start-up, which
 * asks the processor what it is (CPUID instructions, each a trap out of a
 * virtual machine), a fresh image's page faults — cost more CPU than its
 * namespaces and mounts did (docs/performance.rst). A clone of this small
 * process costs a few pages. */
#define SERVER_FD 3
/* the largest inline request ('S'); nsinit.py's INLINE_MAX, well below a
 * SOCK_SEQPACKET message's limit (the socket's send buffer) */
#define INLINE_MAX (96 << 10)

static void answer(const char *line) {
    while (send(SERVER_FD, line, strlen(line), MSG_NOSIGNAL) < 0 && errno == EINTR) {}
}

/* The answer to a request: the init's pid, or why the clone failed. */
static void answer_clone(pid_t pid, int error) {
    char line[128];
    if (pid < 0)
        snprintf(line, sizeof line, "F clone: %s", strerror(error));
    else
        number_line(line, 'P', (long)pid, 0);
    answer(line);
}

static void close_all(const int *fds, int count) {
    for (int i = 0; i < count; i++)
        close(fds[i]);
}

/* In the cloned init: its descriptors in place, a process group of its own. */
static void become_init(const int *fds) __attribute__((noreturn));
static void become_init(const int *fds) {
    status_fd = fds[1];   /* a failure before the descriptors are in place is said there */
    if (fds[0] > STATUS_FD && fds[1] > STATUS_FD && fds[2] > STATUS_FD && fds[3] > STATUS_FD) {
        /* the server's 0 is /dev/null and 1-4 are taken (serve): each goes to its place
         * at once, fd 4 close-on-exec with it (5 system calls, not 12) */
        if (dup2(fds[2], 1) < 0 || dup2(fds[3], 2) < 0 || dup2(fds[0], SPEC_FD) < 0
            || dup3(fds[1], STATUS_FD, O_CLOEXEC) < 0)
            fail("the init's descriptors: %s", strerror(errno));
        status_fd = STATUS_FD;
        close_from(STATUS_FD + 1);
        if (setpgid(0, 0) != 0)
            fail("setpgid: %s", strerror(errno));
        _exit(init_main(1, NULL, 0));
    }
    int high[4];          /* out of the way of 0-4 first: a received fd may be any of them */
    for (int i = 0; i < 4; i++) {
        high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
        if (high[i] < 0)
            fail("the init's descriptors: %s", strerror(errno));
    }
    status_fd = high[1];
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(high[2], 1) < 0 || dup2(high[3], 2) < 0
        || dup2(high[0], SPEC_FD) < 0 || dup2(high[1], STATUS_FD) < 0)
        fail("the init's descriptors: %s", strerror(errno));
    status_fd = STATUS_FD;
    close_from(STATUS_FD + 1);
    if (setpgid(0, 0) != 0)
        fail("setpgid: %s", strerror(errno));
    if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) != 0)
        fail("the init's descriptors: %s", strerror(errno));
    init_signals();
    _exit(init_main(1, NULL, 0));
}

/* A task's stdout or stderr, as the shared supervisor's open_sandbox_file
 * opens it: made new (O_EXCL: a plain file with one link by construction),
 * or, if the name is taken, opened without following a symlink or blocking
 * on a FIFO and checked to be a plain file with one link; given to the
 * task's user (owner). Fails the launch (an "F" line, in the words of the
 * shared supervisor's LaunchProblem) if it cannot. */
static int open_output(const char *path, int owner, uid_t uid, gid_t gid) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd >= 0) {
            struct stat info;
            int flags;
            if (fstat(fd, &info) != 0 || (flags = fcntl(fd, F_GETFL)) < 0
                || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
                fail("cannot open the task's output file %s: %s", path, strerror(errno));
            if (!S_ISREG(info.st_mode) || info.st_nlink != 1)
                fail("cannot open the task's output file %s: not a plain file of the sandbox", path);
        }
    }
    if (fd < 0)
        fail("cannot open the task's output file %s: %s", path, strerror(errno));
    if (owner && fchown(fd, uid, gid) != 0)
        fail("cannot give the task's output file %s to its user: %s", path, strerror(errno));
    return fd;
}

/* In the clone of an inline request ('S'): its status pipe as fd 4, its
 * stdout and stderr opened (by this clone, not the server: the clones of a
 * batch make their files side by side, and the server goes on cloning)
 * before it joins the task's cgroups, as the shared supervisor opened them
 * before; the spec in this process's copy of the server's request. */
static void become_init_inline(int status, const char *out_path, const char *err_path, int owner, uid_t uid,
                               gid_t gid, char *spec, size_t size) __attribute__((noreturn));
static void become_init_inline(int status, const char *out_path, const char *err_path, int owner, uid_t uid,
                               gid_t gid, char *spec, size_t size) {
    if (status >= 0) {
        status_fd = status;   /* above 4, as every descriptor the server gets (serve) */
        if (dup3(status, STATUS_FD, O_CLOEXEC) < 0)
            fail("the init's descriptors: %s", strerror(errno));
    }   /* else a channel request's: fd 4 is the server's status channel already (close-on-exec: serve) */
    status_fd = STATUS_FD;
    close(SERVER_FD);   /* the server's socket: never the init's */
    if (joined_count == 0)   /* else once the cgroups are joined (init_main): their descriptors are among these */
        close_from(STATUS_FD + 1);
    int out = open_output(out_path, owner, uid, gid);
    int err = open_output(err_path, owner, uid, gid);
    if (dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail("the init's descriptors: %s", strerror(errno));
    close(out);
    close(err);
    if (setpgid(0, 0) != 0)
        fail("setpgid: %s", strerror(errno));
    _exit(init_main(1, spec, size));
}

/* The next NUL-terminated field of a request in [*at, end), or NULL. */
static const char *request_field(char **at, char *end) {
    char *nul = *at < end ? memchr(*at, '\0', (size_t)(end - *at)) : NULL;
    if (nul == NULL)
        return NULL;
    const char *value = *at;
    *at = nul + 1;
    return value;
}

/* What marks a helper that takes inline requests (nsinit.py looks for it in the binary). */
static const char inline_feature[] = "nsinit-feature:inline-spec-1";
/* ... and one that takes channel requests ('C'), given its status channel as fd 4 at its start. */
static const char channel_feature[] = "nsinit-feature:status-channel-2";
/* whether this server was started with its status channel on fd 4 (a pipe) */
static int has_channel;

/* The parent directories of the cgroups the inits join (O_PATH), held open
 * by the server: an init opens a cgroup's cgroup.procs from its copy of its
 * parent's descriptor (join_cgroups), walking two names, not the six or
 * seven of the whole path through /sys and kernfs (~2 us a cgroup, four a
 * task). The agent's cgroups of a hierarchy share one parent, so few are
 * held: at most CGROUP_PARENTS, the least recently used let go. A parent
 * removed while held finds nothing below it (the init walks the whole
 * path); one renamed while held would still be the one reached (the agent
 * renames no parent: its bases stay where they are made). (The
 * cgroup.procs themselves, held, would spare the open and the release as
 * well, but the agent's pool hands out hundreds of cgroups in turn: a cache
 * the clone's descriptor table can carry cheaply missed every time.) */
#define CGROUP_PARENTS 8
/* a longer path is not held (its init opens it whole); in place, not on the heap: the server allocates
 * nothing that would put its inits' own allocations on more pages */
#define CACHED_PATH 232
static struct cached_parent {
    unsigned long long hash;
    unsigned long used;
    int fd;
    int threads;   /* a v1 hierarchy's: its cgroups have a tasks file (join_cgroups writes the thread there) */
    char path[CACHED_PATH];
} parent_cache[CGROUP_PARENTS];
static size_t parents_cached;
static unsigned long parent_clock;

static unsigned long long path_hash(const char *path, size_t length) {
    unsigned long long hash = 1469598103934665603ULL;   /* FNV-1a */
    for (size_t i = 0; i < length; i++)
        hash = (hash ^ (unsigned char)path[i]) * 1099511628211ULL;
    return hash;
}

/* The server's descriptor of the directory DIRECTORY[0:length] (opened
 * O_PATH, as the whole path's walk would reach it), or -1 (then the init
 * walks the whole path); *threads: whether its cgroups are v1's (a tasks
 * file: looked for once a parent, not by a failed open an init). */
static int cached_parent(const char *directory, size_t length, int *threads) {
    if (length == 0 || length >= CACHED_PATH)
        return -1;
    unsigned long long hash = path_hash(directory, length);
    struct cached_parent *slot = NULL;
    for (size_t i = 0; i < parents_cached; i++) {
        struct cached_parent *entry = &parent_cache[i];
        if (entry->hash == hash && strncmp(entry->path, directory, length) == 0 && entry->path[length] == '\0') {
            entry->used = ++parent_clock;
            *threads = entry->threads;
            return entry->fd;
        }
        if (slot == NULL || entry->used < slot->used)
            slot = entry;
    }
    char path[CACHED_PATH];
    memcpy(path, directory, length);
    path[length] = '\0';
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (parents_cached < CGROUP_PARENTS)
        slot = &parent_cache[parents_cached++];
    else   /* the least recently used let go */
        close(slot->fd);
    slot->hash = hash;
    slot->used = ++parent_clock;
    slot->fd = fd;
    slot->threads = faccessat(fd, "tasks", F_OK, 0) == 0;   /* v1's; cgroup v2 has none */
    memcpy(slot->path, path, length + 1);
    *threads = slot->threads;
    return fd;
}

/* The spec of a request in [at, end) (its records as parse_spec reads
 * them): each "cgroup" record's parent's descriptor (cached_parent) and
 * its place noted for the init about to be cloned (join_cgroups); nothing
 * noted for a spec that does not follow the records to its "end" (parse_spec
 * in the init says what is wrong with it). */
__attribute__((noinline))   /* its frame (and cached_parent's) gone before the clone: the init's stack starts no deeper */
static void note_cgroups(char *at, char *end) {
    size_t count = 0;
    joined_count = 0;
    while (at < end) {
        const char *tag = request_field(&at, end);
        if (tag == NULL)
            return;
        int fields;
        if (strcmp(tag, "cgroup") == 0) {
            const char *directory = request_field(&at, end);
            if (directory == NULL)
                return;
            if (count < JOINED_MAX) {   /* the rest joined by their paths */
                const char *slash = strrchr(directory, '/');
                int named = directory[0] == '/' && slash != NULL && slash[1] != '\0' && strcmp(slash + 1, ".") != 0
                            && strcmp(slash + 1, "..") != 0;
                joined_path[count] = directory;
                joined_name[count] = named ? slash + 1 : "";
                joined_threads[count] = 0;
                joined_fd[count] = named ? cached_parent(directory, (size_t)(slash - directory), &joined_threads[count])
                                         : -1;
                count++;
            }
            continue;
        }
        if (strcmp(tag, "end") == 0) {
            joined_count = count;
            return;
        }
        if (strcmp(tag, "keep") == 0)
            fields = 2;
        else if (strcmp(tag, "volume") == 0)
            fields = 5;
        else if (strcmp(tag, "user") == 0)
            fields = 3;
        else if (strcmp(tag, "ns") == 0 || strcmp(tag, "hostname") == 0 || strcmp(tag, "tmp") == 0
                 || strcmp(tag, "cwd") == 0 || strcmp(tag, "env") == 0 || strcmp(tag, "arg") == 0)
            fields = 1;
        else
            return;
        while (fields-- > 0)
            if (request_field(&at, end) == NULL)
                return;
    }
}

/* An inline request: "S", "P" or "N", then NUL-terminated fields: the
 * task's stdout and stderr paths, their owner ("" or "UID:GID"), and the
 * spec itself to the end of the message; one descriptor, the status pipe.
 * The clone opens the output files and takes its spec from its copy of
 * this request: the shared supervisor's Python loop makes no memfd and
 * opens no file a task. Answered as a 'P' or 'N' request is; an output
 * file that cannot be opened fails the launch on the status pipe, as a
 * mount that fails does. Closes fd. */
static void serve_inline(char *request, size_t size, int fd) {
    char *at = request + 2, *end = request + size;
    /* a channel request ('C'): the init's tag first (digits), no descriptor: its lines go on the
     * server's status channel (fd 4) under the tag, not on a pipe of its own */
    const char *tag = request[0] == 'C' ? request_field(&at, end) : "";
    const char *out_path = request_field(&at, end), *err_path = request_field(&at, end);
    const char *owner = request_field(&at, end);
    int good = out_path != NULL && err_path != NULL && owner != NULL && at < end && end[-1] == '\0'
               && (request[1] == 'P' || request[1] == 'N') && out_path[0] == '/' && err_path[0] == '/';
    if (good && request[0] == 'C') {
        size_t digits = tag != NULL ? strspn(tag, "0123456789") : 0;
        good = has_channel && fd < 0 && digits > 0 && digits < sizeof status_tag && tag[digits] == '\0';
    }
    unsigned long uid = 0, gid = 0;
    int owned = good && owner[0] != '\0';
    if (owned) {
        char *rest;
        errno = 0;
        uid = strtoul(owner, &rest, 10);
        good = owner[0] >= '0' && owner[0] <= '9' && *rest == ':' && errno == 0 && uid <= 0xfffffffeUL;
        if (good) {
            const char *gid_text = rest + 1;
            gid = strtoul(gid_text, &rest, 10);
            good = gid_text[0] >= '0' && gid_text[0] <= '9' && *rest == '\0' && errno == 0 && gid <= 0xfffffffeUL;
        }
    }
    if (!good) {
        if (fd >= 0)
            close(fd);
        answer("F a bad request to the namespace init server");
        return;
    }
    note_cgroups(at, end);
    unsigned long flags = CLONE_PARENT | (request[1] == 'P' ? CLONE_NEWPID : 0);
    pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid == 0) {
        if (request[0] == 'C')
            strcpy(status_tag, tag);   /* checked to fit above */
        become_init_inline(fd, out_path, err_path, owned, (uid_t)uid, (gid_t)gid, at, (size_t)(end - at));
    }
    joined_count = 0;   /* the init's, noted in its copy: the server's stays none */
    int error = errno;
    if (fd >= 0)
        close(fd);
    answer_clone(pid, error);
}

static int serve(void) {
    if (fcntl(SERVER_FD, F_SETFD, FD_CLOEXEC) != 0) {
        fputs("nsinit: no socket on fd 3\n", stderr);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlives the shared supervisor */
    if (getppid() == 1)
        return 0;
    /* What every init would do first, done once (a clone inherits it): its
     * signals (init_signals); /dev/null as fd 0 (nsinit.py spawns the
     * server so: checked, else opened); 1, 2 and 4 taken (1 and 2 as they
     * came, 4 a copy of 0), so that the descriptors of a request land above
     * 4 and an init puts them in place with one dup2 each (become_init). */
    init_signals();
    /* fd 4, if it came, is the status channel (a pipe: nsinit.py's Server gives it to a helper
     * with channel_feature); close-on-exec, as each init's status descriptor is */
    struct stat channel;
    has_channel = fstat(STATUS_FD, &channel) == 0 && S_ISFIFO(channel.st_mode)
                  && fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) == 0;
    struct stat zero;
    if (fstat(0, &zero) != 0 || !S_ISCHR(zero.st_mode) || zero.st_rdev != makedev(1, 3)) {
        int null = open("/dev/null", O_RDONLY);
        if (null < 0 || (null != 0 && (dup2(null, 0) < 0 || close(null) != 0)))
            return 2;
    }
    for (int fd = 1; fd <= STATUS_FD; fd++)
        if (fd != SERVER_FD && fcntl(fd, F_GETFD) < 0 && fcntl(0, F_DUPFD, fd) != fd)
            return 2;
    static char request[INLINE_MAX + 1];
    for (;;) {
        struct iovec part = {request, INLINE_MAX};
        union { struct cmsghdr header; char space[CMSG_SPACE(8 * sizeof(int))]; } control;
        struct msghdr message;
        memset(&message, 0, sizeof message);
        message.msg_iov = &part;
        message.msg_iovlen = 1;
        message.msg_control = control.space;
        message.msg_controllen = sizeof control.space;
        ssize_t n = recvmsg(SERVER_FD, &message, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;   /* the shared supervisor is gone, or let go */
        int fds[8], count = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&message); c != NULL; c = CMSG_NXTHDR(&message, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            int got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < got && count < 8; i++)
                memcpy(&fds[count++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        char kind = request[0];
        if (kind == 'S' && count == 1 && n >= 2 && !(message.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
            request[n] = '\0';
            serve_inline(request, (size_t)n, fds[0]);
            continue;
        }
        if (kind == 'C' && count == 0 && n >= 2 && !(message.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
            request[n] = '\0';
            serve_inline(request, (size_t)n, -1);
            continue;
        }
        if (n != 1 || (kind != 'P' && kind != 'N') || count != 4 || (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
            close_all(fds, count);
            answer("F a bad request to the namespace init server");
            continue;
        }
        /* a fork with these flags, by the system call: the clone then runs
         * no code that relies on the C library's record of its thread id
         * (no threads, raise or abort; vfork is the bare system call) */
        unsigned long flags = CLONE_PARENT | (kind == 'P' ? CLONE_NEWPID : 0);
        pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
        if (pid == 0)
            become_init(fds);
        int error = errno;
        close_all(fds, count);
        answer_clone(pid, error);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--serve") == 0)
        return serve();
    if (argc == 2 && strcmp(argv[1], "--features") == 0) {
        puts(inline_feature);
        puts(channel_feature);
        return 0;
    }
    if (argc != 1) {
        fputs("nsinit: started by the agent's shared supervisor only (fd 3: the spec, fd 4: status; "
              "or --serve, fd 3: its socket)\n", stderr);
        return 2;
    }
    return init_main(0, NULL, 0);
}
