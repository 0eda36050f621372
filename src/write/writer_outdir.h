/* SPDX-License-Identifier: MIT */
/* out_dir as every part of the writer writes it (writer_outdir.c; not public API). */
#ifndef TW_WRITER_OUTDIR_H
#define TW_WRITER_OUTDIR_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "fileset.h"
#include "manifest.h"
#include "writer_state.h"

/* The first source (the calls); links never change once added. */
writer_source_t *tw_writer_sources(tw_writer_t *w);
/* A source's drop counters, the files' own (write errors) added. */
tw_manifest_drops_t tw_writer_source_drops(const writer_source_t *s);
/* The manifest as it stands, sites.json with it (the pen held, or the closing thread once the writer
 * thread ended). */
void tw_writer_write_manifest(tw_writer_t *w);
/* sites.json, when sites were added since it was written (or at close, for the overflow count). */
void tw_writer_write_sites(tw_writer_t *w);
/* Appends a line to fs of out_dir; a new file brings a new manifest. */
void tw_writer_append(tw_writer_t *w, tw_fileset_t *fs, const char *line, size_t len);
/* A capture's "id", "steps" (first and last, both included, as tw-report --steps) and "steps_asked",
 * into o: out_dir's manifest lists them, the capture's own says them. */
void tw_capture_steps_json(cJSON *o, const capture_t *c);

#endif
