/* SPDX-License-Identifier: MIT */
/* tw-report: streaming per-API report and trace export. See report.h. */
#include "config.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "torchwrapper/reader.h"
#include "torchwrapper/report.h"
#include "torchwrapper/stats.h"
#include "torchwrapper/writer.h"

#define USAGE                                                                                                     \
    "usage: tw-report [options] OUT_DIR|FILE...\n"                                                                \
    "Per-API totals and percentiles from TorchWrapper record files (CSV or JSON lines, any number of\n"           \
    "processes and ranks), read in one streaming pass.\n\n"                                                       \
    "  --sort KEY        total (default), self, gpu, calls, mean, min, max, p50, p95, p99, name\n"               \
    "  --top N           the first N rows only\n"                                                                  \
    "  --by GROUP        api (default), thread, pid, parent (caller > callee)\n"                                   \
    "  --api GLOB        only APIs matching the glob (repeatable)\n"                                               \
    "  --pid N           only process N (repeatable)\n"                                                            \
    "  --tid N           only thread N (repeatable)\n"                                                             \
    "  --window A:B      only calls starting between A and B seconds after the run's start (A or B may be empty)\n" \
    "  --format F        table (default), csv, json, markdown\n"                                                   \
    "  --trace FILE      also write a Chrome trace event file (Perfetto, chrome://tracing); .gz compresses\n"     \
    "  --limit N         at most N calls in the trace (default 1000000; 0 for no limit)\n"                         \
    "  --tree STEP       instead of the table, the call tree of step STEP (0 is the first) of one thread\n"       \
    "                    (--tid, or the first call's), a step ending with an outermost --boundary call\n"        \
    "  --boundary GLOB   the call that ends a step (default 'torch.optim.*.step')\n"                               \
    "  --max-depth N     --tree: N levels at most\n"                                                             \
    "  -h, --help        this text\n"

#define MAX_FILTERS 32

/* ---- small hash maps ------------------------------------------------------------------------- */

typedef struct group {
    char *key;
    size_t key_len;
    uint64_t hash;
    tw_api_stats_t stats;
} group_t;

typedef struct group_table {
    group_t **slots;
    size_t capacity; /* a power of two */
    size_t count;
} group_table_t;

static uint64_t hash_bytes(const char *s, size_t len, uint64_t seed)
{
    /* Eight bytes a step, multiply-xorshift mixing: API names are 10-60 bytes. */
    uint64_t h = seed ^ (len * 0x9E3779B97F4A7C15ull);
    for (; len >= 8; s += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, s, len);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

static int table_grow(group_table_t *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 256;
    group_t **slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return TW_ENOMEM;
    for (size_t i = 0; i < t->capacity; i++) {
        group_t *g = t->slots[i];
        if (g == NULL)
            continue;
        size_t j = g->hash & (capacity - 1);
        while (slots[j] != NULL)
            j = (j + 1) & (capacity - 1);
        slots[j] = g;
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* The group with this key, created if missing; NULL without memory. */
static group_t *table_get(group_table_t *t, const char *key, size_t len)
{
    if ((t->count + 1) * 2 > t->capacity && table_grow(t) != 0)
        return NULL;
    uint64_t h = hash_bytes(key, len, 0);
    size_t j = h & (t->capacity - 1);
    for (group_t *g; (g = t->slots[j]) != NULL; j = (j + 1) & (t->capacity - 1))
        if (g->hash == h && g->key_len == len && memcmp(g->key, key, len) == 0)
            return g;
    group_t *g = calloc(1, sizeof *g);
    char *copy = malloc(len + 1);
    if (g == NULL || copy == NULL) {
        free(g);
        free(copy);
        return NULL;
    }
    memcpy(copy, key, len);
    copy[len] = '\0';
    *g = (group_t){.key = copy, .key_len = len, .hash = h};
    t->slots[j] = g;
    t->count++;
    return g;
}

static void table_free(group_table_t *t)
{
    for (size_t i = 0; i < t->capacity; i++) {
        if (t->slots[i] != NULL) {
            free(t->slots[i]->key);
            free(t->slots[i]->stats.histogram);
            free(t->slots[i]);
        }
    }
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* The hash of a (process, call id) pair: call ids are unique per process only. */
static uint64_t pid_id_hash(int64_t pid, uint64_t id)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ull ^ (uint64_t)pid * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 31);
}

/*
 * --by parent: a call's row is written when it returns, after the rows of the calls inside it, so
 * a child waits here, keyed by (pid, parent call id), until its parent's row names the parent's API.
 * Memory is what the calls still open at that point of the files have below them.
 */
typedef struct pending_child {
    group_t *api;   /* the child's own API (a group of the api table: its interned name) */
    uint64_t cost_ns, self_ns;
    int error;
} pending_child_t;

typedef struct pending {
    int64_t pid;
    uint64_t parent_id; /* 0: an empty slot */
    pending_child_t *children;
    size_t count, capacity;
} pending_t;

typedef struct pending_table {
    pending_t *slots;
    size_t capacity, count;
} pending_table_t;

static size_t pending_slot(const pending_table_t *t, int64_t pid, uint64_t parent_id)
{
    size_t j = pid_id_hash(pid, parent_id) & (t->capacity - 1);
    while (t->slots[j].parent_id != 0 && !(t->slots[j].parent_id == parent_id && t->slots[j].pid == pid))
        j = (j + 1) & (t->capacity - 1);
    return j;
}

static pending_t *pending_find(pending_table_t *t, int64_t pid, uint64_t parent_id)
{
    if (t->capacity == 0)
        return NULL;
    pending_t *p = &t->slots[pending_slot(t, pid, parent_id)];
    return p->parent_id ? p : NULL;
}

/* Removes p, keeping the linear probe chains intact (backward shift). */
static void pending_remove(pending_table_t *t, pending_t *p)
{
    free(p->children);
    size_t i = (size_t)(p - t->slots);
    t->slots[i] = (pending_t){0};
    t->count--;
    for (size_t j = (i + 1) & (t->capacity - 1); t->slots[j].parent_id != 0; j = (j + 1) & (t->capacity - 1)) {
        pending_t moved = t->slots[j];
        t->slots[j] = (pending_t){0};
        t->slots[pending_slot(t, moved.pid, moved.parent_id)] = moved;
    }
}

static int pending_add(pending_table_t *t, int64_t pid, uint64_t parent_id, const pending_child_t *child)
{
    if ((t->count + 1) * 2 > t->capacity) {
        size_t capacity = t->capacity ? t->capacity * 2 : 1024;
        pending_t *old = t->slots;
        size_t old_capacity = t->capacity;
        if ((t->slots = calloc(capacity, sizeof *t->slots)) == NULL) {
            t->slots = old;
            return TW_ENOMEM;
        }
        t->capacity = capacity;
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].parent_id != 0)
                t->slots[pending_slot(t, old[i].pid, old[i].parent_id)] = old[i];
        free(old);
    }
    pending_t *p = &t->slots[pending_slot(t, pid, parent_id)];
    if (p->parent_id == 0) {
        *p = (pending_t){.pid = pid, .parent_id = parent_id};
        t->count++;
    }
    if (p->count == p->capacity) {
        size_t capacity = p->capacity ? p->capacity * 2 : 8;
        pending_child_t *children = realloc(p->children, capacity * sizeof *children);
        if (children == NULL)
            return TW_ENOMEM;
        p->children = children;
        p->capacity = capacity;
    }
    p->children[p->count++] = *child;
    return 0;
}

