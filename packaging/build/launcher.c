/*
 * The first code that runs when `publish` starts, linked statically so that it needs nothing from the node
 * but the kernel.
 *
 * A frozen tree (the build Python's interpreter and compiled modules, or a PyInstaller or Nuitka folder, plus
 * the dynamic loader and C library it was built with) is run as
 *     ROOT/ld-publish.so.1 --inhibit-cache --library-path ROOT/_internal ROOT/publish [PYTHON ARGS] ARGS...
 * so no library of the node is used: not its loader, not its libc, not its ld.so.cache. In the interpreter
 * form (built with -DPUBLISH_INTERPRETER) ROOT/publish is the Python interpreter and PYTHON ARGS are
 * `-I -S [-X publish-payload=FD] -c "import _publish_boot"` (packaging/build/boot.py).
 *
 * Two forms:
 *   folder:   no payload; ROOT is ../libexec/publish next to this file (links resolved).
 *   one file: the tree is appended to this file (members LZ4-compressed or stored, an index and a trailer;
 *             packaging/build/README.md). It is unpacked once per build and per user into the cache,
 *             CACHE/BUILD-DIGEST (CACHE: $PUBLISH_CACHE_DIR, else $XDG_CACHE_HOME/publish, else
 *             $HOME/.cache/publish; a directory of this user's, mode 0700, not a link, writable by no one
 *             else), filled in CACHE/.tmp-PID-N and renamed into place complete; later starts check that copy
 *             (one fstatat per member: check_copy), run it and write nothing. A damaged copy is said on one
 *             line, replaced by a fresh one and kept as CACHE/.damaged-ID-PID-N. Without a usable cache
 *             (PUBLISH_CACHE_DIR=off, no $HOME, a noexec or refused one), each start unpacks into a private
 *             directory of its own on the first candidate filesystem that is writable and allows executables
 *             ($TMPDIR, /tmp, /dev/shm, $XDG_RUNTIME_DIR, /var/tmp, the binary's folder, $HOME), so a noexec
 *             /tmp is passed over. Members flagged lazy (OpenSSL, extension modules, modules only S3 and Vault
 *             use) are not unpacked here: this file stays open as descriptor FD and the program unpacks them
 *             into the same directory on first import (packaging/build/boot.py).
 *
 * In both forms the loader is exec'd in place: the process keeps its pid, receives its signals directly and
 * its exit status is the program's. A private directory (no cache) is removed through a small detached process
 * that waits for the end of a pipe held only by the program: when the program exits, however it exits, the
 * pipe closes and the directory is removed. That process re-executes this file as `publish-unpack-cleaner DIR`
 * (its name in ps and /proc/PID/cmdline), so a `pkill -f 'publish watch'` meant for the program passes it by.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAGIC "PUBLSHX1"
#define TRAILER_SIZE 32 /* magic[8], index offset u64, index length u64, entry count u64 */
#define ENTRY_HEAD 36 /* kind u8, codec u8, flags u8, pad, mode u32, offset u64, packed u64, size u64, path len u32 */
#define KIND_DIR 0
#define KIND_FILE 1
#define KIND_LINK 2
#define CODEC_RAW 0
#define CODEC_LZ4 1
#define CODEC_ZLIB 2  /* lazy members only: the program unpacks those itself (packaging/build/boot.py) */
#define FLAG_LAZY 1   /* left in the file: the program unpacks it on first use */
#define HOLD_FD 1021    /* the program's end of the cleanup pipe: high, out of the way of its own files */
#define PAYLOAD_FD 1020 /* this file, left open for the program (interpreter form): its lazy members */
#define CLEANER "publish-unpack-cleaner" /* argv[0] of the clean-up process */

extern char **environ;

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...) {
    char msg[PATH_MAX * 4 + 256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n > 0) {
        if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
        ssize_t w = write(2, msg, (size_t)n);
        (void)w;
    }
}

static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The LZ4 block format: literals and back-references, nothing else. Returns 0 when exactly dlen bytes came out.
   Short literal runs and matches are copied 16 bytes at a time where both buffers have room to spare (the
   bytes past the end of a copy are overwritten by the next one); near the ends, byte by byte. */
