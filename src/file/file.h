/* SPDX-License-Identifier: MIT */
/* The file backend, as the rest of the library sees it. */
#ifndef DLOCK_FILE_FILE_H
#define DLOCK_FILE_FILE_H

#include "backend.h"

extern const dlock__backend_ops dlock__file_ops;

#endif
