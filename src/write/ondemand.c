/* SPDX-License-Identifier: MIT */
/* On-demand capture: the signal, the control files, the answer at each step boundary. See ondemand.h. */
#include "config.h"
#include "torchwrapper/ondemand.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest.h"

#define REQUEST_MAX 8192 /* bytes of a request file */

struct tw_ondemand {
    tw_writer_t *writer;
    char *out_dir;
    char *default_dir;
    uint64_t default_steps;
    int64_t rank, run_pid;
    pid_t pid;                   /* the process that started it: a forked child leaves it alone */
    unsigned long long start_time; /* /proc/PID/stat's starttime: the command tells a reused pid by it */
    char control_path[PATH_MAX]; /* PID.json */
    char request_path[PATH_MAX]; /* PID.request */
    struct sigaction previous;   /* the program's SIGUSR2 handler */
    uint64_t from, to;           /* the capture recording: steps [from, to); to == 0: none */
    uint32_t capture_id;         /* the last capture begun (0: none) */
    uint64_t last_from, last_to; /* its steps, also once it ended */
    char capture_dir[PATH_MAX];  /* its dir */
    uint64_t requests;           /* answered */
    uint64_t refused;
    char last_result[16];        /* "started", "refused" */
    char last_message[512];
};

/* Set by the handler, taken by tw_ondemand_step: a lock-free atomic, async-signal-safe. */
static atomic_int asked;
static atomic_int started; /* one tw_ondemand_t per process */

static void on_signal(int sig)
{
    (void)sig;
    atomic_store_explicit(&asked, 1, memory_order_relaxed);
}

int tw_ondemand_asked(void)
{
    return atomic_load_explicit(&asked, memory_order_relaxed);
}

/* dir, made 0700 if missing; it must be a directory of this user's that others cannot write (the
 * requests in it choose where files are written). 0 or an errno value (EPERM: someone else's). */
static int control_dir_ok(const char *dir)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return errno;
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno;
    if (!S_ISDIR(st.st_mode))
        return ENOTDIR;
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return EPERM;
    return 0;
}

/* {"id", "steps": [first, last], "dir"} of the last capture begun. */
static cJSON *capture_object(const tw_ondemand_t *od)
{
    cJSON *c = cJSON_CreateObject();
    if (c == NULL)
        return NULL;
    cJSON_AddItemToObject(c, "id", tw_json_uint(od->capture_id));
    cJSON *steps = cJSON_AddArrayToObject(c, "steps");
    cJSON_AddItemToArray(steps, tw_json_uint(od->last_from));
    cJSON_AddItemToArray(steps, tw_json_uint(od->last_to - 1));
    cJSON_AddStringToObject(c, "dir", od->capture_dir);
    return c;
}

/* This process's start time in clock ticks since boot (/proc/self/stat, field 22), 0 if unknown:
 * with the pid, it names this process and no later one that reuses the pid. */
static unsigned long long process_start_time(void)
{
    FILE *f = fopen("/proc/self/stat", "re");
    if (f == NULL)
        return 0;
    char line[1024];
    unsigned long long start = 0;
    if (fgets(line, sizeof line, f) != NULL) {
        const char *p = strrchr(line, ')'); /* the command name may hold spaces and ')' */
        /* the spaces before fields 3 (state) to 22 (starttime) */
        for (int field = 3; p != NULL && field <= 22; field++)
            p = strchr(p + 1, ' ');
        if (p != NULL)
            start = strtoull(p + 1, NULL, 10);
    }
    fclose(f);
    return start;
}

/* The control file as things stand (step: the step that begins now). */
static void write_control(tw_ondemand_t *od, uint64_t step)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return;
    cJSON_AddItemToObject(o, "pid", tw_json_uint((uint64_t)od->pid));
    cJSON_AddItemToObject(o, "start_time", tw_json_uint(od->start_time));
    cJSON_AddItemToObject(o, "rank", od->rank >= 0 ? tw_json_uint((uint64_t)od->rank) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "run_pid", od->run_pid > 0 ? tw_json_uint((uint64_t)od->run_pid) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "out_dir", od->out_dir);
    cJSON_AddItemToObject(o, "default_steps", tw_json_uint(od->default_steps));
    cJSON_AddItemToObject(o, "step", tw_json_uint(step));
    /* the capture recording now */
    cJSON_AddItemToObject(o, "capture", od->to != 0 ? capture_object(od) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "captures", tw_json_uint(od->capture_id));
    cJSON_AddItemToObject(o, "requests", tw_json_uint(od->requests));
    cJSON_AddItemToObject(o, "refused", tw_json_uint(od->refused));
    if (od->requests > 0) {
        cJSON *last = cJSON_AddObjectToObject(o, "last");
        cJSON_AddStringToObject(last, "result", od->last_result);
        cJSON_AddStringToObject(last, "message", od->last_message);
        if (strcmp(od->last_result, "started") == 0) /* it may be over by the time the command reads this */
            cJSON_AddItemToObject(last, "capture", capture_object(od));
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (text != NULL)
        tw_write_file_atomically(od->control_path, text, 0600); /* a failure leaves the old file: the command
                                                                    * times out */
    free(text);
}