static int lz4_decode(const unsigned char *src, size_t slen, unsigned char *dst, size_t dlen) {
    const unsigned char *ip = src, *iend = src + slen;
    unsigned char *op = dst, *oend = dst + dlen;
    while (ip < iend) {
        unsigned token = *ip++;
        size_t lit = token >> 4;
        if (lit == 15) {
            unsigned b;
            do {
                if (ip >= iend) return -1;
                b = *ip++;
                lit += b;
            } while (b == 255);
        }
        if ((size_t)(iend - ip) < lit || (size_t)(oend - op) < lit) return -1;
        if (lit <= 16 && iend - ip >= 16 && oend - op >= 16) {
            memcpy(op, ip, 16);
        } else {
            memcpy(op, ip, lit);
        }
        ip += lit;
        op += lit;
        if (ip == iend) break; /* the last sequence holds literals only */
        if (iend - ip < 2) return -1;
        size_t off = (size_t)ip[0] | ((size_t)ip[1] << 8);
        ip += 2;
        if (off == 0 || off > (size_t)(op - dst)) return -1;
        size_t ml = token & 15;
        if (ml == 15) {
            unsigned b;
            do {
                if (ip >= iend) return -1;
                b = *ip++;
                ml += b;
            } while (b == 255);
        }
        ml += 4;
        if ((size_t)(oend - op) < ml) return -1;
        const unsigned char *m = op - off;
        unsigned char *mend = op + ml;
        if (off >= 16 && (size_t)(oend - op) >= ml + 16) {
            do {
                memcpy(op, m, 16);
                op += 16;
                m += 16;
            } while (op < mend);
        } else if (off >= 8 && (size_t)(oend - op) >= ml + 8) {
            do {
                memcpy(op, m, 8);
                op += 8;
                m += 8;
            } while (op < mend);
        } else {
            while (op < mend) *op++ = *m++;
        }
        op = mend;
    }
    return op == oend ? 0 : -1;
}

/* rm -rf of a tree this launcher made: files, links and folders only. */
static void remove_tree(int parent, const char *name) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        DIR *d = fdopendir(fd);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                if (unlinkat(dirfd(d), e->d_name, 0) != 0 && (errno == EISDIR || errno == EPERM))
                    remove_tree(dirfd(d), e->d_name);
            }
            closedir(d);
        } else {
            close(fd);
        }
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

static int write_all(int fd, const unsigned char *data, uint64_t size) {
    uint64_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (uint64_t)w;
    }
    return 0;
}

/* The stamp: every file an unpack writes gets this modification time once written (futimens), and a warm start
   checks it with the file's type, size and owner's permission bits (check_copy), so that a file changed in
   place, even to the same size, is seen. A whole, even number of seconds in 2001-2002 (kept exactly by every
   filesystem, FAT's 2-second clock included; no write sets it), derived from the build's digest: STAMP_BASE
   plus twice the number its first 6 hex digits spell. packaging/build/boot.py stamps and checks the lazy
   members with the same rule. The access time is left alone (UTIME_OMIT), so that a purge by access time (the
   usual one on scratch filesystems) still sees the copy's use. */
#define STAMP_BASE 1000000000L
static struct timespec stamp[2] = {{0, UTIME_OMIT}, {STAMP_BASE, 0}};

static void set_stamp(const char *id) {
    long v = 0;
    for (int k = 0; k < 6; k++) v = v * 16 + (id[k] <= '9' ? id[k] - '0' : id[k] - 'a' + 10);
    stamp[1].tv_sec = STAMP_BASE + 2 * v;
}

/* Set for the cache: a copy kept across boots is on disk before it is renamed into place, so a crash never
   leaves a copy with empty files that later starts would run. */
static int durable;

/* One file: LZ4 members are decoded into a buffer kept for the next member, then written; a full filesystem
   is then an ordinary write error (no mapping of the new file, so no SIGBUS), and no file is ever read back. */
static int write_file(int dirfd, const char *path, unsigned mode, unsigned codec, const unsigned char *data,
                      uint64_t packed, uint64_t size) {
    static unsigned char *buf;
    static uint64_t cap;
    if (codec == CODEC_RAW ? packed != size : codec != CODEC_LZ4) {
        errno = EILSEQ;
        return -1;
    }
    if (codec == CODEC_LZ4 && size > cap) {
        if (buf) munmap(buf, cap);
        cap = size;
        buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            buf = NULL;
            cap = 0;
            return -1;
        }
    }
    if (codec == CODEC_LZ4 && lz4_decode(data, packed, buf, size) != 0) {
        errno = EILSEQ;
        return -1;
    }
    int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0777);
    if (fd < 0) return -1;
    int rc = write_all(fd, codec == CODEC_LZ4 ? buf : data, size);
    if (rc == 0) rc = fchmod(fd, mode & 0700); /* exactly the index's bits, whatever the umask */
    if (rc == 0) rc = futimens(fd, stamp);
    if (rc == 0 && durable) rc = fsync(fd);
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    errno = e;
    return rc;
}

