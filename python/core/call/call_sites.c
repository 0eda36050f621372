/* SPDX-License-Identifier: MIT */
/*
 * Call sites: where the program made each recorded call (config sites), read from the calling
 * Python frame. The hot path (tw_caller_site, call_sites.h) takes the frame (on CPython 3.11/3.12 the
 * interpreter's own, through the checked mirror of frame_mirror.h; else PyEval_GetFrame, borrowed, which
 * makes a frame object once per frame), its code object and instruction offset, and probes a cache
 * keyed by (code, offset). Here are the slow paths:
 * a key's first call, which decides whether the code is torch's own (by its file, under torch's
 * package directory), computes the line from the offset (PyCode_Addr2Line walks the line table:
 * once per key) and interns (file, line, function) in the C table (sites.h) as C strings, so that
 * the writer thread never touches a Python object; and the walk out of torch's frames for an
 * outermost call that torch's code made (a DataLoader's collate, say).
 */
#include "call_sites.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "active.h"
#include "exc.h"
#include "imported.h"

tw_site_cache_t tw_site_cache;
int tw_site_frames_fast;

/* The most cache entries (code entries included): about 8 MiB of slots at half load. Past it, new
 * keys are looked up the slow way every time (bounded memory, as the site table's cap). */
#define SITE_CACHE_MAX (1u << 18)
#define OUTSIDE_TORCH_MAX_FRAMES 64

static char *torch_dir;      /* ".../site-packages/torch/" (PyMem_Raw), or NULL */
static size_t torch_dir_len;
static char *profiler_dir;   /* ".../torchwrapper/": this package's own code is never a site */
static size_t profiler_dir_len;
static char *stdlib_dir;     /* the standard library's ".../python3.X/", its site-packages apart */
static size_t stdlib_dir_len;

/* Where a file is shown from (sys.path's entries and the working directory at start, each with its
 * '/'): a site's text names its file from the longest of them that holds it, so a library reads as
 * its import path ("transformers/models/bert/modeling_bert.py") and the user's own files relative to
 * the working directory; sites.json keeps the full path for tools. */
#define PATH_ROOTS_MAX 64
static char *path_roots[PATH_ROOTS_MAX]; /* PyMem_Raw strings */
static size_t path_root_count;

static tw_site_slot_t *cache_find(uintptr_t code, uint32_t lasti)
{
    size_t mask = tw_site_cache.mask;
    if (mask == 0)
        return NULL;
    for (size_t i = tw_site_hash(code, lasti) & mask;; i = (i + 1) & mask) {
        tw_site_slot_t *slot = &tw_site_cache.slots[i];
        if (slot->code == code && slot->lasti == lasti)
            return slot;
        if (slot->code == 0)
            return NULL;
    }
}

/* Adds a key (absent); 0, or -1 when the cache is full or out of memory (nothing added). */
static int cache_add(uintptr_t code, uint32_t lasti, uint32_t value)
{
    tw_site_cache_t *c = &tw_site_cache;
    if (c->used >= SITE_CACHE_MAX)
        return -1;
    if ((c->used + 1) * 2 > (c->mask ? c->mask + 1 : 0)) {
        size_t capacity = c->mask ? (c->mask + 1) * 2 : 1024;
        tw_site_slot_t *slots = PyMem_RawCalloc(capacity, sizeof *slots);
        if (slots == NULL)
            return -1;
        for (size_t i = 0; c->mask && i <= c->mask; i++) {
            tw_site_slot_t *old = &c->slots[i];
            if (old->code == 0)
                continue;
            size_t j = tw_site_hash(old->code, old->lasti) & (capacity - 1);
            while (slots[j].code != 0)
                j = (j + 1) & (capacity - 1);
            slots[j] = *old;
        }
        PyMem_RawFree(c->slots);
        c->slots = slots;
        c->mask = capacity - 1;
    }
    size_t j = tw_site_hash(code, lasti) & c->mask;
    while (c->slots[j].code != 0)
        j = (j + 1) & c->mask;
    c->slots[j] = (tw_site_slot_t){code, lasti, value};
    c->used++;
    return 0;
}

/* The UTF-8 of a str attribute of code, or "?" (never raises). */
static const char *utf8_or(PyObject *text, const char *fallback)
{
    const char *s = text != NULL && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : NULL;
    if (s == NULL) {
        PyErr_Clear();
        return fallback;
    }
    return s;
}

