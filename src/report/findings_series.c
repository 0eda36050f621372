/* SPDX-License-Identifier: MIT */
/* The findings' per-line series (findings_series.h): an open-addressing table of keys, and buckets of
 * steps that double in width when the run outgrows them (so a 100,000-step run costs what a 64-step
 * one does). */
#include "config.h"
#include "findings_series.h"

#include <stdlib.h>
#include <string.h>

#include "groups.h"
#include "own_cost_report.h"

static uint64_t key_hash(const tw_row_t *row)
{
    uint64_t h = report_hash_bytes(row->api.ptr, row->api.len, report_pid_id_hash(row->pid, row->tid) ^ row->site);
    h = report_hash_bytes(row->module.ptr, row->module.len, h);
    return h != 0 ? h : 1;
}

static int same_key(const series_entry_t *e, uint64_t h, const tw_row_t *row)
{
    return e->hash == h && e->pid == row->pid && e->tid == row->tid && e->site == row->site &&
           e->api_len == row->api.len && e->module_len == row->module.len &&
           memcmp(e->api, row->api.ptr, row->api.len) == 0 && memcmp(e->module, row->module.ptr, row->module.len) == 0;
}

static int grow(series_table_t *t)
{
    size_t capacity = t->capacity ? 2 * t->capacity : 256;
    series_entry_t **slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < t->capacity; i++) {
        if (t->slots[i] == NULL)
            continue;
        size_t k = t->slots[i]->hash & (capacity - 1);
        while (slots[k] != NULL)
            k = (k + 1) & (capacity - 1);
        slots[k] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

static char *copy_of(tw_str_t s)
{
    char *c = malloc(s.len + 1);
    if (c != NULL) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = '\0';
    }
    return c;
}

static int has_suffix(tw_str_t s, const char *suffix)
{
    size_t n = strlen(suffix);
    return s.len >= n && memcmp(s.ptr + s.len - n, suffix, n) == 0;
}

series_entry_t *report_series_get(series_table_t *t, const tw_row_t *row, int node)
{
    if (t->bin_width == 0)
        t->bin_width = 1;
    uint64_t h = key_hash(row);
    if (t->capacity > 0) {
        for (size_t k = h & (t->capacity - 1);; k = (k + 1) & (t->capacity - 1)) {
            series_entry_t *e = t->slots[k];
            if (e == NULL)
                break;
            if (same_key(e, h, row))
                return e;
        }
    }
    if ((t->count + 1) * 2 > t->capacity && grow(t) != 0) {
        t->oom = 1;
        return NULL;
    }
    /* an allocation of its own: the entry's address outlives the table's growth (findings.c keeps it
     * in a level's runs) */
    series_entry_t *e = calloc(1, sizeof *e);
    if (e == NULL || (e->api = copy_of(row->api)) == NULL || (e->module = copy_of(row->module)) == NULL) {
        if (e != NULL)
            free(e->api);
        free(e);
        t->oom = 1;
        return NULL;
    }
    size_t k = h & (t->capacity - 1);
    while (t->slots[k] != NULL)
        k = (k + 1) & (t->capacity - 1);
    t->slots[k] = e;
    e->hash = h;
    e->pid = row->pid, e->tid = row->tid, e->site = row->site;
    e->api_len = row->api.len, e->module_len = row->module.len;
    e->node = node;
    e->module_forward = row->has_module == 1 && has_suffix(row->api, ".forward");
    static const char *const setters[] = {"torch.set_default_dtype", "torch.Tensor.to", "torch.nn.Module.to",
                                          "torch.tensor", "torch.as_tensor", "torch.from_numpy"};
    for (size_t i = 0; i < sizeof setters / sizeof *setters; i++)
        e->dtype_setter |= row->api.len == strlen(setters[i]) && memcmp(row->api.ptr, setters[i], row->api.len) == 0;
    e->last_step = -1;
    e->run_step = -1;
    e->sample_step = -1;
    e->eval_step = -1;
    e->elems_step_of = -1;
    t->count++;
    return e;
}

