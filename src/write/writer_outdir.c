/* SPDX-License-Identifier: MIT */
/*
 * out_dir as every part of the writer writes it (writer_outdir.h): a line appended to one of its
 * files (a new file brings a new manifest), and its manifest, which lists every source's files and
 * counts, the captures and the sites file, rewritten with sites.json beside it.
 */
#include "config.h"
#include "writer_outdir.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "torchwrapper/queue.h"
#include "torchwrapper/sites.h"
#include "writer_state.h"

/* ---- the captures, as the manifests list them ------------------------------------------------------ */

static const char *const capture_state_names[] = {"recording", "ending", "done"};

/* A capture's "id", "steps" (first and last, both included, as tw-report --steps) and "steps_asked". */
void tw_capture_steps_json(cJSON *o, const capture_t *c)
{
    cJSON_AddItemToObject(o, "id", tw_json_uint(c->id));
    cJSON *steps = cJSON_AddArrayToObject(o, "steps");
    cJSON_AddItemToArray(steps, tw_json_uint(c->from));
    cJSON_AddItemToArray(steps, tw_json_uint(c->to - 1));
    cJSON_AddItemToObject(o, "steps_asked", tw_json_uint(c->asked));
}

/* "captures" of out_dir's manifest (a JSON array, malloc'd; NULL when none); the writer's lock held
 * (it guards the capture list, the states and the file lists). */
static char *captures_json(tw_writer_t *w)
{
    if (w->capture_count == 0)
        return NULL;
    cJSON *array = cJSON_CreateArray();
    for (size_t i = 0; array != NULL && i < w->capture_count; i++) {
        const capture_t *c = w->captures[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL)
            break;
        tw_capture_steps_json(o, c);
        cJSON_AddStringToObject(o, "dir", c->dir);
        cJSON_AddStringToObject(o, "state", capture_state_names[c->state]);
        cJSON_AddItemToObject(o, "records_written", tw_json_uint(c->files[0].written));
        cJSON_AddItemToObject(o, "records_late", tw_json_uint(atomic_load(&c->late)));
        cJSON *files = cJSON_AddArrayToObject(o, "files"); /* of every kind: the calls', then each stream's */
        for (unsigned k = 0; files != NULL && k < WRITER_SOURCES_MAX; k++)
            for (size_t f = 0; f < c->files[k].file_count; f++)
                cJSON_AddItemToArray(files, cJSON_CreateString(c->files[k].files[f].name));
        cJSON_AddItemToArray(array, o);
    }
    char *text = array != NULL ? cJSON_PrintUnformatted(array) : NULL;
    cJSON_Delete(array);
    return text;
}

/* ---- the sources, the manifest and the sites file --------------------------------------------- */

writer_source_t *tw_writer_sources(tw_writer_t *w)
{
    return &w->calls; /* the first; the calls source is never removed */
}

tw_manifest_drops_t tw_writer_source_drops(const writer_source_t *s)
{
    return (tw_manifest_drops_t){atomic_load(&s->dropped_full), atomic_load(&s->dropped_invalid),
                                 atomic_load(&s->dropped_closed), s->files.dropped,
                                 atomic_load(&s->dropped_upstream)};
}

void tw_writer_write_sites(tw_writer_t *w)
{
    tw_sites_stats_t st;
    tw_sites_stats(w->sites, &st);
    if (w->sites_file_written && st.count == w->sites_written && w->end_ns == 0)
        return;
    int err = tw_sites_write_json(w->sites, w->sites_path, w->env.pid);
    if (err != 0) {
        tw_fileset_warn(&w->env, "writing", w->sites_path, err);
    } else {
        w->sites_written = st.count;
        w->sites_file_written = 1;
    }
}

void tw_writer_write_manifest(tw_writer_t *w)
{
    tw_manifest_kind_t kinds[WRITER_SOURCES_MAX];
    size_t count = 0;
    pthread_mutex_lock(&w->lock);
    uint64_t truncated = w->truncated;
    char *captures = captures_json(w);
    /* a copy: tw_writer_set_manifest_key may replace it meanwhile (NULL when out of memory: the
     * manifest is then written without the caller's keys, and again with them at the next write) */
    char *extra = w->manifest_extra != NULL ? strdup(w->manifest_extra) : NULL;
    pthread_mutex_unlock(&w->lock);
    /* the source list's links never change once added; the file counters are read under env.lock */
    for (writer_source_t *s = tw_writer_sources(w); s != NULL && count < WRITER_SOURCES_MAX; s = s->next)
        kinds[count++] = (tw_manifest_kind_t){s->kind, &s->files, tw_writer_source_drops(s), 0};
    kinds[0].truncated = truncated;
    kinds[0].drops.full += tw_queue_dropped(w->queue); /* records the recorder could not queue */
    uint64_t used, peak, limit;
    tw_queue_memory(w->queue, &used, &peak, &limit);
    uint64_t writer_cost[TW_MANIFEST_WRITER_COSTS] = {
        [TW_MANIFEST_HELPED] = atomic_load(&w->helped), [TW_MANIFEST_HELP_NS] = atomic_load(&w->help_ns),
        [TW_MANIFEST_THREAD_CPU_NS] = atomic_load(&w->thread_cpu_ns), [TW_MANIFEST_CLOSE_NS] = atomic_load(&w->close_ns)};
    tw_manifest_t m = {extra, w->clock.source, w->start_ns, w->end_ns, kinds, count,
                       w->buffer_bytes, peak, captures, NULL, NULL, writer_cost};
    tw_sites_stats_t sites;
    if (w->sites != NULL) {
        tw_writer_write_sites(w);
        tw_sites_stats(w->sites, &sites);
        m.sites_file = strrchr(w->sites_path, '/') + 1;
        m.sites = &sites;
    }
    tw_manifest_write(&w->env, w->manifest_path, &m);
    free(captures);
    free(extra);
}

void tw_writer_append(tw_writer_t *w, tw_fileset_t *fs, const char *line, size_t len)
{
    if (tw_fileset_append(&w->env, fs, line, len))
        tw_writer_write_manifest(w);
}