/* Unpack the index's entries below dirfd. */
static int unpack(int dirfd, const unsigned char *base, uint64_t file_size, const unsigned char *idx,
                  uint64_t idx_len, uint64_t count) {
    const unsigned char *p = idx, *end = idx + idx_len;
    char path[PATH_MAX];
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < ENTRY_HEAD) goto bad;
        unsigned kind = p[0], codec = p[1], flags = p[2];
        unsigned mode = get32(p + 4);
        uint64_t off = get64(p + 8), packed = get64(p + 16), size = get64(p + 24);
        uint32_t plen = get32(p + 32);
        p += ENTRY_HEAD;
        if (plen == 0 || plen >= sizeof path || (uint64_t)(end - p) < plen) goto bad;
        if (off > file_size || packed > file_size - off) goto bad;
        memcpy(path, p, plen);
        path[plen] = 0;
        p += plen;
        if (path[0] == '/' || strstr(path, "..")) goto bad;
        if (kind == KIND_DIR) {
            if (mkdirat(dirfd, path, 0700) != 0) return -1;
        } else if (kind == KIND_FILE) {
            if (flags & FLAG_LAZY) continue;
            if (write_file(dirfd, path, mode, codec, base + off, packed, size) != 0) return -1;
        } else if (kind == KIND_LINK) {
            char target[PATH_MAX];
            if (packed >= sizeof target) goto bad;
            memcpy(target, base + off, packed);
            target[packed] = 0;
            if (symlinkat(target, dirfd, path) != 0) return -1;
        } else {
            goto bad;
        }
    }
    return 0;
bad:
    errno = EILSEQ;
    return -1;
}

/* The clean-up process, on descriptor 0 (the read end of the pipe): wait until every writer is gone, then
   remove dir. */
static void clean_when_done(const char *dir) {
    char buf[64];
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r > 0 || (r < 0 && errno == EINTR)) continue;
        break;
    }
    /* the read returned 0 (all writers gone) or failed: either way the program is finished */
    remove_tree(AT_FDCWD, dir);
    _exit(0);
}

/* Is this start the clean-up process that start_cleaner re-executed? Only exactly its own form qualifies:
   argv `publish-unpack-cleaner DIR` with DIR an absolute path ending in /.publish-XXXXXX, an empty
   environment, and a pipe on descriptor 0. */
static int is_cleaner(int argc, char **argv) {
    if (argc != 2 || strcmp(argv[0], CLEANER) != 0 || environ[0] != NULL) return 0;
    const char *dir = argv[1], *slash = strrchr(dir, '/');
    struct stat st;
    if (dir[0] != '/' || !slash || strncmp(slash, "/.publish-", 10) != 0 || strlen(slash) != 16) return 0;
    return fstat(0, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Start the process that removes dir once the write end of the returned pipe is closed everywhere. */
static int start_cleaner(const char *dir) {
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t a = fork();
    if (a < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (a == 0) {
        close(p[1]);
        pid_t b = fork();
        if (b != 0) _exit(0);
        /* Detached: its own session (no terminal signals), no stdio (a $(publish ...) does not wait for it),
           and deaf to the signals a batch system sends a job, so it outlives the program and cleans up. */
        setsid();
        int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_IGN);
        if (chdir("/") != 0) { /* keep going: cwd only pins a mount */
        }
        if (p[0] != 0) {
            dup2(p[0], 0);
            close(p[0]);
        }
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 1U, ~0U, 0U) != 0)
#endif
        {
            for (int fd = 1; fd < 1024; fd++) close(fd);
        }
        /* A forked copy would show the program's own command line (`publish watch ...`) in ps, and be what a
           `pkill -f 'publish watch'` hits; a fresh image of this file under its own name does not (ignored
           signals stay ignored across exec). It also lets go of the mapped payload. Should exec fail, clean up
           from here all the same. */
        char *args[] = {CLEANER, (char *)dir, NULL};
        char *none[] = {NULL};
        execve("/proc/self/exe", args, none);
        prctl(PR_SET_NAME, CLEANER, 0, 0, 0);
        clean_when_done(dir);
    }
    close(p[0]);
    while (waitpid(a, NULL, 0) < 0 && errno == EINTR) {
    }
    if (p[1] != HOLD_FD) {
        if (dup2(p[1], HOLD_FD) < 0) {
            close(p[1]);
            return -1;
        }
        close(p[1]);
    }
    return HOLD_FD;
}