/* TW_SITE_IN_TORCH for torch's own code, TW_SITE_PROFILER for this package's (its forward shims,
 * hooks and launcher stand between a model's call and the user's line: never a site). */
static uint32_t code_flags(PyCodeObject *code)
{
    const char *file = utf8_or(code->co_filename, "");
    if (profiler_dir != NULL && strncmp(file, profiler_dir, profiler_dir_len) == 0)
        return TW_SITE_PROFILER;
    if (torch_dir != NULL && strncmp(file, torch_dir, torch_dir_len) == 0)
        return TW_SITE_IN_TORCH;
    /* Code torch generates (FX graphs, Inductor's modules) and the standard library's (contextlib
     * entering torch.no_grad(), functools): the user's line is further out. */
    if (strcmp(file, "<string>") == 0 || strncmp(file, "<eval_with_key>", 15) == 0 ||
        strstr(file, "/torchinductor_") != NULL)
        return TW_SITE_IN_TORCH;
    if (stdlib_dir != NULL && strncmp(file, stdlib_dir, stdlib_dir_len) == 0 &&
        strncmp(file + stdlib_dir_len, "site-packages/", 14) != 0 && strncmp(file + stdlib_dir_len, "dist-packages/", 14) != 0)
        return TW_SITE_IN_TORCH;
    return 0;
}

/* file as a site's text shows it: after the longest path root that holds it (the whole when none). */
static const char *shown_path(const char *file)
{
    size_t best = 0;
    for (size_t i = 0; i < path_root_count; i++) {
        size_t n = strlen(path_roots[i]);
        if (n > best && strncmp(file, path_roots[i], n) == 0 && file[n] != '\0')
            best = n;
    }
    return file + best;
}

/* Interns the site of (code, lasti): its id, the overflow id, or TW_SITE_NONE. */
static uint32_t intern_site(PyCodeObject *code, int lasti)
{
    int line = PyCode_Addr2Line(code, lasti);
    const char *file = utf8_or(code->co_filename, "?");
    const char *function = utf8_or(code->co_qualname, "?");
    const char *shown = shown_path(file);
    char text[2 * TW_SITE_TEXT_MAX + 32];
    /* cut at character boundaries: sites.json must stay valid UTF-8 */
    snprintf(text, sizeof text, "%.*s:%d %.*s", (int)tw_utf8_cut(shown, strlen(shown), 1024), shown,
             line > 0 ? line : 0, (int)tw_utf8_cut(function, strlen(function), 1024), function);
    return tw_sites_intern(tw_active.sites, file, line > 0 ? (uint32_t)line : 0, function, text);
}


uint32_t tw_site_miss(PyCodeObject *code, int lasti)
{
    if (tw_active.sites == NULL)
        return TW_SITE_NONE;
    tw_saved_exc_t saved; /* the frame may be handling an exception: keep it as it is */
    tw_exc_save(&saved);
    uintptr_t key = (uintptr_t)code;
    tw_site_slot_t *entry = cache_find(key, TW_SITE_CODE_ENTRY);
    uint32_t flags;
    int cached = entry != NULL;
    if (cached) {
        flags = entry->value;
    } else {
        flags = code_flags(code);
        /* The cache holds the code object while its address is a key (released by tw_sites_end). */
        if (cache_add(key, TW_SITE_CODE_ENTRY, flags) == 0) {
            Py_INCREF(code);
            cached = 1;
        }
    }
    /* "boundary": torch's own code is no site (tw_caller_site looks further out, or takes the
     * enclosing call's); the profiler's own code never is, whatever the mode */
    int skipped = (flags & TW_SITE_PROFILER) || (tw_active.sites_mode == TW_SITES_BOUNDARY && (flags & TW_SITE_IN_TORCH));
    uint32_t value = skipped ? TW_SITE_IN_TORCH : intern_site(code, lasti);
    if (cached && value != TW_SITE_NONE)
        cache_add(key, (uint32_t)lasti, value);
    tw_exc_restore(&saved);
    return value;
}