/* ---- options ----------------------------------------------------------------------------------- */

typedef enum { BY_API, BY_THREAD, BY_PID, BY_PARENT } group_by_t;
typedef enum { OUT_TABLE, OUT_CSV, OUT_JSON, OUT_MARKDOWN } out_format_t;
typedef enum { SORT_TOTAL, SORT_SELF, SORT_GPU, SORT_CALLS, SORT_MEAN, SORT_MIN, SORT_MAX, SORT_P50, SORT_P95,
               SORT_P99, SORT_NAME } sort_key_t;

typedef struct options {
    sort_key_t sort;
    size_t top;
    group_by_t by;
    out_format_t format;
    const char *apis[MAX_FILTERS];
    size_t napis;
    int64_t pids[MAX_FILTERS];
    size_t npids;
    uint64_t tids[MAX_FILTERS];
    size_t ntids;
    int has_window;
    double window_from, window_to; /* seconds after the run's start; to < 0: open */
    const char *trace;
    uint64_t limit;
    int64_t tree_step; /* -1: no tree */
    const char *boundary;
    uint64_t max_depth; /* 0: all levels */
    const char **inputs; /* the positional arguments: options may come before, between or after them */
    size_t ninputs;
} options_t;

static int pick(const char *value, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    return -1;
}

static int parse_count(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_window(const char *s, options_t *o)
{
    const char *colon = strchr(s, ':');
    if (colon == NULL)
        return -1;
    char *end;
    o->window_from = 0;
    o->window_to = -1;
    if (colon != s) {
        o->window_from = strtod(s, &end);
        if (end != colon || o->window_from < 0)
            return -1;
    }
    if (colon[1] != '\0') {
        o->window_to = strtod(colon + 1, &end);
        if (*end != '\0' || o->window_to < o->window_from)
            return -1;
    }
    o->has_window = 1;
    return 0;
}

static int usage_error(FILE *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tw-report: ", err);
    vfprintf(err, fmt, ap);
    fputs("\n(tw-report --help lists the options)\n", err);
    va_end(ap);
    return 2;
}

/* Fills o from argv; returns -1 when help was printed, 0, or 2 after a usage error. */
static int parse_options(int argc, char *const argv[], options_t *o, FILE *out, FILE *err)
{
    static const char *const sorts[] = {"total", "self", "gpu", "calls", "mean", "min", "max", "p50", "p95", "p99",
                                        "name"};
    static const char *const bys[] = {"api", "thread", "pid", "parent"};
    static const char *const formats[] = {"table", "csv", "json", "markdown"};
    memset(o, 0, sizeof *o);
    o->limit = 1000000;
    o->tree_step = -1;
    o->boundary = "torch.optim.*.step";
    if ((o->inputs = calloc((size_t)argc + 1, sizeof *o->inputs)) == NULL) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        return 1;
    }
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            o->inputs[o->ninputs++] = a;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, out);
            return -1;
        }
        /* Every other option takes a value: --opt VALUE or --opt=VALUE. */
        const char *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
#define IS(name) (name_len == strlen(name) && strncmp(a, name, name_len) == 0)
        if (!(IS("--sort") || IS("--top") || IS("--by") || IS("--api") || IS("--pid") || IS("--tid") ||
              IS("--window") || IS("--format") || IS("--trace") || IS("--limit") || IS("--tree") ||
              IS("--boundary") || IS("--max-depth")))
            return usage_error(err, "unknown option '%.*s'", (int)name_len, a);
        if (value == NULL)
            return usage_error(err, "option %s needs a value", a);
        uint64_t n;
        int k;
        if (IS("--sort")) {
            if ((k = pick(value, sorts, 11)) < 0)
                return usage_error(err, "--sort '%s' is not accepted: give total, self, gpu, calls, mean, min, max, "
                                        "p50, p95, p99 or name", value);
            o->sort = (sort_key_t)k;
        } else if (IS("--by")) {
            if ((k = pick(value, bys, 4)) < 0)
                return usage_error(err, "--by '%s' is not accepted: give api, thread, pid or parent", value);
            o->by = (group_by_t)k;
        } else if (IS("--format")) {
            if ((k = pick(value, formats, 4)) < 0)
                return usage_error(err, "--format '%s' is not accepted: give table, csv, json or markdown", value);
            o->format = (out_format_t)k;
        } else if (IS("--top") || IS("--limit") || IS("--tree") || IS("--max-depth")) {
            if (parse_count(value, &n) != 0 || (IS("--tree") && n > INT64_MAX))
                return usage_error(err, "%.*s '%s' is not a count (a whole number >= 0)", (int)name_len, a, value);
            if (IS("--top"))
                o->top = (size_t)n;
            else if (IS("--limit"))
                o->limit = n;
            else if (IS("--tree"))
                o->tree_step = (int64_t)n;
            else
                o->max_depth = n;
        } else if (IS("--boundary")) {
            o->boundary = value;
        } else if (IS("--api")) {
            if (o->napis == MAX_FILTERS)
                return usage_error(err, "at most %d --api globs", MAX_FILTERS);
            o->apis[o->napis++] = value;
        } else if (IS("--pid") || IS("--tid")) {
            int64_t v;
            char *end;
            errno = 0;
            v = strtoll(value, &end, 10);
            if (errno != 0 || end == value || *end != '\0')
                return usage_error(err, "%.*s '%s' is not a process or thread id (a whole number)", (int)name_len, a,
                                   value);
            if ((IS("--pid") ? o->npids : o->ntids) == MAX_FILTERS)
                return usage_error(err, "at most %d %.*s filters", MAX_FILTERS, (int)name_len, a);
            if (IS("--pid"))
                o->pids[o->npids++] = v;
            else
                o->tids[o->ntids++] = (uint64_t)v;
        } else if (IS("--window")) {
            if (parse_window(value, o) != 0)
                return usage_error(err, "--window '%s' is not accepted: give START:END in seconds after the run's "
                                        "start, START <= END, either may be empty (e.g. 10:20, 5:, :1.5)", value);
        } else if (IS("--trace")) {
            o->trace = value;
        }
