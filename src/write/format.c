/* SPDX-License-Identifier: MIT */
/*
 * Record formatting: call records as CSV or JSON lines (exact int64 values), and the CSV quoting and
 * JSON escaping under them (tw_csv_field, tw_json_escape, also used by the GPU rows and tw-report).
 * Pure functions: no files, no threads, no allocation.
 */
#include "config.h"
#include "format.h"

#include <string.h>

#include "api_text.h"
#include "torchwrapper/common.h"

/* CSV text field: as is when nothing needs quoting, else through libcsv's quoting. */
static char *put_csv_text(char *p, const char *s, size_t len)
{
    return tw_csv_field(p, s, len);
}

/* A rendering of the name table (api_text.h): TW_API_TEXT_PAD bytes at once, the rest (long names) after. */
static char *put_text(char *p, const char *s, size_t len)
{
    memcpy(p, s, TW_API_TEXT_PAD);
    if (len > TW_API_TEXT_PAD)
        memcpy(p + TW_API_TEXT_PAD, s + TW_API_TEXT_PAD, len - TW_API_TEXT_PAD);
    return p + len;
}

/*
 * The len digits (at most 20) formatted at text earlier in this line, again at p: a record's self time
 * is its cost in nine records of ten (a call with no recorded call inside), formatted once. The first 16
 * bytes go through a register, which reads past the digits into the line being written (its room is
 * the line's, and the bytes read there are overwritten or past the line's end).
 */
static char *put_again(char *p, const char *text, size_t len)
{
    char head[16];
    memcpy(head, text, sizeof head);
    memcpy(p, head, sizeof head);
    if (len > sizeof head) /* above 10^16 ns: 116 days */
        memcpy(p + sizeof head, text + sizeof head, len - sizeof head);
    return p + len;
}

void tw_format_cache_init(tw_format_cache_t *cache)
{
    memset(cache, 0, sizeof *cache);
}

/* pid from the cache (formatted when it changed: a forked child's writer) */
static char *put_pid(char *p, tw_format_cache_t *c, int64_t pid)
{
    if (c->pid_len == 0 || c->pid != pid) {
        c->pid = pid;
        c->pid_len = (uint8_t)(tw_format_i64(c->pid_text, pid) - c->pid_text);
    }
    memcpy(p, c->pid_text, sizeof c->pid_text); /* fixed size: a few moves, not a call */
    return p + c->pid_len;
}

static char *put_tid(char *p, tw_format_cache_t *c, uint64_t tid)
{
    if (c->tid_len == 0 || c->tid != tid) {
        c->tid = tid;
        c->tid_len = (uint8_t)(tw_format_u64(c->tid_text, tid) - c->tid_text);
    }
    memcpy(p, c->tid_text, sizeof c->tid_text);
    return p + c->tid_len;
}

/* A start time: its leading digits from the cache while they stay the same, the last 8 formatted. */
static char *put_start(char *p, tw_format_cache_t *c, int64_t start)
{
    enum { LOW = 100000000 }; /* 10^8: the digits formatted each time */
    uint64_t v = (uint64_t)start;
    if (start < LOW) /* before 1970 + 0.1 s: never from a clock, but exact all the same */
        return tw_format_i64(p, start);
    if (c->start_head_len == 0 || v - c->start_base >= LOW) { /* unsigned: below the base too */
        c->start_base = v - v % LOW;
        c->start_head_len = (uint8_t)(tw_format_u64(c->start_head, v / LOW) - c->start_head);
    }
    memcpy(p, c->start_head, sizeof c->start_head);
    p += c->start_head_len;
    tw_format_8_digits(p, (uint32_t)(v - c->start_base));
    return p + 8;
}

