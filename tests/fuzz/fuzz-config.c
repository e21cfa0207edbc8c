/* SPDX-License-Identifier: MIT */
/*
 * Configuration files: dlock__config_load on any text (through a memfd,
 * as it reads a path), then every route matched against every other
 * route's pattern and the backends' urls parsed, as building a client
 * does.  Besides no crash, leak or hang (the shadowing check was once
 * exponential): a loaded configuration names only known backends.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "parse.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dlock__config *config = NULL;

	if (fd < 0) {
		fd = memfd_create("dlock-fuzz-config", 0);
		if (fd < 0)
			abort();
		g_snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	if (dlock__config_load(path, &config) != 0)
		return 0;
	for (guint i = 0; i < config->routes->len; i++) {
		const dlock__config_route *r = config->routes->pdata[i];
		bool known = false;

		for (guint j = 0; j < config->backends->len; j++)
			known = known || strcmp(((dlock__config_backend *)config->backends->pdata[j])->name,
			                        r->backend) == 0;
		FUZZ_CHECK(known, "route %s names backend %s", r->name, r->backend);
		for (guint j = 0; j < config->routes->len; j++)
			dlock__glob_match(r->match, ((dlock__config_route *)config->routes->pdata[j])->match);
	}
	for (guint i = 0; i < config->backends->len; i++) {
		const dlock__config_backend *b = config->backends->pdata[i];
		dlock__uri *uri = NULL;

		if (dlock__uri_parse(b->url, &uri) == 0)
			dlock__uri_free(uri);
	}
	dlock__config_free(config);
	return 0;
}