uint32_t tw_site_outside_torch(PyFrameObject *frame)
{
    tw_saved_exc_t saved;
    tw_exc_save(&saved);
    uint32_t site = TW_SITE_NONE;
    PyFrameObject *back = PyFrame_GetBack(frame); /* new reference (made if needed): a slow path */
    for (int i = 0; back != NULL && i < OUTSIDE_TORCH_MAX_FRAMES; i++) {
        PyCodeObject *code = PyFrame_GetCode(back);
        int lasti = PyFrame_GetLasti(back);
        tw_site_slot_t *slot = lasti >= 0 ? cache_find((uintptr_t)code, (uint32_t)lasti) : NULL;
        uint32_t value = slot != NULL ? slot->value : lasti >= 0 ? tw_site_miss(code, lasti) : TW_SITE_IN_TORCH;
        Py_DECREF(code);
        if (!(value & TW_SITE_IN_TORCH)) {
            site = value;
            break;
        }
        PyFrameObject *next = PyFrame_GetBack(back);
        Py_DECREF(back);
        back = next;
    }
    Py_XDECREF(back);
    tw_exc_restore(&saved);
    if (site != TW_SITE_NONE && site == tw_active.sites_overflow_id)
        tw_sites_note_overflow(tw_active.sites, 1);
    return site;
}

/* tw_caller_site through the public API: PyEval_GetFrame() (a frame object made for the caller). */
uint32_t tw_caller_site_public(int outermost)
{
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed; made once per Python frame, then cached */
    if (frame == NULL)
        return TW_SITE_NONE;
    PyCodeObject *code = PyFrame_GetCode(frame);
    Py_DECREF(code); /* the frame holds it */
    int lasti = PyFrame_GetLasti(frame);
    if (lasti < 0) /* not started: no instruction (and -1 would be TW_SITE_CODE_ENTRY) */
        return TW_SITE_NONE;
    uint32_t value = tw_site_value(code, lasti);
    if (value & TW_SITE_IN_TORCH)
        return outermost ? tw_site_outside_torch(frame) : TW_SITE_NONE;
    /* (NONE first: a session stopped meanwhile has no table, and its overflow id is 0 too) */
    if (value != TW_SITE_NONE && value == tw_active.sites_overflow_id)
        tw_sites_note_overflow(tw_active.sites, 1);
    return value;
}

#ifdef TW_SITE_FRAME_MIRROR
/* The complete frame after f (CPython's _PyFrame_GetFirstComplete of f->previous), or NULL. */
static const tw_iframe_t *iframe_back(const tw_iframe_t *f)
{
    for (f = f->previous; f != NULL && tw_iframe_incomplete(f); f = f->previous)
        ;
    return f;
}

uint32_t tw_site_outside_torch_fast(const tw_iframe_t *frame)
{
    const tw_iframe_t *back = iframe_back(frame);
    for (int i = 0; back != NULL && i < OUTSIDE_TORCH_MAX_FRAMES; i++, back = iframe_back(back)) {
        uint32_t value = tw_site_value(back->f_code, tw_iframe_lasti(back));
        if (!(value & TW_SITE_IN_TORCH)) {
            if (value != TW_SITE_NONE && value == tw_active.sites_overflow_id)
                tw_sites_note_overflow(tw_active.sites, 1);
            return value;
        }
    }
    return TW_SITE_NONE;
}

/* Whether the mirror reads what the public API says of the calling frame and its caller. */
static int mirror_agrees(void)
{
    const tw_iframe_t *f = tw_iframe_current();
    PyFrameObject *frame = PyEval_GetFrame();
    if (f == NULL || frame == NULL || tw_iframe_incomplete(f))
        return 0;
    PyCodeObject *code = PyFrame_GetCode(frame);
    int same = code == f->f_code && PyFrame_GetLasti(frame) == tw_iframe_lasti(f);
    Py_DECREF(code);
    PyFrameObject *back = PyFrame_GetBack(frame);
    const tw_iframe_t *b = iframe_back(f);
    if (back != NULL && b != NULL) {
        PyCodeObject *back_code = PyFrame_GetCode(back);
        same = same && back_code == b->f_code && PyFrame_GetLasti(back) == tw_iframe_lasti(b);
        Py_DECREF(back_code);
    } else {
        same = same && back == NULL && b == NULL;
    }
    Py_XDECREF(back);
    PyErr_Clear();
    return same;
}
#endif

/* A package's directory with its '/', from sys.modules[package].__file__; NULL when it is not
 * imported. A new PyMem_Raw string; never raises. */
static char *find_package_dir(const char *package)
{
    PyObject *file = tw_imported_attribute(package, "__file__");
    const char *path = file != NULL && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    char *dir = NULL;
    const char *slash = path != NULL ? strrchr(path, '/') : NULL;
    if (slash != NULL && (dir = PyMem_RawMalloc((size_t)(slash - path) + 2)) != NULL) {
        memcpy(dir, path, (size_t)(slash - path) + 1);
        dir[slash - path + 1] = '\0';
    }
    Py_XDECREF(file);
    PyErr_Clear();
    return dir;
}