/* The environment for the program: the caller's, less LD_PRELOAD (a node library must not be mapped into a
   process that runs on another C library). */
static char **program_env(void) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env) return environ;
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[j++] = environ[i];
    env[j] = NULL;
    return env;
}

/* exec ROOT/ld-publish.so.1 on ROOT/publish in place; returns only on failure. payload >= 0: the one file,
   open as that descriptor, for the program's lazy members. */
static void run_tree(const char *root, int payload, int argc, char **argv) {
    static char loader[PATH_MAX], libs[PATH_MAX], prog[PATH_MAX], xopt[64];
    snprintf(loader, sizeof loader, "%s/ld-publish.so.1", root);
    snprintf(libs, sizeof libs, "%s/_internal", root);
    snprintf(prog, sizeof prog, "%s/publish", root);
    char **args = calloc((size_t)argc + 16, sizeof *args);
    if (!args) return;
    int k = 0;
    args[k++] = loader;
    args[k++] = "--inhibit-cache";
    args[k++] = "--library-path";
    args[k++] = libs;
    args[k++] = prog;
#ifdef PUBLISH_INTERPRETER
    /* ROOT/publish is the Python interpreter itself (packaging/build/freeze.py python): isolated (no PYTHON*
       variables, no user or site packages), then the package's entry point from ROOT/lib/pythonXY.zip */
    args[k++] = "-I";
    args[k++] = "-S";
    if (payload >= 0) {
        snprintf(xopt, sizeof xopt, "publish-payload=%d", payload);
        args[k++] = "-X";
        args[k++] = xopt;
    }
    args[k++] = "-c";
    args[k++] = "import _publish_boot";
#else
    (void)payload;
    (void)xopt;
#endif
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    args[k] = NULL;
    execve(loader, args, program_env());
    free(args);
}

static int usable_base(const char *dir) {
    struct statvfs vfs;
    struct stat st;
    if (!dir || dir[0] != '/') return 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (statvfs(dir, &vfs) != 0) return 0;
    if (vfs.f_flag & (ST_NOEXEC | ST_RDONLY)) return 0;
    return access(dir, W_OK | X_OK) == 0;
}

/* --- the cache: one unpacked copy per build and per user ------------------------------------------------------ */

#define BUILD_ID ".build-id" /* the member holding the build's digest (packaging/build/freeze.py) */
#define ID_LEN 32

/* The build's digest, from the index: the first ID_LEN hex digits, into id. 0 if found. */
static int build_id(const unsigned char *base, uint64_t size, const unsigned char *idx, uint64_t idx_len,
                    uint64_t count, char *id) {
    const unsigned char *p = idx, *end = idx + idx_len;
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < ENTRY_HEAD) return -1;
        uint64_t off = get64(p + 8), packed = get64(p + 16);
        uint32_t plen = get32(p + 32);
        p += ENTRY_HEAD;
        if ((uint64_t)(end - p) < plen) return -1;
        if (plen == sizeof BUILD_ID - 1 && memcmp(p, BUILD_ID, plen) == 0) {
            if (packed < ID_LEN || off > size || packed > size - off) return -1;
            for (int k = 0; k < ID_LEN; k++) {
                unsigned char c = base[off + k];
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return -1;
                id[k] = (char)c;
            }
            id[ID_LEN] = 0;
            return 0;
        }
        p += plen;
    }
    return -1;
}

/* The cache directory: $PUBLISH_CACHE_DIR (an absolute path; `off`: none), else $XDG_CACHE_HOME/publish, else
   $HOME/.cache/publish. 0 with dir filled, -1 for no cache. */
static int cache_path(char *dir, size_t n) {
    const char *v = getenv("PUBLISH_CACHE_DIR");
    int w;
    if (v && *v) {
        if (!strcmp(v, "off")) return -1;
        if (v[0] != '/') {
            say("publish: warning: PUBLISH_CACHE_DIR=%s is not an absolute path (or off): %s\n", v,
                "not using a cache");
            return -1;
        }
        w = snprintf(dir, n, "%s", v);
    } else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/') {
        w = snprintf(dir, n, "%s/publish", v);
    } else if ((v = getenv("HOME")) && v[0] == '/') {
        w = snprintf(dir, n, "%s/.cache/publish", v);
    } else {
        return -1;
    }
    if (w <= 0 || (size_t)w >= n) return -1;
    while (w > 1 && dir[w - 1] == '/') dir[--w] = 0;
    return 0;
}

