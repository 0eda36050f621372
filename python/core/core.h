/* SPDX-License-Identifier: MIT */
/*
 * torchwrapper._core, the CPython extension module itself (core.c): its init function, the one symbol
 * the extension exports. Its state is in core_state.h; each file of the extension has its own header.
 * (Named core, not module: everywhere else in torchwrapper a module is an nn.Module.)
 */
#ifndef TW_PY_CORE_H
#define TW_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyMODINIT_FUNC PyInit__core(void);

#endif
