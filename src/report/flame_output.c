/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --folded and --flamegraph: the stacks that flame.c built, written as Brendan Gregg's
 * folded stacks or as a self-contained interactive SVG flame graph (also embedded by --html).
 */
#include "config.h"
#include "flame_output.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "util.h"

/* ---- folded stacks ------------------------------------------------------------------------------ */

typedef struct path {
    char *text;
    size_t len, capacity;
} path_t;

static int folded_node(FILE *out, const flame_node_t *n, path_t *p)
{
    size_t before = p->len;
    size_t need = p->len + n->name->len + 2;
    if (need > p->capacity) {
        size_t capacity = need * 2;
        char *text = realloc(p->text, capacity);
        if (text == NULL)
            return TW_ENOMEM;
        p->text = text;
        p->capacity = capacity;
    }
    if (p->len > 0)
        p->text[p->len++] = ';';
    memcpy(p->text + p->len, n->name->text, n->name->len);
    p->len += n->name->len;
    if (n->self_ns > 0) {
        fwrite(p->text, 1, p->len, out);
        fprintf(out, " %" PRIu64 "\n", n->self_ns);
    }
    for (const flame_node_t *c = n->child; c != NULL; c = c->next)
        if (folded_node(out, c, p) != 0)
            return TW_ENOMEM;
    p->len = before;
    return 0;
}

int report_flame_write_folded(const flame_t *f, const char *path, FILE *err)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        int rc = -errno;
        fprintf(err, "tw-report: cannot write %s: %s\n", path, strerror(errno));
        return rc;
    }
    path_t p = {0};
    int rc = 0;
    for (const flame_node_t *c = f->root.child; rc == 0 && c != NULL; c = c->next)
        rc = folded_node(out, c, &p);
    free(p.text);
    return report_close_output(out, path, rc, err);
}

/* ---- the SVG flame graph ----------------------------------------------------------------------- */

#define SVG_WIDTH 1200.0
#define SVG_PAD 10.0
#define FRAME_HEIGHT 16.0
#define SVG_TOP 56.0    /* title, legend, search and reset */
#define SVG_BOTTOM 30.0 /* the details line */
#define FONT_SIZE 12.0
#define FRAME_CHAR_WIDTH 7.3 /* of FONT_SIZE monospace: how many characters fit in a frame */
#define MIN_WIDTH 0.1   /* frames narrower than this many pixels are left out, as flamegraph.pl does */

static void xml_text(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        switch (c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default:
            /* Control characters are not allowed in XML 1.0 */
            fputc((unsigned char)c < 0x20 ? ' ' : c, out);
        }
    }
}

static void package_colour(char *out, size_t size, const frame_name_t *name)
{
    /* One hue per package; the name's hash varies its shade, so that neighbours stand apart. */
    double v = name != NULL ? (double)(name->hash % 1000) / 1000.0 : 0.5;
    int r, g, b;
    switch (name != NULL ? (package_t)name->package : PKG_NONE) {
    case PKG_NN: r = 240; g = 150 + (int)(60 * v); b = 40 + (int)(30 * v); break;       /* orange */
    case PKG_OPTIM: r = 70 + (int)(60 * v); g = 185 + (int)(45 * v); b = 80 + (int)(40 * v); break; /* green */
    case PKG_TENSOR: r = 80 + (int)(50 * v); g = 145 + (int)(55 * v); b = 235; break;   /* blue */
    case PKG_TORCH: r = 225 + (int)(25 * v); g = 75 + (int)(60 * v); b = 70 + (int)(35 * v); break; /* red */
    case PKG_USER: r = 165 + (int)(40 * v); g = 120 + (int)(40 * v); b = 225; break;    /* purple */
    default: r = g = b = 190; break;                                                    /* grey */
    }
    snprintf(out, size, "#%02x%02x%02x", r, g, b);
}

static const char *const legend[][2] = {
    {"torch.nn", "#f0b44e"}, {"torch.optim", "#64cf78"}, {"torch.Tensor", "#69aeeb"},
    {"other torch", "#eb6e58"}, {"user code", "#b98ce1"},
};

static void print_ms_text(FILE *out, uint64_t ns)
{
    double ms = (double)ns / 1e6;
    if (ms >= 100)
        fprintf(out, "%.0f ms", ms);
    else if (ms >= 1)
        fprintf(out, "%.2f ms", ms);
    else
        fprintf(out, "%.1f us", (double)ns / 1e3);
}