/* Open the cache directory, made (with its missing parents, mode 0700) if need be. Only a directory that is
   not a symbolic link, is owned by this user and is writable by no one else is used: another user must not
   be able to plant code this user then runs. Returns its descriptor, or -1; *why is set when the directory
   exists but is refused (the caller says so), left NULL for an ordinary failure. */
static int open_cache(char *dir, const char **why) {
    *why = NULL;
    struct stat st;
    if (lstat(dir, &st) != 0) {
        if (errno != ENOENT) return -1;
        for (char *s = strchr(dir + 1, '/'); s; s = strchr(s + 1, '/')) {
            *s = 0;
            mkdir(dir, 0700); /* an existing one is fine; any other failure shows below */
            *s = '/';
        }
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
        if (lstat(dir, &st) != 0) return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        *why = "it is a symbolic link";
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR) *why = "not a directory";
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    if (st.st_uid != geteuid()) *why = "it is owned by another user";
    else if (st.st_mode & 022) *why = "other users may write to it (chmod 700 it)";
    if (*why) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Does the copy below dirfd still hold every member every start needs (all but the lazy ones) as the unpack
   left it: each there, of its kind, not a link where the index has none, and each file of the index's size,
   owner's permission bits and stamp? One fstatat each, no read: a warm start's whole cost. Directories come
   before their members in the index and are checked without following links, so no member is reached through
   a link. 0 if so; 1 with what filled ("PATH: REASON", the first member that differs) if not; -1 (errno
   EILSEQ) for a bad index. */
static int check_copy(int dirfd, const unsigned char *idx, uint64_t idx_len, uint64_t count, char *what,
                      size_t n) {
    const unsigned char *p = idx, *end = idx + idx_len;
    char path[PATH_MAX], why[96];
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < ENTRY_HEAD) goto bad;
        unsigned kind = p[0], flags = p[2];
        unsigned mode = get32(p + 4);
        uint64_t packed = get64(p + 16), size = get64(p + 24);
        uint32_t plen = get32(p + 32);
        p += ENTRY_HEAD;
        if (plen == 0 || plen >= sizeof path || (uint64_t)(end - p) < plen) goto bad;
        memcpy(path, p, plen);
        path[plen] = 0;
        p += plen;
        if (path[0] == '/' || strstr(path, "..")) goto bad;
        if (kind > KIND_LINK) goto bad;
        if (kind == KIND_FILE && (flags & FLAG_LAZY)) continue;
        struct stat st;
        why[0] = 0;
        if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            snprintf(why, sizeof why, "%s", errno == ENOENT || errno == ENOTDIR ? "missing" : strerror(errno));
        } else if (kind == KIND_DIR) {
            if (!S_ISDIR(st.st_mode)) snprintf(why, sizeof why, "not a directory");
        } else if (kind == KIND_LINK) {
            if (!S_ISLNK(st.st_mode)) snprintf(why, sizeof why, "not a symbolic link");
            else if ((uint64_t)st.st_size != packed) snprintf(why, sizeof why, "a link to another target");
        } else if (!S_ISREG(st.st_mode)) {
            snprintf(why, sizeof why, "%s", S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file");
        } else if ((uint64_t)st.st_size != size) {
            snprintf(why, sizeof why, "%llu bytes, not %llu", (unsigned long long)st.st_size,
                     (unsigned long long)size);
        } else if (st.st_mtim.tv_sec != stamp[1].tv_sec || st.st_mtim.tv_nsec != 0) {
            snprintf(why, sizeof why, "modified since it was unpacked");
        } else if ((st.st_mode & 0700) != (mode & 0700)) {
            snprintf(why, sizeof why, "mode %03o, not %03o", st.st_mode & 0777, mode & 0700);
        }
        if (why[0]) {
            snprintf(what, n, "%s: %s", path, why);
            return 1;
        }
    }
    return 0;
bad:
    errno = EILSEQ;
    return -1;
}

/* Rename the entry `from` of the cache to CACHE/.damaged-ID-PID-N (the first free N), name into aside. 0 if
   done. */