#undef IS
    }
    while (i < argc)
        o->inputs[o->ninputs++] = argv[i++];
    if (o->ninputs == 0)
        return usage_error(err, "no input: give an output directory or record files");
    return 0;
}

/* ---- inputs ------------------------------------------------------------------------------------ */

typedef struct input_file {
    char *path;
    tw_file_kind_t kind;
} input_file_t;

typedef struct inputs {
    input_file_t *files;
    size_t count, capacity;
    int64_t origin_ns;   /* the earliest start_ns of the manifests found; INT64_MAX when none */
    int64_t rank_pids[256][2]; /* (pid, rank) from the manifests, for the trace's process names */
    size_t nranks;
} inputs_t;

static int add_file(inputs_t *in, const char *path)
{
    if (in->count == in->capacity) {
        size_t capacity = in->capacity ? in->capacity * 2 : 64;
        input_file_t *files = realloc(in->files, capacity * sizeof *files);
        if (files == NULL)
            return TW_ENOMEM;
        in->files = files;
        in->capacity = capacity;
    }
    if ((in->files[in->count].path = strdup(path)) == NULL)
        return TW_ENOMEM;
    in->files[in->count++].kind = 0;
    return 0;
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Notes a manifest's start time and rank; a manifest that does not parse is simply not used. */
static void read_manifest(inputs_t *in, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return;
    char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    cJSON *root = cJSON_Parse(buf);
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(root, "start_ns");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(root, "pid");
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(root, "rank");
    /* start_ns is an epoch time in ns: as a double it is exact to 256 ns, plenty for an origin. */
    if (cJSON_IsNumber(start) && start->valuedouble > 0 && (int64_t)start->valuedouble < in->origin_ns)
        in->origin_ns = (int64_t)start->valuedouble;
    if (cJSON_IsNumber(pid) && cJSON_IsNumber(rank) && in->nranks < 256) {
        in->rank_pids[in->nranks][0] = (int64_t)pid->valuedouble;
        in->rank_pids[in->nranks++][1] = (int64_t)rank->valuedouble;
    }
    cJSON_Delete(root);
}

static int compare_names(const void *a, const void *b)
{
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the record files of a directory (*.csv, *.jsonl) in name order, which is time order for
 * the writer's names, and reads its manifests. */
static int add_directory(inputs_t *in, const char *dir, FILE *err)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(err, "tw-report: cannot read the directory %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char **names = NULL;
    size_t count = 0, capacity = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *name = e->d_name;
        int manifest = strncmp(name, "manifest", 8) == 0 && has_suffix(name, ".json");
        if (!manifest && !has_suffix(name, ".csv") && !has_suffix(name, ".jsonl"))
            continue;
        if (count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            char **bigger = realloc(names, capacity * sizeof *names);
            if (bigger == NULL) {
                rc = TW_ENOMEM;
                break;
            }
            names = bigger;
        }
        size_t len = strlen(dir) + strlen(name) + 2;
        if ((names[count] = malloc(len)) == NULL) {
            rc = TW_ENOMEM;
            break;
        }
        snprintf(names[count++], len, "%s/%s", dir, name);
    }
    closedir(d);
    if (rc == 0)
        qsort(names, count, sizeof *names, compare_names);
    size_t before = in->count;
    for (size_t i = 0; i < count; i++) {
        if (rc == 0) {
            const char *base = strrchr(names[i], '/') + 1;
            if (strncmp(base, "manifest", 8) == 0 && has_suffix(base, ".json"))
                read_manifest(in, names[i]);
            else
                rc = add_file(in, names[i]);
        }
        free(names[i]);
    }
    free(names);
    if (rc != 0) {
        fprintf(err, "tw-report: %s\n", tw_strerror(rc));
        return 1;
    }
    if (in->count == before) {
        fprintf(err, "tw-report: %s holds no record files (*.csv or *.jsonl written by TorchWrapper)\n", dir);
        return 1;
    }
    return 0;
}

static int collect_inputs(const options_t *o, inputs_t *in, FILE *err)
{
    in->origin_ns = INT64_MAX;
    for (size_t i = 0; i < o->ninputs; i++) {
        const char *path = o->inputs[i];
        struct stat st;
        if (stat(path, &st) != 0) {
            fprintf(err, "tw-report: %s: %s\n", path, strerror(errno));
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            if (add_directory(in, path, err) != 0)
                return 1;
            continue;
        }
        if (add_file(in, path) != 0) {
            fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
            return 1;
        }
        /* The manifest beside a file given alone gives the run's start. */
        char dir[4096];
        const char *slash = strrchr(path, '/');
        int n = slash ? snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path) : snprintf(dir, sizeof dir, ".");
        DIR *d = n > 0 && (size_t)n < sizeof dir ? opendir(dir) : NULL;
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            if (strncmp(e->d_name, "manifest", 8) == 0 && has_suffix(e->d_name, ".json")) {
                char manifest[8192];
                snprintf(manifest, sizeof manifest, "%s/%s", dir, e->d_name);
                read_manifest(in, manifest);
            }
        }
        if (d != NULL)
            closedir(d);
    }
    for (size_t i = 0; i < in->count; i++) {
        char message[512];
        if (tw_read_kind(in->files[i].path, &in->files[i].kind, message, sizeof message) != 0) {
            fprintf(err, "tw-report: %s\n", message);
            return 1;
        }
    }
    return 0;
}

static void free_inputs(inputs_t *in)
{
    for (size_t i = 0; i < in->count; i++)
        free(in->files[i].path);
    free(in->files);
}

/* ---- the trace --------------------------------------------------------------------------------- */

struct launch {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
};

typedef struct trace {
    FILE *file;
    gzFile gz;
    char buf[1 << 16];
    size_t used;
    int failed;
    uint64_t events;  /* calls written */
    uint64_t skipped; /* calls beyond --limit */
    int64_t origin_ns;
    /* Tracks named so far: (pid, tid) pairs; bounded by the threads and streams of the run. */
    struct { int64_t pid; uint64_t tid; } *tracks;
    size_t ntracks, track_capacity;
    /* (pid, call id) of the calls that launched GPU work, for the flow arrows. */
    struct launch *launches;
    size_t launch_capacity, nlaunches;
} trace_t;

static void trace_flush(trace_t *t)
{
    if (t->used == 0 || t->failed)
        return;
    size_t wrote = t->gz ? (size_t)gzwrite(t->gz, t->buf, (unsigned)t->used) : fwrite(t->buf, 1, t->used, t->file);
    t->failed = wrote != t->used;
    t->used = 0;
}

