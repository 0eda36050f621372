/* SPDX-License-Identifier: MIT */
/*
 * CUPTI's activity records, checked at build time against the cupti.h being compiled with (CUDA 12's
 * and 13's, make check-cupti-lib builds against both).
 *
 * A CUPTI library writes the newest version of each record its release knows (CUpti_ActivityKernel9
 * in CUDA 12.x, 10 in 13.0, 13 in 13.4); versions only ever add fields at the end. torchwrapper reads
 * every library's records through the oldest layouts it supports (Kernel4, Memcpy5, Memset3): the
 * asserts below prove that each field it reads sits at the same offset in every newer version this
 * header declares. The fake CUPTI of the tests writes TW_CUPTI_*_NEWEST, the records a real library
 * of this header's release writes, so that it cannot drift from the real ABI.
 */
#ifndef TW_CUPTI_LAYOUT_H
#define TW_CUPTI_LAYOUT_H

#include <stddef.h>

#include <cupti.h>

#if CUPTI_API_VERSION >= 130401 /* CUDA 13.4 */
#define TW_CUPTI_KERNEL_NEWEST CUpti_ActivityKernel13
#define TW_CUPTI_MEMCPY_NEWEST CUpti_ActivityMemcpy7
#define TW_CUPTI_MEMSET_NEWEST CUpti_ActivityMemset5
#elif CUPTI_API_VERSION >= 130001 /* CUDA 13.0 */
#define TW_CUPTI_KERNEL_NEWEST CUpti_ActivityKernel10
#define TW_CUPTI_MEMCPY_NEWEST CUpti_ActivityMemcpy6
#define TW_CUPTI_MEMSET_NEWEST CUpti_ActivityMemset4
#elif CUPTI_API_VERSION >= 18 /* CUDA 12.x */
#define TW_CUPTI_KERNEL_NEWEST CUpti_ActivityKernel9
#define TW_CUPTI_MEMCPY_NEWEST CUpti_ActivityMemcpy6
#define TW_CUPTI_MEMSET_NEWEST CUpti_ActivityMemset4
#else
#error "CUPTI headers older than CUDA 12 (CUPTI_API_VERSION < 18) are not supported"
#endif

#define TW_SAME_OFFSET(old, new, field)                                                                    \
    _Static_assert(offsetof(old, field) == offsetof(new, field),                                           \
                   #new "." #field " is not where torchwrapper reads it (" #old "'s offset)")

#define TW_KERNEL_FIELDS_AS_IN_4(new)                                                                      \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, kind);                                                      \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, start);                                                     \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, end);                                                       \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, deviceId);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, streamId);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, correlationId);                                             \
    TW_SAME_OFFSET(CUpti_ActivityKernel4, new, name)
#define TW_MEMCPY_FIELDS_AS_IN_5(new)                                                                      \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, kind);                                                      \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, copyKind);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, start);                                                     \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, end);                                                       \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, deviceId);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, streamId);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityMemcpy5, new, correlationId)
#define TW_MEMSET_FIELDS_AS_IN_3(new)                                                                      \
    TW_SAME_OFFSET(CUpti_ActivityMemset3, new, kind);                                                      \
    TW_SAME_OFFSET(CUpti_ActivityMemset3, new, start);                                                     \
    TW_SAME_OFFSET(CUpti_ActivityMemset3, new, end);                                                       \
    TW_SAME_OFFSET(CUpti_ActivityMemset3, new, deviceId);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityMemset3, new, streamId);                                                  \
    TW_SAME_OFFSET(CUpti_ActivityMemset3, new, correlationId)

TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel5);
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel6);
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel7);
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel8);
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel9);
TW_MEMCPY_FIELDS_AS_IN_5(CUpti_ActivityMemcpy6);
TW_MEMSET_FIELDS_AS_IN_3(CUpti_ActivityMemset4);
#if CUPTI_API_VERSION >= 130001
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel10);
#endif
#if CUPTI_API_VERSION >= 130401
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel11);
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel12);
TW_KERNEL_FIELDS_AS_IN_4(CUpti_ActivityKernel13);
TW_MEMCPY_FIELDS_AS_IN_5(CUpti_ActivityMemcpy7);
TW_MEMSET_FIELDS_AS_IN_3(CUpti_ActivityMemset5);
#endif
/* and the newest, whatever this header's release */
TW_KERNEL_FIELDS_AS_IN_4(TW_CUPTI_KERNEL_NEWEST);
TW_MEMCPY_FIELDS_AS_IN_5(TW_CUPTI_MEMCPY_NEWEST);
TW_MEMSET_FIELDS_AS_IN_3(TW_CUPTI_MEMSET_NEWEST);
/* the records an external correlation and an API call leave: read as declared */
_Static_assert(offsetof(CUpti_ActivityExternalCorrelation, externalId) == 8 &&
                   offsetof(CUpti_ActivityExternalCorrelation, correlationId) == 16,
               "CUpti_ActivityExternalCorrelation changed layout");

#endif