static void frame_label(FILE *out, const char *name, size_t len, double width)
{
    long fit = (long)((width - 6) / FRAME_CHAR_WIDTH);
    if (fit < 3)
        return;
    if ((size_t)fit >= len) {
        xml_text(out, name, len);
    } else {
        xml_text(out, name, tw_utf8_cut(name, len, (size_t)fit - 2)); /* whole characters: the SVG stays XML */
        fputs("..", out);
    }
}

typedef struct svg_layout {
    FILE *out;
    uint64_t all_ns;
    uint64_t min_ns; /* frames with less total time are left out */
    double scale;    /* pixels per ns */
    double height;
    size_t frames;
} svg_layout_t;

static void svg_frame(svg_layout_t *l, const flame_node_t *n, const char *name, size_t len, int depth,
                      uint64_t offset_ns, const frame_name_t *colour_of)
{
    FILE *out = l->out;
    double x = SVG_PAD + (double)offset_ns * l->scale, w = (double)n->total_ns * l->scale;
    double y = l->height - SVG_BOTTOM - (depth + 1) * FRAME_HEIGHT;
    char fill[8];
    package_colour(fill, sizeof fill, colour_of);
    fputs("<g class=\"twf-f\"><title>", out);
    xml_text(out, name, len);
    fprintf(out, "\n%" PRIu64 " call%s, total ", n->calls, n->calls == 1 ? "" : "s");
    print_ms_text(out, n->total_ns);
    fprintf(out, " (%.2f%%), self ", l->all_ns ? 100.0 * (double)n->total_ns / (double)l->all_ns : 0.0);
    print_ms_text(out, n->self_ns);
    fprintf(out, " (%.2f%%)</title><rect x=\"%.3f\" y=\"%.1f\" width=\"%.3f\" height=\"%.1f\" fill=\"%s\" rx=\"2\"/>"
                 "<text x=\"%.3f\" y=\"%.1f\">",
            l->all_ns ? 100.0 * (double)n->self_ns / (double)l->all_ns : 0.0, x, y, w, FRAME_HEIGHT - 1, fill, x + 3,
            y + FRAME_HEIGHT - 4.5);
    frame_label(out, name, len, w);
    fputs("</text></g>\n", out);
    l->frames++;
    uint64_t at = offset_ns; /* children from the frame's left edge, its self time to their right */
    for (const flame_node_t *c = n->child; c != NULL; c = c->next) {
        if (c->total_ns >= l->min_ns && c->total_ns > 0)
            svg_frame(l, c, c->name->text, c->name->len, depth + 1, at, c->name);
        at += c->total_ns;
    }
}

static void collect_totals(const flame_node_t *n, uint64_t *totals, size_t *count)
{
    for (const flame_node_t *c = n->child; c != NULL; c = c->next) {
        if (c->total_ns == 0)
            continue;
        totals[(*count)++] = c->total_ns;
        collect_totals(c, totals, count);
    }
}

static int compare_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int kept_depth(const flame_node_t *n, uint64_t min_ns)
{
    int deepest = 0;
    for (const flame_node_t *c = n->child; c != NULL; c = c->next)
        if (c->total_ns >= min_ns && c->total_ns > 0) {
            int d = 1 + kept_depth(c, min_ns);
            if (d > deepest)
                deepest = d;
        }
    return deepest;
}

/* The script: hover details, click to zoom, search. It finds its graph by id, so that a page can
 * hold several graphs; the frames keep their first place in data attributes for the zoom. */