/* Twice the buckets' width: neighbours merged, in every entry. */
static void widen(series_table_t *t)
{
    for (size_t i = 0; i < t->capacity; i++) {
        series_entry_t *e = t->slots[i];
        if (e == NULL)
            continue;
        for (size_t b = 0; b < SERIES_BINS / 2; b++) {
            e->bin_self[b] = e->bin_self[2 * b] + e->bin_self[2 * b + 1];
            e->bin_elems[b] = e->bin_elems[2 * b] + e->bin_elems[2 * b + 1];
        }
        memset(e->bin_self + SERIES_BINS / 2, 0, SERIES_BINS / 2 * sizeof *e->bin_self);
        memset(e->bin_elems + SERIES_BINS / 2, 0, SERIES_BINS / 2 * sizeof *e->bin_elems);
    }
    t->bin_width *= 2;
}

/* What the rules read of an argument summary's tensors ("((Linear, f32[1,16]@cpu), {})"), in one scan:
 * a hash of their dtypes and sizes and nothing else (a loop over a batch's slices, x[i:i + 1], passes
 * one shape with another index each time), their elements in all, whether one is float64, or float32
 * on a CUDA device, and whether the first has a leading dimension of 1 and another after it (one
 * sample of a batch). */
typedef struct series_tensors tensors_t;

static void read_tensors(tw_str_t args, tensors_t *t)
{
    memset(t, 0, sizeof *t);
    t->shapes_hash = 7;
    const char *p = args.ptr, *end = args.ptr + args.len;
    int first = 1;
    while (p < end && (p = memchr(p, '[', (size_t)(end - p))) != NULL) {
        /* a dtype's letters and bits before the bracket: f32[, bf16[, i64[ (not a list's "[") */
        const char *from = p;
        while (from > args.ptr && from[-1] >= '0' && from[-1] <= '9')
            from--;
        if (from == p || from == args.ptr || !(from[-1] >= 'a' && from[-1] <= 'z')) {
            p++;
            continue;
        }
        while (from > args.ptr && from[-1] >= 'a' && from[-1] <= 'z')
            from--;
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (close == NULL)
            break;
        t->shapes_hash = report_hash_bytes(from, (size_t)(close + 1 - from), t->shapes_hash);
        double n = 1, size = 0;
        for (const char *k = p + 1; k <= close; k++) { /* "2,3,224,224]" */
            if (*k >= '0' && *k <= '9') {
                size = size * 10 + (*k - '0');
            } else {
                n *= size;
                size = 0;
            }
        }
        t->elements += n;
        t->items += 1;
        /* a list past its eighth item: "..., ... 48 items]": the rest counted as the last shown (the device's
         * few letters skipped to what follows the tensor) */
        const char *after = close + 1;
        while (after < end && *after != ',' && *after != ')' && *after != ']')
            after++;
        if (end - after > 12 && after[0] == ',' && after[2] == '.' && memcmp(after, ", ... ", 6) == 0) {
            double rest = (double)(strtol(after + 6, NULL, 10) - 8);
            t->elements += n * rest;
            t->items += rest;
        }
        size_t dtype = (size_t)(p - from);
        t->f64 |= dtype == 3 && memcmp(from, "f64", 3) == 0;
        t->f32_cuda |= dtype == 3 && memcmp(from, "f32", 3) == 0 && end - close > 5 && memcmp(close + 1, "@cuda", 5) == 0;
        if (first)
            t->first_single = close - p > 3 && p[1] == '1' && p[2] == ',';
        first = 0;
        p = close + 1;
    }
}

/* Whether an argument summary passes the dtype float64 itself ("f64" not before a tensor's sizes:
 * set_default_dtype(torch.float64), x.to(torch.float64), torch.tensor(a, dtype=torch.double)). */
static int asks_float64(tw_str_t args)
{
    for (const char *p = args.ptr, *end = args.ptr + args.len; p + 3 <= end;) {
        const char *f = memchr(p, 'f', (size_t)(end - p));
        if (f == NULL || f + 3 > end)
            return 0;
        if (f[1] == '6' && f[2] == '4' && (f + 3 == end || f[3] != '[') && (f == args.ptr || f[-1] == ' ' || f[-1] == '('))
            return 1;
        p = f + 1;
    }
    return 0;
}