size_t tw_format_record(char *line, tw_format_t format, const tw_format_times_t *ns, int64_t pid,
                        tw_format_cache_t *cache, const tw_chunk_t *chunk, const tw_record_t *r, size_t args_max)
{
    static const char unknown_json[3 + TW_API_TEXT_PAD] = "\"?\"", unknown_csv[1 + TW_API_TEXT_PAD] = "?";
    static const char none_json[2 + TW_API_TEXT_PAD] = "\"\"", none_csv[TW_API_TEXT_PAD] = "";
    static const tw_api_text_t unknown = {"?", 1, unknown_json, 3, unknown_csv, 1};
    static const tw_api_text_t none = {"", 0, none_json, 2, none_csv, 0};
    const char *args = chunk->text + r->args_offset;
    size_t args_len;
    /* A backward node: its text is the link to the forward call that created it, not arguments. */
    uint64_t fwd_call_id = 0;
    uint32_t fwd_api_id = 0;
    const tw_api_text_t *fwd_api = &none;
    if ((r->flags & TW_RECORD_BACKWARD) && r->args_len == TW_BACKWARD_LINK_SIZE) {
        tw_backward_link_unpack(args, &fwd_call_id, &fwd_api_id);
        if (fwd_call_id != 0 && (fwd_api = tw_api_text(fwd_api_id)) == NULL)
            fwd_api = &none;
        args_len = 0;
    } else {
        args_len = tw_utf8_cut(args, r->args_len, args_max);
    }
    const tw_api_text_t *api = tw_api_text(r->api_id);
    if (api == NULL)
        api = &unknown;
    const tw_api_text_t *module = tw_module_text(r->module_id); /* NULL: not a module call */
    char *p = line;
    int64_t start = ns->start;
    uint64_t cost = ns->cost, self = ns->self;
    tw_resources_t res;
    int has_res = tw_record_resources(chunk, r, &res);
    if (format == TW_FORMAT_CSV) {
        p = tw_format_u64(p, r->call_id);
        *p++ = ',';
        p = put_text(p, api->csv, api->csv_len);
        *p++ = ',';
        p = put_start(p, cache, start);
        *p++ = ',';
        char *cost_text = p;
        p = tw_format_u64(p, cost);
        size_t cost_len = (size_t)(p - cost_text);
        *p++ = ',';
        p = self == cost ? put_again(p, cost_text, cost_len) : tw_format_u64(p, self);
        *p++ = ',';
        *p++ = '0'; /* gpu_ns: readers join it from the GPU records */
        *p++ = ',';
        p = put_pid(p, cache, pid);
        *p++ = ',';
        p = put_tid(p, cache, chunk->tid);
        *p++ = ',';
        p = tw_format_u64(p, r->depth);
        *p++ = ',';
        p = tw_format_u64(p, r->parent_id);
        *p++ = ',';
        *p++ = (r->flags & TW_RECORD_ERROR) ? '1' : '0';
        *p++ = ',';
        p = put_csv_text(p, args, args_len);
        *p++ = ',';
        if (module != NULL)
            p = put_text(p, module->csv, module->csv_len);
        *p++ = ',';
        p = tw_format_u64(p, r->step);
        *p++ = ',';
        p = tw_format_u64(p, r->site);
        *p++ = ',';
        if (fwd_call_id == 0) { /* all records but backward nodes': no forward call, no API */
            *p++ = '0';
            *p++ = ',';
        } else {
            p = tw_format_u64(p, fwd_call_id);
            *p++ = ',';
            p = put_text(p, fwd_api->csv, fwd_api->csv_len);
        }
        /* the resources: empty fields for the (many) records that carry none, which read as 0 */
        if (has_res) {
            const uint64_t fields[] = {res.flops, res.flops_total, res.mem_alloc, res.mem_self, res.mem_freed, res.mem_peak};
            for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
                *p++ = ',';
                p = tw_format_u64(p, fields[i]);
            }
        } else {
            memcpy(p, ",,,,,,", 6);
            p += 6;
        }
        *p++ = '\n';
    } else {
        memcpy(p, "{\"call_id\":", 11);
        p = tw_format_u64(p + 11, r->call_id);
        memcpy(p, ",\"api\":", 7);
        p = put_text(p + 7, api->json, api->json_len);
        memcpy(p, ",\"start_ns\":", 12);
        p = put_start(p + 12, cache, start);
        memcpy(p, ",\"cost_ns\":", 11);
        char *cost_text = p + 11;
        p = tw_format_u64(p + 11, cost);
        size_t cost_len = (size_t)(p - cost_text);
        memcpy(p, ",\"self_ns\":", 11);
        p = self == cost ? put_again(p + 11, cost_text, cost_len) : tw_format_u64(p + 11, self);
        memcpy(p, ",\"gpu_ns\":0", 11); /* joined from the GPU records by readers */
        p += 11;
        memcpy(p, ",\"pid\":", 7);
        p = put_pid(p + 7, cache, pid);
        memcpy(p, ",\"tid\":", 7);
        p = put_tid(p + 7, cache, chunk->tid);
        memcpy(p, ",\"depth\":", 9);
        p = tw_format_u64(p + 9, r->depth);
        memcpy(p, ",\"parent_id\":", 13);
        p = tw_format_u64(p + 13, r->parent_id);
        if (r->flags & TW_RECORD_ERROR) {
            memcpy(p, ",\"error\":true", 13);
            p += 13;
        } else {
            memcpy(p, ",\"error\":false", 14);
            p += 14;
        }
        memcpy(p, ",\"args\":", 8);
        p = tw_json_escape(p + 8, args, args_len);
        memcpy(p, ",\"module\":", 10);
        p += 10;
        if (module != NULL) {
            p = put_text(p, module->json, module->json_len);
        } else {
            memcpy(p, "null", 4);
            p += 4;
        }
        memcpy(p, ",\"step\":", 8);
        p = tw_format_u64(p + 8, r->step);
        memcpy(p, ",\"site\":", 8);
        p = tw_format_u64(p + 8, r->site);
        if (fwd_call_id == 0) { /* all records but backward nodes': no forward call, no API */
            static const char no_forward[] = ",\"fwd_call_id\":0,\"fwd_api\":\"\"";
            memcpy(p, no_forward, sizeof no_forward - 1);
            p += sizeof no_forward - 1;
        } else {
            memcpy(p, ",\"fwd_call_id\":", 15);
            p = tw_format_u64(p + 15, fwd_call_id);
            memcpy(p, ",\"fwd_api\":", 11);
            p = put_text(p + 11, fwd_api->json, fwd_api->json_len);
        }
        /* the resources, only in the records that carry some: a key left out reads as 0 */
        static const struct {
            const char *key; /* ,"name": */
            size_t len;
        } keys[] = {{",\"flops\":", 9},     {",\"flops_total\":", 15}, {",\"mem_alloc\":", 13},
                    {",\"mem_self\":", 12}, {",\"mem_freed\":", 13},   {",\"mem_peak\":", 12}};
        const uint64_t fields[] = {res.flops, res.flops_total, res.mem_alloc, res.mem_self, res.mem_freed, res.mem_peak};
        for (size_t i = 0; has_res && i < sizeof fields / sizeof fields[0]; i++) {
            memcpy(p, keys[i].key, keys[i].len);
            p = tw_format_u64(p + keys[i].len, fields[i]);
        }
        *p++ = '}';
        *p++ = '\n';
    }
    return (size_t)(p - line);
}

