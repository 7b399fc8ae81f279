/* lostwrites: an LD_PRELOAD library that models what a disk keeps, for the fault tier.
 *
 * For the files under $LOSTWRITES_DIR, a successful fsync/fdatasync copies the file's content
 * to the same relative path under $LOSTWRITES_SHADOW: the shadow tree is what the device holds.
 * Renames and unlinks move or drop the copies with the files (directory entries are taken as
 * durable: the broker fsyncs its directories).  A power loss is then simulated outside the
 * process, after SIGKILL: every tracked file is reset to its shadow copy, or emptied if it was
 * never synced (tests/support/lostwrites.py).
 *
 * While $LOSTWRITES_SHADOW/.fail-fsync exists, fsync and fdatasync of tracked files fail with
 * EIO and take no copy: as on Linux after a failed writeback, the process still reads its
 * writes from the page cache, but the device never got them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);

__attribute__((constructor)) static void init(void) {
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    real_renameat2 = dlsym(RTLD_NEXT, "renameat2");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    real_unlinkat = dlsym(RTLD_NEXT, "unlinkat");
}

/* The shadow path of `path` when it lies under $LOSTWRITES_DIR; 0 otherwise. */
static int shadow_of(const char *path, char *out) {
    const char *dir = getenv("LOSTWRITES_DIR"), *shadow = getenv("LOSTWRITES_SHADOW");
    if (!dir || !shadow) return 0;
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0 || (path[n] != '/' && path[n] != 0)) return 0;
    return snprintf(out, PATH_MAX, "%s%s", shadow, path + n) < PATH_MAX;
}

static int path_of_fd(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0) return 0;
    out[n] = 0;
    return 1;
}

/* An absolute path for `name` relative to `dirfd` (AT_FDCWD or a directory). */
static int resolve(int dirfd, const char *name, char *out) {
    char base[PATH_MAX];
    if (name[0] == '/') return snprintf(out, PATH_MAX, "%s", name) < PATH_MAX;
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) return 0;
    } else if (!path_of_fd(dirfd, base)) {
        return 0;
    }
    return snprintf(out, PATH_MAX, "%s/%s", base, name) < PATH_MAX;
}

static void make_parents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    }
}

static int failing(void) {
    char flag[PATH_MAX];
    const char *shadow = getenv("LOSTWRITES_SHADOW");
    if (!shadow) return 0;
    snprintf(flag, sizeof flag, "%s/.fail-fsync", shadow);
    return access(flag, F_OK) == 0;
}

/* Copy the whole file at `path` to its shadow (through a temporary name, then rename); read
 * by name, as the process's own descriptor may be open for writing only. */
static int keep(const char *path, const char *shadow) {
    char tmp[PATH_MAX];
    struct stat st;
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0) return -1;
    if (fstat(in, &st) != 0 || snprintf(tmp, sizeof tmp, "%s.lostwrites-tmp", shadow) >= PATH_MAX) {
        close(in);
        return -1;
    }
    make_parents(tmp);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return -1;
    }
    off_t offset = 0;
    int rc = 0;
    while (offset < st.st_size) {
        ssize_t n = sendfile(out, in, &offset, (size_t)(st.st_size - offset));
        if (n <= 0) {
            rc = -1;
            break;
        }
    }
    close(in);
    close(out);
    return rc == 0 ? real_rename(tmp, shadow) : -1;
}

static int synced(int fd, int (*real)(int)) {
    char path[PATH_MAX], shadow[PATH_MAX];
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !path_of_fd(fd, path) || !shadow_of(path, shadow))
        return real(fd);
    if (failing()) {
        errno = EIO;
        return -1;
    }
    int rc = real(fd);
    if (rc == 0 && keep(path, shadow) != 0) {
        errno = EIO;
        return -1;
    }
    return rc;
}

int fsync(int fd) { return synced(fd, real_fsync); }
int fdatasync(int fd) { return synced(fd, real_fdatasync); }

static void moved(const char *from, const char *to) {
    char a[PATH_MAX], b[PATH_MAX];
    int has_a = shadow_of(from, a), has_b = shadow_of(to, b);
    if (has_b) real_unlink(b); /* the target's durable content is replaced */
    if (has_a && has_b) {
        make_parents(b);
        real_rename(a, b);
    } else if (has_a) {
        real_unlink(a);
    }
}

int rename(const char *from, const char *to) {
    char a[PATH_MAX], b[PATH_MAX];
    int ok = resolve(AT_FDCWD, from, a) && resolve(AT_FDCWD, to, b);
    int rc = real_rename(from, to);
    if (rc == 0 && ok) moved(a, b);
    return rc;
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    char a[PATH_MAX], b[PATH_MAX];
    int ok = resolve(fromfd, from, a) && resolve(tofd, to, b);
    int rc = real_renameat(fromfd, from, tofd, to);
    if (rc == 0 && ok) moved(a, b);
    return rc;
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    char a[PATH_MAX], b[PATH_MAX];
    int ok = resolve(fromfd, from, a) && resolve(tofd, to, b);
    int rc = real_renameat2(fromfd, from, tofd, to, flags);
    if (rc == 0 && ok) moved(a, b);
    return rc;
}

static void dropped(const char *path) {
    char s[PATH_MAX];
    if (shadow_of(path, s)) real_unlink(s);
}

int unlink(const char *path) {
    char a[PATH_MAX];
    int ok = resolve(AT_FDCWD, path, a);
    int rc = real_unlink(path);
    if (rc == 0 && ok) dropped(a);
    return rc;
}

int unlinkat(int dirfd, const char *path, int flags) {
    char a[PATH_MAX];
    int ok = resolve(dirfd, path, a);
    int rc = real_unlinkat(dirfd, path, flags);
    if (rc == 0 && ok && !(flags & AT_REMOVEDIR)) dropped(a);
    return rc;
}