static void trace_put(trace_t *t, const char *s, size_t len)
{
    if (t->used + len > sizeof t->buf)
        trace_flush(t);
    if (len > sizeof t->buf) {
        size_t wrote = t->gz ? (size_t)gzwrite(t->gz, s, (unsigned)len) : fwrite(s, 1, len, t->file);
        t->failed |= wrote != len;
        return;
    }
    memcpy(t->buf + t->used, s, len);
    t->used += len;
}

#define TRACE_LIT(t, text) trace_put((t), text, sizeof text - 1)

static void trace_printf(trace_t *t, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        trace_put(t, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* A JSON string of s, quotes included, escaped by the writer's tw_json_escape (6 bytes out per
 * byte in at worst). */
static void trace_string(trace_t *t, const char *s, size_t len)
{
    char small[6 * 256 + 2];
    char *out = len <= 256 ? small : malloc(6 * len + 2);
    if (out == NULL) {
        t->failed = 1;
        return;
    }
    trace_put(t, out, (size_t)(tw_json_escape(out, s, len) - out));
    if (out != small)
        free(out);
}

/* Microseconds since the origin with three decimals: exact to the nanosecond as a double. */
static void trace_time(trace_t *t, const char *key, int64_t ns)
{
    int64_t us = ns / 1000, frac = ns % 1000;
    if (frac < 0) {
        us -= 1;
        frac += 1000;
    }
    trace_printf(t, ",\"%s\":%" PRId64 ".%03" PRId64, key, us, frac);
}

static int trace_track_seen(trace_t *t, int64_t pid, uint64_t tid)
{
    for (size_t i = 0; i < t->ntracks; i++)
        if (t->tracks[i].pid == pid && t->tracks[i].tid == tid)
            return 1;
    if (t->ntracks == t->track_capacity) {
        size_t capacity = t->track_capacity ? t->track_capacity * 2 : 64;
        void *bigger = realloc(t->tracks, capacity * sizeof *t->tracks);
        if (bigger == NULL)
            return 1; /* the track is just not named */
        t->tracks = bigger;
        t->track_capacity = capacity;
    }
    t->tracks[t->ntracks].pid = pid;
    t->tracks[t->ntracks++].tid = tid;
    return 0;
}

static size_t launch_slot(const trace_t *t, int64_t pid, uint64_t call_id)
{
    size_t j = pid_id_hash(pid, call_id) & (t->launch_capacity - 1);
    while (t->launches[j].call_id != 0 && !(t->launches[j].call_id == call_id && t->launches[j].pid == pid))
        j = (j + 1) & (t->launch_capacity - 1);
    return j;
}

static void launch_add(trace_t *t, int64_t pid, uint64_t call_id)
{
    if ((t->nlaunches + 1) * 2 > t->launch_capacity) {
        size_t capacity = t->launch_capacity ? t->launch_capacity * 2 : 1024;
        struct launch *old = t->launches;
        size_t old_capacity = t->launch_capacity;
        struct launch *slots = calloc(capacity, sizeof *slots);
        if (slots == NULL)
            return; /* that arrow is not drawn */
        t->launches = slots;
        t->launch_capacity = capacity;
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].call_id != 0)
                t->launches[launch_slot(t, old[i].pid, old[i].call_id)] = old[i];
        free(old);
    }
    size_t j = launch_slot(t, pid, call_id);
    if (t->launches[j].call_id == 0) {
        t->launches[j].pid = pid;
        t->launches[j].call_id = call_id;
        t->nlaunches++;
    }
}

static int launch_has(const trace_t *t, int64_t pid, uint64_t call_id)
{
    return t->launch_capacity != 0 && t->launches[launch_slot(t, pid, call_id)].call_id != 0;
}

/* GPU activity goes on tracks of its own: tid 2^32 + device * 2^16 + stream, named after both. */
static uint64_t gpu_track(const tw_row_t *row)
{
    return (1ull << 32) + ((uint64_t)(row->device & 0xFFFF) << 16) + (uint64_t)(row->stream & 0xFFFF);
}

static void trace_event(trace_t *t, const tw_row_t *row, const inputs_t *in)
{
    int gpu = row->kind == TW_FILE_GPU;
    uint64_t tid = gpu ? gpu_track(row) : row->tid;
    if (!trace_track_seen(t, row->pid, 0)) {
        int64_t rank = -1;
        for (size_t i = 0; i < in->nranks; i++)
            if (in->rank_pids[i][0] == row->pid)
                rank = in->rank_pids[i][1];
        if (rank >= 0)
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":{\"name\":"
                            "\"rank %" PRId64 " (pid %" PRId64 ")\"}},\n", row->pid, rank, row->pid);
        else
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":{\"name\":"
                            "\"pid %" PRId64 "\"}},\n", row->pid, row->pid);
    }
    if (!trace_track_seen(t, row->pid, tid)) {
        if (gpu)
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                            "{\"name\":\"GPU %" PRId64 " stream %" PRId64 "\"}},\n", row->pid, tid, row->device,
                         row->stream);
        else
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                            "{\"name\":\"thread %" PRIu64 "\"}},\n", row->pid, tid, tid);
    }
    int64_t ts = (int64_t)(row->start_ns - (uint64_t)t->origin_ns);
    TRACE_LIT(t, "{\"ph\":\"X\",\"name\":");
    if (gpu)
        trace_string(t, row->name.len ? row->name.ptr : row->gpu_kind.ptr, row->name.len ? row->name.len
                                                                                         : row->gpu_kind.len);
    else
        trace_string(t, row->api.ptr, row->api.len);
    trace_printf(t, ",\"cat\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64, gpu ? "gpu" : "cpu", row->pid, tid);
    trace_time(t, "ts", ts);
    trace_time(t, "dur", (int64_t)row->cost_ns);
    trace_printf(t, ",\"args\":{\"call_id\":%" PRIu64, row->call_id);
    if (gpu) {
        TRACE_LIT(t, ",\"kind\":");
        trace_string(t, row->gpu_kind.ptr, row->gpu_kind.len);
        TRACE_LIT(t, ",\"api\":");
        trace_string(t, row->api.ptr, row->api.len);
        trace_printf(t, ",\"correlation_id\":%" PRIu64 "}}", row->correlation_id);
    } else {
        trace_printf(t, ",\"parent_id\":%" PRIu64 ",\"depth\":%" PRIu64 ",\"self_ns\":%" PRIu64 ",\"gpu_ns\":%" PRIu64
                        "%s,\"args\":", row->parent_id, row->depth, row->self_ns, row->gpu_ns,
                     row->error ? ",\"error\":true" : "");
        trace_string(t, row->args.ptr, row->args.len);
        TRACE_LIT(t, "}}");
    }
    TRACE_LIT(t, ",\n");
    /* A flow arrow from the call that launched GPU work to each piece of it. */
    if (row->call_id != 0 && (gpu || launch_has(t, row->pid, row->call_id))) {
        trace_printf(t, "{\"ph\":\"%s\",\"name\":\"launch\",\"cat\":\"gpu_launch\",\"id\":\"%" PRId64 ".%" PRIu64
                        "\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 "%s", gpu ? "f" : "s", row->pid, row->call_id,
                     row->pid, tid, gpu ? ",\"bp\":\"e\"" : "");
        trace_time(t, "ts", ts);
        TRACE_LIT(t, "},\n");
    }
}