static const char flame_script[] =
    "(function(ID){\n"
    "var svg=document.getElementById(ID);if(!svg||svg.twFlame)return;\n"
    "var pad=+svg.getAttribute('data-pad'),full=+svg.getAttribute('data-width')-2*pad,\n"
    "cw=+svg.getAttribute('data-char');\n"
    "var frames=[],gs=svg.querySelectorAll('g.twf-f');\n"
    "for(var i=0;i<gs.length;i++){var g=gs[i],r=g.querySelector('rect'),t=g.querySelector('text'),"
    "info=g.querySelector('title').textContent;\n"
    "var f={g:g,r:r,t:t,x:+r.getAttribute('x'),w:+r.getAttribute('width'),y:+r.getAttribute('y'),"
    "fill:r.getAttribute('fill'),name:info.split('\\n')[0],info:info};g.twFrame=f;frames.push(f);}\n"
    "var details=svg.querySelector('.twf-details'),matched=svg.querySelector('.twf-matched'),"
    "reset=svg.querySelector('.twf-reset'),searchBtn=svg.querySelector('.twf-search'),term='',zoomed=null;\n"
    "function label(f,w){var n=Math.floor((w-6)/cw);if(n<3)return '';return f.name.length<=n?f.name:"
    "f.name.slice(0,n-2)+'..';}\n"
    "function place(f,x,w){f.r.setAttribute('x',x.toFixed(3));f.r.setAttribute('width',w.toFixed(3));"
    "f.t.setAttribute('x',(x+3).toFixed(3));f.t.textContent=label(f,w);}\n"
    "function zoom(z){var ratio=full/z.w,eps=0.002;\n"
    "frames.forEach(function(f){f.g.classList.remove('twf-hide');f.g.classList.remove('twf-parent');\n"
    "if(f.y>z.y){if(f.x<=z.x+eps&&f.x+f.w>=z.x+z.w-eps){f.g.classList.add('twf-parent');place(f,pad,full);}"
    "else f.g.classList.add('twf-hide');}\n"
    "else if(f.x>=z.x-eps&&f.x+f.w<=z.x+z.w+eps)place(f,pad+(f.x-z.x)*ratio,f.w*ratio);"
    "else f.g.classList.add('twf-hide');});\n"
    "zoomed=z;reset.classList.remove('twf-hide');search(term);}\n"
    "function unzoom(){frames.forEach(function(f){f.g.classList.remove('twf-hide');"
    "f.g.classList.remove('twf-parent');place(f,f.x,f.w);});zoomed=null;reset.classList.add('twf-hide');"
    "search(term);}\n"
    "function search(t){term=t||'';var needle=term.toLowerCase(),hits=[];\n"
    "frames.forEach(function(f){var hit=needle!==''&&f.name.toLowerCase().indexOf(needle)>=0;"
    "f.g.classList.toggle('twf-match',hit);f.r.setAttribute('fill',hit?'#e600e6':f.fill);if(hit)hits.push(f);});\n"
    "hits.sort(function(a,b){return a.x-b.x||b.w-a.w;});var sum=0,end=-1;\n"
    "hits.forEach(function(f){if(f.x>=end-0.002){sum+=f.w;end=f.x+f.w;}});\n"
    "matched.textContent=needle?'Matched: '+hits.length+' frame'+(hits.length==1?'':'s')+', '+"
    "(100*sum/full).toFixed(1)+'% of the time':'';searchBtn.textContent=needle?'Clear search':'Search';}\n"
    "svg.addEventListener('mouseover',function(e){var g=e.target.closest&&e.target.closest('g.twf-f');"
    "if(g)details.textContent=g.twFrame.info.replace('\\n',': ');});\n"
    "svg.addEventListener('mouseout',function(e){if(e.target.closest&&e.target.closest('g.twf-f'))"
    "details.textContent=' ';});\n"
    "svg.addEventListener('click',function(e){var g=e.target.closest&&e.target.closest('g.twf-f');"
    "if(g){if(g.twFrame.y===frames[0].y)unzoom();else zoom(g.twFrame);}});\n"
    "reset.addEventListener('click',unzoom);\n"
    "searchBtn.addEventListener('click',function(){if(term){search('');return;}"
    "var t=prompt('Search frames (part of a name, any case)','');if(t)search(t);});\n"
    "svg.twFlame={zoom:function(name){for(var i=0;i<frames.length;i++)if(frames[i].name===name){"
    "zoom(frames[i]);return frames[i].g;}return null;},reset:unzoom,search:search,"
    "matched:function(){return matched.textContent;}};\n"
    "})";

