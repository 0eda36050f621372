/* SPDX-License-Identifier: MIT */
/* tw-report's row filters (--api, --pid, --tid, --window, --steps): see filter.h. */
#include "config.h"
#include "filter.h"

#include <fnmatch.h>
#include <string.h>

int report_filter_keep(const report_filter_t *f, const tw_row_t *row)
{
    const options_t *o = f->o;
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
    if (o->has_window && ((int64_t)row->start_ns < f->window_from_ns || (int64_t)row->start_ns > f->window_to_ns))
        return 0;
    /* GPU records and files older than the step column carry no step (-1): left out. */
    if (o->has_steps && (row->step < 0 || row->step < o->steps_from || (o->steps_to >= 0 && row->step > o->steps_to)))
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

int report_filter_any(const options_t *o)
{
    return o->npids || o->ntids || o->has_window || o->has_steps || o->napis;
}