/* ---- --tree: the calls of one step of one thread ----------------------------------------------- */

typedef struct tree_call {
    uint64_t call_id, start_ns, cost_ns, self_ns, depth;
    char *api, *module;
} tree_call_t;

typedef struct tree_calls {
    tree_call_t *items;
    size_t count, capacity;
} tree_calls_t;

typedef struct tree {
    int have_tid;
    uint64_t tid;
    int64_t pid;
    int64_t boundaries; /* outermost boundary calls seen: the step the next outermost call is in */
    tree_calls_t pending;  /* calls inside the outermost call not yet returned (rows come children first) */
    tree_calls_t selected; /* the step's calls */
} tree_t;

static void tree_calls_clear(tree_calls_t *c)
{
    for (size_t i = 0; i < c->count; i++) {
        free(c->items[i].api);
        free(c->items[i].module);
    }
    c->count = 0;
}

static char *copy_str(tw_str_t s)
{
    char *copy = malloc(s.len + 1);
    if (copy != NULL) {
        memcpy(copy, s.ptr, s.len);
        copy[s.len] = '\0';
    }
    return copy;
}

static int tree_calls_add(tree_calls_t *c, const tw_row_t *row)
{
    if (c->count == c->capacity) {
        size_t capacity = c->capacity ? c->capacity * 2 : 256;
        tree_call_t *items = realloc(c->items, capacity * sizeof *items);
        if (items == NULL)
            return TW_ENOMEM;
        c->items = items;
        c->capacity = capacity;
    }
    tree_call_t *t = &c->items[c->count];
    *t = (tree_call_t){row->call_id, row->start_ns, row->cost_ns, row->self_ns, row->depth, copy_str(row->api),
                       copy_str(row->module)};
    if (t->api == NULL || t->module == NULL) {
        free(t->api);
        free(t->module);
        return TW_ENOMEM;
    }
    c->count++;
    return 0;
}

