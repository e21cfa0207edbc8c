/* SPDX-License-Identifier: MIT */
/* The ZooKeeper backend, as the rest of the library sees it. */
#ifndef DLOCK_ZK_ZK_H
#define DLOCK_ZK_ZK_H

#include "backend.h"

extern const dlock__backend_ops dlock__zk_ops;

#endif