/* Adds dir (absolute) to the path roots, with its '/'. */
static void add_path_root(const char *dir)
{
    size_t n = strlen(dir);
    if (dir[0] != '/' || path_root_count == PATH_ROOTS_MAX)
        return;
    while (n > 1 && dir[n - 1] == '/')
        n--;
    char *root = PyMem_RawMalloc(n + 2);
    if (root == NULL)
        return;
    memcpy(root, dir, n);
    root[n] = '/';
    root[n + 1] = '\0';
    if (n == 1)
        root[1] = '\0'; /* "/" itself */
    path_roots[path_root_count++] = root;
}

/* sysconfig's "stdlib" path with its '/' (a new PyMem_Raw string), or NULL; never raises. */
static char *find_stdlib_dir(void)
{
    char *dir = NULL;
    PyObject *sysconfig = PyImport_ImportModule("sysconfig");
    PyObject *path = sysconfig != NULL ? PyObject_CallMethod(sysconfig, "get_path", "s", "stdlib") : NULL;
    const char *text = path != NULL && PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : NULL;
    if (text != NULL && text[0] == '/' && (dir = PyMem_RawMalloc(strlen(text) + 2)) != NULL) {
        strcpy(dir, text);
        if (dir[strlen(dir) - 1] != '/')
            strcat(dir, "/");
    }
    Py_XDECREF(path);
    Py_XDECREF(sysconfig);
    PyErr_Clear();
    return dir;
}

/* The working directory and sys.path's absolute entries, as path roots; never raises. */
static void find_path_roots(void)
{
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) != NULL)
        add_path_root(cwd);
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    for (Py_ssize_t i = 0; path != NULL && PyList_Check(path) && i < PyList_GET_SIZE(path); i++) {
        PyObject *entry = PyList_GET_ITEM(path, i);
        const char *dir = PyUnicode_Check(entry) ? PyUnicode_AsUTF8(entry) : NULL;
        if (dir != NULL)
            add_path_root(dir);
    }
    PyErr_Clear();
}

int tw_sites_begin(tw_sites_mode_t mode, tw_sites_t *sites)
{
    tw_sites_end();
    if (mode == TW_SITES_OFF || sites == NULL)
        return 0;
    torch_dir = find_package_dir("torch");
    torch_dir_len = torch_dir != NULL ? strlen(torch_dir) : 0;
    profiler_dir = find_package_dir("torchwrapper");
    profiler_dir_len = profiler_dir != NULL ? strlen(profiler_dir) : 0;
    find_path_roots();
    stdlib_dir = find_stdlib_dir();
    stdlib_dir_len = stdlib_dir != NULL ? strlen(stdlib_dir) : 0;
#ifdef TW_SITE_FRAME_MIRROR
    /* TORCHWRAPPER_SITE_FRAMES=public keeps to the public API (for comparing the two) */
    const char *frames = getenv("TORCHWRAPPER_SITE_FRAMES");
    tw_site_frames_fast = (frames == NULL || strcmp(frames, "public") != 0) && mirror_agrees();
#endif
    tw_active_set_sites(mode, sites);
    return 0;
}

void tw_sites_end(void)
{
    tw_active_set_sites(TW_SITES_OFF, NULL);
    tw_site_cache_t *c = &tw_site_cache;
    tw_site_slot_t *slots = c->slots;
    size_t capacity = c->mask ? c->mask + 1 : 0;
    *c = (tw_site_cache_t){0}; /* emptied first: a code object's deallocation can run Python code */
    for (size_t i = 0; i < capacity; i++)
        if (slots[i].code != 0 && slots[i].lasti == TW_SITE_CODE_ENTRY)
            Py_DECREF((PyObject *)slots[i].code);
    PyMem_RawFree(slots);
    PyMem_RawFree(torch_dir);
    PyMem_RawFree(profiler_dir);
    PyMem_RawFree(stdlib_dir);
    torch_dir = profiler_dir = stdlib_dir = NULL;
    torch_dir_len = profiler_dir_len = stdlib_dir_len = 0;
    for (size_t i = 0; i < path_root_count; i++)
        PyMem_RawFree(path_roots[i]);
    path_root_count = 0;
}