static int compare_tree_calls(const void *a, const void *b)
{
    const tree_call_t *x = a, *y = b;
    /* Start order is the tree's pre-order on one thread; a child starting in the same nanosecond as
     * its parent comes after it. */
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

static void print_tree(FILE *out, FILE *err, const options_t *o, tree_t *t)
{
    tree_calls_t *c = &t->selected;
    if (!t->have_tid || c->count == 0) {
        fprintf(err, "tw-report: step %" PRId64 " is not in the records: %" PRId64 " step(s) of thread %" PRIu64
                     ", each ending with an outermost call of '%s' (--boundary)\n",
                o->tree_step, t->boundaries + (t->pending.count > 0), t->tid, o->boundary);
        return;
    }
    qsort(c->items, c->count, sizeof *c->items, compare_tree_calls);
    uint64_t total = 0;
    size_t shown = 0;
    for (size_t i = 0; i < c->count; i++) {
        total += c->items[i].depth == 0 ? c->items[i].cost_ns : 0;
        shown += o->max_depth == 0 || c->items[i].depth < o->max_depth;
    }
    fprintf(out, "step %" PRId64 " (pid %" PRId64 ", thread %" PRIu64 "): %zu calls shown, %.3f ms\n", o->tree_step,
            t->pid, t->tid, shown, (double)total / 1e6);
    for (size_t i = 0; i < c->count; i++) {
        const tree_call_t *call = &c->items[i];
        if (o->max_depth != 0 && call->depth >= o->max_depth)
            continue;
        fprintf(out, "%*s%s", (int)(2 * (call->depth + 1)), "", call->api);
        if (call->module[0] != '\0')
            fprintf(out, " [%s]", call->module);
        fprintf(out, "  %.3f ms  (self %.3f ms)\n", (double)call->cost_ns / 1e6, (double)call->self_ns / 1e6);
    }
}

/* ---- the pass over the rows ------------------------------------------------------------------ */

typedef struct report {
    const options_t *o;
    const inputs_t *in;
    group_table_t groups;
    group_table_t api_names; /* --by parent: the child's API, interned */
    pending_table_t pending;
    int64_t window_from_ns, window_to_ns; /* absolute; to = INT64_MAX when open */
    int64_t min_start_ns;                 /* for the origin when no manifest gave one */
    int gpu_pass;                         /* reading GPU files (first) */
    int prepass;                          /* only finding the run's first call */
    int have_gpu_files;
    uint64_t kept, filtered;
    int oom;
    trace_t *trace;
    tree_t tree;
} report_t;

/* --tree: rows of the chosen thread wait until their outermost call returns, then belong to the
 * step that call is in: only that step's rows are kept. */
static void tree_row(report_t *r, const tw_row_t *row)
{
    tree_t *t = &r->tree;
    if (row->kind != TW_FILE_CALLS || t->boundaries > r->o->tree_step)
        return;
    if (!t->have_tid) {
        if (r->o->ntids && row->tid != r->o->tids[0])
            return;
        t->have_tid = 1; /* the first call's thread, or the first --tid, in the process it is seen in */
        t->tid = row->tid;
        t->pid = row->pid;
    }
    if (row->tid != t->tid || row->pid != t->pid)
        return;
    if (tree_calls_add(&t->pending, row) != 0) {
        r->oom = 1;
        return;
    }
    if (row->depth != 0)
        return;
    if (t->boundaries == r->o->tree_step) {
        for (size_t i = 0; i < t->pending.count; i++) {
            if (t->selected.count == t->selected.capacity) {
                size_t capacity = t->selected.capacity ? t->selected.capacity * 2 : 256;
                tree_call_t *items = realloc(t->selected.items, capacity * sizeof *items);
                if (items == NULL) {
                    r->oom = 1;
                    break;
                }
                t->selected.items = items;
                t->selected.capacity = capacity;
            }
            t->selected.items[t->selected.count++] = t->pending.items[i]; /* ownership moves */
        }
        t->pending.count = 0;
    } else {
        tree_calls_clear(&t->pending);
    }
    char api[1024];
    size_t len = row->api.len < sizeof api - 1 ? row->api.len : sizeof api - 1;
    memcpy(api, row->api.ptr, len);
    api[len] = '\0';
    if (fnmatch(r->o->boundary, api, 0) == 0)
        t->boundaries++;
}

static int keep_row(report_t *r, const tw_row_t *row)
{
    const options_t *o = r->o;
    if (o->npids) {
        size_t i = 0;
        while (i < o->npids && o->pids[i] != row->pid)
            i++;
        if (i == o->npids)
            return 0;
    }
    if (o->ntids && row->kind == TW_FILE_CALLS) {
        size_t i = 0;
        while (i < o->ntids && o->tids[i] != row->tid)
            i++;
        if (i == o->ntids)
            return 0;
    }
    if (o->has_window && ((int64_t)row->start_ns < r->window_from_ns || (int64_t)row->start_ns > r->window_to_ns))
        return 0;
    if (o->napis) {
        char api[1024];
        size_t len = row->api.len < sizeof api - 1 ? row->api.len : sizeof api - 1;
        memcpy(api, row->api.ptr, len);
        api[len] = '\0';
        size_t i = 0;
        while (i < o->napis && fnmatch(o->apis[i], api, 0) != 0)
            i++;
        if (i == o->napis)
            return 0;
    }
    return 1;
}

static group_t *group_for(report_t *r, const char *fmt, ...)
{
    char key[1200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    return table_get(&r->groups, key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1);
}

static void count_in(report_t *r, group_t *g, uint64_t cost, uint64_t self, uint64_t gpu, int error)
{
    if (g == NULL || tw_api_stats_add(&g->stats, cost, self, gpu, error) != 0)
        r->oom = 1;
}

static int on_row(void *ctx, const tw_row_t *row)
{
    report_t *r = ctx;
    if (r->gpu_pass != (row->kind == TW_FILE_GPU))
        return 0;
    if ((int64_t)row->start_ns < r->min_start_ns && row->start_ns != 0)
        r->min_start_ns = (int64_t)row->start_ns;
    if (r->prepass)
        return 0;
    if (r->o->tree_step >= 0) {
        if (keep_row(r, row))
            tree_row(r, row);
        return 0;
    }
    if (!keep_row(r, row)) {
        r->filtered++;
        return 0;
    }
    r->kept++;
    if (r->trace != NULL) {
        if (row->kind == TW_FILE_GPU && row->call_id != 0)
            launch_add(r->trace, row->pid, row->call_id);
        if (r->o->limit == 0 || r->trace->events < r->o->limit) {
            r->trace->events++;
            trace_event(r->trace, row, r->in);
        } else {
            r->trace->skipped++;
        }
    }
    const char *api = row->api.ptr;
    int api_len = (int)(row->api.len < 1000 ? row->api.len : 1000);
    if (row->kind == TW_FILE_GPU) {
        /* GPU time goes to the groups a GPU record can name without a join: its API and its process. */
        group_t *g = NULL;
        if (r->o->by == BY_API && api_len == 0)
            g = group_for(r, "(not attributed)");
        else if (r->o->by == BY_API)
            g = group_for(r, "%.*s", api_len, api);
        else if (r->o->by == BY_PID)
            g = group_for(r, "%" PRId64, row->pid);
        if (g != NULL)
            g->stats.gpu_ns += row->cost_ns;
        return 0;
    }
    /* The gpu_ns column of call records counts only when no GPU files give the same time. */
    uint64_t gpu = r->have_gpu_files ? 0 : row->gpu_ns;
    char key[48], *k = key;
    switch (r->o->by) {
    case BY_API:
        count_in(r, table_get(&r->groups, api, (size_t)api_len), row->cost_ns, row->self_ns, gpu, row->error);
        break;
    case BY_THREAD:
        k = tw_format_i64(k, row->pid);
        *k++ = '/';
        /* fall through */
    case BY_PID:
        if (r->o->by == BY_THREAD)
            k = tw_format_u64(k, row->tid);
        else
            k = tw_format_i64(k, row->pid);
        count_in(r, table_get(&r->groups, key, (size_t)(k - key)), row->cost_ns, row->self_ns, gpu, row->error);
        break;
    case BY_PARENT: {
        group_t *self_api = table_get(&r->api_names, api, (size_t)api_len);
        if (self_api == NULL) {
            r->oom = 1;
            break;
        }
        pending_t *p = pending_find(&r->pending, row->pid, row->call_id);
        if (p != NULL) {
            for (size_t i = 0; i < p->count; i++)
                count_in(r, group_for(r, "%s > %s", self_api->key, p->children[i].api->key), p->children[i].cost_ns,
                         p->children[i].self_ns, 0, p->children[i].error);
            pending_remove(&r->pending, p);
        }
        if (row->parent_id == 0) {
            count_in(r, group_for(r, "%s", self_api->key), row->cost_ns, row->self_ns, gpu, row->error);
        } else {
            pending_child_t child = {self_api, row->cost_ns, row->self_ns, row->error};
            if (pending_add(&r->pending, row->pid, row->parent_id, &child) != 0)
                r->oom = 1;
        }
        break;
    }
    }
    return 0;
}

/* Children whose parent never came (its process was killed before the parent returned). */
static void settle_pending(report_t *r)
{
    for (size_t i = 0; i < r->pending.capacity; i++) {
        pending_t *p = &r->pending.slots[i];
        if (p->parent_id == 0)
            continue;
        for (size_t k = 0; k < p->count; k++)
            count_in(r, group_for(r, "(not recorded) > %s", p->children[k].api->key), p->children[k].cost_ns,
                     p->children[k].self_ns, 0, p->children[k].error);
        free(p->children);
    }
    free(r->pending.slots);
    memset(&r->pending, 0, sizeof r->pending);
}

/* ---- output ------------------------------------------------------------------------------------ */

static uint64_t sort_value(const group_t *g, sort_key_t key)
{
    const tw_api_stats_t *s = &g->stats;
    switch (key) {
    case SORT_SELF: return s->self_ns;
    case SORT_GPU: return s->gpu_ns;
    case SORT_CALLS: return s->calls;
    case SORT_MEAN: return s->calls ? s->total_ns / s->calls : 0;
    case SORT_MIN: return s->min_ns;
    case SORT_MAX: return s->max_ns;
    case SORT_P50: return tw_stats_percentile(s, 0.50);
    case SORT_P95: return tw_stats_percentile(s, 0.95);
    case SORT_P99: return tw_stats_percentile(s, 0.99);
    default: return s->total_ns;
    }
}

static int compare_groups(const void *a, const void *b, void *arg)
{
    sort_key_t key = *(const sort_key_t *)arg;
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (key != SORT_NAME) {
        uint64_t u = sort_value(x, key), v = sort_value(y, key);
        if (u != v)
            return u < v ? 1 : -1;
    }
    return strcmp(x->key, y->key);
}

typedef struct row_values {
    const char *key;
    uint64_t calls, errors, total, self, gpu, mean, min, p50, p95, p99, max;
    double share;
} row_values_t;

static row_values_t values_of(const group_t *g, uint64_t all_self)
{
    const tw_api_stats_t *s = &g->stats;
    return (row_values_t){g->key, s->calls, s->errors, s->total_ns, s->self_ns, s->gpu_ns,
                          s->calls ? s->total_ns / s->calls : 0, s->min_ns, tw_stats_percentile(s, 0.50),
                          tw_stats_percentile(s, 0.95), tw_stats_percentile(s, 0.99), s->max_ns,
                          all_self ? 100.0 * (double)s->self_ns / (double)all_self : 0.0};
}

static void csv_text(FILE *out, const char *s)
{
    if (strpbrk(s, ",\"\n\r") == NULL) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

static void json_text(FILE *out, const char *s)
{
    size_t len = strlen(s); /* a group key: at most ~1200 bytes */
    char *text = malloc(6 * len + 2);
    if (text == NULL) {
        fputs("\"\"", out); /* still valid JSON */
        return;
    }
    fwrite(text, 1, (size_t)(tw_json_escape(text, s, len) - text), out);
    free(text);
}

static const char *group_title(group_by_t by)
{
    return by == BY_THREAD ? "pid/thread" : by == BY_PID ? "pid" : by == BY_PARENT ? "caller > api" : "api";
}

static void print_ms(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%.3f", (double)ns / 1e6);
}

static void print_us(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%.2f", (double)ns / 1e3);
}

static void print_rows(FILE *out, const options_t *o, group_t **order, size_t n, uint64_t all_self, int any_gpu)
{
    static const char *const heads[] = {"calls", "total ms", "self ms", "gpu ms", "mean us", "min us",
                                        "p50 us", "p95 us", "p99 us", "max us", "share %"};
    enum { NCOLS = 11 };
    if (o->format == OUT_CSV) {
        fprintf(out, "%s,calls,errors,total_ns,self_ns,gpu_ns,mean_ns,min_ns,p50_ns,p95_ns,p99_ns,max_ns,share\n",
                group_title(o->by));
        for (size_t i = 0; i < n; i++) {
            row_values_t v = values_of(order[i], all_self);
            csv_text(out, v.key);
            fprintf(out, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                         ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.4f\n",
                    v.calls, v.errors, v.total, v.self, v.gpu, v.mean, v.min, v.p50, v.p95, v.p99, v.max, v.share);
        }
        return;
    }
    if (o->format == OUT_JSON) {
        fprintf(out, "{\"group_by\":\"%s\",\"rows\":[", o->by == BY_API ? "api" : o->by == BY_THREAD ? "thread"
                                                       : o->by == BY_PID ? "pid" : "parent");
        for (size_t i = 0; i < n; i++) {
            row_values_t v = values_of(order[i], all_self);
            fputs(i ? ",\n{\"key\":" : "\n{\"key\":", out);
            json_text(out, v.key);
            fprintf(out, ",\"calls\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"total_ns\":%" PRIu64 ",\"self_ns\":%" PRIu64
                         ",\"gpu_ns\":%" PRIu64 ",\"mean_ns\":%" PRIu64 ",\"min_ns\":%" PRIu64 ",\"p50_ns\":%" PRIu64
                         ",\"p95_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 ",\"max_ns\":%" PRIu64 ",\"share\":%.4f}",
                    v.calls, v.errors, v.total, v.self, v.gpu, v.mean, v.min, v.p50, v.p95, v.p99, v.max, v.share);
        }
        fputs("\n]}\n", out);
        return;
    }
    /* Table and Markdown: the same cells, aligned; the GPU column only when there is GPU time. */
    char (*cells)[NCOLS][24] = calloc(n ? n : 1, sizeof *cells);
    if (cells == NULL)
        return;
    size_t width[NCOLS + 1] = {strlen(group_title(o->by))};
    for (int c = 0; c < NCOLS; c++)
        width[c + 1] = strlen(heads[c]);
    for (size_t i = 0; i < n; i++) {
        row_values_t v = values_of(order[i], all_self);
        snprintf(cells[i][0], 24, "%" PRIu64, v.calls);
        print_ms(cells[i][1], 24, v.total);
        print_ms(cells[i][2], 24, v.self);
        print_ms(cells[i][3], 24, v.gpu);
        print_us(cells[i][4], 24, v.mean);
        print_us(cells[i][5], 24, v.min);
        print_us(cells[i][6], 24, v.p50);
        print_us(cells[i][7], 24, v.p95);
        print_us(cells[i][8], 24, v.p99);
        print_us(cells[i][9], 24, v.max);
        snprintf(cells[i][10], 24, "%.1f", v.share);
        if (strlen(v.key) > width[0])
            width[0] = strlen(v.key) > 100 ? 100 : strlen(v.key);
        for (int c = 0; c < NCOLS; c++)
            if (strlen(cells[i][c]) > width[c + 1])
                width[c + 1] = strlen(cells[i][c]);
    }
    int md = o->format == OUT_MARKDOWN;
    const char *sep = md ? " | " : "  ";
    fprintf(out, "%s%-*s", md ? "| " : "", (int)width[0], group_title(o->by));
    for (int c = 0; c < NCOLS; c++)
        if (c != 3 || any_gpu)
            fprintf(out, "%s%*s", sep, (int)width[c + 1], heads[c]);
    fputs(md ? " |\n" : "\n", out);
    if (md) {
        fprintf(out, "|%.*s", (int)width[0] + 2, "------------------------------------------------------------"
                                                  "--------------------------------------------------------------");
        for (int c = 0; c < NCOLS; c++)
            if (c != 3 || any_gpu)
                fprintf(out, "|%.*s:", (int)width[c + 1] + 1, "--------------------------------");
        fputs("|\n", out);
    }
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%s%-*.*s", md ? "| " : "", (int)width[0], (int)width[0], order[i]->key);
        for (int c = 0; c < NCOLS; c++)
            if (c != 3 || any_gpu)
                fprintf(out, "%s%*s", sep, (int)width[c + 1], cells[i][c]);
        fputs(md ? " |\n" : "\n", out);
    }
    free(cells);
}

/* ---- main ---------------------------------------------------------------------------------------- */

static int read_all(report_t *r, inputs_t *in, tw_read_stats_t *stats, FILE *err)
{
    for (int pass = 1; pass >= 0; pass--) { /* GPU files first: the trace's arrows need their call ids */
        r->gpu_pass = pass;
        for (size_t i = 0; i < in->count; i++) {
            if ((in->files[i].kind == TW_FILE_GPU) != pass || in->files[i].kind == 0)
                continue;
            char message[512];
            int rc = tw_read_file(in->files[i].path, on_row, r, stats, message, sizeof message);
            if (rc != 0) {
                fprintf(err, "tw-report: %s\n", message);
                return 1;
            }
        }
    }
    return 0;
}

int tw_report_main(int argc, char *const argv[], FILE *out, FILE *err)
{
    options_t o;
    int rc = parse_options(argc, argv, &o, out, err);
    if (rc != 0) {
        free(o.inputs);
        return rc < 0 ? 0 : rc;
    }
    inputs_t in;
    memset(&in, 0, sizeof in);
    report_t r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.in = &in;
    r.min_start_ns = INT64_MAX;
    r.window_to_ns = INT64_MAX;
    trace_t *trace = NULL;
    tw_read_stats_t stats = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = collect_inputs(&o, &in, err);
    for (size_t i = 0; rc == 0 && i < in.count; i++)
        r.have_gpu_files |= in.files[i].kind == TW_FILE_GPU;
    if (rc == 0 && (o.has_window || o.trace) && in.origin_ns == INT64_MAX) {
        /* No manifest says when the run started: one more pass finds its first call. */
        r.prepass = 1;
        tw_read_stats_t ignored = {0};
        rc = read_all(&r, &in, &ignored, err);
        r.prepass = 0;
        in.origin_ns = r.min_start_ns == INT64_MAX ? 0 : r.min_start_ns;
    }
    if (rc == 0 && o.has_window) {
        r.window_from_ns = in.origin_ns + (int64_t)(o.window_from * 1e9);
        r.window_to_ns = o.window_to < 0 ? INT64_MAX : in.origin_ns + (int64_t)(o.window_to * 1e9);
    } else {
        r.window_to_ns = INT64_MAX;
    }
    if (rc == 0 && o.trace) {
        trace = calloc(1, sizeof *trace);
        if (trace == NULL) {
            fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
            rc = 1;
        } else {
            trace->origin_ns = in.origin_ns;
            if (has_suffix(o.trace, ".gz"))
                trace->gz = gzopen(o.trace, "wb6");
            else
                trace->file = fopen(o.trace, "wb");
            if (trace->gz == NULL && trace->file == NULL) {
                fprintf(err, "tw-report: cannot write the trace %s: %s\n", o.trace, strerror(errno));
                rc = 1;
            } else {
                trace_printf(trace, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"origin_ns\":%" PRId64
                                    ",\"generator\":\"tw-report %s\"},\n\"traceEvents\":[\n", in.origin_ns, tw_version());
                r.trace = trace;
            }
        }
    }
    if (rc == 0)
        rc = read_all(&r, &in, &stats, err);
    if (rc == 0 && o.by == BY_PARENT)
        settle_pending(&r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (trace != NULL && (trace->file || trace->gz)) {
        /* The last event is an empty metadata record so that every event above can end with a comma. */
        TRACE_LIT(trace, "{\"ph\":\"M\",\"name\":\"trace_end\",\"pid\":0,\"tid\":0,\"args\":{}}\n]}\n");
        trace_flush(trace);
        int closed = trace->gz ? gzclose(trace->gz) == Z_OK : fclose(trace->file) == 0;
        if (rc == 0 && (trace->failed || !closed)) {
            fprintf(err, "tw-report: writing the trace %s failed (disk full?)\n", o.trace);
            rc = 1;
        }
    }
    if (rc == 0 && r.oom)
        fprintf(err, "tw-report: out of memory: some calls are not counted\n");
    if (rc == 0 && o.tree_step >= 0) {
        print_tree(out, err, &o, &r.tree);
        if (r.tree.selected.count == 0)
            rc = 1;
    } else if (rc == 0) {
        group_t **order = calloc(r.groups.count ? r.groups.count : 1, sizeof *order);
        size_t n = 0;
        uint64_t all_self = 0;
        int any_gpu = 0;
        for (size_t i = 0; order != NULL && i < r.groups.capacity; i++) {
            if (r.groups.slots[i] != NULL) {
                order[n++] = r.groups.slots[i];
                all_self += r.groups.slots[i]->stats.self_ns;
                any_gpu |= r.groups.slots[i]->stats.gpu_ns != 0;
            }
        }
        qsort_r(order, n, sizeof *order, compare_groups, &o.sort);
        size_t shown = o.top && o.top < n ? o.top : n;
        if (stats.rows == 0 && in.count > 0)
            fprintf(err, "tw-report: the record files hold no records yet (%zu file%s)\n", in.count,
                    in.count == 1 ? "" : "s");
        print_rows(out, &o, order, shown, all_self, any_gpu || r.have_gpu_files);
        free(order);
        /* The footer goes under the terminal table; with CSV, JSON or Markdown it goes to err, and only
         * when something was skipped, so that the output stays clean. */
        int table = o.format == OUT_TABLE;
        FILE *note = table ? out : err;
        if (table || stats.truncated || stats.malformed) {
            fprintf(note, "%s%" PRIu64 " records from %zu file%s (%.1f MB) in %.2f s (%.0f MB/s)", table ? "\n"
                    : "tw-report: ", stats.rows, in.count, in.count == 1 ? "" : "s", (double)stats.bytes / 1e6, seconds,
                    seconds > 0 ? (double)stats.bytes / 1e6 / seconds : 0.0);
            if (shown < n)
                fprintf(note, "; %zu more row%s (--top)", n - shown, n - shown == 1 ? "" : "s");
            if (stats.truncated || stats.malformed)
                fprintf(note, "; skipped: %" PRIu64 " torn last line%s (a killed process), %" PRIu64
                              " malformed row%s", stats.truncated, stats.truncated == 1 ? "" : "s", stats.malformed,
                        stats.malformed == 1 ? "" : "s");
            if (r.filtered)
                fprintf(note, "; %" PRIu64 " filtered out", r.filtered);
            if (trace != NULL)
                fprintf(note, "; trace: %" PRIu64 " calls in %s%s", trace->events, o.trace,
                        trace->skipped ? " (--limit reached)" : "");
            fputc('\n', note);
        }
    }
    if (trace != NULL) {
        free(trace->tracks);
        free(trace->launches);
        free(trace);
    }
    tree_calls_clear(&r.tree.pending);
    tree_calls_clear(&r.tree.selected);
    free(r.tree.pending.items);
    free(r.tree.selected.items);
    table_free(&r.groups);
    table_free(&r.api_names);
    for (size_t i = 0; i < r.pending.capacity; i++)
        free(r.pending.slots[i].children);
    free(r.pending.slots);
    free_inputs(&in);
    free(o.inputs);
    fflush(out);
    fflush(err);
    return rc;
}