int tw_ondemand_start(const tw_ondemand_config_t *config, tw_ondemand_t **out, char *err, size_t err_size)
{
    if (config == NULL || config->writer == NULL || config->out_dir == NULL || config->default_steps == 0) {
        snprintf(err, err_size, "on_demand needs a writer, an out_dir and 1 or more steps");
        return TW_EINVAL;
    }
    char dir[PATH_MAX];
    const char *env = getenv("TORCHWRAPPER_CONTROL_DIR");
    if (config->control_dir != NULL)
        snprintf(dir, sizeof dir, "%s", config->control_dir);
    else if (env != NULL && env[0] != '\0')
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "/tmp/torchwrapper-%lu", (unsigned long)geteuid());
    int e = control_dir_ok(dir);
    if (e != 0) {
        snprintf(err, err_size, "on_demand: the control directory '%s' %s: %s", dir,
                 e == EPERM ? "belongs to another user or others can write to it" : "cannot be used", strerror(e));
        return TW_EIO;
    }
    tw_ondemand_t *od = calloc(1, sizeof *od);
    if (od == NULL || (od->out_dir = strdup(config->out_dir)) == NULL ||
        (config->default_dir != NULL && (od->default_dir = strdup(config->default_dir)) == NULL)) {
        if (od != NULL)
            free(od->out_dir);
        free(od);
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    od->writer = config->writer;
    od->default_steps = config->default_steps;
    od->rank = config->rank;
    od->run_pid = config->run_pid;
    od->pid = getpid();
    od->start_time = process_start_time();
    if (snprintf(od->control_path, sizeof od->control_path, "%s/%ld.json", dir, (long)od->pid) >=
            (int)sizeof od->control_path ||
        snprintf(od->request_path, sizeof od->request_path, "%s/%ld.request", dir, (long)od->pid) >=
            (int)sizeof od->request_path) {
        snprintf(err, err_size, "on_demand: the control directory '%s' is too long", dir);
        free(od->default_dir);
        free(od->out_dir);
        free(od);
        return TW_EINVAL;
    }
    int expected = 0;
    if (!atomic_compare_exchange_strong(&started, &expected, 1)) {
        snprintf(err, err_size, "on_demand capture is already set up in this process");
        free(od->default_dir);
        free(od->out_dir);
        free(od);
        return TW_EBUSY;
    }
    unlink(od->request_path); /* a request left for an earlier process of this pid is not ours */
    atomic_store(&asked, 0);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART; /* the program's system calls go on as if nothing came */
    sigaction(SIGUSR2, &action, &od->previous);
    if (od->previous.sa_handler != SIG_DFL && od->previous.sa_handler != SIG_IGN)
        fprintf(stderr, "torchwrapper: on_demand: SIGUSR2 asks for captures until profiling stops; the program's "
                        "own SIGUSR2 handler is put back then\n");
    write_control(od, 0);
    *out = od;
    return 0;
}

/* Reads the request file, if any (then removes it): steps and dir, else the defaults. 0, or -1 with
 * a message when it is not a request. */