static int put_aside(int cfd, const char *from, const char *id, char *aside, size_t n) {
    for (int i = 0; i < 100; i++) {
        snprintf(aside, n, ".damaged-%s-%ld-%d", id, (long)getpid(), i);
        if (fstatat(cfd, aside, &(struct stat){0}, AT_SYMLINK_NOFOLLOW) == 0) continue;
        if (renameat(cfd, from, cfd, aside) == 0) return 0;
        if (errno != EEXIST && errno != ENOTEMPTY && errno != EISDIR && errno != ENOTDIR) return -1;
    }
    errno = EEXIST;
    return -1;
}

/* The one line a start that used or refused the cache has to say, if any (set by cached_copy, printed by the
   caller once it knows what it runs from). */
static char warning[PATH_MAX * 3 + 512];

/* This build's copy in the cache (descriptor cfd, path dir), checked (check_copy) and made if missing or
   damaged: a private temporary directory (.tmp-PID-N) is filled, checked the same way, and renamed into place
   complete, so a half-filled copy is never used and a concurrent start that loses the race uses the winner's.
   A damaged copy is swapped for the fresh one in one step where the filesystem can (RENAME_EXCHANGE: the name
   never points at nothing), else renamed aside first; either way it ends as CACHE/.damaged-ID-PID-N, never
   deleted here: a process may still run from it. Files in place are never rewritten (no SIGBUS for a process
   running from them). 0 with root filled. */
