/* SPDX-License-Identifier: MIT */
/*
 * torchwrapper._core, the CPython module itself (module.c): its init function, the one symbol the
 * extension exports. Its state is in module_state.h; each file of the module has its own header.
 */
#ifndef TW_PY_MODULE_H
#define TW_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyMODINIT_FUNC PyInit__core(void);

#endif