static int read_request(tw_ondemand_t *od, uint64_t *steps, char *dir, size_t dir_size, char *why, size_t why_size)
{
    *steps = od->default_steps;
    dir[0] = '\0';
    if (od->default_dir != NULL)
        snprintf(dir, dir_size, "%s", od->default_dir);
    int fd = open(od->request_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0; /* kill -USR2: the config's settings */
    char text[REQUEST_MAX + 1];
    ssize_t n = read(fd, text, REQUEST_MAX);
    close(fd);
    unlink(od->request_path);
    text[n > 0 ? n : 0] = '\0';
    cJSON *r = cJSON_Parse(text);
    int rc = 0;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "steps"), *d = cJSON_GetObjectItemCaseSensitive(r, "dir");
    if (!cJSON_IsObject(r)) {
        snprintf(why, why_size, "the request %.400s is not a JSON object", od->request_path);
        rc = -1;
    } else if (s != NULL && !cJSON_IsNull(s) &&
               (!cJSON_IsNumber(s) || s->valuedouble < 1 || s->valuedouble > 1e9 ||
                s->valuedouble != (double)(uint64_t)s->valuedouble)) {
        snprintf(why, why_size, "the request's steps is not a whole number from 1 to 1000000000");
        rc = -1;
    } else if (d != NULL && !cJSON_IsNull(d) && (!cJSON_IsString(d) || d->valuestring[0] == '\0')) {
        snprintf(why, why_size, "the request's dir is not a path");
        rc = -1;
    } else {
        if (cJSON_IsNumber(s))
            *steps = (uint64_t)s->valuedouble;
        if (cJSON_IsString(d))
            snprintf(dir, dir_size, "%s", d->valuestring);
    }
    cJSON_Delete(r);
    return rc;
}

/* Answers the request that came, at the boundary where step begins. */
static void answer(tw_ondemand_t *od, uint64_t step)
{
    uint64_t steps;
    char dir[PATH_MAX], why[512] = "";
    od->requests++;
    int ok = read_request(od, &steps, dir, sizeof dir, why, sizeof why) == 0;
    if (ok && od->to != 0) {
        snprintf(why, sizeof why, "capture %u (steps %llu-%llu, into %.300s) is still recording: one capture at a time, "
                                  "ask again once it ends", od->capture_id, (unsigned long long)od->from,
                 (unsigned long long)(od->to - 1), od->capture_dir);
        ok = 0;
    }
    if (ok && dir[0] == '\0')
        snprintf(dir, sizeof dir, "%s/capture-%u", od->out_dir, od->capture_id + 1);
    uint32_t id = 0;
    char err[600] = "";
    if (ok && tw_writer_capture(od->writer, step, steps, dir, &id, err, sizeof err) != 0) {
        snprintf(why, sizeof why, "%s", err);
        ok = 0;
    }
    if (ok) {
        od->capture_id = id;
        od->from = od->last_from = step;
        od->to = od->last_to = step + steps;
        snprintf(od->capture_dir, sizeof od->capture_dir, "%s", dir);
        snprintf(od->last_result, sizeof od->last_result, "started");
        snprintf(od->last_message, sizeof od->last_message, "capture %u: steps %llu-%llu into %s", id,
                 (unsigned long long)step, (unsigned long long)(step + steps - 1), dir);
    } else {
        od->refused++;
        snprintf(od->last_result, sizeof od->last_result, "refused");
        snprintf(od->last_message, sizeof od->last_message, "%s", why);
        fprintf(stderr, "torchwrapper: capture request refused: %s\n", why);
    }
}

int tw_ondemand_step(tw_ondemand_t *od, uint64_t step, uint64_t *from, uint64_t *to)
{
    if (od == NULL || getpid() != od->pid) {
        *from = *to = 0;
        return 0;
    }
    int changed = 0, rewrite = step == 1; /* the file says the process makes steps (the command asks those) */
    if (od->to != 0 && step >= od->to) { /* its steps are over: the writer finishes its files */
        od->from = od->to = 0;
        changed = rewrite = 1;
    }
    if (atomic_exchange_explicit(&asked, 0, memory_order_relaxed)) {
        uint64_t before = od->to;
        answer(od, step);
        changed |= od->to != before;
        rewrite = 1;
    }
    if (rewrite)
        write_control(od, step);
    *from = od->from;
    *to = od->to;
    return changed;
}

void tw_ondemand_stop(tw_ondemand_t *od)
{
    if (od == NULL)
        return;
    if (getpid() == od->pid) {
        /* Put back only our own: a handler the program set since (a checkpoint-on-SIGUSR2 handler)
         * stays. */
        struct sigaction now;
        if (sigaction(SIGUSR2, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == on_signal)
            sigaction(SIGUSR2, &od->previous, NULL);
        unlink(od->control_path);
        unlink(od->request_path);
        atomic_store(&started, 0);
    }
    free(od->default_dir);
    free(od->out_dir);
    free(od);
}