void report_series_add(series_table_t *t, series_entry_t *e, const tw_row_t *row)
{
    e->detail_calls += report_series_detail_step(t, row->step);
    e->calls++;
    e->self_ns += row->self_ns;
    e->cost_ns += row->cost_ns;
    if (row->step == 0) {
        e->first_calls++;
        e->first_self += row->self_ns;
        e->first_cost += row->cost_ns;
    }
    size_t bin = SERIES_BINS; /* the row's bucket (none for the first step) */
    if (row->step > 0) {
        uint64_t s = (uint64_t)row->step;
        if (s > t->last_step)
            t->last_step = s;
        while ((s - 1) / t->bin_width >= SERIES_BINS)
            widen(t);
        e->bin_self[(s - 1) / t->bin_width] += row->self_ns;
        bin = (s - 1) / t->bin_width;
        if (row->step != e->last_step)
            e->steps_seen++;
    }
    e->last_step = row->step;
    if (e->node || row->args.len == 0)
        return;
    tensors_t tensors;
    if (row->args.len == e->last_args_len && memcmp(row->args.ptr, e->last_args, row->args.len) == 0) {
        tensors = e->last_tensors;
    } else {
        read_tensors(row->args, &tensors);
        e->last_args_len = row->args.len <= sizeof e->last_args ? row->args.len : 0;
        memcpy(e->last_args, row->args.ptr, e->last_args_len);
        e->last_tensors = tensors;
    }
    if (bin < SERIES_BINS)
        e->bin_elems[bin] += tensors.elements;
    if (row->step >= 1 && row->step != e->elems_step_of) { /* a new step of this key: the last one done */
        if (e->elems_step_of >= 2) {
            if (e->elems_steps == 0 || e->elems_step < e->elems_min)
                e->elems_min = e->elems_step;
            if (e->elems_step > e->elems_max)
                e->elems_max = e->elems_step;
            if (e->elems_steps == 0 || e->items_step < e->items_min)
                e->items_min = e->items_step;
            if (e->items_step > e->items_max)
                e->items_max = e->items_step;
            e->elems_steps++;
            e->elems_up += e->elems_step > e->elems_before;
            e->items_up += e->items_step > e->items_before;
            e->list_up += e->calls_before > 0 && e->items_step / e->calls_step > e->items_before / e->calls_before;
        }
        if (e->elems_step_of >= 1)
            e->elems_before = e->elems_step, e->items_before = e->items_step, e->calls_before = e->calls_step;
        e->elems_step = e->items_step = e->calls_step = 0;
        e->elems_step_of = row->step;
    }
    if (row->step >= 1)
        e->elems_step += tensors.elements, e->items_step += tensors.items, e->calls_step++;
    if (tensors.f64) {
        e->f64_calls++;
        e->f64_ns += row->cost_ns;
    }
    if (tensors.f32_cuda) {
        e->f32_gpu_calls++;
        e->f32_gpu_ns += row->cost_ns + row->gpu_ns;
    }
    e->single_calls += tensors.first_single;
    if (e->dtype_setter && !e->f64_made)
        e->f64_made = asks_float64(row->args);
    uint64_t h = tensors.shapes_hash;
    e->shape_changes += e->calls > 1 && h != e->last_args_hash;
    e->last_args_hash = h;
}

int report_series_first_tensor(tw_str_t args, long *lead, int *ndim)
{
    const char *p = args.ptr, *end = args.ptr + args.len;
    while (p < end && (p = memchr(p, '[', (size_t)(end - p))) != NULL) {
        if (p == args.ptr || !(p[-1] >= '0' && p[-1] <= '9')) { /* a list's bracket, not a dtype's */
            p++;
            continue;
        }
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (close == NULL)
            return 0;
        *lead = strtol(p + 1, NULL, 10);
        *ndim = close == p + 1 ? 0 : 1;
        for (const char *k = p + 1; k < close; k++)
            *ndim += *k == ',';
        return 1;
    }
    return 0;
}