int report_flame_write_svg(const flame_t *f, FILE *out, const char *id, const char *title, size_t max_frames,
                           int fluid)
{
    const flame_node_t *root = &f->root;
    uint64_t all = root->total_ns;
    /* Frames narrower than MIN_WIDTH pixels, and beyond the max_frames widest, are left out: a
     * frame is never narrower than what it holds, so what is kept stays one tree. */
    uint64_t min_ns = (uint64_t)((double)all * MIN_WIDTH / (SVG_WIDTH - 2 * SVG_PAD));
    size_t count = 0;
    size_t capacity = f->live_nodes + 1;
    uint64_t *totals = malloc(capacity * sizeof *totals);
    if (totals == NULL)
        return TW_ENOMEM;
    collect_totals(root, totals, &count);
    if (count > max_frames) {
        qsort(totals, count, sizeof *totals, compare_desc);
        if (totals[max_frames] + 1 > min_ns)
            min_ns = totals[max_frames] + 1;
    }
    free(totals);
    if (min_ns == 0)
        min_ns = 1;
    svg_layout_t l = {out, all, min_ns, all ? (SVG_WIDTH - 2 * SVG_PAD) / (double)all : 0, 0, 0};
    int depth = kept_depth(root, min_ns);
    l.height = SVG_TOP + (depth + 1) * FRAME_HEIGHT + SVG_BOTTOM;
    char size[64];
    if (fluid)
        snprintf(size, sizeof size, "width=\"100%%\"");
    else
        snprintf(size, sizeof size, "width=\"%.0f\" height=\"%.0f\"", SVG_WIDTH, l.height);
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"%s\" class=\"twf\" %s viewBox=\"0 0 %.0f %.0f\" "
                 "data-pad=\"%.0f\" data-width=\"%.0f\" data-char=\"%.1f\">\n",
            id, size, SVG_WIDTH, l.height, SVG_PAD, SVG_WIDTH, FRAME_CHAR_WIDTH);
    if (!fluid)
        fprintf(out, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#fdfdfd\"/>\n", SVG_WIDTH, l.height);
    fprintf(out, "<style>\n"
                 "#%s text{font:%.0fpx ui-monospace,Menlo,Consolas,'DejaVu Sans Mono',monospace;fill:#222}\n"
                 "#%s .twf-f text{pointer-events:none}\n"
                 "#%s .twf-f{cursor:pointer}\n"
                 "#%s .twf-f:hover rect{stroke:#333;stroke-width:.6}\n"
                 "#%s .twf-hide{display:none}\n"
                 "#%s .twf-parent{opacity:.55}\n"
                 "#%s .twf-button{cursor:pointer;fill:#1558b0}\n"
                 "#%s .twf-title{font-size:16px;font-weight:bold}\n"
                 "</style>\n",
            id, FONT_SIZE, id, id, id, id, id, id, id);
    fputs("<text class=\"twf-title\" x=\"600\" y=\"22\" text-anchor=\"middle\">", out);
    xml_text(out, title, strlen(title));
    fputs("</text>\n", out);
    double lx = SVG_PAD;
    for (size_t i = 0; i < sizeof legend / sizeof *legend; i++) {
        fprintf(out, "<rect x=\"%.0f\" y=\"34\" width=\"12\" height=\"12\" rx=\"2\" fill=\"%s\"/>"
                     "<text x=\"%.0f\" y=\"44\">%s</text>\n",
                lx, legend[i][1], lx + 16, legend[i][0]);
        lx += 16 + FRAME_CHAR_WIDTH * (double)strlen(legend[i][0]) + 18;
    }
    fprintf(out, "<text class=\"twf-button twf-reset twf-hide\" x=\"%.0f\" y=\"44\" text-anchor=\"end\">"
                 "Reset zoom</text>\n",
            SVG_WIDTH - SVG_PAD - 120);
    fprintf(out, "<text class=\"twf-button twf-search\" x=\"%.0f\" y=\"44\" text-anchor=\"end\">Search</text>\n",
            SVG_WIDTH - SVG_PAD);
    fprintf(out, "<text class=\"twf-matched\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\"></text>\n",
            SVG_WIDTH - SVG_PAD, l.height - 10);
    fprintf(out, "<text class=\"twf-details\" x=\"%.0f\" y=\"%.0f\"> </text>\n", SVG_PAD, l.height - 10);
    fputs("<g class=\"twf-frames\">\n", out);
    /* The whole run is the bottom frame, as in flamegraph.pl: clicking it undoes a zoom. */
    flame_node_t all_frame = *root;
    all_frame.calls = f->calls;
    svg_frame(&l, &all_frame, "all", 3, 0, 0, NULL);
    fprintf(out, "</g>\n<script type=\"text/ecmascript\"><![CDATA[\n%s('%s');\n]]></script>\n</svg>\n", flame_script,
            id);
    return 0;
}

/* --flamegraph FILE: the SVG alone. */
int report_flame_write_svg_file(const flame_t *f, const char *path, FILE *err)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        int rc = -errno;
        fprintf(err, "tw-report: cannot write %s: %s\n", path, strerror(errno));
        return rc;
    }
    fputs("<?xml version=\"1.0\" standalone=\"no\"?>\n", out);
    int rc = report_flame_write_svg(f, out, "tw-flame", f->by_module ? "Self time by module path"
                                                                      : "Self time by call stack", 30000, 0);
    return report_close_output(out, path, rc, err);
}
