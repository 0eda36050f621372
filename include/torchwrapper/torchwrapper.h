/* SPDX-License-Identifier: MIT */
/* The torchwrapper C library: include this one header. */
#ifndef TORCHWRAPPER_H
#define TORCHWRAPPER_H
#include "torchwrapper/common.h"
#include "torchwrapper/clock.h"
#include "torchwrapper/api.h"
#include "torchwrapper/recorder.h"
#include "torchwrapper/queue.h"
#include "torchwrapper/config_keys.h"
#include "torchwrapper/schedule.h"
#include "torchwrapper/sites.h"
#include "torchwrapper/stats.h"
#include "torchwrapper/escape.h"
#include "torchwrapper/writer.h"
#include "torchwrapper/ondemand.h"
#include "torchwrapper/gpu.h"
#include "torchwrapper/reader.h"
#include "torchwrapper/report.h"
#endif
