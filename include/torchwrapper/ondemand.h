/* SPDX-License-Identifier: MIT */
/*
 * On-demand capture of a running job (config "on_demand"): `python -m torchwrapper capture PID
 * --steps N`, or `kill -USR2 PID`, makes a profiled process record the next N steps into a
 * directory of their own (tw_writer_capture), whatever its schedule, then go back to the schedule.
 *
 * The SIGUSR2 handler only sets a flag. The process looks at it at each step boundary (with the
 * GIL held: tw_ondemand_step), where it reads the request the capture command left, if any, begins
 * the capture at the step that begins, or refuses it while another one records.
 *
 * The control directory ($TORCHWRAPPER_CONTROL_DIR, else /tmp/torchwrapper-UID, mode 0700) is how
 * the command finds and talks to the process: the process keeps PID.json there while it profiles
 * (its out_dir, rank, the `run` process of its job, the capture recording, how many requests it has
 * answered and the last answer), and the command writes PID.request ({"steps": N, "dir": DIR}, both
 * optional) before the signal.
 */
#ifndef TORCHWRAPPER_ONDEMAND_H
#define TORCHWRAPPER_ONDEMAND_H

#include "torchwrapper/common.h"
#include "torchwrapper/writer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_ondemand tw_ondemand_t;

typedef struct tw_ondemand_config {
    tw_writer_t *writer;       /* the captures' writer (the session's) */
    const char *out_dir;       /* the session's: captures without a dir go to out_dir/capture-N */
    uint64_t default_steps;    /* of a request that names none (kill -USR2): at least 1 */
    const char *default_dir;   /* of a request that names none; NULL: out_dir/capture-N */
    const char *control_dir;   /* NULL: $TORCHWRAPPER_CONTROL_DIR, else /tmp/torchwrapper-UID */
    int64_t rank;              /* < 0: none */
    int64_t run_pid;           /* the `python -m torchwrapper run` process of the job; 0: none */
} tw_ondemand_config_t;

/*
 * Installs the SIGUSR2 handler (the program's own is put back by tw_ondemand_stop) and writes the
 * control file. One at a time in a process. Returns 0, TW_EBUSY (one is started), TW_EINVAL, or
 * TW_EIO (the control directory cannot be made, or is not this user's), with a message in err.
 */
TW_API int tw_ondemand_start(const tw_ondemand_config_t *config, tw_ondemand_t **out, char *err, size_t err_size);

/*
 * At each step boundary, step being the step that begins: ends the capture whose steps are over,
 * and answers a request that came (begins a capture at step, or refuses it, saying why on stderr and
 * in the control file). *from and *to are the steps [from, to) of the capture recording now (0, 0:
 * none). Returns 1 when that changed, else 0. A forked child does nothing (the parent answers).
 * Call it at least when a capture records, when tw_ondemand_asked(), and at step 1 (the control
 * file then says the process makes steps).
 */
TW_API int tw_ondemand_step(tw_ondemand_t *od, uint64_t step, uint64_t *from, uint64_t *to);

/* Whether a request came since the last tw_ondemand_step (async-signal-safe to set, cheap to read). */
TW_API int tw_ondemand_asked(void);

/* Puts the program's SIGUSR2 handler back, removes the control file and frees od. NULL is ignored. */
TW_API void tw_ondemand_stop(tw_ondemand_t *od);

#ifdef __cplusplus
}
#endif
#endif
