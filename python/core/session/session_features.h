/* SPDX-License-Identifier: MIT */
/*
 * What a session starts and stops (session_features.c; not public API): one table of features
 * (tw_session_feature_t, session_object.h), started in order by start() and stopped in reverse.
 */
#ifndef TW_PY_SESSION_FEATURES_H
#define TW_PY_SESSION_FEATURES_H

#include "watch/hooks.h"
#include "session_object.h"

/*
 * Starts the features of a new session in the table's order, each self->features[i].on set (1:
 * started, 0: off, its reason in features[i].reason). Returns 0, or -1 with an exception, those
 * started before the failure stopped so that the session is as new.
 */
int tw_session_features_start(tw_session_object *self);

/* Stops the features started, from the last one to the first (the session stays stopped: its stats()
 * keep what each left). */
void tw_session_features_stop(tw_session_object *self);

/* Drops the model watch's hooks (their references) and their kinds. */
void tw_session_clear_hooks(tw_hooks_t *hooks);

#endif