void report_series_program(series_entry_t *e, uint32_t count, uint64_t cost_ns)
{
    e->program_calls += count;
    e->program_cost += cost_ns;
    if (count > e->max_run)
        e->max_run = count;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double report_series_detail_scale(const series_entry_t *e)
{
    return e->detail_calls > 0 && e->detail_calls < e->calls ? (double)e->calls / (double)e->detail_calls : 1.0;
}

int report_series_detail_step(const series_table_t *t, int64_t step)
{
    return report_detail_step(t->detail_first, t->detail_every, step);
}

/* The steps of [from, to] whose calls carry argument summaries (all, unless detail is sampled). */
static uint64_t detail_steps(const series_table_t *t, uint64_t from, uint64_t to)
{
    if (t->detail_every <= 0)
        return to - from + 1;
    uint64_t n = 0;
    for (uint64_t s = from; s <= to; s++)
        n += report_series_detail_step(t, (int64_t)s);
    return n;
}

int report_series_ends(const series_table_t *t, const series_entry_t *e, int which, double *first, double *last,
                       int *rising)
{
    if (t->last_step < 2)
        return -1;
    /* the buckets that hold steps: the last may hold fewer than its width; for elements, those with
     * steps whose calls carry summaries (a bucket without is left out) */
    size_t buckets = (size_t)((t->last_step - 1) / t->bin_width) + 1, used = 0;
    double means[SERIES_BINS];
    for (size_t b = 0; b < buckets; b++) {
        uint64_t from = b * t->bin_width + 1, to = from + t->bin_width - 1;
        if (to > t->last_step)
            to = t->last_step;
        uint64_t steps = which == SERIES_SELF ? to - from + 1 : detail_steps(t, from, to);
        if (steps > 0)
            means[used++] = (which == SERIES_SELF ? (double)e->bin_self[b] : e->bin_elems[b]) / (double)steps;
    }
    if (used < 8)
        return -1;
    size_t q = used / 4, half = (used - 2 * q) / 2;
    double a[SERIES_BINS], b[SERIES_BINS], c[SERIES_BINS], z[SERIES_BINS];
    double last_min = -1;
    for (size_t i = 0; i < q; i++) {
        a[i] = means[i];
        z[i] = means[used - q + i];
        if (last_min < 0 || z[i] < last_min)
            last_min = z[i];
    }
    /* the middle buckets in two halves: the second and third quarters */
    for (size_t i = 0; i < half; i++)
        b[i] = means[q + i];
    for (size_t i = q + half; i < used - q; i++)
        c[i - q - half] = means[i];
    *first = median(a, q);
    *last = median(z, q);
    double second = median(b, half), third = median(c, used - q - half - q), span = *last - *first;
    /* every bucket of the last quarter above the first quarter's median (a trend, not a few slow steps:
     * a busy machine's spikes land in either quarter, and move a median little), and a ramp: each
     * quarter above the one before, by a part of the rise. A cost that steps up once (a call started
     * late in the run, a curriculum's longer inputs, a machine busy from some point on) leaves two
     * neighbouring quarters level, wherever the step falls; the middle pair is asked too, so that a
     * step at the last quarter's start needs the machine's noise to lift two quarters, not one (a
     * curriculum lengthening torch.randn's output at step 36 of 48 was named growing under load). The
     * elements need less of the rise than the time: they are exact, and a sampled run's detail steps
     * crowd the first quarters (steps 1-9, then one in 20). */
    double part = which == SERIES_SELF ? 0.1 : 0.05;
    *rising = last_min > *first && span > 0 && second - *first >= part * span && third - second >= part * span &&
              *last - third >= part * span;
    return 0;
}

void report_series_free(series_table_t *t)
{
    for (size_t i = 0; i < t->capacity; i++)
        if (t->slots[i] != NULL) {
            free(t->slots[i]->api);
            free(t->slots[i]->module);
            free(t->slots[i]);
        }
    free(t->slots);
    memset(t, 0, sizeof *t);
}