static int cached_copy(int cfd, const char *dir, const char *id, const unsigned char *base, uint64_t size,
                       const unsigned char *idx, uint64_t idx_len, uint64_t count, char *root, size_t n) {
    struct stat st;
    int w = snprintf(root, n, "%s/%s", dir, id);
    if (w <= 0 || (size_t)w >= n) return -1;
    char damage[PATH_MAX + 128] = "", aside[128] = "";
    dev_t dev = 0;
    ino_t ino = 0;
    if (fstatat(cfd, id, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        dev = st.st_dev;
        ino = st.st_ino;
        if (S_ISLNK(st.st_mode)) {
            snprintf(damage, sizeof damage, "it is a symbolic link");
        } else if (!S_ISDIR(st.st_mode)) {
            snprintf(damage, sizeof damage, "it is not a directory");
        } else if (st.st_uid != geteuid()) {
            snprintf(damage, sizeof damage, "it is owned by another user");
        } else {
            int dfd = openat(cfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (dfd < 0) {
                snprintf(damage, sizeof damage, "%s", strerror(errno));
            } else {
                int c = check_copy(dfd, idx, idx_len, count, damage, sizeof damage);
                close(dfd);
                if (c <= 0) return c;
            }
        }
    } else if (errno != ENOENT) {
        return -1;
    }
    char tmp[64];
    int made = 0, e = 0;
    for (int i = 0; i < 1000 && !made; i++) {
        snprintf(tmp, sizeof tmp, ".tmp-%ld-%d", (long)getpid(), i);
        if (mkdirat(cfd, tmp, 0700) == 0) made = 1;
        else if (errno != EEXIST) break;
    }
    if (!made) {
        e = errno ? errno : EEXIST;
        goto failed;
    }
    int tfd = openat(cfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    durable = 1;
    int rc = tfd < 0 ? -1 : unpack(tfd, base, size, idx, idx_len, count);
    durable = 0;
    if (rc == 0) rc = fsync(tfd);
    e = errno;
    if (rc == 0) {
        /* what this start just wrote must pass the check every later start makes, or each of them would
           find the copy damaged and unpack it again: a filesystem that does not keep the times, say */
        char fresh[PATH_MAX + 128];
        if (check_copy(tfd, idx, idx_len, count, fresh, sizeof fresh) != 0) {
            rc = -1;
            e = errno == EILSEQ ? EILSEQ : EIO;
            if (e != EILSEQ)
                snprintf(warning, sizeof warning,
                         "publish: warning: not using the cache %s: a copy unpacked there does not read back as "
                         "written (%s) (unpacking into a private directory instead)\n",
                         dir, fresh);
        }
    }
    if (tfd >= 0) close(tfd);
    if (rc != 0) {
        remove_tree(cfd, tmp);
        if (warning[0] || e == EILSEQ) {
            errno = e;
            return -1;
        }
        goto failed;
    }
    if (damage[0]) {
        if (fstatat(cfd, id, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_dev != dev || st.st_ino != ino) &&
            S_ISDIR(st.st_mode)) {
            /* a concurrent start has already put a fresh copy in place: use that one */
            remove_tree(cfd, tmp);
            snprintf(warning, sizeof warning,
                     "publish: warning: the unpacked copy %s was damaged (%s); another start unpacked it again\n",
                     root, damage);
            return 0;
        }
        if (syscall(SYS_renameat2, cfd, tmp, cfd, id, RENAME_EXCHANGE) == 0) {
            /* the fresh copy is in place; the damaged one has the fill directory's name: give it its own */
            if (put_aside(cfd, tmp, id, aside, sizeof aside) != 0) snprintf(aside, sizeof aside, "%s", tmp);
            fsync(cfd);
            goto repaired;
        }
        if (errno != ENOENT) {
            /* no exchange on this filesystem: the damaged copy goes aside first, then the fresh one in */
            if (put_aside(cfd, id, id, aside, sizeof aside) != 0 && errno != ENOENT) {
                e = errno;
                remove_tree(cfd, tmp);
                goto failed;
            }
        }
    }
    if (renameat(cfd, tmp, cfd, id) != 0) {
        e = errno;
        remove_tree(cfd, tmp);
        if ((e == EEXIST || e == ENOTEMPTY) && fstatat(cfd, id, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(st.st_mode)) {
            goto repaired; /* another start put its copy in place first */
        }
        goto failed;
    }
    fsync(cfd);
repaired:
    if (damage[0] && aside[0])
        snprintf(warning, sizeof warning,
                 "publish: warning: the unpacked copy %s was damaged (%s); moved it to %s/%s and unpacked it "
                 "again\n",
                 root, damage, dir, aside);
    else if (damage[0])
        snprintf(warning, sizeof warning,
                 "publish: warning: the unpacked copy %s was damaged (%s); another start unpacked it again\n",
                 root, damage);
    return 0;
failed:
    if (damage[0])
        snprintf(warning, sizeof warning,
                 "publish: warning: the unpacked copy %s is damaged (%s) and cannot be replaced: %s (unpacking "
                 "into a private directory instead)\n",
                 root, damage, strerror(e));
    errno = e;
    return -1;
}

static int run_one_file(int self, int argc, char **argv) {
    struct stat st;
    if (fstat(self, &st) != 0 || st.st_size < TRAILER_SIZE) return -1;
    uint64_t size = (uint64_t)st.st_size;
    const unsigned char *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, self, 0);
    if (base == MAP_FAILED) return -1;
    const unsigned char *t = base + size - TRAILER_SIZE;
    if (memcmp(t, MAGIC, 8) != 0) {
        munmap((void *)base, size);
        return 1; /* no payload: the folder form */
    }
    uint64_t idx_off = get64(t + 8), idx_len = get64(t + 16), count = get64(t + 24);
    if (idx_off > size || idx_len > size - idx_off) {
        say("publish: %s%s: the archive appended to this executable is damaged\n", "", "");
        exit(1);
    }

    char cdir[PATH_MAX], croot[PATH_MAX], id[ID_LEN + 1];
    int have_id = build_id(base, size, base + idx_off, idx_len, count, id) == 0;
    if (have_id) set_stamp(id);
    if (have_id && cache_path(cdir, sizeof cdir) == 0) {
        const char *why;
        int cfd = open_cache(cdir, &why);
        if (why)
            say("publish: warning: not using the cache %s: %s (unpacking into a private directory instead)\n",
                cdir, why);
        if (cfd >= 0 && usable_base(cdir) &&
            cached_copy(cfd, cdir, id, base, size, base + idx_off, idx_len, count, croot, sizeof croot) == 0) {
            if (warning[0]) say("%s", warning);
            close(cfd);
            munmap((void *)base, size);
            int payload = -1;
#ifdef PUBLISH_INTERPRETER
            if (dup2(self, PAYLOAD_FD) == PAYLOAD_FD) payload = PAYLOAD_FD;
#endif
            close(self);
            run_tree(croot, payload, argc, argv);
            /* exec refused there (a noexec mount statvfs does not show): a private directory instead */
            if (payload >= 0) close(payload);
            self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
            if (self < 0) return -1;
            base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, self, 0);
            if (base == MAP_FAILED) return -1;
        } else {
            if (errno == EILSEQ) {
                say("publish: %s%s: the archive appended to this executable is damaged\n", "", "");
                exit(1);
            }
            if (warning[0]) say("%s", warning);
            if (cfd >= 0) close(cfd);
        }
    }

    char self_dir[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/exe", self_dir, sizeof self_dir - 1);
    if (n > 0) {
        self_dir[n] = 0;
        char *slash = strrchr(self_dir, '/');
        if (slash) slash[slash == self_dir ? 1 : 0] = 0; /* "/publish" -> "/" */
    }
    char home_cache[PATH_MAX] = "";
    const char *home = getenv("HOME");
    if (home && home[0] == '/') snprintf(home_cache, sizeof home_cache, "%s", home);
    const char *candidates[] = {getenv("TMPDIR"), "/tmp", "/dev/shm", getenv("XDG_RUNTIME_DIR"), "/var/tmp",
                                self_dir[0] ? self_dir : NULL, home_cache[0] ? home_cache : NULL};
    const size_t ncand = sizeof candidates / sizeof candidates[0];
    int last_errno = 0;
    for (size_t c = 0; c < ncand; c++) {
        const char *b = candidates[c];
        int seen = 0;
        for (size_t d = 0; d < c; d++)
            if (candidates[d] && b && !strcmp(candidates[d], b)) seen = 1;
        if (seen || !usable_base(b)) continue;
        char dir[PATH_MAX];
        if ((size_t)snprintf(dir, sizeof dir, "%s/.publish-XXXXXX", b) >= sizeof dir) continue;
        if (!mkdtemp(dir)) {
            last_errno = errno;
            continue;
        }
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || unpack(dfd, base, size, base + idx_off, idx_len, count) != 0) {
            last_errno = errno;
            if (dfd >= 0) close(dfd);
            remove_tree(AT_FDCWD, dir);
            if (last_errno == EILSEQ) {
                say("publish: %s%s: the archive appended to this executable is damaged\n", "", "");
                exit(1);
            }
            continue;
        }
        close(dfd);
        int hold = start_cleaner(dir);
        if (hold < 0) {
            last_errno = errno;
            remove_tree(AT_FDCWD, dir);
            continue;
        }
        munmap((void *)base, size);
        int payload = -1;
#ifdef PUBLISH_INTERPRETER
        if (dup2(self, PAYLOAD_FD) == PAYLOAD_FD) payload = PAYLOAD_FD; /* dup2 leaves it open across exec */
#endif
        close(self);
        run_tree(dir, payload, argc, argv);
        if (payload >= 0) close(payload);
        /* exec refused here (a security module, a mount option statvfs does not show): try the next place */
        last_errno = errno;
        remove_tree(AT_FDCWD, dir);
        close(hold);
        self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (self < 0) break;
        base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, self, 0);
        if (base == MAP_FAILED) break;
    }
    say("publish: no writable directory that allows executables to unpack into "
        "(tried $TMPDIR, /tmp, /dev/shm, $XDG_RUNTIME_DIR, /var/tmp, %s, $HOME): %s\n",
        self_dir[0] ? self_dir : "the executable's folder", last_errno ? strerror(last_errno) : "none usable");
    exit(1);
}

int main(int argc, char **argv) {
    if (is_cleaner(argc, argv)) {
        prctl(PR_SET_NAME, CLEANER, 0, 0, 0); /* the short name (ps -e, top): its first 15 characters */
        clean_when_done(argv[1]);
    }
    int self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (self < 0 && argv[0] && strchr(argv[0], '/')) self = open(argv[0], O_RDONLY | O_CLOEXEC);
    if (self < 0) {
        say("publish: cannot open its own executable (is /proc mounted?): %s%s\n", strerror(errno), "");
        return 1;
    }
    int r = run_one_file(self, argc, argv);
    if (r < 0) {
        say("publish: cannot read its own executable: %s%s\n", strerror(errno), "");
        return 1;
    }
    close(self);
    /* the folder form: ../libexec/publish next to the real location of this file */
    char root[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
    if (n <= 0) {
        say("publish: cannot find its own location (is /proc mounted?): %s%s\n", strerror(errno), "");
        return 1;
    }
    root[n] = 0;
    char *slash = strrchr(root, '/');
    if (slash) *slash = 0;
    slash = strrchr(root, '/');
    if (slash) *slash = 0;
    size_t len = strlen(root);
    if (len + sizeof "/libexec/publish" > sizeof root) return 1;
    memcpy(root + len, "/libexec/publish", sizeof "/libexec/publish");
    run_tree(root, -1, argc, argv);
    say("publish: cannot start %s/ld-publish.so.1: %s\n", root, strerror(errno));
    return 1;
}
