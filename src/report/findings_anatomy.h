/* SPDX-License-Identifier: MIT */
/* The step's anatomy (findings_anatomy.c). */
#ifndef TW_REPORT_FINDINGS_ANATOMY_H
#define TW_REPORT_FINDINGS_ANATOMY_H

#include "findings_state.h"

/* The step anatomy of the steps' thread into f->anatomy, and the typical step into c. */
void findings_anatomy(findings_t *f, settle_context_t *c);

#endif
